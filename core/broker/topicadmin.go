package broker

import (
	"context"
	"fmt"
	"slices"
	"strconv"

	"github.com/metaq-go/metaq/conf"
	"github.com/metaq-go/metaq/core/partition"
	"github.com/metaq-go/metaq/core/registry"
	"github.com/metaq-go/metaq/core/topicadmin"
)

// Live topic administration (the admin API, docs/http.md): topics are
// created, given more partitions and deleted at run time. Every change is
// written first to <data_dir>/topics.toml (core/topicadmin, which also
// validates it and says what the file becomes), then made here: the
// config's topic list is replaced under b.mu, the partitions opened or
// closed, and the topic registered in or removed from ZooKeeper (cluster
// mode) without waiting for it. Changes are serialised by b.adminMu.

// configTopic returns the [[topic]] table of name in the config.
func (b *Broker) configTopic(name string) (conf.Topic, bool) {
	b.mu.RLock()
	defer b.mu.RUnlock()
	for _, t := range b.config().Topics {
		if t.Name == name {
			return t, true
		}
	}
	return conf.Topic{}, false
}

// applyTopicChange persists f, then makes the config's topics those of
// server.toml with f applied. It validates first; nothing changes on error.
func (b *Broker) applyTopicChange(f *conf.TopicsFile) error {
	topics, err := b.topicBook.Apply(*b.config(), f)
	if err != nil {
		return err
	}
	b.mu.Lock()
	nc := *b.config() // copy on write: readers hold the old one
	nc.Topics = topics
	b.cfgp.Store(&nc)
	b.mu.Unlock()
	return nil
}

// CreateTopic creates topic t live: persisted in topics.toml, its
// partitions opened, registered in ZooKeeper in cluster mode.
func (b *Broker) CreateTopic(t conf.Topic) error {
	b.adminMu.Lock()
	defer b.adminMu.Unlock()
	if err := topicadmin.CheckName(t.Name); err != nil {
		return err
	}
	if _, ok := b.configTopic(t.Name); ok {
		return topicadmin.Exists(t.Name, false)
	}
	b.mu.RLock()
	_, open := b.topics[t.Name]
	b.mu.RUnlock()
	if open {
		return topicadmin.Exists(t.Name, true)
	}
	prev := b.topicBook.Snapshot()
	if err := b.applyTopicChange(b.topicBook.Create(t)); err != nil {
		return err
	}
	if _, err := b.openTopic(t.Name); err != nil {
		b.logf("topics: create %s: %v; undoing", t.Name, err)
		if uerr := b.applyTopicChange(prev); uerr != nil {
			b.logf("topics: undo create %s: %v", t.Name, uerr)
		}
		return err
	}
	tc, _ := b.topicConfig(t.Name)
	b.logf("topics: created topic %s with %d partition(s)", t.Name, tc.NumPartitions)
	return nil
}

// topicConfig is b.config().TopicConfig under b.mu.
func (b *Broker) topicConfig(name string) (conf.TopicConfig, bool) {
	b.mu.RLock()
	defer b.mu.RUnlock()
	return b.config().TopicConfig(name)
}

// AddPartitions raises a topic's partition count to n live. Keyed
// ordering changes: a key hashed to partition k of the old count may map
// elsewhere now. Fewer partitions are refused (their data would be lost).
func (b *Broker) AddPartitions(name string, n int) (old int, err error) {
	b.adminMu.Lock()
	defer b.adminMu.Unlock()
	b.mu.RLock()
	t := b.topics[name]
	b.mu.RUnlock()
	ct, configured := b.configTopic(name)
	if t == nil || !configured {
		if t != nil {
			return 0, topicadmin.NotConfigured(name)
		}
		return 0, fmt.Errorf("%w: %s", partition.ErrNoTopic, quoteName(name))
	}
	old = len(t.parts)
	if n == old {
		return old, nil
	}
	if err := topicadmin.CheckGrow(name, old, n); err != nil {
		return old, err
	}
	ct.NumPartitions = &n
	prev := b.topicBook.Snapshot()
	if err := b.applyTopicChange(b.topicBook.Alter(ct)); err != nil {
		return old, err
	}
	tc, _ := b.topicConfig(name)
	nt, err := b.growTopic(t, tc)
	if err != nil {
		if uerr := b.applyTopicChange(prev); uerr != nil {
			b.logf("topics: undo alter %s: %v", name, uerr)
		}
		return old, err
	}
	b.mu.Lock()
	if b.topics[name] == t {
		b.topics[name] = nt
	}
	reg := b.reg
	b.mu.Unlock()
	if reg != nil {
		reg.AddTopic(registry.TopicOf(tc))
	}
	b.logf("topics: topic %s now has %d partitions (was %d); keys may map to other partitions now", name, n, old)
	return old, nil
}

// growTopic returns a new topic value sharing t's open partitions, with
// the new ones (tc.NumPartitions) opened. The old value stays valid for
// whoever holds it.
func (b *Broker) growTopic(t *topic, tc conf.TopicConfig) (*topic, error) {
	more, err := b.logs().Open(t.name, &tc, len(t.parts), tc.NumPartitions)
	if err != nil {
		return nil, err
	}
	nt := &topic{name: t.name, disk: t.disk, parts: append(slices.Clip(t.parts), more...)}
	nt.cfgp.Store(&tc)
	nt.pc = make([]partCounters, len(nt.parts))
	for i := range t.pc {
		nt.pc[i].msgsIn.Store(t.pc[i].msgsIn.Load())
		nt.pc[i].bytesIn.Store(t.pc[i].bytesIn.Load())
		nt.pc[i].bytesOut.Store(t.pc[i].bytesOut.Load())
		nt.pc[i].msgsOut.Store(t.pc[i].msgsOut.Load())
		nt.pc[i].gets.Store(t.pc[i].gets.Load())
	}
	// The realtime stats start again for the new value: `stats <topic>`
	// reads the current one.
	return nt, nil
}

// DeleteTopic deletes a topic live: it is removed from topics.toml (or
// marked deleted there when server.toml has it), unregistered from
// ZooKeeper and its partitions closed; puts and gets to it then fail.
// With deleteData its partition directories are removed too, once a
// journal checkpoint guarantees that a restart replays nothing into them;
// without, they stay on disk (creating the topic again reopens them).
func (b *Broker) DeleteTopic(name string, deleteData bool) error {
	b.adminMu.Lock()
	defer b.adminMu.Unlock()
	_, configured := b.configTopic(name)
	b.mu.RLock()
	t := b.topics[name]
	b.mu.RUnlock()
	if !configured && t == nil {
		return fmt.Errorf("%w: %s", partition.ErrNoTopic, quoteName(name))
	}
	if configured {
		if err := b.applyTopicChange(b.topicBook.Delete(name)); err != nil {
			return err
		}
	}
	b.mu.Lock()
	delete(b.topics, name)
	b.names = slices.DeleteFunc(b.names, func(n string) bool { return n == name })
	reg := b.reg
	b.mu.Unlock()
	if reg != nil {
		reg.RemoveTopic(name)
	}
	b.committed.Forget(name)
	var dirs []string
	if t != nil {
		for _, l := range t.parts {
			dirs = append(dirs, l.Dir())
		}
		if err := t.close(); err != nil {
			b.logf("topics: delete %s: closing its partitions: %v", name, err)
		}
	}
	what := "data kept on disk"
	if deleteData && len(dirs) > 0 {
		if err := b.removeTopicData(t, dirs); err != nil {
			b.logf("topics: deleted topic %s, but its data stays: %v", name, err)
			return fmt.Errorf("topic %s deleted, but its data was not removed: %w", name, err)
		}
		what = "data removed (" + strconv.Itoa(len(dirs)) + " partition directories)"
	}
	b.logf("topics: deleted topic %s; %s", name, what)
	return nil
}

// removeTopicData removes a closed topic's partition directories
// (topicadmin.RemoveData, after a checkpoint of their journal if any).
func (b *Broker) removeTopicData(t *topic, dirs []string) error {
	dir := t.conf().DataDir
	if dir == "" {
		dir = b.config().DataDir
	}
	var checkpoint func(context.Context) error
	if j := b.journalFor(dir, t.conf().UnflushThreshold); j != nil {
		checkpoint = j.CheckpointClosed
	}
	return topicadmin.RemoveData(dir, dirs, checkpoint)
}
