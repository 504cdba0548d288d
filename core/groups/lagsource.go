package groups

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"os"
	"path/filepath"
	"sort"
	"time"

	"github.com/metaq-go/metaq/conf"
	"github.com/metaq-go/metaq/core/partition"
	"github.com/metaq-go/metaq/core/registry"
	"github.com/metaq-go/metaq/internal/fsutil"
	"github.com/metaq-go/metaq/internal/logx"
	"github.com/metaq-go/metaq/sdk/message"
)

// Where the committed offsets behind lag come from (committed.go,
// docs/http.md): the commits this broker sees, saved to
// <data_dir>/committed-offsets.json at most every committedSaveEvery (and
// at Close) so that lag survives a restart, and in cluster mode the
// offsets MetaQ consumers keep in ZooKeeper, read every zkOffsetsEvery.

const (
	// CommittedFileName is the file in the data directory.
	CommittedFileName    = "committed-offsets.json"
	committedFileVersion = 1
	committedSaveEvery   = 10 * time.Second
	// ZKOffsetsEvery is how often the ZooKeeper offsets are read (at
	// least: RunZK).
	ZKOffsetsEvery = 5 * time.Second
	// ZKOffsetsMaxGroups and ZKOffsetsMaxReads bound one ZooKeeper read
	// (registry.OffsetLimits).
	ZKOffsetsMaxGroups = 1000
	ZKOffsetsMaxReads  = 20000
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
func parseCommittedFile(data []byte) (int, map[GroupTopic][]commitAt, error) {
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
	m := make(map[GroupTopic][]commitAt, len(f.Groups))
	for i, e := range f.Groups {
		if err := message.ValidateGroup(e.Group); err != nil {
			return 0, nil, fmt.Errorf("entry %d: group %q: %v", i, e.Group, err)
		}
		if !conf.ValidTopicName(e.Topic) {
			return 0, nil, fmt.Errorf("entry %d: topic %q is not a valid name", i, e.Topic)
		}
		k := GroupTopic{e.Group, e.Topic}
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
func encodeCommittedFile(brokerID int, m map[GroupTopic][]commitAt) ([]byte, error) {
	f := committedFile{Version: committedFileVersion, BrokerID: brokerID, Groups: make([]committedFileEntry, 0, len(m))}
	for k, offs := range m {
		e := committedFileEntry{Group: k.Group, Topic: k.Topic, Offsets: make([][]int64, len(offs))}
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

// ZKSource reads, from ZooKeeper, the offsets MetaQ consumers keep there
// of this broker's partitions (registry.Registry.ConsumerOffsets, with this
// broker's id and topics). ErrNoZooKeeper: not connected yet; the last
// read stays.
type ZKSource func(lim registry.OffsetLimits) ([]registry.GroupOffsets, bool, error)

// ErrNoZooKeeper is a ZKSource's error while the broker has no ZooKeeper
// session: RefreshZK keeps what it read before and reports no error.
var ErrNoZooKeeper = errors.New("not registered in ZooKeeper")

// RegistrySource is the ZKSource of broker brokerID's partitions of src's
// topics, read through the registry reg returns (nil while there is none:
// ErrNoZooKeeper).
func RegistrySource(brokerID int, reg func() *registry.Registry, src partition.Source) ZKSource {
	return func(lim registry.OffsetLimits) ([]registry.GroupOffsets, bool, error) {
		r := reg()
		if r == nil {
			return nil, false, ErrNoZooKeeper
		}
		topics := map[string]int{}
		for _, name := range src.Topics() {
			if n, err := src.Partitions(name); err == nil {
				topics[name] = n
			}
		}
		return r.ConsumerOffsets(brokerID, topics, lim)
	}
}

// ZKSourceFromConf is RegistrySource of cfg's broker in cluster mode, nil
// in local mode (no ZooKeeper).
func ZKSourceFromConf(cfg *conf.Config, reg func() *registry.Registry, src partition.Source) ZKSource {
	if !cfg.ZooKeeper.Enabled() {
		return nil
	}
	return RegistrySource(cfg.BrokerID, reg, src)
}

// Start restores the saved commits (Restore) and starts the save loop
// (Run) and the ZooKeeper reader (RunZK) with goFn, until done is closed.
func (s *Committed) Start(done <-chan struct{}, goFn func(func())) {
	s.Restore()
	goFn(func() { s.Run(done) })
	goFn(func() { s.RunZK(done) })
}

// CommittedConfig is the committed offsets' slice of the configuration
// (restart-only values).
type CommittedConfig struct {
	DataDir  string
	BrokerID int
}

// CommittedFromConf returns the committed offsets' configuration in cfg.
func CommittedFromConf(cfg *conf.Config) CommittedConfig {
	return CommittedConfig{DataDir: cfg.DataDir, BrokerID: cfg.BrokerID}
}

// NewCommitted returns an empty set of committed offsets, saved in
// cfg.DataDir, reading ZooKeeper through zk (nil: no ZooKeeper). Its lines
// go to log.
func NewCommitted(cfg CommittedConfig, zk ZKSource, log *slog.Logger) *Committed {
	return &Committed{path: filepath.Join(cfg.DataDir, CommittedFileName), brokerID: cfg.BrokerID, zk: zk,
		logf: logx.Printf(log, slog.LevelInfo), warnf: logx.Printf(log, slog.LevelWarn)}
}

// Restore loads committed-offsets.json. A file that does not parse is
// renamed to .bad (kept for a person to look at) and lag starts from
// nothing; the broker starts either way. The broker calls it at Start,
// before accepting.
func (s *Committed) Restore() {
	path := s.path
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
		s.warnf("lag: cannot read %s (%v): lag starts from the commits seen from now on", path, err)
		return
	}
	id, m, err := parseCommittedFile(data)
	if err == nil && len(data) > committedFileMax {
		err = fmt.Errorf("larger than %d bytes", committedFileMax)
	}
	if err != nil {
		bad := path + ".bad"
		rerr := os.Rename(path, bad)
		s.warnf("lag: %s is not a committed-offsets file (%v); moved to %s (rename error: %v); lag starts from the commits seen from now on", path, err, bad, rerr)
		return
	}
	if id != s.brokerID {
		s.warnf("lag: %s is broker %d's, this is broker %d: not used (its partitions are other partitions)", path, id, s.brokerID)
		return
	}
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
	s.logf("lag: restored the committed offsets of %d group/topic pair(s) from %s", len(m), path)
}

// Save writes the commits seen here when they changed since the last
// save: a temporary file, fsynced, renamed, the directory fsynced.
func (s *Committed) Save() error {
	s.saveMu.Lock()
	defer s.saveMu.Unlock()
	s.mu.Lock()
	if !s.dirty {
		s.mu.Unlock()
		return nil
	}
	cp := make(map[GroupTopic][]commitAt, len(s.m))
	for k, offs := range s.m {
		cp[k] = append([]commitAt(nil), offs...)
	}
	s.dirty = false
	s.mu.Unlock()
	data, err := encodeCommittedFile(s.brokerID, cp)
	if err == nil {
		err = fsutil.WriteFileDurable(s.path, data)
	}
	if err != nil {
		s.mu.Lock()
		s.dirty = true // try again next time
		s.mu.Unlock()
		return fmt.Errorf("lag: save committed offsets: %w", err)
	}
	return nil
}

// SaveAtClose saves once more after the last commit; a failure is logged
// (the offset store has the commits: only lag after a restart is missing
// them).
func (s *Committed) SaveAtClose() {
	if err := s.Save(); err != nil {
		s.warnf("%v", err)
	}
}

// Run saves every committedSaveEvery until done is closed (the broker's
// Close saves once more, after the last commit: SaveAtClose).
func (s *Committed) Run(done <-chan struct{}) {
	t := time.NewTicker(committedSaveEvery)
	defer t.Stop()
	var lastErr string
	for {
		select {
		case <-done:
			return
		case <-t.C:
			if err := s.Save(); err != nil && err.Error() != lastErr {
				s.warnf("%v", err)
				lastErr = err.Error()
			} else if err == nil {
				lastErr = ""
			}
		}
	}
}

// RunZK reads the consumers' offsets from ZooKeeper until done is
// closed: every ZKOffsetsEvery, or ten times as long as the last read took
// if that is longer (a ZooKeeper with many groups is read less often
// rather than kept busy). Without a ZKSource it returns at once.
func (s *Committed) RunZK(done <-chan struct{}) {
	if s.zk == nil {
		return
	}
	t := time.NewTimer(ZKOffsetsEvery)
	defer t.Stop()
	var lastErr string
	var lastLog time.Time
	for {
		start := time.Now()
		err := s.RefreshZK()
		t.Reset(max(ZKOffsetsEvery, 10*time.Since(start)))
		switch {
		case err == nil:
			lastErr = ""
		case err.Error() != lastErr || time.Since(lastLog) > time.Minute:
			s.warnf("lag: reading consumer offsets from ZooKeeper: %v (lag keeps the last offsets read)", err)
			lastErr, lastLog = err.Error(), time.Now()
		}
		select {
		case <-done:
			return
		case <-t.C:
		}
	}
}

// RefreshZK reads every group's offsets of this broker's partitions from
// ZooKeeper once and replaces the ZooKeeper source with them. On error
// the previous read stays.
func (s *Committed) RefreshZK() error {
	if s.zk == nil {
		return nil
	}
	res, truncated, err := s.zk(registry.OffsetLimits{MaxGroups: ZKOffsetsMaxGroups, MaxReads: ZKOffsetsMaxReads})
	if errors.Is(err, ErrNoZooKeeper) {
		return nil
	}
	if err != nil {
		return err
	}
	m := make(map[GroupTopic]zkEntry, len(res))
	for _, g := range res {
		if len(m) >= maxCommittedEntries {
			truncated = true
			break
		}
		e := zkEntry{offs: make([]commitAt, len(g.Offsets)), owned: g.Owned, err: g.Err}
		for i, o := range g.Offsets {
			e.offs[i] = commitAt{o.Offset, o.MTime}
		}
		m[GroupTopic{g.Group, g.Topic}] = e
	}
	s.setZK(m)
	s.zkTruncated.Store(truncated)
	return nil
}

// ZKTruncated says whether the last ZooKeeper read hit a limit
// (ZKOffsetsMaxGroups, ZKOffsetsMaxReads or the entries kept).
func (s *Committed) ZKTruncated() bool { return s.zkTruncated.Load() }
