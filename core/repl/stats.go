package repl

import "strconv"

// The replication lines of the broker's `stats` (docs/protocol.md) and of
// the dashboard's cluster page: each status emits its key/value pairs
// through kv, in the order the reply shows them; the broker writes them
// into the reply.

// SummaryLines are the replication lines of the broker's `stats`
// summary for a broker in role, with replication its configured mode:
// whether it is a slave; failover's lines (fo nil without failover: epoch
// 0, docs/replication.md); a slave's lines, or the mode; a sync master's
// lines (sm nil when there is no sync master).
func SummaryLines(role Role, replication string, fo *Failover, slave *Slave, sm *SyncMaster, kv func(k string, v any)) {
	kv("slave", role == RoleSlave)
	if fo != nil {
		fo.Status().StatsLines(kv)
	} else {
		kv("epoch", 0) // no failover, no epoch (docs/replication.md)
	}
	if role == RoleSlave {
		slave.Status().StatsLines(kv)
	} else {
		kv("replication", replication)
	}
	if sm != nil && role != RoleSlave {
		sm.Status().StatsLines(kv)
	}
}

// StatsLines are a sync master's lines of stats.
func (st SyncStatus) StatsLines(kv func(k string, v any)) {
	addr := st.Slave
	if addr == "" {
		addr = "none"
	}
	kv("sync_slave", addr)
	kv("sync_partitions_in_sync", strconv.Itoa(st.InSync)+"/"+strconv.Itoa(st.Partitions))
	kv("sync_shipped", st.Shipped)
	kv("sync_failed", st.Failed)
	kv("sync_refused", st.Refused)
	kv("sync_degraded_puts", st.Degraded)
	kv("sync_tx_shipped", st.ExtShipped)
}

// StatsLines are a slave's lines of stats.
func (st SlaveStatus) StatsLines(kv func(k string, v any)) {
	kv("slave_id", st.ID)
	m := st.Master
	if m == "" {
		m = "none"
	}
	kv("slave_master", m)
	kv("slave_connected", st.Connected)
	kv("slave_lag_bytes", st.LagBytes)
	kv("slave_lag_ms", st.LagMs)
	kv("slave_copied_messages", st.Copied)
	kv("slave_sync_messages", st.Syncs)
	kv("slave_sync_duplicates", st.SyncDups)
	kv("slave_refetched_bytes", st.Refetched)
}

// StatsLines are the failover lines of stats.
func (st FailoverStatus) StatsLines(kv func(k string, v any)) {
	kv("failover_role", st.Role.StatsName())
	kv("epoch", st.Epoch)
	if st.Role.Holds() {
		kv("failover_lease_ms", st.LeaseMs)
		insync := "-"
		if st.InSync >= 0 {
			insync = MemberLabel(st.InSync)
		}
		kv("failover_insync", insync)
	}
}

// StatsName is the role as stats and metrics name it
// (docs/replication.md): a draining holder is still the master, a member
// fenced by a switchover is fenced.
func (r Role) StatsName() string {
	switch r {
	case RoleDraining:
		return "master"
	case RoleHandover:
		return "fenced"
	}
	return r.String()
}
