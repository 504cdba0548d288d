package httpapi

import (
	"fmt"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/metaq-go/metaq/conf"
	"github.com/metaq-go/metaq/core/repl"
)

// What the HTTP side shows of replication (docs/http.md): the /readyz
// "replica" check and the metaq_replication_* series, both from the typed
// status of core/repl (Slave.Status, SyncMaster.Status, Failover.Status)
// the broker reads, as `stats` does.

// Replication is the broker's replication at a scrape.
type Replication struct {
	// Failover is set with failover = true.
	Failover *FailoverGauge
	// Slave is set while the broker is a slave; Sync while it is a sync
	// master (and not a slave).
	Slave *repl.SlaveStatus
	Sync  *repl.SyncStatus
}

// ReplicationOf reads the replication of a broker in role: failover's
// (fo nil without failover), a slave's while it is one, else a sync
// master's (sm nil when there is none), as repl.SummaryLines does for
// stats.
func ReplicationOf(role repl.Role, fo *repl.Failover, slave *repl.Slave, sm *repl.SyncMaster) Replication {
	var r Replication
	if fo != nil {
		st := fo.Status()
		r.Failover = &FailoverGauge{Epoch: st.Epoch, Role: st.Role.StatsName()}
	}
	if role == repl.RoleSlave {
		st := slave.Status()
		r.Slave = &st
	} else if sm != nil {
		st := sm.Status()
		r.Sync = &st
	}
	return r
}

// FailoverGauge is failover's epoch and role name ("master", "slave",
// "fenced").
type FailoverGauge struct {
	Epoch int64
	Role  string
}

var (
	dReplRole      = desc("metaq_replication_role", "Always 1; the label gives the broker's replication role (master or slave).", "role")
	dReplConnected = desc("metaq_replication_connected", "Slaves: 1 while connected to the master it pulls from.")
	dReplLagBytes  = desc("metaq_replication_lag_bytes", "Slaves: the master's end minus this slave's end, summed over the partitions, as of the last pull round.")
	dReplLagSecs   = desc("metaq_replication_lag_seconds", "Slaves: how long ago the master first had data this slave still lacks (0 when caught up), as of the last pull round.")
	dReplCopied    = desc("metaq_replication_copied_messages_total", "Slaves: messages copied from the master since start (pulled).")
	dReplSyncMsgs  = desc("metaq_replication_sync_messages_total", "Slaves: messages a sync master shipped and this slave stored since start.")
	dSyncParts     = desc("metaq_replication_sync_partitions", "Sync masters: partitions taking part in sync replication.")
	dSyncInSync    = desc("metaq_replication_sync_partitions_in_sync", "Sync masters: partitions in sync with the slave now.")
	dSyncShipped   = desc("metaq_replication_sync_shipped_total", "Sync masters: syncs the slave acknowledged.")
	dSyncFailed    = desc("metaq_replication_sync_failed_total", "Sync masters: puts failed for the slave's side.")
	dSyncRefused   = desc("metaq_replication_sync_refused_total", "Sync masters: puts refused because no slave was in sync.")
	dSyncDegraded  = desc("metaq_replication_sync_degraded_puts_total", "Sync masters: puts stored on the master alone (sync_degrade).")
	dFoEpoch       = desc("metaq_replication_epoch", "With failover = true: the epoch (fencing token) this broker last saw in ZooKeeper; it rises on every promotion.")
	dFoRole        = desc("metaq_replication_failover_role", "With failover = true: always 1; the label gives the failover role (master holds the epoch, slave, fenced).", "role")
)

// collect sends the metaq_replication_* series.
func (r Replication) collect(gauge func(d *prometheus.Desc, v float64, labels ...string), counter func(d *prometheus.Desc, v int64, labels ...string)) {
	if f := r.Failover; f != nil {
		gauge(dFoEpoch, float64(f.Epoch))
		gauge(dFoRole, 1, f.Role)
	}
	if st := r.Slave; st != nil {
		gauge(dReplRole, 1, "slave")
		connected := 0.0
		if st.Connected {
			connected = 1
		}
		gauge(dReplConnected, connected)
		gauge(dReplLagBytes, float64(st.LagBytes))
		gauge(dReplLagSecs, float64(st.LagMs)/1000)
		counter(dReplCopied, st.Copied)
		counter(dReplSyncMsgs, st.Syncs)
		return
	}
	gauge(dReplRole, 1, "master")
	st := r.Sync
	if st == nil {
		return
	}
	gauge(dSyncParts, float64(st.Partitions))
	gauge(dSyncInSync, float64(st.InSync))
	counter(dSyncShipped, st.Shipped)
	counter(dSyncFailed, st.Failed)
	counter(dSyncRefused, st.Refused)
	counter(dSyncDegraded, st.Degraded)
}

// ReplicaCheck is /readyz's "replica" check: hook's when it is set (the
// broker's Options.ReplicaInSync), else a slave's built-in one
// (SlaveReady, under cfg); nil for a master without a hook.
func ReplicaCheck(hook func() (bool, string), role repl.Role, slave *repl.Slave, cfg *conf.Config) *ReadyCheck {
	if hook != nil {
		ok, d := hook()
		return &ReadyCheck{Name: "replica", OK: ok, Detail: d}
	}
	if role == repl.RoleSlave {
		c := SlaveReady(slave.Status(), cfg.SlaveID, cfg.BrokerID, cfg.Replication == conf.ReplicationSync,
			time.Duration(cfg.SyncTimeout)*time.Millisecond)
		return &c
	}
	return nil
}

// SlaveReady is the built-in "replica" check of slave slaveID of broker
// brokerID. A slave whose configuration says replication = "sync"
// (slaves share the master's server.toml; the key makes the master ship
// puts synchronously) is in sync mode: ready once connected to its master
// and caught up (no data missing, or missing for less than syncTimeout).
// An async slave is always ready (it serves reads as it copies); the
// detail says its state.
func SlaveReady(st repl.SlaveStatus, slaveID, brokerID int, syncMode bool, syncTimeout time.Duration) ReadyCheck {
	master := st.Master
	if master == "" {
		master = "none"
	}
	state := fmt.Sprintf("slave %d of broker %d, master %s, connected %v, lag %d bytes, %d ms", slaveID, brokerID,
		master, st.Connected, st.LagBytes, st.LagMs)
	c := ReadyCheck{Name: "replica", OK: true}
	switch {
	case !syncMode:
		c.Detail = state + " (async: readiness does not wait for it)"
	case !st.Connected:
		c.OK, c.Detail = false, state+": not connected to the master (sync mode)"
	case st.LagBytes > 0 && time.Duration(st.LagMs)*time.Millisecond >= syncTimeout:
		c.OK, c.Detail = false, state+": not in sync with the master (sync mode: behind for "+syncTimeout.String()+" or more)"
	default:
		c.Detail = state + ": in sync (sync mode)"
	}
	return c
}

// ReadyState is what /readyz checks.
type ReadyState struct {
	// Recovered: the partitions are opened and recovered. JournalErr is
	// the first failed journal's error ("" when none), of data directory
	// JournalDir.
	Recovered              bool
	JournalDir, JournalErr string
	// Serving: the client listeners are open.
	Serving bool
	// ZooKeeper: cluster mode, under root ZKRoot; Registered there now.
	ZooKeeper, Registered bool
	ZKRoot                string
	// Replica is the "replica" check (nil: none).
	Replica *ReadyCheck
}

// Checks are /readyz's checks: storage recovered, no journal failed, the
// listeners open, registered in ZooKeeper in cluster mode, and the
// replica check.
func (s ReadyState) Checks() []ReadyCheck {
	out := []ReadyCheck{{Name: "storage", OK: s.Recovered, Detail: "partitions opened and recovered"}, {Name: "journal", OK: true}}
	if s.JournalErr != "" {
		out[1] = ReadyCheck{Name: "journal", Detail: "journal of " + s.JournalDir + " failed: " + s.JournalErr}
	}
	out = append(out, ReadyCheck{Name: "serving", OK: s.Serving, Detail: "client listeners open"})
	if s.ZooKeeper {
		// zookeeper.connect is secret (it may carry credentials, and
		// /readyz needs no user): the root names the cluster.
		d := "registered in ZooKeeper (root " + s.ZKRoot + ")"
		if !s.Registered {
			d = "not registered in ZooKeeper (root " + s.ZKRoot + "; unreachable, or the session is being re-established)"
		}
		out = append(out, ReadyCheck{Name: "zookeeper", OK: s.Registered, Detail: d})
	}
	if s.Replica != nil {
		out = append(out, *s.Replica)
	}
	return out
}
