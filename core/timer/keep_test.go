package timer

import (
	"path/filepath"
	"testing"
	"time"

	"github.com/metaq-go/metaq/core/store"
	"github.com/metaq-go/metaq/sdk/message"
)

// TestKeeper: a timer log's retention stops at the first segment holding
// a message its last mark does not cover, reads the log incrementally,
// and what it keeps rebuilds to the pending messages.
func TestKeeper(t *testing.T) {
	t.Parallel()
	tl := openTestLog(t, t.TempDir())
	defer tl.l.Close()
	big := make([]byte, 4000)
	msg := func(due int64) (id, off int64) {
		return tl.put(AppendMessage(nil, &Message{Due: due, Topic: "t", Partition: 1, Data: big}))
	}
	k := NewKeeper()
	keep := func() int64 {
		t.Helper()
		n, err := k.KeepFrom(tl.l)
		if err != nil {
			t.Fatal(err)
		}
		return n
	}
	segOf := func(off int64) int64 { // the start of the segment holding off
		var s int64
		for _, st := range tl.l.SegmentStarts() {
			if st <= off {
				s = st
			}
		}
		return s
	}
	for range 40 {
		msg(1000)
	}
	if got := keep(); got != 0 {
		t.Fatalf("no mark yet: keep %d, want 0", got)
	}
	_, far := msg(1 << 50) // pending for long
	for range 40 {
		msg(2000)
	}
	tl.put(AppendMark(nil, Mark{DueUpTo: 1500, IndexedTo: tl.l.MaxOffset()}))
	want := segOf(far)
	if want == 0 {
		t.Fatal("the far message is in the first segment: the test needs it later")
	}
	if got := keep(); got != want {
		t.Fatalf("keep %d, want %d (the far message's segment)", got, want)
	}
	for range 40 {
		msg(3000)
	}
	tl.put(AppendMark(nil, Mark{DueUpTo: 5000, IndexedTo: tl.l.MaxOffset()}))
	if got := keep(); got != want {
		t.Fatalf("keep %d after a later mark, want %d", got, want)
	}
	n, held, err := tl.l.DeleteOlderThanBelow(-time.Hour, time.Now(), want)
	if err != nil || n == 0 || held == 0 {
		t.Fatalf("deleted %d, held %d, %v", n, held, err)
	}
	w, err := Open(t.TempDir(), tl.l, 1<<16)
	if err != nil {
		t.Fatal(err)
	}
	if w.Pending() != 1 || w.Mark().DueUpTo != 5000 {
		t.Fatalf("rebuilt: %d pending, mark %+v; want 1 and the last mark", w.Pending(), w.Mark())
	}
	if got := keep(); got != want {
		t.Fatalf("keep %d after the deletion, want %d", got, want)
	}
}

// TestWheelCancelBeforeMessage: a tombstone that comes before its
// message (a transactional delayed put cancelled before its commit)
// skips the message, in the running wheel and after a rebuild.
func TestWheelCancelBeforeMessage(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	tl := openTestLog(t, dir)
	defer tl.l.Close()
	w, err := Open(filepath.Join(dir, "wheel"), tl.l, 1<<20)
	if err != nil {
		t.Fatal(err)
	}
	const due = int64(1_700_000_000_000)
	tl.put(AppendCancel(nil, 42))
	if err := w.Index(); err != nil {
		t.Fatal(err)
	}
	data := AppendMessage(nil, &Message{Due: due, Topic: "t", Partition: 1, Data: []byte("x")})
	if _, _, err := tl.l.AppendSync([]store.Entry{{ID: 42, Data: data, CRC: message.Checksum(data)}}); err != nil {
		t.Fatal(err)
	}
	other := tl.message(due)
	check := func(w *Wheel) {
		t.Helper()
		if err := w.Index(); err != nil {
			t.Fatal(err)
		}
		es, _, _, err := w.Due(due+1, 10)
		if err != nil {
			t.Fatal(err)
		}
		if len(es) != 1 || es[0].ID != other {
			t.Fatalf("due %+v, want only id %d", es, other)
		}
	}
	check(w)
	w2, err := Open(filepath.Join(dir, "wheel2"), tl.l, 1<<20)
	if err != nil {
		t.Fatal(err)
	}
	check(w2)
}
