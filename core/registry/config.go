package registry

import (
	"time"

	"github.com/metaq-go/metaq/conf"
	"github.com/metaq-go/metaq/sdk/cluster"
)

// FromConf is the registration's slice of cfg: [zookeeper] (connect,
// root, session timeout, digest identity), the broker id and, for a
// slave, its slave id. The broker adds what it knows once listening: the
// URIs, the config checksum, the topics, failover's settings.
func FromConf(cfg *conf.Config) Options {
	zc := cfg.ZooKeeper
	return Options{
		Connect:        zc.Connect,
		Root:           zc.Root,
		SessionTimeout: time.Duration(zc.SessionTimeout) * time.Millisecond,
		BrokerID:       cfg.BrokerID,
		Auth:           cluster.Auth{User: zc.AuthUser, Password: zc.AuthPassword},
		Slave:          cfg.IsSlave(),
		SlaveID:        cfg.SlaveID,
	}
}
