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

type store struct {
	mu     sync.Mutex
	f      *os.File
	path   string
	m      map[offsetstore.Key]offsetstore.Entry
	closed bool
}

func (s *store) Init(_ context.Context, req *offsetstore.InitRequest) error {
	path := req.Config["path"]
	if path == "" {
		return fmt.Errorf("%w: jsonl store needs a \"path\"", offsetstore.ErrBadConfig)
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.closed {
		return offsetstore.ErrClosed
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
func replay(r io.Reader) (map[offsetstore.Key]offsetstore.Entry, int64, error) {
	m := make(map[offsetstore.Key]offsetstore.Entry)
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
			k := offsetstore.Key{Group: e.Group, Topic: e.Topic, BrokerID: e.BrokerID, Partition: e.Partition}
			m[k] = offsetstore.Entry{Key: k, Offset: e.Offset, MsgID: e.MsgID}
		}
		good += int64(len(b))
	}
}

func (s *store) ready() error {
	switch {
	case s.closed:
		return offsetstore.ErrClosed
	case s.f == nil:
		return offsetstore.ErrNotInitialized
	}
	return nil
}

func (s *store) Commit(_ context.Context, entries []offsetstore.Entry) error {
	if len(entries) == 0 {
		return nil
	}
	l := line{Entries: make([]entry, len(entries))}
	for i, e := range entries {
		l.Entries[i] = entry{e.Group, e.Topic, e.BrokerID, e.Partition, e.Offset, e.MsgID}
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
	for _, e := range entries {
		s.m[e.Key] = e
	}
	return nil
}

func (s *store) Load(_ context.Context, keys []offsetstore.Key) ([]offsetstore.Result, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if err := s.ready(); err != nil {
		return nil, err
	}
	out := make([]offsetstore.Result, len(keys))
	for i, k := range keys {
		e, ok := s.m[k]
		if !ok {
			e = offsetstore.Entry{Key: k, Offset: -1, MsgID: -1}
		}
		out[i] = offsetstore.Result{Entry: e, Found: ok}
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
