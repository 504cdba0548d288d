// Command metaq-offsetstore-mysql is the MySQL/MariaDB offset store plugin:
// MetaQ's meta_topic_partition_group_offset table with BIGINT offsets,
// created when missing. `make` builds it into bin/plugins; name it in
// server.toml as an offsetstore plugin (config: dsn, table). It is started
// by the broker, not by hand.
package main

import (
	"github.com/metaq-go/metaq/offsetstore"
	"github.com/metaq-go/metaq/offsetstore/mysql"
)

func main() { offsetstore.Serve(mysql.New()) }
