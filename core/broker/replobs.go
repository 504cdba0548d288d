package broker

import "github.com/metaq-go/metaq/core/httpapi"

// What the HTTP side shows of replication (core/httpapi repl.go): the
// metaq_replication_* series, from the typed status of core/repl (the
// /readyz "replica" check is httpapi.ReplicaCheck).

// replStatus is the replication /metrics shows (core/httpapi).
func (b *Broker) replStatus() httpapi.Replication {
	return httpapi.ReplicationOf(b.replRole(), b.fo, b.slave, b.sync.master())
}
