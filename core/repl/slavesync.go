package repl

import (
	"errors"
	"strconv"
	"sync/atomic"

	"github.com/metaq-go/metaq/core/store"
	"github.com/metaq-go/metaq/sdk/message"
)

// Syncs from a sync master (MetaQ's gregor slave, reference §9), the
// slave's side: a sync's message is appended with the master's msgId and
// answered like a put once it is durable here, with the slave's offset.
// Syncs of one connection are applied in the order they arrive, so a
// master that ships a partition's puts in its append order on one
// connection gets the same offsets here. A msgId at or below the last one
// appended to the partition (the puller copied it already) is answered
// 200 with offset -1 once the puller's copy is durable (a reply sooner
// would let the master acknowledge a put that a power cut of the slave
// could still lose, and the copies differ meanwhile).
//
// The master ships a partition only after this slave has caught up with
// it (put.go); a sync itself cannot show a gap, since it carries no
// offset.

// SyncConn is the connection a sync master's syncs arrive on: it answers
// them.
type SyncConn interface {
	// AppendDone answers a sync appended here, like a put (store.Waiter).
	AppendDone(token uint64, firstID, firstOffset int64, err error)
	// SyncPending counts a reply that will come later (1) or came (-1).
	SyncPending(n int)
	// SyncDup answers a sync of message id to partition p that the
	// puller had appended: 200 with offset -1, or err, the failure of the
	// puller's append. It counts the reply as come (SyncPending(-1)).
	SyncDup(opaque int32, id int64, p int32, err error)
	// FailSyncs refuses the later syncs on the connection (its SyncGate's
	// Fail): one's append failed once queued, told right before its
	// AppendDone.
	FailSyncs()
}

// syncWaiter is the store.Waiter of the syncs of one connection to one
// partition: a failed append (once queued: ENOSPC, a failed log) marks
// the partition's append state stale (SlaveLog.Lock sets it to the log's)
// and refuses the connection's later syncs, before the connection answers
// it.
type syncWaiter struct {
	sl *SlaveLog
	c  SyncConn
}

func (w *syncWaiter) AppendDone(token uint64, firstID, firstOffset int64, err error) {
	if err != nil {
		w.sl.stale.Store(true)
		w.c.FailSyncs()
	}
	w.c.AppendDone(token, firstID, firstOffset, err)
}

// SyncGate is a sync connection's memory of a failed sync. Once a sync
// on it failed, the master has a message this slave lacks, and a later
// sync of that partition would be stored here at a lower offset than
// there (a sync carries no offset): every later sync on the connection is
// refused. The master drops the link when told of the failure, and its
// next link joins each partition again once the puller has copied what
// the slave lacks.
type SyncGate struct{ failed atomic.Bool }

// Check is the refusal of a sync on a connection whose earlier sync
// failed (nil while none did).
func (g *SyncGate) Check() error {
	if g.failed.Load() {
		return errorf(NotStored, "sync: refused: an earlier sync on this connection failed (the master links again and the slave pulls what it lacks)")
	}
	return nil
}

// Fail records that a sync on the connection failed.
func (g *SyncGate) Fail() { g.failed.Store(true) }

// CheckSync checks a sync's message id and size (n bytes, at most maxSize).
func CheckSync(id int64, n, maxSize int) error {
	if n > maxSize {
		return errorf(Invalid, "sync: message of "+strconv.Itoa(n)+" bytes exceeds max_message_size "+strconv.Itoa(maxSize))
	}
	if id <= 0 {
		return errorf(Invalid, "sync: message id must be positive")
	}
	return nil
}

// SyncEntry is a sync's message as an entry to append: its checksum (the
// master's, when it sent one, must match) and flag checked.
func SyncEntry(id int64, flag int32, body []byte, hasChecksum bool, checksum int64) (store.Entry, error) {
	crc := message.Checksum(body)
	if hasChecksum && int64(crc) != checksum {
		return store.Entry{}, errorf(NotStored, "sync: checksum mismatch")
	}
	if _, _, _, err := message.SplitData(flag, body); err != nil {
		if errors.Is(err, message.ErrBadProperties) || errors.Is(err, message.ErrPropertiesLimit) {
			return store.Entry{}, errorf(Invalid, "sync: bad properties: "+err.Error())
		}
		return store.Entry{}, errorf(Invalid, "sync: flag says attribute but body has none: "+err.Error())
	}
	return store.Entry{ID: id, Flag: flag, CRC: crc, Data: body}, nil
}

// ApplySync appends entries (one, a sync's message) to partition p, log
// l, under its SlaveLog's lock, unless refusal (checked under the lock)
// refuses it now, or the puller appended it already (it is answered by
// c.SyncDup then). c.AppendDone answers it unless it returns an error.
func (s *Slave) ApplySync(c SyncConn, l *store.Log, p int32, entries []store.Entry, opaque int32, refusal func() error) error {
	sl := s.LogState(l)
	sl.Lock()
	if err := refusal(); err != nil {
		sl.Unlock()
		return err
	}
	if id := entries[0].ID; id <= sl.LastID() && (!isDelivery(entries[0]) || sl.TakePulledOld(id)) {
		s.CountSyncDup()
		d := &dupSync{c: c, opaque: opaque, id: id, part: p}
		c.SyncPending(1)
		if sl.WaitPulled(d) {
			// The puller's copy may not be durable yet: answer when it is.
			sl.Unlock()
			return nil
		}
		sl.Unlock()
		d.PulledDone(nil)
		return nil
	}
	token := uint64(uint32(opaque)) | uint64(uint16(p))<<32
	if sl.sw == nil || sl.sw.c != c {
		sl.sw = &syncWaiter{sl: sl, c: c}
	}
	c.SyncPending(1)
	err := l.Append(entries, sl.sw, token)
	if err == nil {
		sl.Appended(entries)
	}
	sl.Unlock()
	if err != nil {
		c.SyncPending(-1)
		return errorf(NotStored, "sync: append failed: "+err.Error())
	}
	s.CountSyncs(1)
	return nil
}

// isDelivery reports whether e is a delayed message's delivery (it
// carries a delivery header and keeps the id of its acceptance: an id
// below the partition's last one is no sign that the puller copied it).
func isDelivery(e store.Entry) bool {
	if e.Flag&message.FlagHasProperties == 0 {
		return false
	}
	_, _, ok, _ := message.TimerHeaders(e.Flag, e.Data)
	return ok
}

// dupSync is a sync answered by a puller's append still in flight
// (PullWaiter).
type dupSync struct {
	c      SyncConn
	opaque int32
	id     int64
	part   int32
}

// PulledDone answers d, a sync whose message the puller appended.
func (d *dupSync) PulledDone(err error) { d.c.SyncDup(d.opaque, d.id, d.part, err) }
