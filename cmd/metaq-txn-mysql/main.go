// Command metaq-txn-mysql is the MySQL/MariaDB XA coordinator plugin: a
// txn.Coordinator whose decision log is a table (metaq_txn_decision,
// created when missing), so that several instances of an application,
// each with its own owner name, can recover each other's transactions.
// `make` builds it into bin/plugins; an application opens it with
// txn.Open (OpenOptions.Plugin; config: dsn, table, durability_check). It
// is started by the application, not by hand.
package main

import (
	"github.com/metaq-go/metaq/txn"
	"github.com/metaq-go/metaq/txn/mysql"
)

func main() { txn.Serve(mysql.NewCoordinator()) }
