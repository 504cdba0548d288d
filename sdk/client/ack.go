package client

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"time"

	"github.com/metaq-go/metaq/internal/backoff"
	"github.com/metaq-go/metaq/sdk/message"
)

// Acknowledged consumption (MetaQ's autoAck = false, issue 28): with
// ManualAck a group member's positions move only when the application
// acks. Each partition keeps its delivered messages in offset order; its
// position (what is committed) is the start of the first one neither
// acked nor nacked, or the end of what was read when there is none.

// DefaultMaxUnacked is ManualAck's bound on the messages of one
// partition delivered past its position.
const DefaultMaxUnacked = 1024

// ErrDeliveryStale is returned by Delivery.Ack and Delivery.Nack when the
// message will be delivered again: Rollback (or an ordered group's Nack of
// an earlier message) rewound its partition past it, the partition went
// to another member, or consumption stopped. Its position was not
// committed past it.
var ErrDeliveryStale = errors.New("metaq: the delivery is stale: its partition was rewound or released, and the message will be delivered again")

// ErrNacked is the error a nacked message carries to the Reject policy
// (HeaderLastError of the retry and dead-letter topics).
var ErrNacked = errors.New("metaq: nacked by the application")

// ManualAck makes a ConsumerGroup member's positions move only when the
// application acks (MetaQ's setAutoAck(false)): consume with
// ConsumeAcked, whose handler gets each message as a *Delivery to Ack or
// Nack, then or later, from any goroutine. A partition's committed
// position is the start of its first message neither acked nor nacked;
// Client.Rollback redelivers the unacked ones; a partition that goes to
// another member is redelivered there from that position (a message
// acked after an unsettled one is then delivered again: only an ack the
// position has passed is final). At most maxUnacked messages of a
// partition are delivered past its position, unsettled or acked after an
// unsettled one (0: DefaultMaxUnacked): the partition waits for acks
// before it hands out more. Needs ConsumerGroup.
func ManualAck(maxUnacked int) Opt {
	return consumerOption("ManualAck", func(c *config) {
		c.groupOnly = append(c.groupOnly, "ManualAck")
		if maxUnacked < 0 {
			c.errorf("ManualAck needs maxUnacked >= 0")
		}
		if maxUnacked == 0 {
			maxUnacked = DefaultMaxUnacked
		}
		c.manualAck = maxUnacked
		c.cOpts = append(c.cOpts, consumerOpt(func(cc *consumerConfig) { cc.maxUnacked = maxUnacked }))
	})
}

// AckHandler processes one message of a ManualAck Client (ConsumeAcked).
// Returning nil leaves the message waiting for d.Ack or d.Nack; returning
// an error (without having acked) retries it as Consume's handler errors
// are (HandlerRetries, then the Reject policy, which settles it). An error
// returned after d.Ack or d.Nack (or once the delivery is stale, or a
// Rollback will deliver it again) is logged and ends the delivery: the
// handler is not run again for it and the Reject policy does not get it.
type AckHandler func(ctx context.Context, d *Delivery) error

// Delivery is one delivered message of a ManualAck Client.
type Delivery struct {
	// Message is the message, as Consume's handler would see it.
	Message *message.Message

	c       *brokerConsumer
	a       *ackState // nil: a message replayed from RecoverLocally's store
	e       *ackEntry
	fetched *message.Message // as fetched (a retry topic's message)
	rej     rejecter         // the run's reject function
}

type deliveryKey struct{}

// Ack settles the message: the partition's position may move past it
// (once every earlier message is settled too). It returns
// ErrDeliveryStale when the message will be delivered again instead, and
// an error when it was nacked; a second Ack returns nil.
func (d *Delivery) Ack() error {
	if d.a == nil {
		return nil // replayed: settled when the handler returns nil
	}
	if err := d.a.settle(d.e); err != nil {
		return err
	}
	d.c.cfg.dedup.handled(d.c.topic, d.fetched.ID)
	return nil
}

// Nack sends the message back through the group's retry path, to be
// delivered again after delay: with RetryTopics, to the group's retry
// topic with that delay (it counts as a delivery: on the last one it goes
// to the dead-letter topic); with RetryInPlace (ordered groups) the
// partition is rewound to it after delay, so it and every later message
// not acked yet come again in order; other policies get it as a rejected
// message (ErrNacked). Either way the message is settled by the Nack: a
// later Ack or Nack of it returns an error. It returns ErrDeliveryStale,
// having sent nothing, when the message will be delivered again anyway
// (Rollback or a release came first); an error when it was settled
// already; and the error of the retry path when that could not take it
// (it stays unsettled: Nack again, or Rollback). A Rollback or a release
// that comes while the Nack sends the message waits for it: sent, the
// message is settled and not delivered again from its partition.
func (d *Delivery) Nack(ctx context.Context, delay time.Duration) error {
	if delay < 0 {
		return errors.New("metaq: Nack needs delay >= 0")
	}
	if d.a == nil {
		return errors.New("metaq: Nack of a message replayed from the recovery store: return an error from the handler instead")
	}
	c := d.c
	if c.inPlaceMax > 0 {
		return d.a.rewindAt(d.e, delay)
	}
	if err := d.a.beginNack(d.e); err != nil {
		return err
	}
	var err error
	if r, ok := c.cfg.reject.(*retrier); ok {
		err = r.rejectAfter(ctx, d.fetched, ErrNacked, delay)
	} else {
		err = d.rej(ctx, d.fetched, ErrNacked)
	}
	d.a.endNack(d.e, err == nil)
	return err
}

// ConsumeAcked is Consume for a Client built with ManualAck: h gets each
// message as a *Delivery, and positions move only past messages acked
// or nacked (see ManualAck). Messages of one partition are handed to h one
// at a time, in order; h may return before acking. Consume and Messages
// refuse a ManualAck Client.
func (c *Client) ConsumeAcked(ctx context.Context, h AckHandler) error {
	if c.cfg.manualAck == 0 {
		return errors.New("metaq: ConsumeAcked needs a Client built with ManualAck")
	}
	if h == nil {
		return errors.New("metaq: ConsumeAcked needs a handler")
	}
	return c.consume(ctx, func(ctx context.Context, m *message.Message) error {
		d, _ := ctx.Value(deliveryKey{}).(*Delivery)
		if d == nil {
			d = &Delivery{Message: m}
		} else {
			d.Message = m
		}
		return h(ctx, d)
	})
}

// Rollback makes every partition of a ManualAck Client deliver again,
// in order, its messages not acked or nacked yet (those acked after the
// first of them are not delivered again). Their Deliveries turn stale.
// It returns at once; the partitions rewind as their handlers finish
// the message at hand.
func (c *Client) Rollback() error {
	if c.cfg.manualAck == 0 {
		return errors.New("metaq: Rollback needs a Client built with ManualAck")
	}
	c.mu.Lock()
	runs := c.cons
	c.mu.Unlock()
	for _, r := range runs {
		r.rollback()
	}
	return nil
}

// rollback rewinds every partition of c to its first unsettled message.
func (c *brokerConsumer) rollback() {
	c.mu.Lock()
	parts := c.parts
	c.mu.Unlock()
	for _, ps := range parts {
		if ps.acks != nil {
			ps.acks.rollback()
		}
	}
}

func (d *directConsumer) rollback() { d.brokerConsumer.rollback() }

func (cc *clusterConsumer) rollback() {
	cc.mu.Lock()
	cs := make([]*brokerConsumer, 0, len(cc.consumers))
	for c := range cc.consumers {
		cs = append(cs, c)
	}
	cc.mu.Unlock()
	for _, c := range cs {
		c.rollback()
	}
}

// ackEntry is one delivered message of a partition.
type ackEntry struct {
	off, end, id int64
	settled      bool // acked or nacked: the position may pass it
	nacked       bool // nacked (settled, or an ordered group's rewind to it asked for)
	nacking      bool // a Nack (or the Reject policy) is sending it to the retry path
	stale        bool // rewound or released: will be delivered again
}

var (
	errNackedAlready  = errors.New("metaq: the message was nacked already")
	errSettledAlready = errors.New("metaq: the message was acked or nacked already")
)

// ackState tracks a ManualAck partition's delivered messages.
type ackState struct {
	ps  *partState
	max int

	mu     sync.Mutex
	q      []*ackEntry // delivered, in offset order; q[0] unsettled
	read   int64       // the offset after everything delivered or skipped
	done   map[int64]bool
	rewind int64 // offset to rewind to; -1: none
	delay  time.Duration
	closed bool
	// wake is signalled when an entry settles or a rewind is asked for.
	wake chan struct{}
	// nackDone is broadcast when a Nack's send ends (a rewind or a
	// release waits for those of the entries it would make stale).
	nackDone *sync.Cond
}

func newAckState(ps *partState, max int) *ackState {
	a := &ackState{ps: ps, max: max, read: ps.pos.Load(), rewind: -1, wake: make(chan struct{}, 1)}
	a.nackDone = sync.NewCond(&a.mu)
	return a
}

func (a *ackState) signal() {
	select {
	case a.wake <- struct{}{}:
	default:
	}
}

// advance drops the settled head and publishes the position (a.mu held):
// lastID before pos, as commit reads them.
func (a *ackState) advance() {
	i := 0
	for i < len(a.q) && a.q[i].settled {
		a.ps.lastID.Store(a.q[i].id)
		i++
	}
	if i > 0 {
		clear(a.q[:i])
		a.q = a.q[i:]
	}
	if len(a.q) > 0 {
		a.ps.pos.Store(a.q[0].off)
	} else {
		a.ps.pos.Store(a.read)
	}
}

// settle marks e acked: an error when it is stale or was nacked, nil when
// it was acked already.
func (a *ackState) settle(e *ackEntry) error {
	a.mu.Lock()
	defer a.mu.Unlock()
	switch {
	case e.stale:
		return ErrDeliveryStale
	case e.nacked || e.nacking:
		return errNackedAlready
	case e.settled:
		return nil
	}
	e.settled = true
	a.advance()
	a.signal()
	return nil
}

// beginNack claims e for sending it to the retry path (a Nack, or the
// Reject policy after the handler failed): it fails when e is settled or
// nacked already, and with ErrDeliveryStale when e will be delivered again
// (stale, released, or a rewind to it or before it asked for), so that
// nothing is sent then. Until endNack nothing else settles e, and a rewind
// or a release waits (it would deliver e again besides the copy sent).
func (a *ackState) beginNack(e *ackEntry) error {
	a.mu.Lock()
	defer a.mu.Unlock()
	if err := a.ended(e); err != nil {
		return err
	}
	e.nacking = true
	return nil
}

// ended says (a.mu held) why the delivery of e ended, nil while it has
// not: ErrDeliveryStale when e will be delivered again (stale, released,
// or a rewind to it or before it asked for), else whether it was nacked
// (or is being nacked) or settled.
func (a *ackState) ended(e *ackEntry) error {
	switch {
	case e.stale || a.closed || (a.rewind >= 0 && e.off >= a.rewind):
		return ErrDeliveryStale
	case e.nacked || e.nacking:
		return errNackedAlready
	case e.settled:
		return errSettledAlready
	}
	return nil
}

// endNack ends beginNack's claim: sent, e is settled (nacked); else it
// stays unsettled.
func (a *ackState) endNack(e *ackEntry, sent bool) {
	a.mu.Lock()
	defer a.mu.Unlock()
	e.nacking = false
	if sent {
		e.settled, e.nacked = true, true
		a.advance()
		a.signal()
	}
	a.nackDone.Broadcast()
}

// waitNacks waits (a.mu held) until no entry from off on is being sent
// by a Nack.
func (a *ackState) waitNacks(off int64) {
	for {
		busy := false
		for _, e := range a.q {
			if e.nacking && e.off >= off {
				busy = true
				break
			}
		}
		if !busy {
			return
		}
		a.nackDone.Wait()
	}
}

// over reports whether the delivery of e ended: settled, nacked (or being
// nacked), stale, or to be delivered again by a pending rewind.
func (a *ackState) over(e *ackEntry) bool {
	a.mu.Lock()
	defer a.mu.Unlock()
	return a.ended(e) != nil
}

// add registers the message at off..end about to be delivered, waiting
// while max messages are unsettled. It returns nil when ctx ended or a
// rewind is pending, and an entry already settled for a message acked
// before a rewind (not to be delivered again).
func (a *ackState) add(ctx context.Context, off, end, id int64) *ackEntry {
	a.mu.Lock()
	defer a.mu.Unlock()
	for len(a.q) >= a.max && a.rewind < 0 {
		a.mu.Unlock()
		select {
		case <-ctx.Done():
		case <-a.wake:
		}
		a.mu.Lock()
		if ctx.Err() != nil {
			return nil
		}
	}
	if a.rewind >= 0 {
		return nil
	}
	e := &ackEntry{off: off, end: end, id: id}
	a.read = end
	if a.done[off] {
		delete(a.done, off)
		e.settled = true
		if len(a.q) == 0 {
			a.ps.lastID.Store(id)
		}
		a.advance()
		return e
	}
	a.q = append(a.q, e)
	a.advance()
	return e
}

// readTo notes that everything before next was read (records a fetch
// skipped past its last message).
func (a *ackState) readTo(next int64) {
	a.mu.Lock()
	if a.rewind < 0 && next > a.read {
		a.read = next
		a.advance()
	}
	a.mu.Unlock()
}

func (a *ackState) pending() bool {
	a.mu.Lock()
	defer a.mu.Unlock()
	return a.rewind >= 0
}

// rollback asks for a rewind to the first unsettled message.
func (a *ackState) rollback() {
	a.mu.Lock()
	if len(a.q) > 0 && !a.closed {
		a.askRewind(a.q[0].off, 0)
	}
	a.mu.Unlock()
}

// rewindAt asks for a rewind to e after delay (an ordered group's Nack):
// e is nacked, not settled (the position stays before it), and delivered
// again by the rewind.
func (a *ackState) rewindAt(e *ackEntry, delay time.Duration) error {
	a.mu.Lock()
	defer a.mu.Unlock()
	switch {
	case e.stale || a.closed:
		return ErrDeliveryStale
	case e.nacked || e.nacking:
		return errNackedAlready
	case e.settled:
		return errSettledAlready
	}
	e.nacked = true
	a.askRewind(e.off, delay)
	return nil
}

func (a *ackState) askRewind(off int64, delay time.Duration) {
	if a.rewind < 0 || off < a.rewind {
		a.rewind = off
	}
	a.delay = max(a.delay, delay)
	a.signal()
}

// takeRewind performs the pending rewind: the messages from its offset on
// turn stale (those settled are remembered, not to be delivered again),
// and it returns where fetching starts again and after what pause. It
// first waits for the Nacks sending those messages.
func (a *ackState) takeRewind() (int64, time.Duration) {
	a.mu.Lock()
	defer a.mu.Unlock()
	a.waitNacks(a.rewind)
	// Not before the position: the head may have been settled (acked, or
	// nacked by the Nacks waited for) since the rewind was asked for.
	off, delay := max(a.rewind, a.ps.pos.Load()), a.delay
	a.rewind, a.delay = -1, 0
	keep := a.q[:0:0]
	for _, e := range a.q {
		switch {
		case e.off < off:
			keep = append(keep, e)
		case e.settled:
			if a.done == nil {
				a.done = map[int64]bool{}
			}
			a.done[e.off] = true
		default:
			e.stale = true
		}
	}
	a.q = keep
	a.read = off
	a.advance()
	return off, delay
}

// close makes every unsettled delivery stale: the partition stopped. It
// first waits for the Nacks being sent (settled, the position passes
// them before the final commit).
func (a *ackState) close() {
	a.mu.Lock()
	defer a.mu.Unlock()
	a.closed = true
	a.waitNacks(0)
	for _, e := range a.q {
		e.stale = true
	}
}

// runAckPartition is runPartition for a ManualAck consumer: one goroutine
// (in wg) fetches (in another) and delivers, rewinding when asked to.
func (c *brokerConsumer) runAckPartition(rctx context.Context, ps *partState, h Handler,
	rej rejecter, errCh chan<- error, wg *sync.WaitGroup) {
	a := ps.acks
	wg.Go(func() {
		defer a.close()
		from := ps.pos.Load()
		for {
			fctx, fcancel := context.WithCancel(rctx)
			ch := make(chan *fetched, 1)
			fdone := make(chan struct{})
			go func() {
				defer close(fdone)
				defer close(ch)
				c.fetchLoopFrom(fctx, ps, from, func(f *fetched) bool {
					select {
					case ch <- f:
						return true
					case <-fctx.Done():
						return false
					}
				})
			}()
			rewind, err := c.deliverAcked(rctx, ps, ch, h, rej)
			fcancel()
			<-fdone
			if err != nil {
				select {
				case errCh <- err:
				default:
				}
				return
			}
			if !rewind {
				return
			}
			off, delay := a.takeRewind()
			if delay > 0 && backoff.Sleep(rctx, delay) != nil {
				return
			}
			from = off
		}
	})
}

// deliverAcked hands the fetched messages of ps to h until ctx ends (false),
// a rewind is asked for (true) or the partition fails (its error).
func (c *brokerConsumer) deliverAcked(ctx context.Context, ps *partState, ch <-chan *fetched, h Handler,
	rej rejecter) (bool, error) {
	a := ps.acks
	for {
		var f *fetched
		select {
		case <-ctx.Done():
			return false, nil
		case <-a.wake:
			if a.pending() {
				return true, nil
			}
			continue
		case f = <-ch:
		}
		if f == nil {
			return false, nil
		}
		if f.err != nil {
			return false, f.err
		}
		for i := range f.msgs {
			m := &f.msgs[i]
			e := a.add(ctx, m.Offset, f.ends[i], m.ID)
			if e == nil {
				return ctx.Err() == nil, nil
			}
			if e.settled {
				continue // acked before a rollback
			}
			if c.cfg.dedup.drop(c.topic, m.ID) {
				_ = a.settle(e)
				continue
			}
			d := &Delivery{Message: m, c: c, a: a, e: e, fetched: m, rej: rej}
			hctx := context.WithValue(ctx, deliveryKey{}, d)
			// An error returned once the delivery is over (acked, nacked,
			// stale, or to be rewound) ends it: no retry, no reject.
			eh := func(ctx context.Context, m *message.Message) error {
				err := h(ctx, m)
				if err != nil && ctx.Err() == nil && a.over(e) {
					c.cfg.logger.Warn("metaq: handler error after the delivery was settled; not retried", "topic", m.Topic,
						"partition", m.Partition, "offset", m.Offset, "id", m.ID, "err", err)
					return nil
				}
				return err
			}
			// The Reject policy has the message only while nothing else
			// settled it (an Ack or Nack from another goroutine).
			erej := func(ctx context.Context, m *message.Message, herr error) error {
				if a.beginNack(e) != nil {
					return nil
				}
				err := rej(ctx, m, herr)
				a.endNack(e, err == nil)
				return err
			}
			if !c.handle(hctx, m, eh, erej) {
				return false, nil
			}
			if a.pending() {
				return true, nil
			}
		}
		a.readTo(f.next)
	}
}

// rejectAfter is reject with the redelivery after delay (Delivery.Nack)
// instead of the backoff schedule's.
func (r *retrier) rejectAfter(ctx context.Context, fetched *message.Message, herr error, delay time.Duration) error {
	if r.dropping.Load() {
		return r.reject(ctx, fetched, herr)
	}
	v := *fetched
	m := &v
	r.view(m)
	out, at, dead := r.nextAfter(m, herr, r.now(), delay)
	if err := r.send.sendAt(ctx, out, at); err != nil {
		return fmt.Errorf("metaq: sending a nacked message to %s: %w", out.Topic, err)
	}
	if dead {
		r.logger.Warn("metaq: message nacked on its last delivery; sent to the dead-letter topic", "topic", m.Topic,
			"partition", m.Partition, "offset", m.Offset, "id", m.ID, "deliveries", deliveries(m), "dlq", r.dlqTopic)
	}
	return nil
}
