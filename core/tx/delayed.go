package tx

import (
	"fmt"
	"time"

	"github.com/metaq-go/metaq/conf"
	"github.com/metaq-go/metaq/core/store"
	"github.com/metaq-go/metaq/core/timer"
	"github.com/metaq-go/metaq/sdk/message"
)

// Delayed messages in transactions (docs/delayed.md, "In transactions").
//
// A transactional put may carry a delivery header (metaq-delay or
// metaq-deliver-at; the broker checked it against max_delay when it took
// the put). Until the commit it is buffered like any transactional
// message. The commit turns it into a timer log record, due by the clock
// of the commit (a delay counts from the commit, a time stays as given, a
// time past is now), for the timer partition of its target (Host.TimerLog)
// with the msgId of its put; that record is one of the commit's batches,
// so it is stored with the others, atomically, and replicated with them.
//
// When the commit is recorded in the journal (XA, or batches that are not
// one atomic group, or a sync master), the timer records are written to
// the journal as put records of the timer partitions, before the commit
// record: the replay completes the timer batch as any other (looked for by
// its first id and crc from where the commit said, appended again if
// missing), and takes the put records of the timer topic in place of the
// original puts with the same ids. A timer put record without a commit
// record after it (a torn write) is dropped by the replay: the original
// put stays, and the commit, when it comes, turns it again.

// commitTimerMsgs returns msgs with each delayed message turned into its
// timer log record, due by now (Unix ms), and the timer records alone;
// msgs itself when none is delayed.
func (m *Manager) commitTimerMsgs(msgs []txMsg, now int64) ([]txMsg, []txMsg, error) {
	var out, timers []txMsg
	for i := range msgs {
		tm := &msgs[i]
		d, cancel, ok, err := message.TimerHeaders(tm.e.Flag, tm.e.Data)
		if err != nil || cancel != 0 {
			// The broker refused these at the put; one from a journal
			// written before is stored as it is.
			ok = false
		}
		if !ok {
			if out != nil {
				out = append(out, *tm)
			}
			continue
		}
		if out == nil {
			out = append(make([]txMsg, 0, len(msgs)), msgs[:i]...)
		}
		tt, tl, tp, err := m.host.TimerLog(tm.t.Name(), tm.p)
		if err != nil {
			return nil, nil, fmt.Errorf("delayed message %d for %s-%d: timer topic: %w", tm.e.ID, tm.t.Name(), tm.p, err)
		}
		data := timer.PutRecord(tm.t.Name(), tm.p, tm.e.Flag, tm.e.Data, d, 0, now) // a time in the past is now
		rec := txMsg{t: tt, l: tl, p: tp, e: store.Entry{ID: tm.e.ID, CRC: message.Checksum(data), Data: data}}
		out = append(out, rec)
		timers = append(timers, rec)
	}
	if out == nil {
		return msgs, nil, nil
	}
	return out, timers, nil
}

// TimerTopic is the timer topic as a commit's delayed messages go to it
// (Host.TimerLog): once stored they count in Topic's traffic and as
// accepted by Timer, whose loop of that timer partition is woken (one due
// at once is delivered without waiting for its tick).
type TimerTopic struct {
	Topic
	Timer interface{ Stored(i int, msgs int) } // *timer.Service
}

// CountIn implements Topic.
func (t TimerTopic) CountIn(p int32, msgs int, bytes int64) {
	t.Topic.CountIn(p, msgs, bytes)
	t.Timer.Stored(int(p), msgs)
}

// ReadyTimer readies the timer partition a transactional delayed message
// for partition p of topic goes to at its commit, when the broker takes
// the put: it opens the timer topic (Host.TimerLog: not under the
// transactions' lock at the commit, the first time), and on a sync
// master, whose commit check refuses a partition not in sync with the
// slave, waits at most sync_timeout until that partition is in sync (the
// sync loop brings a newly opened one in): once per timer partition and
// link. An error is left for the commit to tell.
func (m *Manager) ReadyTimer(topic string, p int32) {
	_, l, tp, err := m.host.TimerLog(topic, p)
	if err != nil {
		return
	}
	sm := m.host.Master()
	if sm == nil {
		return
	}
	sp := sm.Part(conf.TimerTopic, tp, l)
	for deadline := time.Now().Add(sm.Timeout()); ; time.Sleep(5 * time.Millisecond) {
		if _, ok := sm.InSync(sp); ok || sm.Link() == nil || time.Now().After(deadline) {
			return
		}
	}
}

// replayedTimerIDs returns the ids of msgs' timer log records (put records
// of the timer topic, written by a commit), nil if none.
func replayedTimerIDs(msgs []replayedMsg) map[int64]bool {
	var ids map[int64]bool
	for _, rm := range msgs {
		if rm.topic == conf.TimerTopic {
			if ids == nil {
				ids = map[int64]bool{}
			}
			ids[rm.e.ID] = true
		}
	}
	return ids
}

// withoutTimerMsgs returns msgs without the timer log records: those of a
// commit whose record did not follow (the transaction is still prepared,
// or rolled back).
func withoutTimerMsgs(msgs []replayedMsg) []replayedMsg {
	if replayedTimerIDs(msgs) == nil {
		return msgs
	}
	out := make([]replayedMsg, 0, len(msgs))
	for _, rm := range msgs {
		if rm.topic != conf.TimerTopic {
			out = append(out, rm)
		}
	}
	return out
}
