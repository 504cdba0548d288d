package broker

import (
	"errors"
	"math"
	"math/rand/v2"
	"strconv"

	"github.com/metaq-go/metaq/conf"
	"github.com/metaq-go/metaq/core/partition"
	"github.com/metaq-go/metaq/core/repl"
	"github.com/metaq-go/metaq/core/store"
	"github.com/metaq-go/metaq/core/timer"
	"github.com/metaq-go/metaq/sdk/message"
	"github.com/metaq-go/metaq/sdk/protocol"
)

func (c *conn) dispatch(r *protocol.Request) {
	if !c.authorize(r) { // auth.go
		return
	}
	role := c.b.replRole()                           // repl.go
	if role == repl.RoleSlave && c.slaveRefuses(r) { // replica.go
		return
	}
	if c.b.fo != nil && role != repl.RoleSlave && c.failoverRefuses(r) { // failover.go
		return
	}
	switch r.Op {
	case protocol.OpPut:
		c.handlePut(r)
	case protocol.OpMPut:
		c.handleMPut(r)
	case protocol.OpGet:
		c.handleGet(r)
	case protocol.OpFilter:
		c.handleFilter(r) // consumerfilter.go
	case protocol.OpOffset:
		c.handleOffset(r)
	case protocol.OpCommit:
		c.handleCommit(r)
	case protocol.OpFetch:
		c.handleFetch(r)
	case protocol.OpJoin, protocol.OpHeartbeat, protocol.OpLeave:
		c.handleGroup(r)
	case protocol.OpAuth:
		c.handleAuth(r)
	case protocol.OpVersion:
		c.reply(protocol.StatusOK, Version, r.Opaque)
	case protocol.OpStats:
		c.handleStats(r)
	case protocol.OpTransaction:
		c.handleTransaction(r) // txglue.go
	case protocol.OpSync:
		if role == repl.RoleSlave {
			c.handleSync(r) // syncslave.go
		} else {
			c.reply(protocol.StatusInternalError, "sync refused: this broker is not a slave", r.Opaque)
		}
	case protocol.OpTxSync:
		if role == repl.RoleSlave {
			c.handleTxSync(r) // syncslave.go
		} else {
			c.reply(protocol.StatusInternalError, "txsync refused: this broker is not a slave", r.Opaque)
		}
	default:
		c.reply(protocol.StatusBadRequest, "unexpected "+r.Op.String()+" frame", r.Opaque)
	}
}

// putTarget resolves a put's topic and partition, replying with the error
// when it cannot. p is the partition actually used (a -1 is resolved).
// checkPut checks a put (plain or transactional) before it is stored:
// its size, its target partition, its checksum and its attribute flag.
// On a failure it has answered the put and ok is false.
// ps is the idempotent producer's id and sequence when the body carries
// them (docs/protocol.md, "Idempotent producer").
func (c *conn) checkPut(r *protocol.Request) (t *partition.Topic, l *store.Log, p int32, crc uint32, ps producerSeq, ok bool) {
	b := c.b
	if len(r.Body) > b.config().MaxMessageSize {
		b.stats.putFailed.Add(1)
		c.reply(protocol.StatusBadRequest, "message of "+strconv.Itoa(len(r.Body))+
			" bytes exceeds max_message_size "+strconv.Itoa(b.config().MaxMessageSize), r.Opaque)
		return nil, nil, 0, 0, ps, false
	}
	if t, l, p, ok = c.putTarget(r); !ok {
		return nil, nil, 0, 0, ps, false
	}
	crc = message.Checksum(r.Body)
	if r.HasChecksum() && int64(crc) != r.Checksum {
		c.putFail(r.Opaque, "checksum mismatch: body has "+strconv.FormatUint(uint64(crc), 10)+
			", request says "+strconv.FormatInt(r.Checksum, 10))
		return nil, nil, 0, 0, ps, false
	}
	var err error
	if ps.id, ps.seq, ps.ok, ps.only, err = message.SplitDataProducerOnly(r.Flag, r.Body); err != nil {
		b.stats.putFailed.Add(1)
		c.reply(protocol.StatusBadRequest, badDataReason("", err), r.Opaque)
		return nil, nil, 0, 0, ps, false
	}
	return t, l, p, crc, ps, true
}

func (c *conn) putTarget(r *protocol.Request) (t *partition.Topic, l *store.Log, p int32, ok bool) {
	t, err := c.b.lookup(r.Topic, true)
	if errors.Is(err, partition.ErrNoTopic) {
		msg := "The server do not accept topic " + showTopic(r.Topic)
		if errors.Is(err, conf.ErrBadTopicName) { // auto_create_topics: say why
			msg += ": " + conf.ValidateTopicName(string(r.Topic)).Error()
		}
		c.putFail(r.Opaque, msg)
		return nil, nil, 0, false
	}
	if err != nil { // an auto-created topic that could not be opened (EMFILE, ...); the next put retries
		c.b.errorf("put: %v", err)
		c.putFail(r.Opaque, oneLine(err.Error()))
		return nil, nil, 0, false
	}
	if !t.Conf().AcceptPublish {
		c.b.stats.putFailed.Add(1)
		c.reply(protocol.StatusForbidden, "topic "+t.Name()+" does not accept puts (accept_publish = false)", r.Opaque)
		return nil, nil, 0, false
	}
	if t.Disk.Full() {
		c.b.disks.Rejects.Add(1)
		c.putFail(r.Opaque, c.b.disks.Refusal(t.Disk))
		return nil, nil, 0, false
	}
	p = r.Partition
	if p == -1 {
		p = int32(rand.IntN(len(t.Parts)))
	}
	l = t.Partition(p)
	if l == nil {
		c.putFail(r.Opaque, outOfRange(t, r.Partition))
		return nil, nil, 0, false
	}
	return t, l, p, true
}

// outOfRange is the error text for a partition the topic does not have.
func outOfRange(t *partition.Topic, p int32) string {
	return protocol.WithCause(protocol.CausePartitionOutOfRange, strconv.Itoa(int(p))+" for topic "+t.Name()+
		" (0.."+strconv.Itoa(len(t.Parts)-1)+")")
}

func (c *conn) putFail(opaque int32, msg string) {
	c.b.stats.putFailed.Add(1)
	c.reply(protocol.StatusInternalError, msg, opaque)
}

func (c *conn) handlePut(r *protocol.Request) {
	b := c.b
	b.stats.cmdPut.Add(1)
	if len(r.TxKey) > 0 {
		c.handleTxPut(r) // txglue.go
		return
	}
	t, l, p, crc, ps, ok := c.checkPut(r)
	if !ok {
		return
	}
	if r.Flag&message.FlagHasProperties != 0 && !ps.only { // delay.go: a delayed message, or a cancel of one
		d, cancel, delayed, bad := c.delayOf(r)
		if bad {
			return
		}
		if delayed {
			c.delayedPut(r, t, p, d, cancel, ps)
			return
		}
	}
	var w repl.PutDone = c
	if ps.ok {
		iw := c.idemBegin(t, l, p, r.Opaque, ps, 1, false) // idem.go
		if iw == nil {
			return
		}
		w = iw
	}
	c.entries = append(c.entries[:0], store.Entry{Flag: r.Flag, CRC: crc, Data: r.Body})
	c.appendEntries(t, l, p, r.Opaque, false, int64(len(r.Body)), w)
}

// appendEntries appends c.entries (a put's or an mput's, whose reply also
// carries the count) to partition p's log; the reply is queued when the
// store completes the append. size is the data bytes, for realtime stats.
// w is told the outcome: c, an idempotent put's *idem.Waiter or a
// delayed put's *timer.PutWaiter.
func (c *conn) appendEntries(t *partition.Topic, l *store.Log, p int32, opaque int32, mput bool, size int64, w repl.PutDone) {
	if c.b.sync != nil {
		c.appendReplicated(t, l, p, opaque, mput, size, w) // syncrepl.go
		return
	}
	token := uint64(uint32(opaque)) | uint64(uint16(p))<<32
	if mput {
		token |= uint64(len(c.entries)) << 48
	}
	c.addPending(1)
	probe := c.probeTok.Load() == 0
	if probe { // time this put (metrics.go): no other is being timed
		c.probeStart.Store(monoNow())
		c.probeTok.Store(token + 1)
	}
	// With nothing else read from the connection, a put on an idle
	// journal is committed on this goroutine (one fdatasync, no handoff
	// to the committer and back); with more requests waiting to be read
	// it is left to the committer, so that they join its rounds.
	app := l.Append
	if c.lone {
		app = l.AppendLead
	}
	if err := app(c.entries, w, token); err != nil {
		if probe {
			c.probeTok.Store(0)
		}
		if iw, ok := w.(putFailer); ok {
			iw.Failed()
		}
		c.addPending(-1)
		c.b.disks.WakeOn(err)
		c.putFail(opaque, "append failed: "+err.Error())
		return
	}
	pc := &t.PC[p]
	pc.MsgsIn.Add(int64(len(c.entries)))
	pc.BytesIn.Add(size)
	if t.Conf().Stat {
		t.RT.Put.Add(int64(len(c.entries)))
		t.RT.Size.Add(size)
	}
}

func (c *conn) handleMPut(r *protocol.Request) {
	b := c.b
	b.stats.cmdPut.Add(1)
	t, l, p, ok := c.putTarget(r)
	if !ok {
		return
	}
	c.entries = c.entries[:0]
	body := r.Body
	var size int64
	var ps producerSeq
	for len(body) > 0 {
		var e protocol.MPutEntry
		e, body = protocol.NextMPutEntry(body)
		if len(e.Data) > b.config().MaxMessageSize {
			b.stats.putFailed.Add(1)
			c.reply(protocol.StatusBadRequest, "mput: message "+strconv.Itoa(len(c.entries))+" of "+
				strconv.Itoa(len(e.Data))+" bytes exceeds max_message_size "+strconv.Itoa(b.config().MaxMessageSize), r.Opaque)
			return
		}
		crc := message.Checksum(e.Data)
		if e.CRC != -1 && uint32(e.CRC) != crc {
			c.putFail(r.Opaque, "mput: checksum mismatch in message "+strconv.Itoa(len(c.entries)))
			return
		}
		id, seq, hasProducer, only, err := message.SplitDataProducerOnly(e.Flag, e.Data)
		if err != nil {
			b.stats.putFailed.Add(1)
			c.reply(protocol.StatusBadRequest, badDataReason("mput: message "+strconv.Itoa(len(c.entries))+": ", err), r.Opaque)
			return
		}
		if e.Flag&message.FlagHasProperties != 0 && !only && timer.IsDelayed(e.Flag, e.Data) {
			b.stats.putFailed.Add(1)
			c.reply(protocol.StatusBadRequest, "mput: message "+strconv.Itoa(len(c.entries))+
				": a delayed message (metaq-deliver-at, metaq-delay or metaq-cancel) goes in a put of its own", r.Opaque)
			return
		}
		// An idempotent mput's messages are one producer's consecutive
		// sequences (docs/protocol.md, "Idempotent producer").
		if len(c.entries) == 0 {
			ps = producerSeq{id: id, seq: seq, ok: hasProducer}
		} else if hasProducer != ps.ok || (ps.ok && (id != ps.id || seq != ps.seq+int64(len(c.entries)))) {
			b.stats.putFailed.Add(1)
			c.reply(protocol.StatusBadRequest, "mput: message "+strconv.Itoa(len(c.entries))+
				": idempotent producer id and sequence do not follow message 0's (one producer, consecutive sequences, or none)", r.Opaque)
			return
		}
		c.entries = append(c.entries, store.Entry{Flag: e.Flag, CRC: crc, Data: e.Data})
		size += int64(len(e.Data))
	}
	var w repl.PutDone = c
	if ps.ok {
		iw := c.idemBegin(t, l, p, r.Opaque, ps, len(c.entries), true) // idem.go
		if iw == nil {
			return
		}
		w = iw
	}
	c.appendEntries(t, l, p, r.Opaque, true, size, w)
}

// readTarget resolves a get or offset's topic and partition.
func (c *conn) readTarget(r *protocol.Request) (*partition.Topic, *store.Log, bool) {
	if string(r.Topic) == conf.TimerTopic && string(r.Group) == c.b.config().EffectiveSlaveGroup() && !c.b.timerOpen() {
		// A slave's copy asks before this broker took a delayed message:
		// none to copy (the timer topic is not opened for it).
		c.reply(protocol.StatusInternalError, "unknown topic "+conf.TimerTopic+": no delayed message taken", r.Opaque)
		return nil, nil, false
	}
	t, err := c.b.lookup(r.Topic, false)
	if err != nil {
		c.reply(protocol.StatusInternalError, "unknown topic "+showTopic(r.Topic), r.Opaque)
		return nil, nil, false
	}
	timerCopy := false
	if t.Name() == conf.TimerTopic && r.Op != protocol.OpOffset { // delay.go: the timer log is the broker's; a sync master asks its slave's end
		if !c.copiesTimer(r) {
			c.reply(protocol.StatusForbidden, "topic "+t.Name()+" is the broker's internal timer log: it does not accept gets", r.Opaque)
			return nil, nil, false
		}
		timerCopy = true
	}
	if !timerCopy && !t.Conf().AcceptSubscribe {
		c.reply(protocol.StatusForbidden, "topic "+t.Name()+" does not accept gets (accept_subscribe = false)", r.Opaque)
		return nil, nil, false
	}
	l := t.Partition(r.Partition)
	if l == nil {
		c.reply(protocol.StatusInternalError, outOfRange(t, r.Partition), r.Opaque)
		return nil, nil, false
	}
	return t, l, true
}

func (c *conn) handleGet(r *protocol.Request) {
	b := c.b
	b.stats.cmdGet.Add(1)
	start := monoNow()
	t, l, ok := c.readTarget(r)
	if !ok {
		return
	}
	pc := t.Counters(r.Partition, l)
	pc.Gets.Add(1)
	defer func() { b.metrics.get.Observe(float64(monoNow()-start) / 1e9) }()
	if t.Conf().Stat {
		t.RT.Get.Add(1)
	}
	if r.MaxSize <= 0 {
		c.reply(protocol.StatusBadRequest, "maxSize must be positive", r.Opaque)
		return
	}
	maxSize := min(int(r.MaxSize), b.config().MaxTransferSize)
	v, err := l.Read(r.Offset, maxSize)
	if err != nil {
		var below *store.OffsetOutOfRangeError
		switch {
		case errors.As(err, &below):
			c.replyInt(protocol.StatusMoved, below.Min, r.Opaque)
		case errors.Is(err, store.ErrNoData):
			if r.Offset == math.MaxInt64 {
				c.replyInt(protocol.StatusMoved, l.MaxOffset(), r.Opaque)
				return
			}
			b.stats.getMiss.Add(1)
			if t.Conf().Stat {
				t.RT.GetMiss.Add(1)
			}
			c.reply(protocol.StatusNotFound, "Could not find message at position "+strconv.FormatInt(r.Offset, 10), r.Opaque)
		case errors.Is(err, store.ErrCorrupt):
			c.reply(protocol.StatusInternalError, protocol.CorruptDataPrefix+err.Error(), r.Opaque)
		default:
			c.reply(protocol.StatusInternalError, "read failed: "+err.Error(), r.Opaque)
		}
		return
	}
	if in, cf := b.filters.Lookup(t.Name(), r.Group), c.subs.Lookup(t.Name(), r.Group); in != nil || cf != nil {
		c.getPC = pc
		c.sendFiltered(in, cf, r, l, v, maxSize)
		return
	}
	// Counted before the send: a consumer that has read the reply then
	// finds it in the counters (a scrape right after it raced the note).
	// A send that fails closes the connection; its range counts as sent,
	// since some of it may have left.
	pc.BytesOut.Add(int64(v.Len))
	c.noteSent(l, pc, v.Offset, v.Len) // msgsout.go
	err = c.sendValue(v, r.Opaque)
	v.Release()
	if err != nil {
		c.close()
	}
}

func (c *conn) handleOffset(r *protocol.Request) {
	c.b.stats.cmdOffset.Add(1)
	t, l, ok := c.readTarget(r)
	if !ok {
		return
	}
	if t.Conf().Stat {
		t.RT.Offset.Add(1)
	}
	c.replyInt(protocol.StatusOK, l.NearestOffset(r.Offset), r.Opaque)
}

func (c *conn) replyInt(code int, v int64, opaque int32) {
	var buf [24]byte
	c.replyBytes(code, strconv.AppendInt(buf[:0], v, 10), opaque)
}

// badDataReason is the 400 body for a put body SplitData refused: a
// properties block's (with its cause, docs/protocol.md "Properties") or an
// attribute's. where prefixes the explanation (an mput's entry).
func badDataReason(where string, err error) string {
	if errors.Is(err, message.ErrBadProperties) || errors.Is(err, message.ErrPropertiesLimit) {
		return protocol.WithCause(protocol.CauseBadProperties, where+err.Error())
	}
	if where != "" {
		return where + err.Error()
	}
	return "flag says attribute but body has none: " + err.Error()
}
