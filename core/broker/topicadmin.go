package broker

import (
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/metaq-go/metaq/conf"
	"github.com/metaq-go/metaq/core/partition"
	"github.com/metaq-go/metaq/internal/fsutil"
)

// Live topic administration (the admin API, docs/http.md): topics are
// created, given more partitions and deleted at run time. Every change is
// written first to <data_dir>/topics.toml (conf.TopicsFile), which New
// applies on top of server.toml, then made: the config's topic list is
// replaced under b.mu, the partitions opened or closed, and the topic
// registered in or removed from ZooKeeper (cluster mode) without waiting
// for it. Changes are serialised by b.adminMu.

// Errors of the topic changes, mapped to HTTP codes by the admin API.
var (
	errTopicExists  = errors.New("topic exists")
	errTopicInvalid = errors.New("invalid topic")
)

// checkpointClosedTimeout bounds the wait, when deleting a topic's data,
// for a journal checkpoint after its partitions closed.
const checkpointClosedTimeout = 30 * time.Second

// topicsFilePath is <data_dir>/topics.toml.
func (b *Broker) topicsFilePath() string {
	return filepath.Join(b.config().DataDir, conf.TopicsFileName)
}

// loadTopicsFile reads topics.toml (an empty file when there is none) and
// applies it to b.config(). New calls it before opening anything.
func (b *Broker) loadTopicsFile() error {
	b.serverTopics = slices.Clone(b.config().Topics)
	data, err := os.ReadFile(b.topicsFilePath())
	if errors.Is(err, os.ErrNotExist) {
		b.topicsFile = &conf.TopicsFile{}
		return nil
	}
	if err != nil {
		return fmt.Errorf("%s: %w", conf.TopicsFileName, err)
	}
	f, err := conf.ParseTopicsFile(data, b.topicsFilePath())
	if err != nil {
		return err
	}
	if err := b.config().ApplyTopics(f); err != nil {
		return err
	}
	if len(f.Topics) > 0 || len(f.Deleted) > 0 {
		b.logf("topics: %s applied: %d topic(s) created or altered, %d deleted", b.topicsFilePath(), len(f.Topics), len(f.Deleted))
	}
	b.topicsFile = f
	return nil
}

// writeTopicsFile writes f durably: a temporary file, fsynced, renamed
// over topics.toml, and the directory fsynced.
func (b *Broker) writeTopicsFile(f *conf.TopicsFile) error {
	data, err := f.Encode()
	if err != nil {
		return err
	}
	path := b.topicsFilePath()
	if err := fsutil.WriteFileDurable(path, data); err != nil {
		return fmt.Errorf("write %s: %w", path, err)
	}
	return nil
}

// cloneTopicsFile copies the current topics file for a change.
func (b *Broker) cloneTopicsFile() *conf.TopicsFile {
	return &conf.TopicsFile{Deleted: slices.Clone(b.topicsFile.Deleted), Topics: slices.Clone(b.topicsFile.Topics)}
}

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
// base with f applied. It validates first; nothing changes on error.
func (b *Broker) applyTopicChange(f *conf.TopicsFile) error {
	base := *b.config()
	// The config as server.toml gave it: base topics from the file as
	// loaded, then every live change.
	topics := b.liveTopics(f)
	if _, err := base.WithTopics(topics); err != nil {
		var ce *conf.Error
		if errors.As(err, &ce) {
			var msgs []string
			for _, p := range ce.Problems {
				msgs = append(msgs, p.String())
			}
			return fmt.Errorf("%w: %s", errTopicInvalid, strings.Join(msgs, "; "))
		}
		return fmt.Errorf("%w: %v", errTopicInvalid, err)
	}
	if err := b.writeTopicsFile(f); err != nil {
		return err
	}
	b.mu.Lock()
	nc := *b.config() // copy on write: readers hold the old one
	nc.Topics = topics
	b.cfgp.Store(&nc)
	b.topicsFile = f
	b.mu.Unlock()
	return nil
}

// liveTopics is server.toml's topics (b.serverTopics) with f applied.
func (b *Broker) liveTopics(f *conf.TopicsFile) []conf.Topic {
	c := conf.Config{Topics: b.serverTopics}
	return c.TopicsWith(f)
}

// CreateTopic creates topic t live: persisted in topics.toml, its
// partitions opened, registered in ZooKeeper in cluster mode.
func (b *Broker) CreateTopic(t conf.Topic) error {
	b.adminMu.Lock()
	defer b.adminMu.Unlock()
	if err := conf.ValidateTopicName(t.Name); err != nil {
		return fmt.Errorf("%w: %w", errTopicInvalid, err)
	}
	if _, ok := b.configTopic(t.Name); ok {
		return fmt.Errorf("%w: %s", errTopicExists, t.Name)
	}
	b.mu.RLock()
	_, open := b.topics[t.Name]
	b.mu.RUnlock()
	if open { // auto-created
		return fmt.Errorf("%w: %s (auto-created)", errTopicExists, t.Name)
	}
	f := b.cloneTopicsFile()
	f.Deleted = slices.DeleteFunc(f.Deleted, func(n string) bool { return n == t.Name })
	f.Topics = append(f.Topics, t)
	prev := b.cloneTopicsFile()
	if err := b.applyTopicChange(f); err != nil {
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
			return 0, fmt.Errorf("%w: %s is auto-created (it has no [[topic]] table): create it first", errTopicInvalid, name)
		}
		return 0, fmt.Errorf("%w: %s", partition.ErrNoTopic, quoteName(name))
	}
	old = len(t.parts)
	switch {
	case n == old:
		return old, nil
	case n < old:
		return old, fmt.Errorf("%w: %s has %d partitions; removing partitions is not supported (their messages would be lost)", errTopicInvalid, name, old)
	case n > conf.MaxPartitions:
		return old, fmt.Errorf("%w: num_partitions must be at most %d", errTopicInvalid, conf.MaxPartitions)
	}
	ct.NumPartitions = &n
	f := b.cloneTopicsFile()
	f.Topics = slices.DeleteFunc(f.Topics, func(x conf.Topic) bool { return x.Name == name })
	f.Topics = append(f.Topics, ct)
	prev := b.cloneTopicsFile()
	if err := b.applyTopicChange(f); err != nil {
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
		reg.AddTopic(registryTopic(tc))
	}
	b.logf("topics: topic %s now has %d partitions (was %d); keys may map to other partitions now", name, n, old)
	return old, nil
}

// growTopic returns a new topic value sharing t's open partitions, with
// the new ones (tc.NumPartitions) opened. The old value stays valid for
// whoever holds it.
func (b *Broker) growTopic(t *topic, tc conf.TopicConfig) (*topic, error) {
	more, err := b.openPartitionRange(t.name, tc, len(t.parts), tc.NumPartitions)
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
		f := b.cloneTopicsFile()
		f.Topics = slices.DeleteFunc(f.Topics, func(x conf.Topic) bool { return x.Name == name })
		if slices.Contains(b.serverTopicNames(), name) && !slices.Contains(f.Deleted, name) {
			f.Deleted = append(f.Deleted, name)
		}
		if err := b.applyTopicChange(f); err != nil {
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

// removeTopicData removes a closed topic's partition directories, after
// a checkpoint of their journal (if any) so that no restart replays
// records into them.
func (b *Broker) removeTopicData(t *topic, dirs []string) error {
	dir := t.conf().DataDir
	if dir == "" {
		dir = b.config().DataDir
	}
	if j := b.journalFor(dir, t.conf().UnflushThreshold); j != nil {
		ctx, cancel := context.WithTimeout(context.Background(), checkpointClosedTimeout)
		defer cancel()
		if err := j.CheckpointClosed(ctx); err != nil {
			return fmt.Errorf("journal checkpoint: %w", err)
		}
	}
	for _, d := range dirs {
		if err := os.RemoveAll(d); err != nil {
			return err
		}
	}
	return fsutil.SyncDir(filepath.Clean(dir))
}

// serverTopicNames are the names of server.toml's topics.
func (b *Broker) serverTopicNames() []string {
	out := make([]string, len(b.serverTopics))
	for i, t := range b.serverTopics {
		out[i] = t.Name
	}
	return out
}
