package partition

import (
	"errors"
	"fmt"
	"math"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"time"

	"github.com/metaq-go/metaq/conf"
	"github.com/metaq-go/metaq/core/store"
)

// Logs opens, lists, retains and closes the partition logs of a broker's
// topics, in the spirit of Kafka's LogManager: partition p of topic t
// lives in the directory `<data dir>/<t>-<p>`. A Logs holds no logs
// itself: the broker keeps them in its topics and hands them back for
// retention and close. Build one with LogsFromConf and set the broker's
// shared parts (IDs, Journal, Observer, loggers).
type Logs struct {
	// DataDir is the data directory of topics without their own data_dir.
	DataDir        string
	Recovery       store.RecoveryMode
	MaxSegmentSize int64
	MaxMessageSize int
	// IDs assigns message ids; each opened log's last id is observed.
	IDs *store.IDWorker
	// Journal returns the group-commit journal of a data directory, or nil.
	Journal  func(dir string, unflushThreshold int) *store.Journal
	Observer store.Observer
	// Logf and Errorf report at info and error level. Required.
	Logf, Errorf func(format string, args ...any)
}

// LogsFromConf returns the Logs settings of cfg; the caller sets IDs,
// Journal, Observer, Logf and Errorf.
func LogsFromConf(cfg *conf.Config) Logs {
	m := Logs{DataDir: cfg.DataDir, MaxSegmentSize: cfg.MaxSegmentSize, MaxMessageSize: cfg.MaxMessageSize}
	if cfg.Recovery == conf.RecoveryTruncate {
		m.Recovery = store.RecoverTruncate
	} else {
		m.Recovery = store.RecoverQuarantine
	}
	return m
}

// Dir returns the data directory of a topic with settings tc.
func (m *Logs) Dir(tc *conf.TopicConfig) string {
	if tc.DataDir != "" {
		return tc.DataDir
	}
	return m.DataDir
}

// TopicsOnDisk lists topic names from `<topic>-<partition>` directories
// of DataDir, once per partition directory.
func (m *Logs) TopicsOnDisk() []string {
	ents, err := os.ReadDir(m.DataDir)
	if err != nil {
		return nil
	}
	var out []string
	for _, e := range ents {
		if !e.IsDir() {
			continue
		}
		i := strings.LastIndexByte(e.Name(), '-')
		if i <= 0 {
			continue
		}
		if _, err := strconv.Atoi(e.Name()[i+1:]); err != nil {
			continue
		}
		out = append(out, e.Name()[:i])
	}
	return out
}

// Open opens partitions from..to-1 of topic name with settings tc (crash
// recovery, file I/O); on error it closes those it opened.
func (m *Logs) Open(name string, tc *conf.TopicConfig, from, to int) ([]*store.Log, error) {
	dir := m.Dir(tc)
	var parts []*store.Log
	for p := from; p < to; p++ {
		var j *store.Journal
		if m.Journal != nil {
			j = m.Journal(dir, tc.UnflushThreshold)
		}
		l, err := store.Open(filepath.Join(dir, name+"-"+strconv.Itoa(p)), store.Options{
			Recovery:         m.Recovery,
			MaxSegmentSize:   m.MaxSegmentSize,
			UnflushThreshold: tc.UnflushThreshold,
			UnflushInterval:  tc.UnflushInterval,
			MaxMessageSize:   m.MaxMessageSize,
			IDs:              m.IDs,
			Journal:          j,
			Observer:         m.Observer,
			Logf: func(format string, args ...any) {
				m.Logf("store %s-%d: "+format, append([]any{name, p}, args...)...)
			},
		})
		if err != nil {
			CloseLogs(parts)
			return nil, fmt.Errorf("open topic %s partition %d: %w", name, p, err)
		}
		m.IDs.Observe(l.LastID())
		parts = append(parts, l)
	}
	return parts, nil
}

// Retain applies a delete policy of retainFor (none if <= 0) to the sealed
// segments of topic name's logs parts, logging what it deleted. It
// reports whether any segment went.
func (m *Logs) Retain(name string, parts []*store.Log, retainFor time.Duration, now time.Time) (deleted bool) {
	deleted, _ = m.RetainBelow(name, parts, retainFor, now, nil)
	return deleted
}

// RetainBelow is Retain where keep, when not nil, says for each partition
// the offset after which no segment may be deleted (the timer log's
// pending delayed messages: core/timer's Keeper); a partition whose keep
// fails loses nothing this time. held[p] is how many of partition p's
// segments old enough to go its keep offset held back.
func (m *Logs) RetainBelow(name string, parts []*store.Log, retainFor time.Duration, now time.Time,
	keep func(p int, l *store.Log) (int64, error)) (deleted bool, held []int) {
	if retainFor <= 0 {
		return false, nil
	}
	held = make([]int, len(parts))
	for p, l := range parts {
		limit := int64(math.MaxInt64)
		if keep != nil {
			var err error
			if limit, err = keep(p, l); err != nil {
				m.Errorf("retention %s-%d: nothing deleted: %v", name, p, err)
				continue
			}
		}
		n, h, err := l.DeleteOlderThanBelow(retainFor, now, limit)
		held[p] = h
		if err != nil {
			m.Errorf("retention %s-%d: %v", name, p, err)
		} else if n > 0 {
			m.Logf("retention %s-%d: deleted %d segment(s), min offset now %d", name, p, n, l.MinOffset())
			deleted = true
		}
	}
	return deleted, held
}

// RetentionLoop calls apply every `every` seconds (5 minutes if <= 0)
// until done is closed.
func RetentionLoop(done <-chan struct{}, every int, apply func(now time.Time)) {
	d := time.Duration(every) * time.Second
	if d <= 0 {
		d = 5 * time.Minute
	}
	tk := time.NewTicker(d)
	defer tk.Stop()
	for {
		select {
		case <-done:
			return
		case now := <-tk.C:
			apply(now)
		}
	}
}

// CloseLogs closes logs and returns their errors joined.
func CloseLogs(logs []*store.Log) error {
	var errs []error
	for _, l := range logs {
		if err := l.Close(); err != nil {
			errs = append(errs, err)
		}
	}
	return errors.Join(errs...)
}
