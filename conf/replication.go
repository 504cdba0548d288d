package conf

import (
	"errors"
	"strconv"
	"strings"
)

// Values of Config.Replication.
const (
	// ReplicationAsync: slaves pull from the master (MetaQ's metaslave); a
	// put is acknowledged once the master has it.
	ReplicationAsync = "async"
	// ReplicationSync: the master ships every put to its slave with sync
	// and acknowledges it only once both have it (MetaQ's samsa/gregor).
	ReplicationSync = "sync"
)

// Defaults of the replication keys.
const (
	DefaultSlaveMaxDelay = 500  // milliseconds
	DefaultSyncTimeout   = 2000 // milliseconds
	// MaxSlaveID is the largest slave id.
	MaxSlaveID = 1023
)

// IsSlave reports whether the broker runs as a slave (slave_id >= 0).
func (c *Config) IsSlave() bool { return c.SlaveID >= 0 }

// EffectiveSlaveGroup is slave_group, or MetaQ's default
// "meta-slave-group_<broker_id>".
func (c *Config) EffectiveSlaveGroup() string {
	if c.SlaveGroup != "" {
		return c.SlaveGroup
	}
	return "meta-slave-group_" + strconv.Itoa(c.BrokerID)
}

func (k *checker) replication(c *Config) {
	k.intRange("slave_id", int64(c.SlaveID), -1, MaxSlaveID)
	k.intRange("slave_max_delay", int64(c.SlaveMaxDelay), 1, 60000)
	k.intRange("sync_timeout", int64(c.SyncTimeout), 1, 600000)
	k.intRange("failover_slave_id", int64(c.FailoverSlaveID), 0, MaxSlaveID)
	if c.SlaveGroup != "" && !ValidTopicName(c.SlaveGroup) {
		k.add("slave_group", "must be a name of letters, digits, '_', '-' and '.', got %q", c.SlaveGroup)
	}
	if c.ReplicationPassword != "" && c.ReplicationUser == "" {
		k.add("replication_password", "needs replication_user")
	}
	if strings.ContainsAny(c.ReplicationUser, "\x00\r\n") || strings.ContainsRune(c.ReplicationPassword, 0) {
		k.add("replication_user", "the user and password may not hold NUL (or, the user, a line break)")
	}
	switch c.Replication {
	case ReplicationAsync, ReplicationSync:
	default:
		k.add("replication", "must be %q or %q, got %q", ReplicationAsync, ReplicationSync, c.Replication)
	}
}

// CheckReplication reports a replication setting that cannot work with
// the rest (the broker calls it at start, after command-line overrides):
// a slave, and a sync master, find each other in ZooKeeper.
func (c *Config) CheckReplication() error {
	switch {
	case c.IsSlave() && !c.ZooKeeper.Enabled():
		return errors.New("slave_id: a slave finds its master in ZooKeeper: set [zookeeper] connect (or --zk)")
	case c.Failover && !c.ZooKeeper.Enabled():
		return errors.New("failover: promotion and fencing go through ZooKeeper: set [zookeeper] connect (or --zk)")
	case c.Failover && !c.IsSlave() && c.Replication != ReplicationSync:
		return errors.New(`failover = true needs replication = "sync" on the master (an async slave is never known to be in sync)`)
	case !c.IsSlave() && c.Replication == ReplicationSync && !c.ZooKeeper.Enabled():
		return errors.New(`replication = "sync": the master finds its slave in ZooKeeper: set [zookeeper] connect (or --zk)`)
	}
	return nil
}
