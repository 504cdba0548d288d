package client

import (
	"context"
	"errors"
	"iter"
	"slices"

	"github.com/metaq-go/metaq/sdk/message"
)

// errNotConsuming is returned by the consuming calls of a Client built
// without ConsumeTopics or ConsumePartitions.
var errNotConsuming = errors.New("metaq: this Client consumes nothing: build it with ConsumeTopics or ConsumePartitions")

// Consume hands every message of the Client's partitions to h until ctx
// is done, Close is called, or a partition fails for good (a
// *CorruptRecordError, a record over FetchMaxBytesLimit); then it stops
// fetching, commits (group members) and, in a group, releases its
// partitions. Messages of one partition are handled one at a time, in
// order; different partitions concurrently, so h must be safe for
// concurrent use. A message h fails on is retried (HandlerRetries), then
// given to the Reject policy. One Consume or Messages runs at a time.
func (c *Client) Consume(ctx context.Context, h Handler) error {
	if c.cfg.manualAck > 0 {
		return errManualAck
	}
	return c.consume(ctx, h)
}

// errManualAck is returned by Consume and Messages of a ManualAck Client.
var errManualAck = errors.New("metaq: a Client built with ManualAck consumes with ConsumeAcked")

func (c *Client) consume(ctx context.Context, h Handler) error {
	runs, err := c.startConsuming()
	if err != nil {
		return err
	}
	defer c.stopConsuming()
	if c.retrier != nil {
		if !c.retrier.dropping.Load() {
			if err := c.ensureRetryTopics(ctx); err != nil {
				if !c.retryDefault {
					return err
				}
				// The default policy: the group goes on as with Drop()
				// for this Client's life.
				c.cfg.logger.Warn("metaq: rejected messages will be dropped: the group's retry topics cannot be created "+
					"(create them, or choose a policy with Reject)", "group", c.cfg.group, "err", err)
				c.retrier.dropping.Store(true)
			}
		}
		if c.retrier.dropping.Load() {
			runs = slices.DeleteFunc(runs, func(r consumerRun) bool { return c.retryRuns[r] })
		}
		h = c.retrier.wrap(h)
	}
	// A ZooKeeper member registers once, with every topic it consumes.
	var joined []string
	for _, r := range runs {
		if cc, ok := r.(*clusterConsumer); ok {
			joined = append(joined, cc.topic)
		}
	}
	for _, r := range runs {
		if cc, ok := r.(*clusterConsumer); ok {
			cc.joinTopics = joined
		}
	}
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	errs := make(chan error, len(runs))
	for _, r := range runs {
		go func() {
			if d, ok := r.(*directConsumer); ok {
				go d.learnID(ctx)
			}
			err := r.Consume(ctx, h)
			if err != nil && ctx.Err() == nil {
				cancel() // one failed for good: stop the others
			}
			errs <- err
		}()
	}
	var first error
	for range runs {
		if err := <-errs; err != nil && first == nil && !errors.Is(err, context.Canceled) {
			first = err
		}
	}
	if first == nil {
		first = ctx.Err()
	}
	return first
}

func (c *Client) startConsuming() ([]consumerRun, error) {
	c.mu.Lock()
	defer c.mu.Unlock()
	switch {
	case c.closed:
		return nil, ErrClosed
	case len(c.cons) == 0:
		return nil, errNotConsuming
	case c.consuming:
		return nil, ErrAlreadyConsuming
	}
	c.consuming = true
	return slices.Clone(c.cons), nil
}

func (c *Client) stopConsuming() {
	c.mu.Lock()
	c.consuming = false
	c.mu.Unlock()
}

// Messages is Consume as an iterator: it yields each message, or an
// error that ends consumption. A message counts as handled (and its
// position may be committed) once the loop body has returned for it and
// the next one is asked for; breaking out of the loop stops consuming,
// and the message the body last received is not counted, so a group
// redelivers it.
//
//	for m, err := range cl.Messages(ctx) {
//		if err != nil { return err }
//		...
//	}
func (c *Client) Messages(ctx context.Context) iter.Seq2[*message.Message, error] {
	return func(yield func(*message.Message, error) bool) {
		if c.cfg.manualAck > 0 {
			yield(nil, errManualAck)
			return
		}
		if d := c.lone(); d != nil {
			// One broker and no group: its consumer's own iterator,
			// with no handoff per message.
			if _, err := c.startConsuming(); err != nil {
				yield(nil, err)
				return
			}
			defer c.stopConsuming()
			go d.learnID(ctx)
			for m, err := range d.brokerConsumer.Messages(ctx) {
				if err != nil && (errors.Is(err, context.Canceled) || ctx.Err() != nil && errors.Is(err, ctx.Err())) {
					return
				}
				if !yield(m, err) || err != nil {
					return
				}
			}
			return
		}
		ctx, cancel := context.WithCancel(ctx)
		defer cancel()
		type item struct {
			m    *message.Message
			done chan bool // true: handled
		}
		items := make(chan item)
		res := make(chan error, 1)
		go func() {
			res <- c.Consume(ctx, func(hctx context.Context, m *message.Message) error {
				done := make(chan bool, 1)
				select {
				case items <- item{m, done}:
				case <-hctx.Done():
					return hctx.Err()
				}
				select {
				case ok := <-done:
					if !ok {
						return context.Canceled
					}
					return nil
				case <-hctx.Done():
					return hctx.Err()
				}
			})
		}()
		for {
			select {
			case it := <-items:
				if !yield(it.m, nil) {
					it.done <- false
					cancel()
					<-res
					return
				}
				it.done <- true
			case err := <-res:
				if err != nil && !errors.Is(err, context.Canceled) && (ctx.Err() == nil || !errors.Is(err, ctx.Err())) {
					yield(nil, err)
				}
				return
			}
		}
	}
}

// Commit commits the positions of every partition this Client reads now
// (group members; others have nothing to commit). Positions are also
// committed every CommitInterval, on release and on Close.
func (c *Client) Commit(ctx context.Context) error {
	c.mu.Lock()
	runs := slices.Clone(c.cons)
	c.mu.Unlock()
	if len(runs) == 0 {
		return errNotConsuming
	}
	var errs []error
	for _, r := range runs {
		errs = append(errs, r.commit(ctx))
	}
	return errors.Join(errs...)
}

// Assigned returns the partitions this Client reads now, sorted by
// broker id and number. In direct mode the broker id is -1 until the
// broker has told it.
func (c *Client) Assigned() []message.Partition {
	c.mu.Lock()
	runs := slices.Clone(c.cons)
	c.mu.Unlock()
	var out []message.Partition
	for _, r := range runs {
		out = append(out, r.assigned()...)
	}
	slices.SortFunc(out, message.Partition.Compare)
	return out
}

// Position returns the next offset this Client reads from partition p
// of topic: past the last message handled and past every record a fetch
// skipped (filtered out by the broker, or before a start offset that fell
// inside a record). A reader that stops at a partition's end compares
// Position with the end, never the offset of the last message it saw,
// which may not be the last record. ok is false when the Client does not
// read that partition now (before Consume or Messages started, say). In
// direct mode, p.BrokerID -1 matches partition p.Partition of any broker
// (meant for a Client of one broker); in ZooKeeper mode p.BrokerID must
// be the broker's id, as Assigned reports it.
func (c *Client) Position(topic string, p message.Partition) (offset int64, ok bool) {
	c.mu.Lock()
	runs := slices.Clone(c.cons)
	c.mu.Unlock()
	for _, r := range runs {
		if off, ok := r.position(topic, p); ok {
			return off, true
		}
	}
	return 0, false
}

// learnID asks the broker its id (for Assigned), once; the brokerConsumer's
// offset store shares what it learned.
func (d *directConsumer) learnID(ctx context.Context) {
	d.mu.Lock()
	known := d.id >= 0
	d.mu.Unlock()
	if known {
		return
	}
	id, err := d.bid.get(ctx, d.cn)
	if err != nil {
		return
	}
	d.mu.Lock()
	d.id = id
	d.mu.Unlock()
}

// lone returns the Client's consumer when it is the only one and reads
// with no group membership (Messages can use its iterator), else nil.
func (c *Client) lone() *directConsumer {
	c.mu.Lock()
	defer c.mu.Unlock()
	if len(c.cons) != 1 {
		return nil
	}
	d, ok := c.cons[0].(*directConsumer)
	if !ok || d.groupMode() {
		return nil
	}
	return d
}

// DuplicatesDropped returns how many messages this Client did not hand to
// its handler (or Messages loop) because their id was in its
// MessageIDCache: redeliveries of messages it had handled already.
func (c *Client) DuplicatesDropped() int64 {
	if c.dedup == nil {
		return 0
	}
	return c.dedup.dropped.Load()
}
