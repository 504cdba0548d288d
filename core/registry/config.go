package registry

import (
	"net"
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

// ListenerOptions is FromConf with the URIs of the broker's listeners ln
// (plaintext, "meta") and tlsLn (TLS, "metaqs"), either nil when it has
// none, on the advertised host (AdvertiseHost of cfg's host: warnf says
// so when it is not the configured one).
func ListenerOptions(cfg *conf.Config, ln, tlsLn net.Listener, warnf func(string, ...any)) Options {
	host := AdvertiseHost(cfg.Host)
	if host != cfg.Host {
		warnf("registry: host %q is not an address clients can use; advertising %s", cfg.Host, host)
	}
	o := FromConf(cfg)
	o.URI = ListenerURI("meta", host, ln)
	o.TLSURI = ListenerURI("metaqs", host, tlsLn)
	return o
}
