// Command offsetstore-plugin is an example offset-store plugin: a
// JSON-lines file. Every Commit appends one line holding the batch and
// fsyncs it; Init replays the file into memory, keeping the last entry per
// key. A torn last line (a crash mid-append) is ignored. Config: "path".
//
// Build it, drop the binary into plugin_dir and name it in server.toml:
//
//	[[plugin]]
//	kind = "offsetstore"
//	name = "jsonl"
//	path = "offsetstore-plugin"
//	[plugin.config]
//	path = "/var/lib/metaq/offsets.jsonl"
//
//	offset_store = "jsonl"
package main

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"sync"

	"github.com/metaq-go/metaq/offsetstore"
	"github.com/metaq-go/metaq/sdk/message"
	"github.com/metaq-go/metaq/sdk/offsets"
)

func main() {
	// Nothing may be printed to stdout before Serve: it carries the handshake.
	offsetstore.Serve(&store{})
}

// line is one commit: the batch, as written.
type line struct {
	Entries []entry `json:"e"`
}

type entry struct {
	Group     string `json:"g"`
	Topic     string `json:"t"`
	BrokerID  int    `json:"b"`
	Partition int32  `json:"p"`
	Offset    int64  `json:"o"`
	MsgID     int64  `json:"m"`
}

// key is what one position is kept under: its group and partition.
type key struct {
	group, topic string
	part         message.Partition
}

// store is an offsetstore.Store: the offsets.Store contract (Commit and
// Load of one group's positions) plus Init and Close.
type store struct {
	mu     sync.Mutex
	f      *os.File
	path   string
	m      map[key]message.Position
	closed bool
}

var _ offsetstore.Store = (*store)(nil)

func (s *store) Init(_ context.Context, req *offsetstore.InitRequest) error {
	path := req.Config["path"]
	if path == "" {
		return fmt.Errorf("%w: jsonl store needs a \"path\"", offsetstore.ErrBadConfig)
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.closed {
		return offsets.ErrClosed
	}
	if s.f != nil {
		if path != s.path {
			return fmt.Errorf("%w: already open at %s", offsetstore.ErrBadConfig, s.path)
		}
		return nil
	}
	f, err := os.OpenFile(path, os.O_RDWR|os.O_CREATE, 0o644)
	if err != nil {
		return fmt.Errorf("open %s: %w", path, err)
	}
	m, good, err := replay(f)
	if err != nil {
		f.Close()
		return err
	}
	// Drop a torn tail so that the next append starts on a line boundary.
	if err := f.Truncate(good); err != nil {
		f.Close()
		return err
	}
	if _, err := f.Seek(good, io.SeekStart); err != nil {
		f.Close()
		return err
	}
	s.f, s.path, s.m = f, path, m
	return nil
}

// replay reads every whole line and returns the state and the length of
// the whole lines.
func replay(r io.Reader) (map[key]message.Position, int64, error) {
	m := make(map[key]message.Position)
	br := bufio.NewReader(r)
	var good int64
	for {
		b, err := br.ReadBytes('\n')
		if errors.Is(err, io.EOF) {
			return m, good, nil // a partial last line is a torn append
		}
		if err != nil {
			return nil, 0, err
		}
		var l line
		if err := json.Unmarshal(bytes.TrimSpace(b), &l); err != nil {
			return nil, 0, fmt.Errorf("corrupt line at byte %d: %w", good, err)
		}
		for _, e := range l.Entries {
			part := message.Partition{BrokerID: e.BrokerID, Partition: e.Partition}
			m[key{e.Group, e.Topic, part}] = message.Position{Topic: e.Topic, Partition: part, Offset: e.Offset, MsgID: e.MsgID}
		}
		good += int64(len(b))
	}
}

func (s *store) ready() error {
	switch {
	case s.closed:
		return offsets.ErrClosed
	case s.f == nil:
		return offsetstore.ErrNotInitialized
	}
	return nil
}

// Commit appends the batch as one line and fsyncs it.
func (s *store) Commit(_ context.Context, group string, ps []message.Position) error {
	if err := offsets.ValidateCommit(group, ps); err != nil {
		return err
	}
	if len(ps) == 0 {
		return nil
	}
	l := line{Entries: make([]entry, len(ps))}
	for i, p := range ps {
		l.Entries[i] = entry{group, p.Topic, p.Partition.BrokerID, p.Partition.Partition, p.Offset, p.MsgID}
	}
	b, err := json.Marshal(l)
	if err != nil {
		return err
	}
	b = append(b, '\n')
	s.mu.Lock()
	defer s.mu.Unlock()
	if err := s.ready(); err != nil {
		return err
	}
	if _, err := s.f.Write(b); err != nil {
		return fmt.Errorf("append: %w", err)
	}
	if err := s.f.Sync(); err != nil {
		return fmt.Errorf("fsync: %w", err)
	}
	for _, p := range ps {
		s.m[key{group, p.Topic, p.Partition}] = p
	}
	return nil
}

// Load answers from memory: Offset and MsgID -1 where nothing is stored.
func (s *store) Load(_ context.Context, group string, ps []message.Position) ([]message.Position, error) {
	if err := offsets.ValidateLoad(group, ps); err != nil {
		return nil, err
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	if err := s.ready(); err != nil {
		return nil, err
	}
	out := make([]message.Position, len(ps))
	for i, p := range ps {
		out[i] = offsets.NotStored(p)
		if e, ok := s.m[key{group, p.Topic, p.Partition}]; ok {
			out[i].Offset, out[i].MsgID = e.Offset, e.MsgID
		}
	}
	return out, nil
}

func (s *store) Close() error {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.closed {
		return nil
	}
	s.closed = true
	if s.f != nil {
		return s.f.Close()
	}
	return nil
}
