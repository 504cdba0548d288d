package tx

import (
	"errors"
	"fmt"
	"slices"
	"strings"
	"sync"

	"github.com/metaq-go/metaq/core/store"
	"github.com/metaq-go/metaq/sdk/protocol"
)

// The fast path of a local commit (docs/storage.md, "Local commits in one
// journal round"): when every partition of a local transaction is a
// group-commit partition of the same data directory, its batches are
// appended as one atomic group of that directory's journal
// (store.Journal.AppendAtomic) and no commit record is written: the group
// is the decision. One journal round, and so one fdatasync, makes the
// commit durable; after a crash the group is in every partition or in
// none, and the transaction journal, which holds no commit record for it,
// has nothing to complete (an unfinished local transaction is rolled
// back, which appends nothing).

// atomicJournal returns the journal that can commit t's batches as one
// atomic group, or nil: t must be local (XA transactions need their
// decision logged for RECOVER and the coordinator) and every batch's log
// a group-commit log of the same journal.
func atomicJournal(t *tx, batches []*txBatch, heur bool) *store.Journal {
	if t.xa || heur || len(batches) == 0 {
		return nil
	}
	j := batches[0].l.Journal()
	if j == nil {
		return nil
	}
	for _, bt := range batches[1:] {
		if bt.l.Journal() != j {
			return nil
		}
	}
	return j
}

// txAtomicCommit is a fast-path commit in flight: it replies when every
// part of its group is done (all at once: the group is one round).
type txAtomicCommit struct {
	m      *Manager
	s      *Session
	t      *tx
	opaque int32
	mu     sync.Mutex
	left   int
	errs   []string
	failed bool // an error is the journal's failure: the group may be replayed
	// batches are counted in the topics' in-counters once stored.
	batches []*txBatch
}

// appendCommitAtomic appends t's batches as one atomic group of j and
// replies when the group is durable. The caller has marked t committing
// and counted the pending answer.
func (m *Manager) appendCommitAtomic(s *Session, j *store.Journal, t *tx, batches []*txBatch, opaque int32) {
	tc := &txAtomicCommit{m: m, s: s, t: t, opaque: opaque, left: len(batches), batches: batches}
	parts := make([]store.AtomicPart, len(batches))
	for i, bt := range batches {
		parts[i] = store.AtomicPart{Log: bt.l, Entries: bt.entries, Token: uint64(i)}
	}
	if err := j.AppendAtomic(parts, tc); err != nil {
		m.host.AppendFailed(err)
		tc.left = 1
		tc.AppendDone(0, 0, 0, fmt.Errorf("append to %s: %w", j.Dir(), err))
	}
}

// AppendDone implements store.Waiter for one partition's part.
func (tc *txAtomicCommit) AppendDone(_ uint64, _, _ int64, err error) {
	tc.mu.Lock()
	if err != nil && !slices.Contains(tc.errs, err.Error()) { // every part fails alike
		tc.errs = append(tc.errs, err.Error())
		tc.failed = tc.failed || errors.Is(err, store.ErrFailed)
	}
	tc.left--
	last := tc.left == 0
	tc.mu.Unlock()
	if !last {
		return
	}
	if tc.m.j.releaseSyncs(tc.t) {
		go tc.finish() // not on the store's completer: release fsyncs
		return
	}
	tc.finish()
}

func (tc *txAtomicCommit) finish() {
	m := tc.m
	ok := len(tc.errs) == 0
	m.mu.Lock()
	tc.t.state = txDone
	m.unregisterLocked(tc.t)
	tc.t.msgs = nil
	// Only if the transaction has records in its journal (it wrote its
	// puts out): its end, so that a later transaction with the same key
	// is not taken for this one by a replay. Not fsynced: without it the
	// replay rolls this one back, which appends nothing.
	if ok {
		m.journalEnd(tc.t, txRecDone)
	} else {
		m.journalEnd(tc.t, txRecRollback)
	}
	m.mu.Unlock()
	tc.s.peer.TxPending(-1)
	m.j.release(tc.t)
	if !ok {
		outcome := "nothing of it was stored: it is rolled back"
		if tc.failed {
			outcome = "the journal failed: the broker refuses durable appends until it restarts, and the restart stores the transaction whole or not at all"
		}
		msg := "commit of " + tc.t.key + " failed: " + strings.Join(tc.errs, "; ") + " (" + outcome + ")"
		m.logf("transaction %s", msg)
		if !tc.failed {
			m.rollbacks.Add(1)
		}
		tc.s.peer.TxDone(tc.opaque, "", tc.t.fail(protocol.XAErRMFail, oneLine(msg)))
		return
	}
	m.commits.Add(1)
	m.countIn(tc.batches)
	tc.s.peer.TxDone(tc.opaque, "", nil)
}
