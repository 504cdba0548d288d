package partition

import (
	"math/rand/v2"
	"slices"
	"sync/atomic"

	"github.com/metaq-go/metaq/conf"
	"github.com/metaq-go/metaq/core/diskwatch"
	"github.com/metaq-go/metaq/core/index"
	"github.com/metaq-go/metaq/core/store"
)

// Topic is one open topic of a broker, the value its Topics table holds:
// the partitions' logs, their traffic counters and realtime statistics,
// the topic's settings, the data directory it is in and the key index set
// that follows its logs. The put and get paths read its fields directly
// (Parts[p], &PC[p]: no call, no allocation). A topic that grows is a new
// value (Grow) put in the table in place of the old one, which stays
// valid for whoever holds it.
type Topic struct {
	name string
	// cfgp is the topic's settings; a reload swaps them (accept_*, stat,
	// delete_policy). Read with Conf.
	cfgp atomic.Pointer[conf.TopicConfig]
	// Parts are the partitions' logs, partition p at Parts[p].
	Parts []*store.Log
	// PC are the partitions' traffic counters, one per part.
	PC []Counters
	// RT are the topic's realtime statistics (`stats <topic>`).
	RT Realtime
	// Disk is the data directory the partitions are in: puts are refused
	// while it is full.
	Disk *diskwatch.Disk
	// IX is the broker's index set, which follows Parts (core/index Set).
	IX *index.Set
}

// Counters are one partition's traffic counters, always kept (unlike
// Realtime, which `stats reset` clears and stat = false turns off).
type Counters struct {
	// Idem is the partition's idempotent producer table, found here by the
	// put path before the broker's map (IdemTables). Set once, read by
	// every idempotent put: it has a cache line of its own, not the one
	// the counters below, written by every put, keep moving between cores.
	Idem atomic.Pointer[IdemPart]
	_    [56]byte

	MsgsIn, BytesIn, BytesOut, Gets atomic.Int64
	// MsgsOut is counted off the get path (the broker's msgsout.go).
	MsgsOut atomic.Int64
	_       [24]byte // keep neighbouring partitions' counters off one cache line
}

// NewTopic returns topic name over its open partition logs parts, with
// settings tc, in data directory disk, its logs indexed in ix (nil: none).
func NewTopic(name string, tc *conf.TopicConfig, parts []*store.Log, disk *diskwatch.Disk, ix *index.Set) *Topic {
	t := &Topic{name: name, Parts: parts, PC: make([]Counters, len(parts)), Disk: disk, IX: ix}
	t.cfgp.Store(tc)
	return t
}

// Name is the topic's name.
func (t *Topic) Name() string { return t.name }

// Conf returns the topic's current settings.
func (t *Topic) Conf() *conf.TopicConfig { return t.cfgp.Load() }

// SetConf replaces the topic's settings (a reload).
func (t *Topic) SetConf(tc *conf.TopicConfig) { t.cfgp.Store(tc) }

// ThresholdFlush tells whether the topic's puts are flushed by the unflushed
// count threshold (unflush_threshold > 0).
func (t *Topic) ThresholdFlush() bool { return t.Conf().UnflushThreshold > 0 }

// Partition returns partition p's log, a random one for p = -1, nil when
// p is out of range.
func (t *Topic) Partition(p int32) *store.Log {
	if p == -1 {
		return t.Parts[rand.IntN(len(t.Parts))]
	}
	if p < 0 || int(p) >= len(t.Parts) {
		return nil
	}
	return t.Parts[p]
}

// Counters returns the traffic counters of partition p (l): a get of
// partition -1 reads a random one.
func (t *Topic) Counters(p int32, l *store.Log) *Counters {
	if p >= 0 {
		return &t.PC[p]
	}
	for i, x := range t.Parts {
		if x == l {
			return &t.PC[i]
		}
	}
	return &t.PC[0]
}

// CountIn counts a batch of msgs messages, bytes long, written to
// partition p other than by a put (a committed transaction's batch) in its
// traffic counters and, with stat on, the realtime statistics, as an
// accepted put is.
func (t *Topic) CountIn(p int32, msgs int, bytes int64) {
	if int(p) < len(t.PC) {
		pc := &t.PC[p]
		pc.MsgsIn.Add(int64(msgs))
		pc.BytesIn.Add(bytes)
	}
	if t.Conf().Stat {
		t.RT.Put.Add(int64(msgs))
		t.RT.Size.Add(bytes)
	}
}

// Grow returns a new value of the topic sharing its open partitions, with
// more appended and settings tc; the partitions' traffic counters carry
// over, the realtime statistics start again (`stats <topic>` reads the
// current value). The old value stays valid for whoever holds it.
func (t *Topic) Grow(tc *conf.TopicConfig, more []*store.Log) *Topic {
	nt := NewTopic(t.name, tc, append(slices.Clip(t.Parts), more...), t.Disk, t.IX)
	for i := range t.PC {
		nt.PC[i].MsgsIn.Store(t.PC[i].MsgsIn.Load())
		nt.PC[i].BytesIn.Store(t.PC[i].BytesIn.Load())
		nt.PC[i].BytesOut.Store(t.PC[i].BytesOut.Load())
		nt.PC[i].MsgsOut.Store(t.PC[i].MsgsOut.Load())
		nt.PC[i].Gets.Store(t.PC[i].Gets.Load())
	}
	return nt
}

// Close closes the topic's logs (taking them out of the index set first)
// and returns the first error.
func (t *Topic) Close() error {
	if t.IX != nil {
		t.IX.Remove(t.Parts)
	}
	return CloseLogs(t.Parts)
}
