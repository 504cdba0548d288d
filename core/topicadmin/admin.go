package topicadmin

import (
	"context"
	"errors"
	"fmt"
	"strconv"

	"github.com/metaq-go/metaq/conf"
	"github.com/metaq-go/metaq/core/partition"
	"github.com/metaq-go/metaq/sdk/protocol"
)

// Live topic administration (the admin API, docs/http.md): topics are
// created, given more partitions and deleted at run time. Every change is
// written first to <data_dir>/topics.toml (the Book, which also validates
// it and says what the file becomes), then made through the Host: the
// config's topic list is replaced, the partitions opened or closed, and
// the topic registered in or removed from ZooKeeper (cluster mode)
// without waiting for it.

// Host is what live topic administration needs of the broker: its
// configuration and its open topics. core/broker implements it
// (topicadmin.go).
type Host interface {
	// Config is the current configuration.
	Config() *conf.Config
	// TopicConfig is Config().TopicConfig, read under the lock that
	// SetTopics takes.
	TopicConfig(name string) (conf.TopicConfig, bool)
	// SetTopics makes topics the configuration's [[topic]] list (copy on
	// write: readers keep the configuration they hold).
	SetTopics(topics []conf.Topic)
	// Open says how many partitions topic name has open, and whether it
	// is open.
	Open(name string) (partitions int, open bool)
	// OpenTopic opens a configured topic's partitions and registers it.
	OpenTopic(name string) error
	// Grow opens the partitions of open topic name up to
	// tc.NumPartitions, publishes the grown topic and registers it.
	Grow(name string, tc conf.TopicConfig) error
	// Remove takes topic name out of the broker: unpublished,
	// unregistered, its committed offsets forgotten, its partitions
	// closed (Removed.Dirs is nil when it was not open).
	Remove(name string) Removed
}

// Removed is what Host.Remove closed of a topic: its partition
// directories, the data directory they are in, the checkpoint of their
// journal and its ForgetRemoved (nil without one) and the error closing
// them.
type Removed struct {
	Dirs       []string
	DataDir    string
	Checkpoint func(context.Context) error
	Forget     func(context.Context, []string) error
	CloseErr   error
}

// Admin carries out topic changes over a Book and a Host. Its methods
// are not safe for concurrent use: the broker serialises them, and its
// reloads, with its adminMu (as Book's).
type Admin struct {
	Book *Book
	Host Host
	Logf func(format string, args ...any)
}

// configTopic returns the [[topic]] table of name in the config.
func (a Admin) configTopic(name string) (conf.Topic, bool) {
	for _, t := range a.Host.Config().Topics {
		if t.Name == name {
			return t, true
		}
	}
	return conf.Topic{}, false
}

// apply persists f, then makes the config's topics those of server.toml
// with f applied. It validates first; nothing changes on error.
func (a Admin) apply(f *conf.TopicsFile) error {
	topics, err := a.Book.Apply(*a.Host.Config(), f)
	if err != nil {
		return err
	}
	a.Host.SetTopics(topics)
	return nil
}

// noTopic is the refusal of a topic neither configured nor open.
func noTopic(name string) error {
	return fmt.Errorf("%w: %s", partition.ErrNoTopic, protocol.Printable([]byte(name)))
}

// Create creates topic t: persisted in topics.toml, its partitions
// opened, registered in ZooKeeper in cluster mode.
func (a Admin) Create(t conf.Topic) error {
	if err := CheckName(t.Name); err != nil {
		return err
	}
	if _, ok := a.configTopic(t.Name); ok {
		return Exists(t.Name, false)
	}
	if _, open := a.Host.Open(t.Name); open {
		return Exists(t.Name, true)
	}
	prev := a.Book.Snapshot()
	if err := a.apply(a.Book.Create(t)); err != nil {
		return err
	}
	if err := a.Host.OpenTopic(t.Name); err != nil {
		a.Logf("topics: create %s: %v; undoing", t.Name, err)
		if uerr := a.apply(prev); uerr != nil {
			a.Logf("topics: undo create %s: %v", t.Name, uerr)
		}
		return err
	}
	tc, _ := a.Host.TopicConfig(t.Name)
	a.Logf("topics: created topic %s with %d partition(s)", t.Name, tc.NumPartitions)
	return nil
}

// AddPartitions raises a topic's partition count to n. Keyed ordering
// changes: a key hashed to partition k of the old count may map elsewhere
// now. Fewer partitions are refused (their data would be lost).
func (a Admin) AddPartitions(name string, n int) (old int, err error) {
	old, open := a.Host.Open(name)
	ct, configured := a.configTopic(name)
	if !open || !configured {
		if open {
			return 0, NotConfigured(name)
		}
		return 0, noTopic(name)
	}
	if n == old {
		return old, nil
	}
	if err := CheckGrow(name, old, n); err != nil {
		return old, err
	}
	ct.NumPartitions = &n
	prev := a.Book.Snapshot()
	if err := a.apply(a.Book.Alter(ct)); err != nil {
		return old, err
	}
	tc, _ := a.Host.TopicConfig(name)
	if err := a.Host.Grow(name, tc); err != nil {
		if uerr := a.apply(prev); uerr != nil {
			a.Logf("topics: undo alter %s: %v", name, uerr)
		}
		return old, err
	}
	a.Logf("topics: topic %s now has %d partitions (was %d); keys may map to other partitions now", name, n, old)
	return old, nil
}

// Delete deletes a topic: it is removed from topics.toml (or marked
// deleted there when server.toml has it), unregistered from ZooKeeper and
// its partitions closed; puts and gets to it then fail. With deleteData
// its partition directories are removed too, once a journal checkpoint
// guarantees that a restart replays nothing into them (RemoveData);
// without, they stay on disk (creating the topic again reopens them).
func (a Admin) Delete(name string, deleteData bool) error {
	_, configured := a.configTopic(name)
	_, open := a.Host.Open(name)
	if !configured && !open {
		return noTopic(name)
	}
	if configured {
		if err := a.apply(a.Book.Delete(name)); err != nil {
			return err
		}
	}
	r := a.Host.Remove(name)
	if r.CloseErr != nil {
		a.Logf("topics: delete %s: closing its partitions: %v", name, r.CloseErr)
	}
	what := "data kept on disk"
	if deleteData && len(r.Dirs) > 0 {
		var fe *ForgetError
		if err := RemoveData(r.DataDir, r.Dirs, r.Checkpoint, r.Forget); errors.As(err, &fe) {
			a.Logf("topics: deleted topic %s: %v", name, err)
		} else if err != nil {
			a.Logf("topics: deleted topic %s, but its data stays: %v", name, err)
			return fmt.Errorf("topic %s deleted, but its data was not removed: %w", name, err)
		}
		what = "data removed (" + strconv.Itoa(len(r.Dirs)) + " partition directories)"
	}
	a.Logf("topics: deleted topic %s; %s", name, what)
	return nil
}
