package broker

import (
	"fmt"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/metaq-go/metaq/conf"
	"github.com/metaq-go/metaq/core/repl"
)

// What the HTTP side shows of replication (docs/http.md): the /readyz
// "replica" check and the metaq_replication_* series. Both read the typed
// status of core/repl (Slave.Status, SyncMaster.Status, Failover.Status),
// as `stats` does (stats.go renders it as text).

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

// slaveReady is the built-in "replica" check of a slave. A slave whose
// configuration says replication = "sync" (slaves share the master's
// server.toml; the key makes the master ship puts synchronously) is in
// sync mode: ready once connected to its master and caught up (no data
// missing, or missing for less than sync_timeout). An async slave is
// always ready (it serves reads as it copies); the detail says its state.
func (b *Broker) slaveReady() (bool, string) {
	st := b.slave.Status()
	connected := st.Connected
	lagB, lagMs := st.LagBytes, st.LagMs
	master := st.Master
	if master == "" {
		master = "none"
	}
	state := fmt.Sprintf("slave %d of broker %d, master %s, connected %v, lag %d bytes, %d ms", b.config().SlaveID, b.config().BrokerID,
		master, connected, lagB, lagMs)
	if b.config().Replication != conf.ReplicationSync {
		return true, state + " (async: readiness does not wait for it)"
	}
	limit := time.Duration(b.config().SyncTimeout) * time.Millisecond
	switch {
	case !connected:
		return false, state + ": not connected to the master (sync mode)"
	case lagB > 0 && time.Duration(lagMs)*time.Millisecond >= limit:
		return false, state + ": not in sync with the master (sync mode: behind for " + limit.String() + " or more)"
	}
	return true, state + ": in sync (sync mode)"
}

// replicaCheck is /readyz's "replica" check: the Options hook when set,
// else the built-in one of a slave; ok false when there is none.
func (b *Broker) replicaCheck() (readyCheck, bool) {
	if f := b.opts.ReplicaInSync; f != nil {
		ok, d := f()
		return readyCheck{Name: "replica", OK: ok, Detail: d}, true
	}
	if b.replRole() == repl.RoleSlave {
		ok, d := b.slaveReady()
		return readyCheck{Name: "replica", OK: ok, Detail: d}, true
	}
	return readyCheck{}, false
}

// collectReplication sends the metaq_replication_* series.
func (b *Broker) collectReplication(gauge func(d *promDesc, v float64, labels ...string), counter func(d *promDesc, v int64, labels ...string)) {
	if b.fo != nil {
		st := b.fo.Status()
		gauge(dFoEpoch, float64(st.Epoch))
		gauge(dFoRole, 1, failoverRoleName(st.Role))
	}
	if b.replRole() == repl.RoleSlave {
		gauge(dReplRole, 1, "slave")
		st := b.slave.Status()
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
	if b.sync == nil {
		return
	}
	st := b.sync.Status()
	gauge(dSyncParts, float64(st.Partitions))
	gauge(dSyncInSync, float64(st.InSync))
	counter(dSyncShipped, st.Shipped)
	counter(dSyncFailed, st.Failed)
	counter(dSyncRefused, st.Refused)
	counter(dSyncDegraded, st.Degraded)
}

type promDesc = prometheus.Desc
