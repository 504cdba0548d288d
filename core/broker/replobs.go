package broker

import (
	"time"

	"github.com/metaq-go/metaq/conf"
	"github.com/metaq-go/metaq/core/httpapi"
	"github.com/metaq-go/metaq/core/repl"
)

// What the HTTP side shows of replication (core/httpapi repl.go): the
// /readyz "replica" check and the metaq_replication_* series, from the
// typed status of core/repl.

// replicaCheck is /readyz's "replica" check: the Options hook when set,
// else the built-in one of a slave; nil when there is none.
func (b *Broker) replicaCheck() *readyCheck {
	if f := b.opts.ReplicaInSync; f != nil {
		ok, d := f()
		return &readyCheck{Name: "replica", OK: ok, Detail: d}
	}
	if b.replRole() == repl.RoleSlave {
		cfg := b.config()
		c := httpapi.SlaveReady(b.slave.Status(), cfg.SlaveID, cfg.BrokerID, cfg.Replication == conf.ReplicationSync,
			time.Duration(cfg.SyncTimeout)*time.Millisecond)
		return &c
	}
	return nil
}

// replStatus is the replication /metrics shows (core/httpapi).
func (b *Broker) replStatus() httpapi.Replication {
	return httpapi.ReplicationOf(b.replRole(), b.fo, b.slave, b.sync.master())
}
