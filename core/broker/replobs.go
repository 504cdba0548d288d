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

// replStatus is the replication /metrics shows.
func (b *Broker) replStatus() httpapi.Replication {
	var r httpapi.Replication
	if b.fo != nil {
		st := b.fo.Status()
		r.Failover = &httpapi.FailoverGauge{Epoch: st.Epoch, Role: st.Role.StatsName()}
	}
	if b.replRole() == repl.RoleSlave {
		st := b.slave.Status()
		r.Slave = &st
	} else if b.sync != nil {
		st := b.sync.Status()
		r.Sync = &st
	}
	return r
}
