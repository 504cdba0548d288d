// Command metaq-offsetstore-zk is the ZooKeeper offset store plugin: MetaQ's
// znodes <root>/consumers/<group>/offsets/<topic>/<brokerId>-<partition>
// holding "<msgId>-<offset>". `make` builds it into bin/plugins; name it in
// server.toml as an offsetstore plugin (config: connect, root,
// session_timeout_ms, timeout_ms). It is started by the broker, not by hand.
package main

import (
	"github.com/metaq-go/metaq/offsetstore"
	"github.com/metaq-go/metaq/offsetstore/zk"
)

func main() { offsetstore.Serve(zk.New()) }
