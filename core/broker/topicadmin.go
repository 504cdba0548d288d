package broker

import (
	"github.com/metaq-go/metaq/conf"
	"github.com/metaq-go/metaq/core/partition"
	"github.com/metaq-go/metaq/core/registry"
	"github.com/metaq-go/metaq/core/topicadmin"
)

// Live topic administration (the admin API, docs/http.md): the sequence
// of a create, an alter or a delete (validate, persist to topics.toml,
// apply, undo) is core/topicadmin's Admin; topicHost is the broker as its
// topicadmin.Host: the config's topic list replaced under b.mu, the
// partitions opened or closed, the topic registered in or removed from
// ZooKeeper (cluster mode) without waiting for it. Changes are serialised
// by b.adminMu.

// topicAdmin is the topic changes over b's topics.toml; hold b.adminMu.
func (b *Broker) topicAdmin() topicadmin.Admin {
	return topicadmin.Admin{Book: b.topicBook, Host: topicHost{b}, Logf: b.logf}
}

// CreateTopic creates topic t live: persisted in topics.toml, its
// partitions opened, registered in ZooKeeper in cluster mode.
func (b *Broker) CreateTopic(t conf.Topic) error {
	b.adminMu.Lock()
	defer b.adminMu.Unlock()
	return b.topicAdmin().Create(t)
}

// AddPartitions raises a topic's partition count to n live
// (topicadmin.Admin.AddPartitions).
func (b *Broker) AddPartitions(name string, n int) (old int, err error) {
	b.adminMu.Lock()
	defer b.adminMu.Unlock()
	return b.topicAdmin().AddPartitions(name, n)
}

// DeleteTopic deletes a topic live, and with deleteData its partition
// directories (topicadmin.Admin.Delete).
func (b *Broker) DeleteTopic(name string, deleteData bool) error {
	b.adminMu.Lock()
	defer b.adminMu.Unlock()
	return b.topicAdmin().Delete(name, deleteData)
}

// topicConfig is b.config().TopicConfig under b.mu.
func (b *Broker) topicConfig(name string) (conf.TopicConfig, bool) {
	b.mu.RLock()
	defer b.mu.RUnlock()
	return b.config().TopicConfig(name)
}

// topicHost is the broker as topicadmin.Host.
type topicHost struct{ b *Broker }

var _ topicadmin.Host = topicHost{}

func (h topicHost) Config() *conf.Config { return h.b.config() }

func (h topicHost) TopicConfig(name string) (conf.TopicConfig, bool) { return h.b.topicConfig(name) }

func (h topicHost) SetTopics(topics []conf.Topic) {
	b := h.b
	b.mu.Lock()
	nc := *b.config() // copy on write: readers hold the old one
	nc.Topics = topics
	b.cfgp.Store(&nc)
	b.mu.Unlock()
}

func (h topicHost) Open(name string) (int, bool) {
	t := h.b.topics.Get(name)
	if t == nil {
		return 0, false
	}
	return len(t.Parts), true
}

func (h topicHost) OpenTopic(name string) error {
	_, err := h.b.openTopic(name)
	return err
}

func (h topicHost) Grow(name string, tc conf.TopicConfig) error {
	b := h.b
	t := b.topics.Get(name)
	nt, err := b.growTopic(t, tc)
	if err != nil {
		return err
	}
	b.topics.Replace(name, t, nt)
	reg := b.registry()
	if reg != nil {
		reg.AddTopic(registry.TopicOf(tc))
	}
	return nil
}

// growTopic returns a new topic value sharing t's open partitions, with
// the new ones (tc.NumPartitions) opened (partition.Topic.Grow). The old
// value stays valid for whoever holds it.
func (b *Broker) growTopic(t *partition.Topic, tc conf.TopicConfig) (*partition.Topic, error) {
	lm := b.logs()
	more, err := lm.Open(t.Name(), &tc, len(t.Parts), tc.NumPartitions)
	if err != nil {
		return nil, err
	}
	b.indexLogs(lm.Dir(&tc), more)
	return t.Grow(&tc, more), nil
}

func (h topicHost) Remove(name string) topicadmin.Removed {
	b := h.b
	t := b.topics.Remove(name)
	reg := b.registry()
	if reg != nil {
		reg.RemoveTopic(name)
	}
	b.committed.Forget(name)
	var r topicadmin.Removed
	if t == nil {
		return r
	}
	for _, l := range t.Parts {
		r.Dirs = append(r.Dirs, l.Dir())
	}
	r.CloseErr = t.Close()
	b.forgetIdem(t.Parts) // idem.go
	r.DataDir = t.Conf().DataDir
	if r.DataDir == "" {
		r.DataDir = b.config().DataDir
	}
	if j := b.journalFor(r.DataDir, t.Conf().UnflushThreshold); j != nil {
		r.Checkpoint = j.CheckpointClosed
		r.Forget = j.ForgetRemoved
	}
	return r
}
