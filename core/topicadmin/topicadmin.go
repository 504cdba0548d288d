// Package topicadmin is the bookkeeping of live topic administration (the
// admin API, docs/http.md): <data_dir>/topics.toml (conf.TopicsFile),
// which the broker applies on top of server.toml at start and on reload,
// the validation of a change and the file it makes, and the sequence of a
// change (Admin, admin.go: check, persist, apply, undo). The broker is its
// Host: it swaps its config's topic list, opens or closes partitions and
// registers in ZooKeeper.
package topicadmin

import (
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"time"

	"github.com/metaq-go/metaq/conf"
	"github.com/metaq-go/metaq/internal/fsutil"
)

// Errors of the topic changes, mapped to HTTP codes by the broker.
var (
	ErrExists  = errors.New("topic exists")
	ErrInvalid = errors.New("invalid topic")
)

// checkpointClosedTimeout bounds the wait, when deleting a topic's data,
// for a journal checkpoint after its partitions closed.
const checkpointClosedTimeout = 30 * time.Second

// Book is topics.toml as last written and server.toml's [[topic]] tables.
// It is not safe for concurrent use: the broker serialises topic changes
// and reloads (its adminMu).
type Book struct {
	path   string
	server []conf.Topic
	file   *conf.TopicsFile
}

// Path is <data_dir>/topics.toml.
func Path(dataDir string) string { return filepath.Join(dataDir, conf.TopicsFileName) }

// Load reads <cfg.DataDir>/topics.toml (an empty file when there is none)
// and applies it to cfg, logging what it applied with logf.
func Load(cfg *conf.Config, logf func(string, ...any)) (*Book, error) {
	k := &Book{path: Path(cfg.DataDir), server: slices.Clone(cfg.Topics)}
	f, err := read(k.path)
	if err != nil {
		return nil, err
	}
	if f == nil {
		k.file = &conf.TopicsFile{}
		return k, nil
	}
	if err := cfg.ApplyTopics(f); err != nil {
		return nil, err
	}
	if len(f.Topics) > 0 || len(f.Deleted) > 0 {
		logf("topics: %s applied: %d topic(s) created or altered, %d deleted", k.path, len(f.Topics), len(f.Deleted))
	}
	k.file = f
	return k, nil
}

// read parses the topics file at path, nil when there is none.
func read(path string) (*conf.TopicsFile, error) {
	data, err := os.ReadFile(path)
	if errors.Is(err, os.ErrNotExist) {
		return nil, nil
	}
	if err != nil {
		return nil, fmt.Errorf("%s: %w", conf.TopicsFileName, err)
	}
	return conf.ParseTopicsFile(data, path)
}

// Check says what is wrong with <cfg.DataDir>/topics.toml, or "" (also
// when there is none): what Load would refuse at start. cfg is not changed.
func Check(cfg *conf.Config) string {
	f, err := read(Path(cfg.DataDir))
	if err != nil {
		return err.Error()
	}
	if f == nil {
		return ""
	}
	cp := *cfg
	if err := cp.ApplyTopics(f); err != nil {
		return err.Error()
	}
	return ""
}

// Path is the topics file's path.
func (k *Book) Path() string { return k.path }

// File is topics.toml as last written (Reload applies it to a new config).
func (k *Book) File() *conf.TopicsFile { return k.file }

// SetServer records server.toml's [[topic]] tables after a reload.
func (k *Book) SetServer(topics []conf.Topic) { k.server = topics }

// Source says where a topic comes from: conf.TopicsFileName, "server.toml"
// or "auto-created".
func (k *Book) Source(name string) string {
	if slices.ContainsFunc(k.file.Topics, func(t conf.Topic) bool { return t.Name == name }) {
		return conf.TopicsFileName
	}
	if slices.ContainsFunc(k.server, func(t conf.Topic) bool { return t.Name == name }) {
		return "server.toml"
	}
	return "auto-created"
}

// Snapshot copies the current topics file (to undo a change with Apply).
func (k *Book) Snapshot() *conf.TopicsFile {
	return &conf.TopicsFile{Deleted: slices.Clone(k.file.Deleted), Topics: slices.Clone(k.file.Topics)}
}

// CheckName refuses a topic name that may not be created.
func CheckName(name string) error {
	if err := conf.ValidateTopicName(name); err != nil {
		return fmt.Errorf("%w: %w", ErrInvalid, err)
	}
	return nil
}

// Exists is the refusal to create a topic that exists; autoCreated says it
// exists only because a put created it.
func Exists(name string, autoCreated bool) error {
	if autoCreated {
		return fmt.Errorf("%w: %s (auto-created)", ErrExists, name)
	}
	return fmt.Errorf("%w: %s", ErrExists, name)
}

// NotConfigured refuses to alter a topic that has no [[topic]] table.
func NotConfigured(name string) error {
	return fmt.Errorf("%w: %s is auto-created (it has no [[topic]] table): create it first", ErrInvalid, name)
}

// CheckGrow refuses to give topic name, which has old partitions, n
// partitions instead.
func CheckGrow(name string, old, n int) error {
	switch {
	case n < old:
		return fmt.Errorf("%w: %s has %d partitions; removing partitions is not supported (their messages would be lost)", ErrInvalid, name, old)
	case n > conf.MaxPartitions:
		return fmt.Errorf("%w: num_partitions must be at most %d", ErrInvalid, conf.MaxPartitions)
	}
	return nil
}

// Create is the topics file with t created.
func (k *Book) Create(t conf.Topic) *conf.TopicsFile {
	f := k.Snapshot()
	f.Deleted = slices.DeleteFunc(f.Deleted, func(n string) bool { return n == t.Name })
	f.Topics = append(f.Topics, t)
	return f
}

// Alter is the topics file with t replacing the topic of its name.
func (k *Book) Alter(t conf.Topic) *conf.TopicsFile {
	f := k.Snapshot()
	f.Topics = slices.DeleteFunc(f.Topics, func(x conf.Topic) bool { return x.Name == t.Name })
	f.Topics = append(f.Topics, t)
	return f
}

// Delete is the topics file with topic name deleted: removed, and marked
// deleted when server.toml has it.
func (k *Book) Delete(name string) *conf.TopicsFile {
	f := k.Snapshot()
	f.Topics = slices.DeleteFunc(f.Topics, func(x conf.Topic) bool { return x.Name == name })
	if slices.ContainsFunc(k.server, func(t conf.Topic) bool { return t.Name == name }) && !slices.Contains(f.Deleted, name) {
		f.Deleted = append(f.Deleted, name)
	}
	return f
}

// Apply validates base's config with the topics of server.toml with f
// applied, persists f (a temporary file, fsynced, renamed over
// topics.toml, and the directory fsynced) and returns those topics, which
// the caller makes its config's. Nothing changes on error.
func (k *Book) Apply(base conf.Config, f *conf.TopicsFile) ([]conf.Topic, error) {
	topics := (&conf.Config{Topics: k.server}).TopicsWith(f)
	if _, err := base.WithTopics(topics); err != nil {
		var ce *conf.Error
		if errors.As(err, &ce) {
			var msgs []string
			for _, p := range ce.Problems {
				msgs = append(msgs, p.String())
			}
			return nil, fmt.Errorf("%w: %s", ErrInvalid, strings.Join(msgs, "; "))
		}
		return nil, fmt.Errorf("%w: %v", ErrInvalid, err)
	}
	data, err := f.Encode()
	if err != nil {
		return nil, err
	}
	if err := fsutil.WriteFileDurable(k.path, data); err != nil {
		return nil, fmt.Errorf("write %s: %w", k.path, err)
	}
	k.file = f
	return topics, nil
}

// ForgetError is RemoveData's error when the directories are removed but
// the journal's checkpoint without them failed: a restart drops them then
// (their directories are gone).
type ForgetError struct{ Err error }

func (e *ForgetError) Error() string {
	return "data removed, but the journal checkpoint after it failed (a restart forgets the partitions): " + e.Err.Error()
}

func (e *ForgetError) Unwrap() error { return e.Err }

// RemoveData removes a deleted topic's closed partition directories dirs,
// under dataDir, after checkpoint (its journal's CheckpointClosed; nil
// without a journal) so that no restart replays records into them, and
// fsyncs dataDir; then forget (its journal's ForgetRemoved; nil without
// one) drops the journal's trust state of them, so that a topic created
// again under the name does not inherit it.
func RemoveData(dataDir string, dirs []string, checkpoint func(context.Context) error, forget func(context.Context, []string) error) error {
	ctx, cancel := context.WithTimeout(context.Background(), checkpointClosedTimeout)
	defer cancel()
	if checkpoint != nil {
		if err := checkpoint(ctx); err != nil {
			return fmt.Errorf("journal checkpoint: %w", err)
		}
	}
	for _, d := range dirs {
		if err := os.RemoveAll(d); err != nil {
			return err
		}
	}
	if err := fsutil.SyncDir(filepath.Clean(dataDir)); err != nil {
		return err
	}
	if forget != nil {
		if err := forget(ctx, dirs); err != nil {
			return &ForgetError{Err: err}
		}
	}
	return nil
}
