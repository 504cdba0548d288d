package timer

import (
	"container/heap"
	"encoding/binary"
	"errors"
	"fmt"
	"math"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"

	"github.com/metaq-go/metaq/core/store"
	"github.com/metaq-go/metaq/sdk/message"
)

// SlotMs is the width of one slot of the wheel: the messages due in one
// minute share a slot file.
const SlotMs = 60_000

// entrySize is one slot entry: [int64 due][int64 timer log offset][int64 msgId].
const entrySize = 24

// flushBytes bounds the slot entries buffered before they are written.
const flushBytes = 4 << 20

// Source is the timer log the wheel indexes (a *store.Log).
type Source interface {
	Read(offset int64, maxSize int) (store.View, error)
	MinOffset() int64
	MaxOffset() int64
}

// Entry is a pending message in the wheel: its due time, its timer log
// record's offset and its msgId.
type Entry struct {
	Due, Offset, ID int64
}

// Wheel indexes a timer log into slot files by due minute and hands out
// what is due. It is not safe for concurrent use: one goroutine (the
// broker's timer loop) indexes, takes due entries and records marks.
//
// Memory holds the window (the messages of the slots up to the current
// minute that are not delivered yet), the numbers and entry counts of the
// slots on disk, and the ids of cancelled messages not reached yet; not
// one entry per pending message.
type Wheel struct {
	dir       string
	src       Source
	readSize  int
	indexedTo int64
	mark      Mark
	cancelled map[int64]struct{}
	// intents are the delivery rounds' targets read after the last mark
	// at Open (rounds whose mark may have been lost in a crash).
	intents []Target
	// slots are the slot numbers above loaded with a file or buffered
	// entries, ascending; counts their entry counts.
	slots  []int64
	counts map[int64]int64
	loaded int64
	window entryHeap
	pend   map[int64][]byte
	pendN  int
	buf    []byte
}

// Open rebuilds the wheel of the timer log src in dir (its slot files are
// derived data: dir is emptied and refilled from the log). maxRecord is
// the largest record the log may hold (the read size).
func Open(dir string, src Source, maxRecord int) (*Wheel, error) {
	if err := os.RemoveAll(dir); err != nil {
		return nil, err
	}
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return nil, err
	}
	w := &Wheel{dir: dir, src: src, readSize: maxRecord + message.HeaderSize,
		cancelled: map[int64]struct{}{}, counts: map[int64]int64{}, pend: map[int64][]byte{},
		loaded: math.MinInt64}
	w.indexedTo = src.MinOffset()
	// Pass 1: every message to its slot file, the cancels, the last mark.
	if err := w.scan(w.indexedTo, -1, func(e Entry) { w.add(e) }, true); err != nil {
		return nil, err
	}
	if err := w.flush(); err != nil {
		return nil, err
	}
	// Pass 2, over the tail after the last mark only: the messages due by
	// the mark that it does not cover (accepted late, or past due). It
	// ends where pass 1 ended: a put appended since is pass 1's to index
	// (Index reads it), not pass 2's to drop for being due after the mark.
	m := w.mark
	if m.IndexedTo > 0 && m.IndexedTo < w.indexedTo {
		if err := w.scan(m.IndexedTo, w.indexedTo, func(e Entry) {
			if e.Due <= m.DueUpTo {
				heap.Push(&w.window, e)
			}
		}, false); err != nil {
			return nil, err
		}
	}
	// The slots before the mark's are delivered (their late messages are in
	// the window); the mark's slot is loaded, skipping what it covers.
	cur := slotOf(m.DueUpTo)
	for len(w.slots) > 0 && w.slots[0] < cur {
		s := w.slots[0]
		w.slots = w.slots[1:]
		delete(w.counts, s)
		_ = os.Remove(w.slotPath(s))
	}
	w.loaded = cur - 1
	if err := w.loadThrough(cur, m.DueUpTo); err != nil {
		return nil, err
	}
	return w, nil
}

// Intents returns the targets of the delivery rounds the timer log holds
// after its last mark, as Open read them: the rounds that may have
// appended messages before a crash lost their mark.
func (w *Wheel) Intents() []Target { return slices.Clone(w.intents) }

// SkipDelivered makes Due skip the messages due by now that delivered
// reports as already in their partitions (found by the caller in the
// Intents' ranges), as if cancelled; it returns how many.
func (w *Wheel) SkipDelivered(now int64, delivered func(id int64) bool) (int, error) {
	if err := w.loadThrough(slotOf(now), math.MinInt64); err != nil {
		return 0, err
	}
	n := 0
	for _, e := range w.window {
		if _, c := w.cancelled[e.ID]; !c && delivered(e.ID) {
			w.cancelled[e.ID] = struct{}{}
			n++
		}
	}
	return n, nil
}

// Mark returns the last delivered mark.
func (w *Wheel) Mark() Mark { return w.mark }

// IndexedTo returns the timer log offset the wheel has read to.
func (w *Wheel) IndexedTo() int64 { return w.indexedTo }

// Pending returns the number of messages in the wheel not delivered yet
// (cancelled ones count until their due time).
func (w *Wheel) Pending() int64 {
	n := int64(len(w.window))
	for _, c := range w.counts {
		n += c
	}
	return n
}

// NextDue returns the due time of the earliest message in the window, or
// false when the window is empty (later slots are on disk).
func (w *Wheel) NextDue() (int64, bool) {
	if len(w.window) == 0 {
		return 0, false
	}
	return w.window[0].Due, true
}

// Index reads the timer log from where it stopped to its end.
func (w *Wheel) Index() error {
	if w.src.MaxOffset() <= w.indexedTo {
		return nil
	}
	if err := w.scan(w.indexedTo, -1, func(e Entry) { w.add(e) }, false); err != nil {
		return err
	}
	return w.flush()
}

// Due returns up to max messages due at now, earliest first, skipping
// cancelled ones, with the mark to record once they are delivered; ok is
// false when there is no new mark to record (nothing taken, or messages
// due before the last mark are still left).
func (w *Wheel) Due(now int64, max int) (due []Entry, mk Mark, ok bool, err error) {
	if err := w.loadThrough(slotOf(now), math.MinInt64); err != nil {
		return nil, Mark{}, false, err
	}
	took := false
	for len(w.window) > 0 && w.window[0].Due <= now && len(due) < max {
		e := heap.Pop(&w.window).(Entry)
		took = true
		if _, c := w.cancelled[e.ID]; c {
			delete(w.cancelled, e.ID)
			continue
		}
		due = append(due, e)
	}
	if !took {
		return nil, Mark{}, false, nil
	}
	upTo := now
	if len(w.window) > 0 && w.window[0].Due-1 < upTo {
		upTo = w.window[0].Due - 1
	}
	if upTo < w.mark.DueUpTo {
		return due, Mark{}, false, nil
	}
	return due, Mark{DueUpTo: upTo, IndexedTo: w.indexedTo}, true, nil
}

// Requeue puts back messages Due handed out that were not delivered.
func (w *Wheel) Requeue(es []Entry) {
	for _, e := range es {
		heap.Push(&w.window, e)
	}
}

// Marked records that mk is in the timer log.
func (w *Wheel) Marked(mk Mark) {
	if mk.DueUpTo >= w.mark.DueUpTo {
		w.mark = mk
	}
}

// add files a message indexed from the log: in the window when its slot
// is loaded, else in its slot.
func (w *Wheel) add(e Entry) {
	s := slotOf(e.Due)
	if s <= w.loaded {
		heap.Push(&w.window, e)
		return
	}
	if _, ok := w.counts[s]; !ok {
		i, _ := slices.BinarySearch(w.slots, s)
		w.slots = slices.Insert(w.slots, i, s)
	}
	w.counts[s]++
	var b [entrySize]byte
	binary.BigEndian.PutUint64(b[0:], uint64(e.Due))
	binary.BigEndian.PutUint64(b[8:], uint64(e.Offset))
	binary.BigEndian.PutUint64(b[16:], uint64(e.ID))
	w.pend[s] = append(w.pend[s], b[:]...)
	w.pendN += entrySize
}

// flush appends the buffered slot entries to their files. The files are
// not synced: they are rebuilt from the log at every Open.
func (w *Wheel) flush() error {
	for s, b := range w.pend {
		f, err := os.OpenFile(w.slotPath(s), os.O_WRONLY|os.O_CREATE|os.O_APPEND, 0o644)
		if err != nil {
			return err
		}
		_, err = f.Write(b)
		if cerr := f.Close(); err == nil {
			err = cerr
		}
		if err != nil {
			return err
		}
		delete(w.pend, s)
	}
	w.pendN = 0
	return nil
}

// loadThrough moves the slots up to s into the window, skipping messages
// due at or before skipTo.
func (w *Wheel) loadThrough(s int64, skipTo int64) error {
	if s <= w.loaded {
		return nil
	}
	if len(w.pend) > 0 {
		if err := w.flush(); err != nil {
			return err
		}
	}
	for len(w.slots) > 0 && w.slots[0] <= s {
		n := w.slots[0]
		b, err := os.ReadFile(w.slotPath(n))
		if err != nil && !errors.Is(err, os.ErrNotExist) {
			return err
		}
		for ; len(b) >= entrySize; b = b[entrySize:] {
			e := Entry{Due: int64(binary.BigEndian.Uint64(b)), Offset: int64(binary.BigEndian.Uint64(b[8:])),
				ID: int64(binary.BigEndian.Uint64(b[16:]))}
			if e.Due > skipTo {
				heap.Push(&w.window, e)
			}
		}
		w.slots = w.slots[1:]
		delete(w.counts, n)
		if err := os.Remove(w.slotPath(n)); err != nil && !errors.Is(err, os.ErrNotExist) {
			return err
		}
	}
	w.loaded = s
	return nil
}

// scan reads the timer log from offset from to offset to (a record
// boundary), or to its end now when to is negative, handing each message
// to fn; cancels are noted, and marks too when marks is set. It advances
// indexedTo. Records appended while it reads, past its end, are left for
// the next scan.
func (w *Wheel) scan(from, to int64, fn func(Entry), marks bool) error {
	end := to
	if end < 0 {
		end = w.src.MaxOffset()
	}
	off := from
	for off < end {
		v, err := w.src.Read(off, max(w.readSize, 1<<20))
		if err != nil {
			var oor *store.OffsetOutOfRangeError
			if errors.As(err, &oor) { // retention removed it
				off = oor.Min
				continue
			}
			if errors.Is(err, store.ErrNoData) {
				break
			}
			return err
		}
		w.buf, err = v.ReadAll(w.buf[:0])
		v.Release()
		if err != nil {
			return err
		}
		it := message.NewIterator(w.buf, off, w.readSize)
		n := 0
		next := int64(-1) // the end offset when it stops there
		for it.Next() {
			r := it.Record()
			if r.Offset >= end {
				next = r.Offset
				break
			}
			rec, perr := Parse(r.Data)
			if perr != nil {
				return fmt.Errorf("timer log at %d: %w", r.Offset, perr)
			}
			switch rec.Kind {
			case KindMessage:
				fn(Entry{Due: rec.Msg.Due, Offset: r.Offset, ID: r.ID})
			case KindCancel:
				w.cancelled[rec.Cancel] = struct{}{}
			case KindMark:
				if marks && rec.Mark.DueUpTo >= w.mark.DueUpTo {
					w.mark = rec.Mark
					w.intents = w.intents[:0]
				}
			case KindIntent:
				if marks {
					w.intents = append(w.intents, rec.Intent...)
				}
			}
			n++
		}
		if next >= 0 {
			off = next
			break
		}
		if err := it.Err(); err != nil {
			return fmt.Errorf("timer log at %d: %w", it.NextOffset(), err)
		}
		if n == 0 { // a record larger than the read: cannot happen with readSize
			return fmt.Errorf("timer log at %d: no whole record in %d bytes", off, len(w.buf))
		}
		off = it.NextOffset()
		if w.pendN >= flushBytes {
			if err := w.flush(); err != nil {
				return err
			}
		}
	}
	if off > w.indexedTo {
		w.indexedTo = off
	}
	return nil
}

func (w *Wheel) slotPath(s int64) string {
	return filepath.Join(w.dir, strconv.FormatInt(s, 10)+".slot")
}

// PendingAfter returns how many pending messages are due in the slots
// after the minute of ms, and the start of the last slot (0 if none).
func (w *Wheel) PendingAfter(ms int64) (n, last int64) {
	from := slotOf(ms)
	for _, s := range w.slots {
		if s > from {
			n += w.counts[s]
			last = s * SlotMs
		}
	}
	return n, last
}

// Slots returns the slot numbers on disk (for stats and tests).
func (w *Wheel) Slots() []int64 { return slices.Clone(w.slots) }

// SlotCounts returns the pending counts of the slots on disk by slot.
func (w *Wheel) SlotCounts() map[int64]int64 {
	m := make(map[int64]int64, len(w.counts))
	for k, v := range w.counts {
		m[k] = v
	}
	return m
}

// IsSlotFile reports whether name is a slot file's name.
func IsSlotFile(name string) bool { return strings.HasSuffix(name, ".slot") }

func slotOf(ms int64) int64 {
	s := ms / SlotMs
	if ms < 0 && ms%SlotMs != 0 {
		s--
	}
	return s
}

// entryHeap orders entries by due time, then timer log offset.
type entryHeap []Entry

func (h entryHeap) Len() int { return len(h) }
func (h entryHeap) Less(i, j int) bool {
	if h[i].Due != h[j].Due {
		return h[i].Due < h[j].Due
	}
	return h[i].Offset < h[j].Offset
}
func (h entryHeap) Swap(i, j int) { h[i], h[j] = h[j], h[i] }
func (h *entryHeap) Push(x any)   { *h = append(*h, x.(Entry)) }
func (h *entryHeap) Pop() any {
	old := *h
	e := old[len(old)-1]
	*h = old[:len(old)-1]
	return e
}
