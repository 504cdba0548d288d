package repl

import (
	"time"

	"github.com/metaq-go/metaq/conf"
)

// Config is replication's slice of the broker's configuration. None of it
// changes live: a Reload that changes it is reported as needing a restart
// by the broker's generic diff (core/broker/reload.go).
type Config struct {
	BrokerID int
	// SlaveID is this slave's id, -1 for a master.
	SlaveID int
	// Sync is replication = "sync" (a master ships puts to its slave).
	Sync bool
	// SyncDegrade and SyncTimeout: sync_degrade and sync_timeout.
	SyncDegrade bool
	SyncTimeout time.Duration
	// SlaveGroup, SlaveMaxDelay: a slave's consumer group for its pulls
	// and its longest idle wait (slave_max_delay).
	SlaveGroup    string
	SlaveMaxDelay time.Duration
	// MaxMessageSize bounds a copied record.
	MaxMessageSize int
	// Failover (failover = true): the ZooKeeper session_timeout that
	// bounds a lease, unclean_election, failover_slave_id (the master's
	// slave id when it rejoins as one) and data_dir (epochs,
	// failover-held).
	SessionTimeout  time.Duration
	UncleanElection bool
	FailoverSlaveID int
	DataDir         string
}

// FromConf is cfg's replication slice.
func FromConf(cfg *conf.Config) Config {
	return Config{
		BrokerID:    cfg.BrokerID,
		SlaveID:     cfg.SlaveID,
		Sync:        cfg.Replication == conf.ReplicationSync,
		SyncDegrade: cfg.SyncDegrade,
		SyncTimeout: time.Duration(cfg.SyncTimeout) * time.Millisecond,

		SlaveGroup:     cfg.EffectiveSlaveGroup(),
		SlaveMaxDelay:  time.Duration(cfg.SlaveMaxDelay) * time.Millisecond,
		MaxMessageSize: cfg.MaxMessageSize,

		SessionTimeout:  time.Duration(cfg.ZooKeeper.SessionTimeout) * time.Millisecond,
		UncleanElection: cfg.UncleanElection,
		FailoverSlaveID: cfg.FailoverSlaveID,
		DataDir:         cfg.DataDir,
	}
}
