package broker

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"sort"
	"time"

	"github.com/metaq-go/metaq/conf"
	"github.com/metaq-go/metaq/core/registry"
	"github.com/metaq-go/metaq/internal/fsutil"
	"github.com/metaq-go/metaq/sdk/message"
)

// Where the committed offsets behind lag come from (committed.go,
// docs/http.md): the commits this broker sees, saved to
// <data_dir>/committed-offsets.json at most every committedSaveEvery (and
// at Close) so that lag survives a restart, and in cluster mode the
// offsets MetaQ consumers keep in ZooKeeper, read every zkOffsetsEvery.

const (
	committedFileName    = "committed-offsets.json"
	committedFileVersion = 1
	committedSaveEvery   = 10 * time.Second
	zkOffsetsEvery       = 5 * time.Second
	zkOffsetsMaxGroups   = 1000
	zkOffsetsMaxReads    = 20000
	// committedFileMax bounds the file read at start.
	committedFileMax = 256 << 20
)

// committedFile is committed-offsets.json.
type committedFile struct {
	Version  int                  `json:"version"`
	BrokerID int                  `json:"broker_id"`
	Groups   []committedFileEntry `json:"groups"`
}

type committedFileEntry struct {
	Group string `json:"group"`
	Topic string `json:"topic"`
	// Offsets are [offset, committed at (Unix ms)] by partition; offset -1
	// is none.
	Offsets [][]int64 `json:"offsets"`
}

// parseCommittedFile reads committed-offsets.json: its broker id and
// entries. Anything malformed is an error naming it.
func parseCommittedFile(data []byte) (int, map[groupTopic][]commitAt, error) {
	dec := json.NewDecoder(bytes.NewReader(data))
	dec.DisallowUnknownFields()
	var f committedFile
	if err := dec.Decode(&f); err != nil {
		return 0, nil, err
	}
	if _, err := dec.Token(); err != io.EOF {
		return 0, nil, errors.New("data after the JSON object")
	}
	if f.Version != committedFileVersion {
		return 0, nil, fmt.Errorf("version %d, want %d", f.Version, committedFileVersion)
	}
	if f.BrokerID < 0 || f.BrokerID > 1023 {
		return 0, nil, fmt.Errorf("broker_id %d is not in 0..1023", f.BrokerID)
	}
	if len(f.Groups) > maxCommittedEntries {
		return 0, nil, fmt.Errorf("%d entries, at most %d", len(f.Groups), maxCommittedEntries)
	}
	m := make(map[groupTopic][]commitAt, len(f.Groups))
	for i, e := range f.Groups {
		if err := message.ValidateGroup(e.Group); err != nil {
			return 0, nil, fmt.Errorf("entry %d: group %q: %v", i, e.Group, err)
		}
		if !conf.ValidTopicName(e.Topic) {
			return 0, nil, fmt.Errorf("entry %d: topic %q is not a valid name", i, e.Topic)
		}
		k := groupTopic{e.Group, e.Topic}
		if _, dup := m[k]; dup {
			return 0, nil, fmt.Errorf("entry %d: group %q topic %q given twice", i, e.Group, e.Topic)
		}
		if len(e.Offsets) > maxCommittedPartitions {
			return 0, nil, fmt.Errorf("entry %d: %d partitions, at most %d", i, len(e.Offsets), maxCommittedPartitions)
		}
		offs := make([]commitAt, len(e.Offsets))
		for p, o := range e.Offsets {
			if len(o) != 2 {
				return 0, nil, fmt.Errorf("entry %d: partition %d: want [offset, time], got %v", i, p, o)
			}
			if o[0] < -1 || o[1] < 0 {
				return 0, nil, fmt.Errorf("entry %d: partition %d: offset %d, time %d out of range", i, p, o[0], o[1])
			}
			offs[p] = commitAt{o[0], o[1]}
		}
		m[k] = offs
	}
	return f.BrokerID, m, nil
}

// encodeCommittedFile is parseCommittedFile's inverse, sorted.
func encodeCommittedFile(brokerID int, m map[groupTopic][]commitAt) ([]byte, error) {
	f := committedFile{Version: committedFileVersion, BrokerID: brokerID, Groups: make([]committedFileEntry, 0, len(m))}
	for k, offs := range m {
		e := committedFileEntry{Group: k.group, Topic: k.topic, Offsets: make([][]int64, len(offs))}
		for i, c := range offs {
			e.Offsets[i] = []int64{c.off, c.at}
		}
		f.Groups = append(f.Groups, e)
	}
	sort.Slice(f.Groups, func(i, j int) bool {
		if f.Groups[i].Group != f.Groups[j].Group {
			return f.Groups[i].Group < f.Groups[j].Group
		}
		return f.Groups[i].Topic < f.Groups[j].Topic
	})
	return json.Marshal(f)
}

func (b *Broker) committedFilePath() string {
	return filepath.Join(b.config().DataDir, committedFileName)
}

// startLagSource restores the saved commits and starts the save loop and,
// in cluster mode, the ZooKeeper reader. Start calls it before accepting.
func (b *Broker) startLagSource() {
	b.restoreCommitted()
	b.wg.Add(1)
	go b.committedSaveLoop()
	if b.config().ZooKeeper.Enabled() {
		b.wg.Add(1)
		go b.zkOffsetsLoop()
	}
}

// restoreCommitted loads committed-offsets.json. A file that does not
// parse is renamed to .bad (kept for a person to look at) and lag starts
// from nothing; the broker starts either way.
func (b *Broker) restoreCommitted() {
	path := b.committedFilePath()
	f, err := os.Open(path)
	if errors.Is(err, os.ErrNotExist) {
		return
	}
	var data []byte
	if err == nil {
		data, err = io.ReadAll(io.LimitReader(f, committedFileMax+1))
		f.Close()
	}
	if err != nil {
		b.warnf("lag: cannot read %s (%v): lag starts from the commits seen from now on", path, err)
		return
	}
	id, m, err := parseCommittedFile(data)
	if err == nil && len(data) > committedFileMax {
		err = fmt.Errorf("larger than %d bytes", committedFileMax)
	}
	if err != nil {
		bad := path + ".bad"
		rerr := os.Rename(path, bad)
		b.warnf("lag: %s is not a committed-offsets file (%v); moved to %s (rename error: %v); lag starts from the commits seen from now on", path, err, bad, rerr)
		return
	}
	if id != b.config().BrokerID {
		b.warnf("lag: %s is broker %d's, this is broker %d: not used (its partitions are other partitions)", path, id, b.config().BrokerID)
		return
	}
	s := &b.committed
	s.mu.Lock()
	for k, offs := range m {
		for p, c := range offs {
			if cur, ok := s.m[k]; !ok || p >= len(cur) || cur[p].at < c.at {
				s.setLocked(k, p, c)
			}
		}
	}
	s.dirty = false
	s.mu.Unlock()
	b.logf("lag: restored the committed offsets of %d group/topic pair(s) from %s", len(m), path)
}

// saveCommitted writes the commits seen here when they changed since the
// last save: a temporary file, fsynced, renamed, the directory fsynced.
func (b *Broker) saveCommitted() error {
	s := &b.committed
	s.saveMu.Lock()
	defer s.saveMu.Unlock()
	s.mu.Lock()
	if !s.dirty {
		s.mu.Unlock()
		return nil
	}
	cp := make(map[groupTopic][]commitAt, len(s.m))
	for k, offs := range s.m {
		cp[k] = append([]commitAt(nil), offs...)
	}
	s.dirty = false
	s.mu.Unlock()
	data, err := encodeCommittedFile(b.config().BrokerID, cp)
	if err == nil {
		err = writeFileDurable(b.committedFilePath(), data)
	}
	if err != nil {
		s.mu.Lock()
		s.dirty = true // try again next time
		s.mu.Unlock()
		return fmt.Errorf("lag: save committed offsets: %w", err)
	}
	return nil
}

// saveCommittedAtClose saves once more after the last commit; a failure
// is logged (the offset store has the commits: only lag after a restart
// is missing them).
func (b *Broker) saveCommittedAtClose() {
	if err := b.saveCommitted(); err != nil {
		b.warnf("%v", err)
	}
}

// writeFileDurable replaces path with data: a temporary file, fsynced,
// renamed over path, and the directory fsynced.
func writeFileDurable(path string, data []byte) error {
	tmp := path + ".tmp"
	w, err := os.OpenFile(tmp, os.O_WRONLY|os.O_CREATE|os.O_TRUNC, 0o644)
	if err != nil {
		return err
	}
	_, err = w.Write(data)
	if err == nil {
		err = w.Sync()
	}
	if cerr := w.Close(); err == nil {
		err = cerr
	}
	if err == nil {
		err = os.Rename(tmp, path)
	}
	if err == nil {
		err = fsutil.SyncDir(filepath.Dir(path))
	}
	if err != nil {
		os.Remove(tmp)
	}
	return err
}

// committedSaveLoop saves every committedSaveEvery until the broker
// closes (Close saves once more, after the last commit).
func (b *Broker) committedSaveLoop() {
	defer b.wg.Done()
	t := time.NewTicker(committedSaveEvery)
	defer t.Stop()
	var lastErr string
	for {
		select {
		case <-b.done:
			return
		case <-t.C:
			if err := b.saveCommitted(); err != nil && err.Error() != lastErr {
				b.warnf("%v", err)
				lastErr = err.Error()
			} else if err == nil {
				lastErr = ""
			}
		}
	}
}

// zkOffsetsLoop reads the consumers' offsets from ZooKeeper until the
// broker closes: every zkOffsetsEvery, or ten times as long as the last
// read took if that is longer (a ZooKeeper with many groups is read less
// often rather than kept busy).
func (b *Broker) zkOffsetsLoop() {
	defer b.wg.Done()
	t := time.NewTimer(zkOffsetsEvery)
	defer t.Stop()
	var lastErr string
	var lastLog time.Time
	for {
		start := time.Now()
		err := b.refreshZKOffsets()
		t.Reset(max(zkOffsetsEvery, 10*time.Since(start)))
		switch {
		case err == nil:
			lastErr = ""
		case err.Error() != lastErr || time.Since(lastLog) > time.Minute:
			b.warnf("lag: reading consumer offsets from ZooKeeper: %v (lag keeps the last offsets read)", err)
			lastErr, lastLog = err.Error(), time.Now()
		}
		select {
		case <-b.done:
			return
		case <-t.C:
		}
	}
}

// refreshZKOffsets reads every group's offsets of this broker's
// partitions from ZooKeeper once and replaces the ZooKeeper source with
// them. On error the previous read stays.
func (b *Broker) refreshZKOffsets() error {
	b.mu.RLock()
	reg := b.reg
	b.mu.RUnlock()
	if reg == nil {
		return nil
	}
	topics := map[string]int{}
	for _, t := range b.topicList() {
		topics[t.name] = len(t.parts)
	}
	res, truncated, err := reg.ConsumerOffsets(b.config().BrokerID, topics,
		registry.OffsetLimits{MaxGroups: zkOffsetsMaxGroups, MaxReads: zkOffsetsMaxReads})
	if err != nil {
		return err
	}
	m := make(map[groupTopic]zkEntry, len(res))
	for _, g := range res {
		if len(m) >= maxCommittedEntries {
			truncated = true
			break
		}
		e := zkEntry{offs: make([]commitAt, len(g.Offsets)), owned: g.Owned, err: g.Err}
		for i, o := range g.Offsets {
			e.offs[i] = commitAt{o.Offset, o.MTime}
		}
		m[groupTopic{g.Group, g.Topic}] = e
	}
	b.committed.setZK(m)
	b.committed.zkTruncated.Store(truncated)
	return nil
}
