package client

import (
	"crypto/rand"
	"encoding/binary"
	"errors"
	"fmt"
	"math"
	"sync"

	"github.com/metaq-go/metaq/sdk/message"
	"github.com/metaq-go/metaq/sdk/protocol"
)

// The idempotent producer, the SDK's side (docs/protocol.md, "Idempotent
// producer"; docs/sdk.md). A brokerProducer keeps per (topic, partition)
// a producer id, drawn at random when it first sends there, and the next
// sequence. A message is bound to its (producer id, sequence) when its
// put or mput frame is written to the connection, under the wire's lock,
// so sequences go out in the order the broker receives them; a retry of
// it keeps the binding (its ProducerID is set), so the broker stores it
// once. A broker that refuses a sequence as out of order (a gap: an
// earlier message was never stored) makes the partition start over with
// a new producer id, and the refused message is bound again, when it was
// sent for the first time or lies past a sequence bound again so
// (pastHole); a retry otherwise is resent with its binding (retryOutcome). So does a
// refusal as of an unknown producer (the broker forgot it) of a message
// sent for the first time under its binding; for a retry (an earlier
// attempt's outcome unknown) it fails the send with ErrOutcomeUnknown.

// idemReserve is what binding may add to a message's data: a properties
// block's length, version and fields (6) when it had none, and two
// uvarints of up to 9 bytes.
const idemReserve = 6 + 9 + 9

// seqState is one partition's producer id and next sequence.
type seqState struct {
	pid  int64
	next int64
}

// newProducerID draws a random producer id in 2^56..2^63-1: 62 random
// bits, and always 9 bytes as a uvarint, so that a message's size does
// not depend on the draw.
func newProducerID() int64 {
	var b [8]byte
	_, _ = rand.Read(b[:]) // crypto/rand.Read never fails (Go 1.24+)
	return int64(binary.BigEndian.Uint64(b[:])&math.MaxInt64 | 1<<62)
}

// withIdempotence turns the idempotent producer on or off: on for a
// Client unless Idempotence(false); off for a bare brokerProducer.
func withIdempotence(on bool) prodOption {
	return producerOpt(func(c *producerConfig) { c.idempotent = on })
}

// bind gives m its producer id and sequence in partition part (and sets
// m.Partition, which the broker's answer sets again), unless it has them
// for part (a retry). Without idempotence it clears them: a message
// carries no producer of another session.
func (p *brokerProducer) bind(m *message.Message, part int32) {
	if !p.cfg.idempotent {
		m.ProducerID, m.ProducerSeq = 0, 0
		return
	}
	if m.ProducerID != 0 && m.Partition == part {
		return // a retry keeps its binding
	}
	p.smu.Lock()
	key := tpKey{m.Topic, part}
	seqs := p.seqMap(m)
	st := (*seqs)[key]
	if st == nil {
		if *seqs == nil {
			*seqs = make(map[tpKey]*seqState)
		}
		st = &seqState{pid: newProducerID()}
		(*seqs)[key] = st
	}
	m.ProducerID, m.ProducerSeq, m.Partition = st.pid, st.next, part
	st.next++
	p.smu.Unlock()
}

// renew handles a broker's renewable refusal of m in partition part:
// the partition starts over with a new producer id (unless another
// refusal renewed it since m was bound), and m is unbound, to be bound
// again when it is resent.
func (p *brokerProducer) renew(m *message.Message, part int32) {
	p.smu.Lock()
	if st := (*p.seqMap(m))[tpKey{m.Topic, part}]; st != nil && st.pid == m.ProducerID {
		st.pid, st.next = newProducerID(), 0
	}
	p.smu.Unlock()
	if m.ProducerID != 0 {
		p.holes.add(m.ProducerID, m.ProducerSeq)
	}
	m.ProducerID, m.ProducerSeq = 0, 0
}

// idemHoles holds, per producer id given up (renew), the lowest sequence
// that was bound again under a new id (pastHole). A clusterProducer's
// brokerProducers share one: a retry follows its partition to another
// address (a failover promotes a slave, a broker moves), and it must find
// there the holes recorded where its producer's other messages were
// refused (else it waits out its grace and fails unstored). Producer ids
// are drawn per partition at random, so the id alone is the key.
type idemHoles struct {
	mu sync.Mutex
	m  map[int64]int64
}

// maxHoles bounds idemHoles.
const maxHoles = 4096

// add records that sequence seq of producer id is bound again under a new
// id: it is never stored under id.
func (h *idemHoles) add(id, seq int64) {
	h.mu.Lock()
	defer h.mu.Unlock()
	if h.m == nil || len(h.m) >= maxHoles {
		h.m = make(map[int64]int64) // forgetting only makes retries wait (pastHole)
	}
	if old, ok := h.m[id]; !ok || seq < old {
		h.m[id] = seq
	}
}

// past reports whether seq of producer id lies past a hole of id.
func (h *idemHoles) past(id, seq int64) bool {
	h.mu.Lock()
	defer h.mu.Unlock()
	hole, ok := h.m[id]
	return ok && seq > hole
}

// withHoles makes a brokerProducer record and read its holes in h: a
// clusterProducer's, shared by its brokers.
func withHoles(h *idemHoles) prodOption {
	return producerOpt(func(c *producerConfig) { c.holes = h })
}

// pastHole reports whether m (bound) lies past a sequence of its producer
// id that was bound again under a new id (renew): the broker stores a
// producer's sequences only in order, so that sequence is never stored
// under this id, and neither is m, by any copy, later or earlier. A retry
// of m refused as out of order is then bound again safely; before such a
// hole it is not (retryOutcome).
func (p *brokerProducer) pastHole(m *message.Message) bool {
	return p.holes.past(m.ProducerID, m.ProducerSeq)
}

// seqMap is where m's producer and sequences are kept: a delayed
// message's apart from the plain ones' (docs/delayed.md): the broker
// holds it in its timer log, not in the partition, and judges it by a
// table of the partition's delayed puts, and its delivery later must not
// look like a plain put of the partition's producer.
func (p *brokerProducer) seqMap(m *message.Message) *map[tpKey]*seqState {
	if m.Delayed() {
		return &p.dseqs
	}
	return &p.seqs
}

// unbind clears what a caller (or an earlier send of m) set: a send binds
// m afresh.
func unbind(m *message.Message) {
	if m != nil {
		m.ProducerID, m.ProducerSeq = 0, 0
	}
}

// putEncoder returns the encoder of m's put to partition part: it binds m
// first. crc is m's checksum computed by the caller, used when binding
// cannot change the data (idempotence off).
func (p *brokerProducer) putEncoder(m *message.Message, part int32, crc int64) func(dst []byte, op int32) []byte {
	return func(dst []byte, op int32) []byte {
		if p.cfg.idempotent {
			p.bind(m, part)
			crc = int64(dataChecksum(m))
		}
		dst = protocol.AppendPutHeader(dst, m.Topic, part, m.DataLen(), m.Flag(), crc, op)
		return m.AppendData(dst)
	}
}

// renewable reports whether err is a broker's refusal of an idempotent
// put after which the message is bound again under a new producer id and
// resent: out of order, or unknown producer for a first attempt (put
// turns a retry's into ErrOutcomeUnknown).
func renewable(err error) bool {
	if err == nil || errors.Is(err, ErrOutcomeUnknown) {
		return false
	}
	c := sendCause(err)
	return c == protocol.CauseOutOfOrderSequence || c == protocol.CauseUnknownProducer
}

// retryOutcome turns a broker's unknown-producer refusal of a retry (m's
// binding kept from an earlier attempt whose outcome is unknown) into
// ErrOutcomeUnknown.
//
// A refusal as out of order says that this copy was not stored, not that
// an earlier one will not be: a copy sent on a connection that was lost
// may still be in the broker's socket buffer, read after the retry (the
// gap the retry met is that connection's earlier messages, which land
// then). Bound again, the retry stored such a message twice, the second
// copy at sequence 0 of the new id (TestIdempotentDroppedReplies, about 1
// run in 10 under -race on a loaded machine). So a retry refused as out
// of order is ErrOutcomeUnknown too (resent with its binding for a while,
// then failed: clusterProducer.sendWith's grace, which runs from the last
// retry of its producer stored, idemProgress), unless past is set: it lies
// past a hole of its producer (pastHole), where no copy of it is ever
// stored, and is bound again.
func retryOutcome(err error, retry, past bool) error {
	if !retry {
		return err
	}
	switch sendCause(err) {
	case protocol.CauseUnknownProducer:
		return fmt.Errorf("%w (the broker forgot the idempotent producer before this retry): %w", ErrOutcomeUnknown, err)
	case protocol.CauseOutOfOrderSequence:
		if !past {
			return fmt.Errorf("%w (an earlier copy of this retry, or an earlier message of its producer, has not reached the broker yet): %w", ErrOutcomeUnknown, err)
		}
	}
	return err
}

// kept reports whether a put of m to partition part keeps m's binding
// from an earlier attempt (bind): a retry.
func (p *brokerProducer) kept(m *message.Message, part int32) bool {
	return p.cfg.idempotent && m.ProducerID != 0 && m.Partition == part
}

// sendCause returns the cause of a broker's refusal ("" for none).
func sendCause(err error) string {
	var be *BrokerError
	if errors.As(err, &be) {
		return be.Cause
	}
	return ""
}

// storedUnknown is the result of a put the broker found stored already,
// by a put whose offsets it no longer holds (cause duplicate sequence).
func storedUnknown(m *message.Message, part int32) SendResult {
	m.ID, m.Partition, m.Offset = -1, part, -1
	return SendResult{Topic: m.Topic, Partition: part, Offset: -1, ID: -1, OffsetUnknown: true}
}
