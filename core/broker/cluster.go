package broker

import (
	"context"
	"fmt"
	"time"

	"github.com/metaq-go/metaq/core/registry"
)

// Cluster mode: the broker registers itself in ZooKeeper (core/registry)
// once its listener is bound, so the registered URI carries the real port.
//
// A ZooKeeper that is down or slow at start does not stop the broker:
// Serve waits at most zookeeper.connection_timeout for the first
// registration (MetaQ waits that long and then fails to start); after that
// the broker serves anyway, logs it, and the registry keeps trying in the
// background, registering as soon as ZooKeeper answers.

// openRegistry starts the registration (without waiting for it) with the
// topics open now; topics created later are added by openTopic.
func (b *Broker) openRegistry() error {
	o := registry.ListenerOptions(b.config(), b.ln, b.tlsLn, b.warnf) // [zookeeper], ids, URIs
	ctx, cancel := context.WithCancel(context.Background())
	cancel() // Open must not wait: Serve waits after starting to accept
	b.mu.Lock()
	defer b.mu.Unlock()
	var topics []registry.Topic
	for _, t := range b.topics.List() { // openTopic registers the later ones
		topics = append(topics, registry.TopicOf(*t.Conf()))
	}
	o.ConfigChecksum = b.configChecksum()
	o.Topics = topics
	o.Logf = b.logf
	o.Standby = b.fo != nil && !b.config().IsSlave()
	o.FenceOnExpiry = b.fo != nil
	o.OnExpired = b.foExpired
	r, err := registry.Open(ctx, o)
	if err != nil {
		return fmt.Errorf("zookeeper: %w", err)
	}
	b.reg = r
	return nil
}

// waitRegistered waits for the first registration, at most
// zookeeper.connection_timeout (registry.Registry.WaitStart).
func (b *Broker) waitRegistered() {
	if r := b.registry(); r != nil {
		r.WaitStart(b.startCtx, time.Duration(b.config().ZooKeeper.ConnectionTimeout)*time.Millisecond, b.logf, b.warnf)
	}
}

// Registered reports whether the broker is registered in ZooKeeper under
// its current session (false in local mode).
func (b *Broker) Registered() bool {
	r := b.registry()
	return r != nil && r.Registered()
}

// foExpired is the registry's OnExpired: a failover holder whose session
// expired is fenced.
func (b *Broker) foExpired() {
	if b.fo != nil {
		b.fo.OnExpired()
	}
}
