package repl

import (
	"errors"
	"testing"
)

// putDone records a PutWait's outcome.
type putDone struct {
	n          int
	token      uint64
	id, off    int64
	err, syncE error
}

func (d *putDone) AppendDone(token uint64, id, off int64, err error) {
	d.n++
	d.token, d.id, d.off, d.err = token, id, off, err
}

func (d *putDone) SyncFailed(token uint64, err error) {
	d.n++
	d.token, d.syncE = token, err
}

// A put of two messages completes once its append and both syncs have,
// in any order, and releases its partition then.
func TestPutWaitCompletesAfterAllSides(t *testing.T) {
	sm := &SyncMaster{}
	sp := &Part{}
	var d putDone
	w := sm.NewPutWait(&d, sp, 7, 2)
	if sp.InFlight() != 1 {
		t.Fatalf("in flight %d, want 1", sp.InFlight())
	}
	w.SlaveDone(nil)
	w.AppendDone(7, 100, 2048, nil)
	if d.n != 0 {
		t.Fatal("completed before its last sync")
	}
	w.SlaveDone(nil)
	if d.n != 1 || d.token != 7 || d.id != 100 || d.off != 2048 || d.err != nil || d.syncE != nil {
		t.Fatalf("outcome %+v", d)
	}
	if sp.InFlight() != 0 {
		t.Fatalf("in flight %d after completion", sp.InFlight())
	}
}

// A sync that fails makes the put fail for the slave's side (and counts
// it); a failed local append wins over it.
func TestPutWaitFailures(t *testing.T) {
	slaveErr, localErr := errors.New("slave"), errors.New("local")
	sm := &SyncMaster{}
	var d putDone
	w := sm.NewPutWait(&d, &Part{}, 1, 1)
	w.SlaveDone(slaveErr)
	w.AppendDone(1, 5, 6, nil)
	if d.n != 1 || d.syncE != slaveErr || sm.failed.Load() != 1 {
		t.Fatalf("outcome %+v, failed %d", d, sm.failed.Load())
	}
	d = putDone{}
	w = sm.NewPutWait(&d, &Part{}, 2, 1)
	w.SlaveDone(slaveErr)
	w.AppendDone(2, 0, 0, localErr)
	if d.n != 1 || d.err != localErr || d.syncE != nil {
		t.Fatalf("outcome %+v", d)
	}
}
