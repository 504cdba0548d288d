// Package queuecheck (test helper, not API) checks a history of a
// partitioned queue's sends and reads, in the spirit of Jepsen's kafka
// queue checker: it records every send (acknowledged with an offset,
// failed, or of unknown outcome) and every read (a value at an offset of
// a partition) and reports
//
//   - lost writes: acknowledged sends never read, split into holes (the
//     acknowledged offset lies below the end of what was read of its
//     partition: nothing may excuse it) and a tail (at or past that end:
//     what an async replica may lose, bounded by its lag);
//   - wrong offsets: an acknowledged value read at another offset than the
//     one its ack gave;
//   - duplicates: one value read at more than one offset of a partition;
//   - conflicts: two different values read at one offset;
//   - reorderings: two acknowledged sends of one producer to one
//     partition whose offsets are in the opposite order of the sends;
//   - unexpected values: values read that no send produced (a failed or
//     unknown send may appear: its outcome was not known to the sender).
//
// Values must be unique per history. Safe for concurrent use.
package queuecheck

import (
	"fmt"
	"sort"
	"strings"
	"sync"
)

// Outcome is what the sender learned of a send.
type Outcome int

// The outcomes.
const (
	// Acked: the broker acknowledged the send with an offset.
	Acked Outcome = iota
	// Failed: the broker answered with an error.
	Failed
	// Unknown: no answer (timeout, connection lost).
	Unknown
)

func (o Outcome) String() string {
	switch o {
	case Acked:
		return "acked"
	case Failed:
		return "failed"
	default:
		return "unknown"
	}
}

// Send is one send of the history.
type Send struct {
	Producer  string // who sent it; its sends are numbered in the order recorded
	Partition string
	Value     string
	Outcome   Outcome
	Offset    int64 // acknowledged offset (Acked only)
	seq       int
}

// Read is one value read at an offset of a partition.
type Read struct {
	Partition string
	Offset    int64
	Value     string
}

// History collects sends and reads.
type History struct {
	mu    sync.Mutex
	sends []Send
	seqs  map[string]int
	reads []Read
	ends  map[string]int64 // partition -> end of what was read (exclusive)
}

// New returns an empty history.
func New() *History { return &History{seqs: map[string]int{}, ends: map[string]int64{}} }

// Send records a send.
func (h *History) Send(producer, partition, value string, outcome Outcome, offset int64) {
	h.mu.Lock()
	defer h.mu.Unlock()
	h.seqs[producer]++
	h.sends = append(h.sends, Send{Producer: producer, Partition: partition, Value: value, Outcome: outcome, Offset: offset, seq: h.seqs[producer]})
}

// Read records a value read at offset of partition.
func (h *History) Read(partition string, offset int64, value string) {
	h.mu.Lock()
	defer h.mu.Unlock()
	h.reads = append(h.reads, Read{partition, offset, value})
}

// ReadEnd records that partition was read completely up to end
// (exclusive): acknowledged offsets below it must have been read.
func (h *History) ReadEnd(partition string, end int64) {
	h.mu.Lock()
	defer h.mu.Unlock()
	h.ends[partition] = max(h.ends[partition], end)
}

// Report is the outcome of Check.
type Report struct {
	Sends, Acked, Reads int
	LostHoles           []Send // acked below the read end of their partition, never read
	LostTail            []Send // acked at or past the read end (or in a partition never read)
	WrongOffset         []string
	Duplicates          []string
	Conflicts           []string
	Reordered           []string
	Unexpected          []string
}

// OK reports whether nothing at all is wrong, the tail included.
func (r *Report) OK() bool { return r.Safe() && len(r.LostTail) == 0 }

// Safe reports whether nothing is wrong but a lost tail (what an async
// copy may lose).
func (r *Report) Safe() bool {
	return len(r.LostHoles) == 0 && len(r.WrongOffset) == 0 && len(r.Duplicates) == 0 &&
		len(r.Conflicts) == 0 && len(r.Reordered) == 0 && len(r.Unexpected) == 0
}

// String summarises the report, with up to 5 examples of each problem.
func (r *Report) String() string {
	var b strings.Builder
	fmt.Fprintf(&b, "%d sends (%d acked), %d reads", r.Sends, r.Acked, r.Reads)
	list := func(name string, xs []string) {
		if len(xs) == 0 {
			return
		}
		fmt.Fprintf(&b, "; %d %s: %s", len(xs), name, strings.Join(xs[:min(5, len(xs))], ", "))
	}
	sends := func(ss []Send) []string {
		out := make([]string, len(ss))
		for i, s := range ss {
			out[i] = fmt.Sprintf("%s@%s:%d", short(s.Value), s.Partition, s.Offset)
		}
		return out
	}
	list("lost (holes)", sends(r.LostHoles))
	list("lost (tail)", sends(r.LostTail))
	list("wrong offsets", r.WrongOffset)
	list("duplicates", r.Duplicates)
	list("conflicts", r.Conflicts)
	list("reordered", r.Reordered)
	list("unexpected", r.Unexpected)
	return b.String()
}

// short cuts a value for a report line.
func short(v string) string {
	if len(v) > 40 {
		return v[:37] + "..."
	}
	return v
}

// Check analyses the history.
func (h *History) Check() *Report {
	h.mu.Lock()
	defer h.mu.Unlock()
	r := &Report{Sends: len(h.sends), Reads: len(h.reads)}
	type po struct {
		p   string
		off int64
	}
	byValue := map[string]*Send{}
	for i := range h.sends {
		s := &h.sends[i]
		byValue[s.Value] = s
		if s.Outcome == Acked {
			r.Acked++
		}
	}
	atOffset := map[po]string{}
	readAt := map[string][]po{} // value -> where read (distinct)
	for _, rd := range h.reads {
		k := po{rd.Partition, rd.Offset}
		if v, ok := atOffset[k]; ok {
			if v != rd.Value {
				r.Conflicts = append(r.Conflicts, fmt.Sprintf("%s:%d holds %q and %q", rd.Partition, rd.Offset, v, rd.Value))
			}
			continue
		}
		atOffset[k] = rd.Value
		readAt[rd.Value] = append(readAt[rd.Value], k)
		if _, ok := byValue[rd.Value]; !ok {
			r.Unexpected = append(r.Unexpected, fmt.Sprintf("%q at %s:%d", rd.Value, rd.Partition, rd.Offset))
		}
	}
	for v, at := range readAt {
		if len(at) > 1 {
			r.Duplicates = append(r.Duplicates, fmt.Sprintf("%q at %d offsets", v, len(at)))
		}
	}
	// Lost and wrong offsets.
	type pk struct{ producer, partition string }
	acked := map[pk][]*Send{}
	for i := range h.sends {
		s := &h.sends[i]
		if s.Outcome != Acked {
			continue
		}
		acked[pk{s.Producer, s.Partition}] = append(acked[pk{s.Producer, s.Partition}], s)
		at := readAt[s.Value]
		switch {
		case len(at) == 0:
			if end, ok := h.ends[s.Partition]; ok && s.Offset < end {
				r.LostHoles = append(r.LostHoles, *s)
			} else {
				r.LostTail = append(r.LostTail, *s)
			}
		case at[0].p != s.Partition || at[0].off != s.Offset:
			r.WrongOffset = append(r.WrongOffset, fmt.Sprintf("%q acked at %s:%d, read at %s:%d", s.Value, s.Partition, s.Offset, at[0].p, at[0].off))
		}
	}
	// Reordering: per producer and partition, acked offsets rise with
	// the send order.
	keys := make([]pk, 0, len(acked))
	for k := range acked {
		keys = append(keys, k)
	}
	sort.Slice(keys, func(i, j int) bool {
		if keys[i].producer != keys[j].producer {
			return keys[i].producer < keys[j].producer
		}
		return keys[i].partition < keys[j].partition
	})
	for _, k := range keys {
		ss := acked[k]
		sort.Slice(ss, func(i, j int) bool { return ss[i].seq < ss[j].seq })
		for i := 1; i < len(ss); i++ {
			if ss[i].Offset <= ss[i-1].Offset {
				r.Reordered = append(r.Reordered, fmt.Sprintf("%s: %q (sent before) at %s:%d, %q at %d",
					k.producer, ss[i-1].Value, k.partition, ss[i-1].Offset, ss[i].Value, ss[i].Offset))
			}
		}
	}
	sort.Strings(r.Duplicates)
	sort.Strings(r.Unexpected)
	return r
}
