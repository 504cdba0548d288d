package mysql_test

import "github.com/metaq-go/metaq/offsetstore/offsetstoretest"

// The tests spell positions with offsetstoretest's grouped keys.
type (
	key   = offsetstoretest.Key
	entry = offsetstoretest.Entry
)

var (
	commit = offsetstoretest.Commit
	load   = offsetstoretest.Load
)
