package client

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"time"

	"github.com/metaq-go/metaq/internal/backoff"
	"github.com/metaq-go/metaq/sdk/message"
)

// orderedJob is one Produce of an Ordered Client, sent in call order.
type orderedJob struct {
	ctx     context.Context
	m       *message.Message
	promise func(SendResult, error)
}

// producer returns the Client's producer, making it on first use.
func (c *Client) producer() (*clusterProducer, *orderedProducer, error) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.closed {
		return nil, nil, ErrClosed
	}
	if c.prod != nil || c.prodErr != nil {
		return c.prod, c.ordered, c.prodErr
	}
	cfg := &c.cfg
	opts := append([]prodOption{producerOpt(func(pc *producerConfig) {
		pc.conn, pc.logger = cfg.conn, cfg.logger
		pc.idempotent = true // unless Idempotence(false), among prodOpts
	})}, cfg.prodOpts...)
	newCP := func(opts []prodOption) (*clusterProducer, error) {
		pc := newProducerConfig(opts)
		if pc.maxInFlight == 0 {
			pc.maxInFlight = DefaultMaxInFlight
			if pc.batch.enabled {
				pc.maxInFlight = max(DefaultMaxInFlight, 8*pc.batch.maxMessages)
			}
		}
		var src viewSource
		if c.zk != nil {
			src = zkSource{cl: c.zk}
		} else {
			src = newDirectSource(cfg.brokers, cfg.conn, pc.sendTimeout)
		}
		return newClusterProducer(pc, opts, src), nil
	}
	if !cfg.ordered {
		c.prod, c.prodErr = newCP(opts)
		if c.prodErr == nil && cfg.spool {
			sp, err := openSpooler(cfg.spoolDir, c.prod, cfg.logger)
			if err != nil {
				_ = c.prod.Close(context.Background())
				c.prod, c.prodErr = nil, err
				return nil, nil, err
			}
			c.spool = sp
		}
		return c.prod, nil, c.prodErr
	}
	oopts := append(slices.Clip(opts), withLocalStore(cfg.orderedDir))
	oopts = append(oopts, cfg.layouts...)
	op, err := newOrderedProducer(oopts, newCP)
	if err != nil {
		c.prodErr = err
		return nil, nil, err
	}
	c.prod, c.ordered = op.cp, op
	c.orderedQ = make(chan orderedJob, 1024)
	c.orderedWG.Add(1)
	go func() {
		defer c.orderedWG.Done()
		for j := range c.orderedQ {
			if j.m == nil { // Flush's marker
				j.promise(SendResult{}, nil)
				continue
			}
			res, err := op.Send(j.ctx, j.m)
			j.promise(res, err)
		}
	}()
	return c.prod, c.ordered, nil
}

// Produce sends m without waiting; promise (may be nil) runs exactly once
// with the outcome, on the Client's callback goroutine, in completion
// order, so it should be quick. ctx bounds the wait for room among the
// MaxBufferedMessages and the send itself (with ProduceTimeout). An error
// wrapping ErrTimeout or ErrConnectionLost leaves it unknown whether m was
// stored. With Spool, such a failure, or a full MaxBufferedMessages,
// writes m to the spool instead, and the result says Spooled. m must not
// be modified until promise runs.
func (c *Client) Produce(ctx context.Context, m *message.Message, promise func(SendResult, error)) {
	if promise == nil {
		promise = func(SendResult, error) {}
	}
	cp, op, err := c.producer()
	if err != nil {
		promise(SendResult{}, err)
		return
	}
	if op != nil {
		c.mu.Lock()
		closed := c.closed
		if !closed {
			// Under c.mu: Close closes the queue only after setting closed.
			select {
			case c.orderedQ <- orderedJob{ctx, m, promise}:
				c.mu.Unlock()
				return
			default:
			}
		}
		c.mu.Unlock()
		if closed {
			promise(SendResult{}, ErrClosed)
			return
		}
		// The queue is full: wait for room outside the lock.
		res, err := op.Send(ctx, m)
		promise(res, err)
		return
	}
	if sp := c.spool; sp != nil { // set with c.prod, under c.mu
		sp.produce(ctx, m, promise)
		return
	}
	cp.SendAsync(ctx, m, promise)
}

// SpoolBacklog returns how many messages wait in the Spool (those being
// resent included); after Close, how many it left on disk. 0 without
// Spool.
func (c *Client) SpoolBacklog() int {
	c.mu.Lock()
	sp := c.spool
	c.mu.Unlock()
	if sp == nil {
		return 0
	}
	return int(sp.backlog.Load())
}

// ProduceSync sends msgs and waits for every outcome. The results are in
// the order of msgs; if some failed, err joins their errors (each naming
// the message's index) and the failed messages' results are zero.
func (c *Client) ProduceSync(ctx context.Context, msgs ...*message.Message) ([]SendResult, error) {
	return ProduceSyncVia(ctx, c.Produce, msgs...)
}

// ProduceSyncVia is ProduceSync over produce, a function that sends like
// Client.Produce (a wrapper of it, such as otelmetaq.Producer.Produce).
func ProduceSyncVia(ctx context.Context, produce func(context.Context, *message.Message, func(SendResult, error)), msgs ...*message.Message) ([]SendResult, error) {
	res := make([]SendResult, len(msgs))
	errs := make([]error, len(msgs))
	done := make(chan struct{}, len(msgs))
	for i, m := range msgs {
		produce(ctx, m, func(r SendResult, err error) {
			res[i], errs[i] = r, err
			done <- struct{}{}
		})
	}
	for range msgs {
		<-done
	}
	var failed []error
	for i, err := range errs {
		if err != nil {
			failed = append(failed, fmt.Errorf("message %d: %w", i, err))
		}
	}
	return res, errors.Join(failed...)
}

// Flush sends every batched message now and waits until every message
// produced before the call has its outcome, or ctx is done. With Spool
// a spooled message's outcome is its write to the spool: Flush does not
// wait for the spool to drain (see SpoolBacklog).
func (c *Client) Flush(ctx context.Context) error {
	c.mu.Lock()
	cp, op, sp := c.prod, c.ordered, c.spool
	c.mu.Unlock()
	if cp == nil {
		return nil
	}
	if op != nil {
		// The ordered queue is FIFO: a marker job completes after every
		// earlier one.
		done := make(chan struct{})
		marker := orderedJob{ctx: ctx, promise: func(SendResult, error) { close(done) }}
		for queued := false; !queued; {
			c.mu.Lock()
			if c.closed {
				c.mu.Unlock()
				return ErrClosed
			}
			select {
			case c.orderedQ <- marker:
				queued = true
			default:
			}
			c.mu.Unlock()
			if !queued && backoff.Sleep(ctx, time.Millisecond) != nil {
				return ctx.Err()
			}
		}
		select {
		case <-done:
		case <-ctx.Done():
			return ctx.Err()
		}
		return nil
	}
	if err := cp.Flush(ctx); err != nil || sp == nil {
		return err
	}
	// Every earlier send has completed, so its failure, if spooled, is
	// handed to the spool: wait for those writes.
	return sp.flush(ctx)
}
