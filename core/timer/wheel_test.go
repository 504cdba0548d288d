package timer

import (
	"math/rand/v2"
	"path/filepath"
	"slices"
	"testing"
	"time"

	"github.com/metaq-go/metaq/core/store"
	"github.com/metaq-go/metaq/sdk/message"
)

type testLog struct {
	t   *testing.T
	dir string
	l   *store.Log
}

func openTestLog(t *testing.T, dir string) *testLog {
	t.Helper()
	l, err := store.Open(filepath.Join(dir, "log"), store.Options{IDs: store.NewIDWorker(1, time.Now), MaxSegmentSize: 64 << 10})
	if err != nil {
		t.Fatal(err)
	}
	return &testLog{t: t, dir: dir, l: l}
}

func (tl *testLog) put(data []byte) (id, off int64) {
	tl.t.Helper()
	id, off, err := tl.l.AppendSync([]store.Entry{{Data: data, CRC: message.Checksum(data)}})
	if err != nil {
		tl.t.Fatal(err)
	}
	return id, off
}

func (tl *testLog) message(due int64) int64 {
	id, _ := tl.put(AppendMessage(nil, &Message{Due: due, Topic: "t", Partition: 1, Data: []byte("x")}))
	return id
}

// deliverAll runs the wheel at each time of times, returning the ids
// delivered and checking none is early or delivered twice; marks are
// appended to the log as the broker does.
func deliverAll(t *testing.T, tl *testLog, w *Wheel, now int64, seen map[int64]int64, due map[int64]int64) {
	t.Helper()
	if err := w.Index(); err != nil {
		t.Fatal(err)
	}
	for {
		es, mk, ok, err := w.Due(now, 7)
		if err != nil {
			t.Fatal(err)
		}
		for _, e := range es {
			if e.Due > now {
				t.Fatalf("id %d due %d delivered at %d", e.ID, e.Due, now)
			}
			if d, ok := due[e.ID]; !ok || d != e.Due {
				t.Fatalf("id %d: due %d, want %d (%v)", e.ID, e.Due, d, ok)
			}
			if _, dup := seen[e.ID]; dup {
				t.Fatalf("id %d delivered twice", e.ID)
			}
			seen[e.ID] = now
		}
		if ok {
			tl.put(AppendMark(nil, mk))
			w.Marked(mk)
		}
		if len(es) == 0 && !ok {
			return
		}
	}
}

func TestWheelFakeClock(t *testing.T) {
	dir := t.TempDir()
	tl := openTestLog(t, dir)
	defer func() { tl.l.Close() }()
	w, err := Open(filepath.Join(dir, "wheel"), tl.l, 1<<20)
	if err != nil {
		t.Fatal(err)
	}
	const base = int64(1_700_000_000_000)
	due := map[int64]int64{}
	r := rand.New(rand.NewPCG(1, 2))
	for range 2000 {
		d := base + r.Int64N(10*SlotMs)
		due[tl.message(d)] = d
	}
	// A message in the past: due now.
	past := tl.message(base - 5*SlotMs)
	due[past] = base - 5*SlotMs
	// A cancelled one.
	cid := tl.message(base + 3*SlotMs)
	tl.put(AppendCancel(nil, cid))
	if err := w.Index(); err != nil {
		t.Fatal(err)
	}
	if got := w.Pending(); got != 2002 {
		t.Fatalf("pending %d, want 2002", got)
	}
	if len(w.window) != 0 {
		t.Fatalf("window holds %d before any is due", len(w.window))
	}
	seen := map[int64]int64{}
	now := base
	deliverAll(t, tl, w, now, seen, due)
	if _, ok := seen[past]; !ok {
		t.Fatal("past message not delivered at once")
	}
	// Half way: restart (rebuild from the log), then go on.
	for ; now < base+5*SlotMs; now += 1000 {
		deliverAll(t, tl, w, now, seen, due)
	}
	// Late acceptance of a message due before the mark.
	late := tl.message(base + SlotMs)
	due[late] = base + SlotMs
	if w, err = Open(filepath.Join(dir, "wheel"), tl.l, 1<<20); err != nil {
		t.Fatal(err)
	}
	// A clock step back: nothing is redelivered.
	deliverAll(t, tl, w, base, seen, due)
	deliverAll(t, tl, w, now, seen, due)
	if _, ok := seen[late]; !ok {
		t.Fatal("late message not delivered after the restart")
	}
	for ; now < base+11*SlotMs; now += 1000 {
		deliverAll(t, tl, w, now, seen, due)
		if now == base+8*SlotMs { // and a restart with its log reopened
			if err := tl.l.Close(); err != nil {
				t.Fatal(err)
			}
			tl = openTestLog(t, dir)
			if w, err = Open(filepath.Join(dir, "wheel"), tl.l, 1<<20); err != nil {
				t.Fatal(err)
			}
		}
	}
	if _, ok := seen[cid]; ok {
		t.Fatal("cancelled message delivered")
	}
	if len(seen) != len(due) {
		t.Fatalf("delivered %d of %d", len(seen), len(due))
	}
	if p := w.Pending(); p != 0 {
		t.Fatalf("pending %d after all delivered", p)
	}
}

func TestParseRecords(t *testing.T) {
	m := Message{Due: 42, Topic: "topic", Partition: 3, Flag: 2, Data: []byte("body")}
	r, err := Parse(AppendMessage(nil, &m))
	if err != nil || r.Kind != KindMessage || r.Msg.Due != 42 || r.Msg.Topic != "topic" || r.Msg.Partition != 3 ||
		r.Msg.Flag != 2 || string(r.Msg.Data) != "body" {
		t.Fatalf("%+v %v", r, err)
	}
	if r, err = Parse(AppendCancel(nil, 7)); err != nil || r.Cancel != 7 {
		t.Fatalf("%+v %v", r, err)
	}
	if r, err = Parse(AppendMark(nil, Mark{5, 6})); err != nil || r.Mark != (Mark{5, 6}) {
		t.Fatalf("%+v %v", r, err)
	}
	ts := []Target{{Topic: "a", Partition: 3, From: 77}, {Topic: "orders", Partition: 0, From: 0}}
	if r, err = Parse(AppendIntent(nil, ts)); err != nil || !slices.Equal(r.Intent, ts) {
		t.Fatalf("%+v %v", r, err)
	}
	good := AppendIntent(nil, ts)
	for _, b := range [][]byte{nil, {9}, {1, 0}, {2, 0}, {3}, {4}, {4, 0, 1}, good[:len(good)-1], append(good, 0)} {
		if _, err := Parse(b); err == nil {
			t.Fatalf("%x parsed", b)
		}
	}
}

func FuzzParse(f *testing.F) {
	f.Add(AppendMessage(nil, &Message{Due: 1, Topic: "t", Data: []byte("d")}))
	f.Add(AppendCancel(nil, 1))
	f.Add(AppendMark(nil, Mark{1, 2}))
	f.Add(AppendIntent(nil, []Target{{Topic: "t", Partition: 1, From: 2}}))
	f.Fuzz(func(t *testing.T, b []byte) {
		r, err := Parse(b)
		if err == nil && r.Kind == KindIntent {
			again, err := Parse(AppendIntent(nil, r.Intent))
			if err != nil || !slices.Equal(again.Intent, r.Intent) {
				t.Fatalf("intent round trip: %+v %v", again, err)
			}
		}
		if err != nil || r.Kind != KindMessage {
			return
		}
		again, err := Parse(AppendMessage(nil, &r.Msg))
		if err != nil || again.Msg.Due != r.Msg.Due || again.Msg.Topic != r.Msg.Topic {
			t.Fatalf("round trip: %+v %v", again, err)
		}
	})
}

// TestWheelClockStep: the wheel is driven by a fake clock that steps back
// and forward, with a rebuild (a restart) while the clock is behind the
// last mark: nothing is delivered before its due time by the clock of the
// moment, nothing twice, nothing lost. A step back holds back what is not
// due by the new clock (late by the step); a step forward delivers at once
// what the new clock makes due (early by the step, in true time).
func TestWheelClockStep(t *testing.T) {
	dir := t.TempDir()
	tl := openTestLog(t, dir)
	defer func() { tl.l.Close() }()
	const base = int64(1_700_000_000_000)
	due := map[int64]int64{}
	r := rand.New(rand.NewPCG(3, 4))
	for range 500 {
		d := base + r.Int64N(10*SlotMs)
		due[tl.message(d)] = d
	}
	w, err := Open(filepath.Join(dir, "wheel"), tl.l, 1<<20)
	if err != nil {
		t.Fatal(err)
	}
	seen := map[int64]int64{}
	count := func(upTo int64) int {
		n := 0
		for _, d := range due {
			if d <= upTo {
				n++
			}
		}
		return n
	}
	deliverAll(t, tl, w, base+2*SlotMs, seen, due)
	if len(seen) != count(base+2*SlotMs) {
		t.Fatalf("%d delivered at +2 min, want %d", len(seen), count(base+2*SlotMs))
	}
	// The clock steps back an hour: nothing is delivered again, nothing new.
	before := len(seen)
	deliverAll(t, tl, w, base-60*SlotMs, seen, due)
	if len(seen) != before {
		t.Fatalf("a step back delivered %d", len(seen)-before)
	}
	// A restart while the clock is behind: the rebuilt wheel delivers
	// nothing twice (deliverAll fails on a second delivery).
	w, err = Open(filepath.Join(dir, "wheel"), tl.l, 1<<20)
	if err != nil {
		t.Fatal(err)
	}
	deliverAll(t, tl, w, base+SlotMs, seen, due)
	if len(seen) != before {
		t.Fatalf("a rebuild behind the mark delivered %d", len(seen)-before)
	}
	// Back to +3 min: the messages due by then, not before.
	deliverAll(t, tl, w, base+3*SlotMs, seen, due)
	if len(seen) != count(base+3*SlotMs) {
		t.Fatalf("%d delivered at +3 min, want %d", len(seen), count(base+3*SlotMs))
	}
	// A step forward a day: the rest at once.
	deliverAll(t, tl, w, base+24*60*SlotMs, seen, due)
	if len(seen) != len(due) || w.Pending() != 0 {
		t.Fatalf("%d of %d delivered, %d pending", len(seen), len(due), w.Pending())
	}
}

// appendingSource is a timer log that, the n-th time its end is asked
// for, first appends a message (a put accepted while the wheel opens).
type appendingSource struct {
	*store.Log
	tl    *testLog
	calls int
	n     int
	due   int64
	id    int64
}

func (s *appendingSource) MaxOffset() int64 {
	s.calls++
	if s.calls == s.n {
		s.id = s.tl.message(s.due)
	}
	return s.Log.MaxOffset()
}

// TestWheelOpenRacesPut: a put appended to the timer log while Open
// reads it (between its pass over the whole log and its pass over the
// tail after the last mark), due after that mark, is delivered when due.
// Before the fix the second pass read it, dropped it for being due after
// the mark, and moved the wheel's read position past it: the next mark
// covered it and it was never delivered (the delayed crash tests'
// "acknowledged delayed message never delivered", under load).
func TestWheelOpenRacesPut(t *testing.T) {
	// n: the put lands before the n-th time Open asks for the log's end
	// (2: after the pass over the whole log, as in the crash tests).
	for n := 1; n <= 3; n++ {
		dir := t.TempDir()
		tl := openTestLog(t, dir)
		// A message, a mark covering it, then a message after the mark.
		due := map[int64]int64{tl.message(1000): 1000}
		tl.put(AppendMark(nil, Mark{DueUpTo: 1000, IndexedTo: tl.l.MaxOffset()}))
		due[tl.message(1500)] = 1500
		src := &appendingSource{Log: tl.l, tl: tl, n: n, due: 2000}
		w, err := Open(filepath.Join(dir, "wheel"), src, 1<<20)
		if err != nil {
			t.Fatal(err)
		}
		src.n = 0        // no more puts from MaxOffset
		if src.id == 0 { // Open did not ask that often: the put comes after it
			src.id = tl.message(2000)
		}
		due[src.id] = 2000
		seen := map[int64]int64{}
		deliverAll(t, tl, w, 3000, seen, due)
		for id, d := range due {
			if d > 1000 {
				if _, ok := seen[id]; !ok {
					t.Errorf("n %d: message %d due %d, appended while the wheel opened, never delivered", n, id, d)
				}
			}
		}
	}
}
