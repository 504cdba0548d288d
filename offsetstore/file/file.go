// Package file is the builtin offset store: one JSON file, rewritten
// atomically on every commit (write a temp file in the same directory,
// fsync it, rename it over the old one, fsync the directory), so that a
// crash at any point leaves either the old or the new file, never a torn
// one. Loads are served from memory. It is safe for concurrent use, and
// concurrent commits share one write (group commit).
//
// Config: "path", the file (its directory is created if missing).
package file

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"sort"
	"strings"
	"sync"

	"github.com/metaq-go/metaq/internal/fsutil"
	"github.com/metaq-go/metaq/offsetstore"
	"github.com/metaq-go/metaq/sdk/message"
	"github.com/metaq-go/metaq/sdk/offsets"
)

// Name is the builtin's name in server.toml (offset_store = "file").
const Name = "file"

// formatVersion is the "version" field of the file.
const formatVersion = 1

// Store is the file offset store. The zero value is not usable: call New.
type Store struct {
	path string

	mu      sync.Mutex // guards the fields below
	entries map[key]message.Position
	version uint64 // bumped by every commit
	inited  bool
	closed  bool

	wmu     sync.Mutex // serialises file writes; taken before mu
	written uint64     // version the file holds (under wmu)
}

var _ offsetstore.Store = (*Store)(nil)

// key is what one stored position is kept under.
type key struct {
	group, topic string
	part         message.Partition
}

func keyOf(group string, p message.Position) key {
	return key{group: group, topic: p.Topic, part: p.Partition}
}

// New returns an uninitialised file store (Init gives it its path).
func New() offsetstore.Store { return &Store{entries: make(map[key]message.Position)} }

// Open returns a file store at path, initialised.
func Open(path string) (*Store, error) {
	s := New().(*Store)
	if err := s.Init(context.Background(), &offsetstore.InitRequest{Config: map[string]string{"path": path}}); err != nil {
		return nil, err
	}
	return s, nil
}

// fileFormat is the JSON document, after MetaQ's LocalOffsetStorage:
// {group: [{topic, brokerId, partition, offset, msgId}]}.
type fileFormat struct {
	Version int                    `json:"version"`
	Groups  map[string][]fileEntry `json:"groups"`
}

type fileEntry struct {
	Topic     string `json:"topic"`
	BrokerID  int    `json:"brokerId"`
	Partition int32  `json:"partition"`
	Offset    int64  `json:"offset"`
	MsgID     int64  `json:"msgId"`
}

// Init reads the file named by config "path" (a missing file is an empty
// store) and removes temp files a crash left behind.
func (s *Store) Init(_ context.Context, req *offsetstore.InitRequest) error {
	path := req.Config["path"]
	if path == "" {
		return fmt.Errorf("%w: file store needs a \"path\"", offsetstore.ErrBadConfig)
	}
	for k := range req.Config {
		if k != "path" {
			return fmt.Errorf("%w: file store: unknown key %q", offsetstore.ErrBadConfig, k)
		}
	}
	s.wmu.Lock()
	defer s.wmu.Unlock()
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.closed {
		return offsets.ErrClosed
	}
	if s.inited {
		if path != s.path {
			return fmt.Errorf("%w: file store already open at %s", offsetstore.ErrBadConfig, s.path)
		}
		return nil
	}
	if err := os.MkdirAll(filepath.Dir(path), 0o755); err != nil {
		return fmt.Errorf("offset file dir: %w", err)
	}
	entries, err := readFile(path)
	if err != nil {
		return err
	}
	removeTemps(path)
	s.path, s.entries, s.inited = path, entries, true
	return nil
}

func readFile(path string) (map[key]message.Position, error) {
	out := make(map[key]message.Position)
	b, err := os.ReadFile(path)
	if errors.Is(err, os.ErrNotExist) {
		return out, nil
	}
	if err != nil {
		return nil, fmt.Errorf("read offset file: %w", err)
	}
	var f fileFormat
	if err := json.Unmarshal(b, &f); err != nil {
		return nil, fmt.Errorf("offset file %s is corrupt: %w", path, err)
	}
	if f.Version != formatVersion {
		return nil, fmt.Errorf("offset file %s: unsupported version %d", path, f.Version)
	}
	for g, es := range f.Groups {
		for _, e := range es {
			p := message.Position{Topic: e.Topic, Partition: message.Partition{BrokerID: e.BrokerID, Partition: e.Partition},
				Offset: e.Offset, MsgID: e.MsgID}
			out[keyOf(g, p)] = p
		}
	}
	return out, nil
}

// removeTemps deletes the temp files of writes a crash interrupted.
func removeTemps(path string) {
	matches, _ := filepath.Glob(path + ".tmp-*")
	for _, m := range matches {
		if strings.HasPrefix(filepath.Base(m), filepath.Base(path)+".tmp-") {
			os.Remove(m)
		}
	}
}

func (s *Store) check() error {
	switch {
	case s.closed:
		return offsets.ErrClosed
	case !s.inited:
		return offsetstore.ErrNotInitialized
	}
	return nil
}

// Commit merges positions and rewrites the file. It returns once a file
// holding them is durable. If writing fails the error is returned and the
// positions stay in memory (Load sees them); the next successful commit
// writes them too. A malformed group or position (offsets.ValidateCommit;
// notably a group name that is not valid UTF-8, which JSON would silently
// rewrite) fails the whole batch with offsets.ErrInvalid.
func (s *Store) Commit(_ context.Context, group string, ps []message.Position) error {
	if err := offsets.ValidateCommit(group, ps); err != nil {
		return err
	}
	s.mu.Lock()
	if err := s.check(); err != nil {
		s.mu.Unlock()
		return err
	}
	for _, p := range ps {
		s.entries[keyOf(group, p)] = p
	}
	s.version++
	mine := s.version
	s.mu.Unlock()

	s.wmu.Lock()
	defer s.wmu.Unlock()
	if s.written >= mine {
		return nil // a write that started after our merge carried our positions
	}
	s.mu.Lock()
	if s.closed {
		s.mu.Unlock()
		return offsets.ErrClosed
	}
	doc, ver := s.snapshot(), s.version
	s.mu.Unlock()
	if err := writeAtomic(s.path, doc); err != nil {
		return fmt.Errorf("offset file %s: %w", s.path, err)
	}
	s.written = ver
	return nil
}

// snapshot encodes the positions, sorted; the caller holds mu.
func (s *Store) snapshot() []byte {
	f := fileFormat{Version: formatVersion, Groups: make(map[string][]fileEntry)}
	for k, p := range s.entries {
		f.Groups[k.group] = append(f.Groups[k.group], fileEntry{Topic: p.Topic, BrokerID: p.Partition.BrokerID,
			Partition: p.Partition.Partition, Offset: p.Offset, MsgID: p.MsgID})
	}
	for _, es := range f.Groups {
		sort.Slice(es, func(i, j int) bool {
			a, b := es[i], es[j]
			if a.Topic != b.Topic {
				return a.Topic < b.Topic
			}
			if a.BrokerID != b.BrokerID {
				return a.BrokerID < b.BrokerID
			}
			return a.Partition < b.Partition
		})
	}
	b, _ := json.MarshalIndent(f, "", " ") // plain types: cannot fail
	return append(b, '\n')
}

// writeAtomic replaces path with data: temp file, fsync, rename, fsync dir.
func writeAtomic(path string, data []byte) (err error) {
	dir := filepath.Dir(path)
	tmp, err := os.CreateTemp(dir, filepath.Base(path)+".tmp-*")
	if err != nil {
		return err
	}
	defer func() {
		if err != nil {
			tmp.Close()
			os.Remove(tmp.Name())
		}
	}()
	if _, err = tmp.Write(data); err != nil {
		return err
	}
	if err = tmp.Sync(); err != nil {
		return err
	}
	if err = tmp.Close(); err != nil {
		return err
	}
	if err = os.Rename(tmp.Name(), path); err != nil {
		return err
	}
	return fsutil.SyncDir(dir)
}

// Load answers from memory. A malformed group or position fails the call
// with offsets.ErrInvalid.
func (s *Store) Load(_ context.Context, group string, ps []message.Position) ([]message.Position, error) {
	if err := offsets.ValidateLoad(group, ps); err != nil {
		return nil, err
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	if err := s.check(); err != nil {
		return nil, err
	}
	out := make([]message.Position, len(ps))
	for i, p := range ps {
		out[i] = offsets.NotStored(p)
		if e, ok := s.entries[keyOf(group, p)]; ok {
			out[i].Offset, out[i].MsgID = e.Offset, e.MsgID
		}
	}
	return out, nil
}

// Close waits for a write in progress and closes the store. Idempotent.
func (s *Store) Close() error {
	s.wmu.Lock()
	defer s.wmu.Unlock()
	s.mu.Lock()
	defer s.mu.Unlock()
	s.closed = true
	return nil
}
