package repl

import (
	"bytes"
	"io"
	"log/slog"
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/metaq-go/metaq/core/store"
	"github.com/metaq-go/metaq/internal/testsvc"
	"github.com/metaq-go/metaq/sdk/message"
)

// TestSyncAppendFailsQueued: a sync whose append fails once queued (a
// full disk: the store answers it with an error and puts the appends
// queued behind it where it would have gone) refuses the connection's
// later syncs, and the partition's append state goes back to what the log
// holds: the puller then copies the master's message the sync failed to
// store. Before, the state counted the failed message, the puller took
// the master's copy for one the sync had appended and skipped it, and the
// slave's copy lacked it, every later record at a lower offset than on
// the master.
func TestSyncAppendFailsQueued(t *testing.T) {
	t.Parallel()
	dir := testsvc.MountTmpfs(t, 1<<20)
	l, err := store.Open(filepath.Join(dir, "t-0"), store.Options{IDs: &testIDs{}, MaxSegmentSize: 256 << 10})
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	s := NewSlave(Config{MaxMessageSize: 1 << 20}, 1, nil, slog.New(slog.NewTextHandler(io.Discard, nil)))
	entry := func(id int64) store.Entry {
		data := bytes.Repeat([]byte{byte('a' + id)}, 16<<10)
		return store.Entry{ID: id, CRC: message.Checksum(data), Data: data}
	}
	c := &syncConn{done: make(chan struct{}, 4)}
	sync := func(id int64) {
		t.Helper()
		if err := s.ApplySync(c, l, 0, []store.Entry{entry(id)}, int32(id), func() error { return nil }); err != nil {
			t.Fatal(err)
		}
		select {
		case <-c.done:
		case <-time.After(10 * time.Second):
			t.Fatal("a sync was not answered")
		}
	}
	sync(1)
	if c.failed.Load() {
		t.Fatal("a sync that succeeded refused the later ones")
	}
	filler := filepath.Join(dir, "filler")
	testsvc.Fill(t, filler, 1)
	sync(2) // fails on the full disk
	if len(c.appended) != 1 {
		t.Fatalf("appended %v on a full disk", c.appended)
	}
	if !c.failed.Load() {
		t.Fatal("a failed sync append did not refuse the connection's later syncs")
	}
	if err := os.Remove(filler); err != nil {
		t.Fatal(err)
	}

	// The puller reads the master's records 1 and 2 from offset 0.
	res, body := pullRecords(t, s, &replPart{topic: "t", l: l, fetch: 1 << 20}, entry(1), entry(2))
	if err := res.err; err != nil {
		t.Fatal(err)
	}
	if l.MaxOffset() != int64(len(body)) {
		t.Fatalf("the slave's log ends at %d, the master's at %d: the message whose sync failed was not copied", l.MaxOffset(), len(body))
	}
	if l.LastID() != 2 {
		t.Fatalf("the slave's last id is %d, want 2", l.LastID())
	}
}
