// Command metaq-offsetstore-zk is the ZooKeeper offset store plugin: MetaQ's
// offset znodes, one per group, topic and partition, holding
// "<msgId>-<offset>" (package offsetstore/zk has the layout). `make` builds it into bin/plugins; name it in
// server.toml as an offsetstore plugin (config: connect, root,
// session_timeout_ms, timeout_ms, and auth_user with auth_password for
// ZooKeeper digest auth and ACLs). It is started by the broker, not by hand.
package main

import (
	"github.com/metaq-go/metaq/offsetstore"
	"github.com/metaq-go/metaq/offsetstore/zk"
)

func main() { offsetstore.Serve(zk.New()) }
