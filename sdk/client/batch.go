package client

import (
	"context"
	"encoding/binary"
	"fmt"
	"sync"
	"time"

	"github.com/metaq-go/metaq/sdk/message"
	"github.com/metaq-go/metaq/sdk/protocol"
)

type batchConfig struct {
	enabled     bool
	maxMessages int
	maxBytes    int // mput body bytes: entry headers plus data
	linger      time.Duration
}

// pendingMsg is one accepted message on its way to the broker.
type pendingMsg struct {
	msg  *message.Message
	part int32
	crc  uint32
	// Exactly one of cb (async), direct (a clusterProducer's async send,
	// called on the reader goroutine) and done (sync) is set.
	cb     func(SendResult, error)
	direct func(SendResult, error)
	done   chan struct{}
	res    SendResult
	err    error
}

type tpKey struct {
	topic string
	part  int32
}

// batch is the messages for one topic-partition waiting to be sent.
type batch struct {
	key   tpKey
	msgs  []*pendingMsg
	bytes int
	timer *time.Timer
}

// accumulator groups messages into mput batches per topic-partition.
//
// Batches are sent in the order they are detached (by a full add, the
// linger timer, a flush, or a put or SendBatch chunk of the partition
// that must not overtake them): detach queues them under mu and drain
// hands them to the connection one after another under sendMu, whose
// wire keeps that order. Sending each from the goroutine that detached
// it, after unlocking, could put a partition's newer batch on the wire
// before an older one.
type accumulator struct {
	p       *brokerProducer
	mu      sync.Mutex
	batches map[tpKey]*batch
	ready   []*batch // detached, not sent yet, in detach order (under mu)
	sendMu  sync.Mutex
	spare   []*batch // drain's other queue array, reused (under sendMu)
}

func newAccumulator(p *brokerProducer) *accumulator {
	return &accumulator{p: p, batches: make(map[tpKey]*batch)}
}

func (a *accumulator) add(pm *pendingMsg) {
	cfg := &a.p.cfg.batch
	size := protocol.MPutEntryHeader + pm.msg.DataLen()
	if !a.p.cfg.idempotent {
		pm.crc = dataChecksum(pm.msg)
	} else {
		size += idemReserve // bound when sent (idem.go), then checksummed
	}
	key := tpKey{pm.msg.Topic, pm.part}
	a.mu.Lock()
	queued := len(a.ready)
	b := a.batches[key]
	if b != nil && b.bytes+size > cfg.maxBytes {
		a.detach(b)
		b = nil
	}
	if b == nil {
		b = &batch{key: key}
		a.batches[key] = b
	}
	b.msgs = append(b.msgs, pm)
	b.bytes += size
	switch {
	case len(b.msgs) >= cfg.maxMessages || b.bytes >= cfg.maxBytes || cfg.linger <= 0:
		a.detach(b)
	case len(b.msgs) == 1:
		b.timer = time.AfterFunc(cfg.linger, func() { a.flushBatch(b) })
	}
	detached := len(a.ready) > queued
	a.mu.Unlock()
	if detached {
		a.drain()
	}
}

// detach removes b from the map and queues it for drain. Holds a.mu.
func (a *accumulator) detach(b *batch) {
	delete(a.batches, b.key)
	if b.timer != nil {
		b.timer.Stop()
	}
	a.ready = append(a.ready, b)
}

// drain sends the queued batches in order. When it returns, every batch
// queued before the call has been handed to the connection (by this
// goroutine or by the one draining when it was called).
func (a *accumulator) drain() {
	a.sendMu.Lock()
	defer a.sendMu.Unlock()
	for {
		a.mu.Lock()
		q := a.ready
		if len(q) == 0 {
			a.mu.Unlock()
			return
		}
		a.ready = a.spare
		a.mu.Unlock()
		for _, b := range q {
			a.send(b)
		}
		clear(q)
		a.spare = q[:0]
	}
}

func (a *accumulator) flushBatch(b *batch) {
	a.mu.Lock()
	if a.batches[b.key] != b {
		a.mu.Unlock()
		return // already sent
	}
	a.detach(b)
	a.mu.Unlock()
	a.drain()
}

// flushKey sends key's batch now, if there is one, and returns once it
// and every batch detached before it are handed to the connection: a
// message sent past the batches after it (put) cannot overtake them.
func (a *accumulator) flushKey(key tpKey) {
	a.mu.Lock()
	if b := a.batches[key]; b != nil {
		a.detach(b)
	}
	a.mu.Unlock()
	a.drain()
}

// sendAfter queues b, a batch formed elsewhere (a SendBatch chunk), after
// the batch of its partition, and sends them.
func (a *accumulator) sendAfter(b *batch) {
	a.mu.Lock()
	if ob := a.batches[b.key]; ob != nil {
		a.detach(ob)
	}
	a.ready = append(a.ready, b)
	a.mu.Unlock()
	a.drain()
}

func (a *accumulator) flushAll() {
	a.mu.Lock()
	for _, b := range a.batches {
		a.detach(b)
	}
	a.mu.Unlock()
	a.drain()
}

func (a *accumulator) close() { a.flushAll() }

// send writes b as one mput and completes its messages from the reply.
func (a *accumulator) send(b *batch) {
	p := a.p
	bodyLen := b.bytes
	deadline := time.Now().Add(p.cfg.sendTimeout)
	p.cn.sendAsync(context.Background(), deadline, func(dst []byte, op int32) []byte {
		if p.cfg.idempotent { // bind, in order, under the wire's lock
			bodyLen = 0
			for _, pm := range b.msgs {
				p.bind(pm.msg, b.key.part)
				pm.crc = dataChecksum(pm.msg)
				bodyLen += protocol.MPutEntryHeader + pm.msg.DataLen()
			}
		}
		dst = protocol.AppendMPutHeader(dst, b.key.topic, b.key.part, bodyLen, len(b.msgs), op)
		for _, pm := range b.msgs {
			m := pm.msg
			dst = binary.BigEndian.AppendUint32(dst, uint32(m.Flag()))
			dst = binary.BigEndian.AppendUint32(dst, uint32(m.DataLen()))
			dst = binary.BigEndian.AppendUint32(dst, pm.crc)
			dst = m.AppendData(dst)
		}
		return dst
	}, func(c *call) {
		a.complete(b, c)
		putCall(c)
	})
}

// complete hands each message of b its result: ids are consecutive and
// each record starts where the previous one ends.
func (a *accumulator) complete(b *batch, c *call) {
	p := a.p
	var err error
	var id, off int64
	var part int32
	unknown := false
	switch {
	case c.err != nil:
		err = c.err
	case c.code != protocol.StatusOK:
		err = resultError(c.code, c.body)
		if isPartitionError(err) {
			p.forgetTopic(b.key.topic)
		}
		if sendCause(err) == protocol.CauseDuplicateSequence { // stored already
			for _, pm := range b.msgs {
				pm.res = storedUnknown(pm.msg, b.key.part)
			}
			unknown = true
			err = nil
		}
	default:
		var n int
		id, part, off, n, err = protocol.ParsePutResult(c.body)
		if err == nil && n != len(b.msgs) {
			err = fmt.Errorf("metaq: mput of %d messages acknowledged %d", len(b.msgs), n)
		}
	}
	for i, pm := range b.msgs {
		switch {
		case unknown:
		case err != nil:
			pm.err = err
		default:
			m := pm.msg
			m.ID, m.Partition, m.Offset = id+int64(i), part, off
			pm.res = SendResult{Topic: m.Topic, Partition: part, Offset: off, ID: m.ID}
			off += int64(message.HeaderSize + m.DataLen())
		}
		switch {
		case pm.cb != nil:
			p.cbs.push(pm.cb, pm.res, pm.err, p.end)
		case pm.direct != nil:
			p.end()
			pm.direct(pm.res, pm.err)
		default:
			close(pm.done)
			p.end()
		}
	}
}
