package broker

import (
	"strconv"

	"github.com/metaq-go/metaq/core/store"
	"github.com/metaq-go/metaq/sdk/message"
	"github.com/metaq-go/metaq/sdk/protocol"
)

// handleSync applies a sync from a sync master (MetaQ's gregor slave,
// reference §9): the message is appended with the master's msgId and
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
// it (syncrepl.go); handleSync itself cannot tell a gap, since sync
// carries no offset.
func (c *conn) handleSync(r *protocol.Request) {
	b := c.b
	if len(r.Body) > b.config().MaxMessageSize {
		c.reply(protocol.StatusBadRequest, "sync: message of "+strconv.Itoa(len(r.Body))+
			" bytes exceeds max_message_size "+strconv.Itoa(b.config().MaxMessageSize), r.Opaque)
		return
	}
	if r.MsgID <= 0 {
		c.reply(protocol.StatusBadRequest, "sync: message id must be positive", r.Opaque)
		return
	}
	t, err := b.lookup(r.Topic, true)
	if err != nil {
		c.reply(protocol.StatusInternalError, "sync: The server do not accept topic "+showTopic(r.Topic), r.Opaque)
		return
	}
	l := t.partition(r.Partition)
	if l == nil || r.Partition < 0 {
		c.reply(protocol.StatusInternalError, t.outOfRange(r.Partition), r.Opaque)
		return
	}
	crc := message.Checksum(r.Body)
	if r.HasChecksum() && int64(crc) != r.Checksum {
		c.reply(protocol.StatusInternalError, "sync: checksum mismatch", r.Opaque)
		return
	}
	if _, _, _, err := message.SplitData(r.Flag, r.Body); err != nil {
		c.reply(protocol.StatusBadRequest, "sync: flag says attribute but body has none: "+err.Error(), r.Opaque)
		return
	}
	sl := b.slave.LogState(l)
	sl.Lock()
	if err := c.syncRefusal(); err != nil { // txreplslave.go
		sl.Unlock()
		c.replyErr(err, r.Opaque)
		return
	}
	if r.MsgID <= sl.LastID() {
		b.slave.CountSyncDup()
		d := &dupSync{c: c, opaque: r.Opaque, id: r.MsgID, part: r.Partition}
		c.addPending(1)
		if sl.WaitPulled(d) {
			// The puller's copy may not be durable yet: answer when it is.
			sl.Unlock()
			return
		}
		sl.Unlock()
		d.PulledDone(nil)
		return
	}
	c.entries = append(c.entries[:0], store.Entry{ID: r.MsgID, Flag: r.Flag, CRC: crc, Data: r.Body})
	token := uint64(uint32(r.Opaque)) | uint64(uint16(r.Partition))<<32
	c.addPending(1)
	err = l.Append(c.entries, c, token)
	if err == nil {
		sl.Appended(c.entries)
	}
	sl.Unlock()
	if err != nil {
		c.addPending(-1)
		c.reply(protocol.StatusInternalError, "sync: append failed: "+err.Error(), r.Opaque)
		return
	}
	b.slave.CountSyncs(1)
}

// dupSync is a sync answered by a puller's append still in flight
// (repl.PullWaiter).
type dupSync struct {
	c      *conn
	opaque int32
	id     int64
	part   int32
}

// PulledDone answers d, a sync whose message the puller appended: 200
// with offset -1, or the puller's append failure.
func (d *dupSync) PulledDone(err error) {
	c := d.c
	c.addPending(-1)
	if err != nil {
		c.reply(protocol.StatusInternalError, "sync: append failed: "+err.Error(), d.opaque)
		return
	}
	var body [64]byte
	c.replyBytes(protocol.StatusOK, protocol.AppendPutResultBody(body[:0], d.id, d.part, -1), d.opaque)
}
