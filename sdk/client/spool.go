package client

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"os"
	"path/filepath"
	"sync"
	"sync/atomic"
	"time"

	"github.com/metaq-go/metaq/internal/backoff"
	"github.com/metaq-go/metaq/sdk/message"
)

// Spool (reference §14): MetaQ's async producer writes the messages it
// could not send, and those over its window, to a local storage and
// resends them later. Here the storage is one recoverStore journal (the
// store of RecoverLocally and Ordered) in the spool directory.
const (
	// spoolWriteBatch caps the messages written with one fsync.
	spoolWriteBatch = 256
	// spoolRound caps the messages one resend round takes from the spool;
	// the acknowledged ones are removed together, with one fsync.
	spoolRound = 256
	// spoolResenders is how many resends of a round run at once, at most
	// half of MaxBufferedMessages: Produce keeps room.
	spoolResenders = 32
	// spoolLogEvery: a message the brokers keep refusing is logged at its
	// first failure and every spoolLogEvery-th after.
	spoolLogEvery = 30
)

// spoolPoll is the backoff between resend rounds that failed.
var spoolPoll = backoff.Policy{Min: 100 * time.Millisecond, Max: 5 * time.Second, Jitter: redialJitter}

// defaultSpoolDir returns ~/.metaq_async_storage (MetaQ:
// ~/.meta_async_storage, whose files a Java client would not read), or a
// directory under os.TempDir() when there is no home directory.
func defaultSpoolDir() string {
	if h, err := os.UserHomeDir(); err == nil && h != "" {
		return filepath.Join(h, ".metaq_async_storage")
	}
	return filepath.Join(os.TempDir(), ".metaq_async_storage")
}

// spoolDirs are the spool directories in use in this process.
var spoolDirs = struct {
	sync.Mutex
	m map[string]bool
}{m: make(map[string]bool)}

// spoolReq is one message to write to the spool, or Flush's marker (m
// nil).
type spoolReq struct {
	m       *message.Message
	promise func(SendResult, error)
	cause   error // why it was not sent
}

// spooler is a Client's Spool: it writes the messages its clusterProducer
// could not send (or had no room for) to the spool, fsynced, completes
// their promises as spooled, and resends them in the background, removing
// each once a broker acknowledged it.
type spooler struct {
	cp     *clusterProducer
	store  *recoverStore
	logger *slog.Logger
	dir    string

	// backlog mirrors the store's count: it is read on every successful
	// send.
	backlog atomic.Int64
	// refusals counts resends a broker refused, for the log.
	refusals atomic.Int64

	q          chan spoolReq
	writerDone chan struct{}
	newMsgs    chan struct{} // the writer wrote messages
	up         chan struct{} // a send succeeded: a broker is back

	mu     sync.Mutex
	closed bool           // no more requests
	enq    sync.WaitGroup // requests being handed to the writer

	stop         chan struct{} // the resender starts no more sends
	resendCtx    context.Context
	cancelResend context.CancelFunc
	resenderDone chan struct{}
	stopOnce     sync.Once
	stopErr      error
	closeOnce    sync.Once
}

// openSpooler opens the spool in dir ("" for defaultSpoolDir()) for cp
// and starts resending what it holds.
func openSpooler(dir string, cp *clusterProducer, logger *slog.Logger) (*spooler, error) {
	if dir == "" {
		dir = defaultSpoolDir()
	}
	abs, err := filepath.Abs(dir)
	if err != nil {
		return nil, fmt.Errorf("metaq: spool %s: %w", dir, err)
	}
	spoolDirs.Lock()
	if spoolDirs.m[abs] {
		spoolDirs.Unlock()
		return nil, fmt.Errorf("metaq: spool %s is in use by another Client of this process", abs)
	}
	spoolDirs.m[abs] = true
	spoolDirs.Unlock()
	if err := os.MkdirAll(abs, 0o700); err != nil {
		releaseSpoolDir(abs)
		return nil, fmt.Errorf("metaq: spool %s: %w", abs, err)
	}
	st, err := acquireRecoverStore(abs, logger)
	if err != nil {
		releaseSpoolDir(abs)
		return nil, fmt.Errorf("metaq: spool: %w", err)
	}
	rctx, cancel := context.WithCancel(context.Background())
	sp := &spooler{cp: cp, store: st, logger: logger, dir: abs,
		q: make(chan spoolReq, max(cp.cfg.maxInFlight, 1)), writerDone: make(chan struct{}),
		newMsgs: make(chan struct{}, 1), up: make(chan struct{}, 1),
		stop: make(chan struct{}), resendCtx: rctx, cancelResend: cancel, resenderDone: make(chan struct{})}
	if n := st.count(); n > 0 {
		sp.backlog.Store(int64(n))
		logger.Info("metaq: spool holds messages of an earlier run; resending them", "dir", abs, "messages", n)
	}
	go sp.write()
	go sp.resend()
	return sp, nil
}

func releaseSpoolDir(abs string) {
	spoolDirs.Lock()
	delete(spoolDirs.m, abs)
	spoolDirs.Unlock()
}

// signal wakes whoever waits on c, if nobody did yet.
func signal(c chan struct{}) {
	select {
	case c <- struct{}{}:
	default:
	}
}

// produce sends m like clusterProducer.SendAsync, but writes it to the
// spool instead when the send fails in a way a later resend may fix
// (spoolable), or when no in-flight slot is free.
func (sp *spooler) produce(ctx context.Context, m *message.Message, promise func(SendResult, error)) {
	cb := func(res SendResult, err error) {
		if err == nil {
			if sp.backlog.Load() > 0 {
				signal(sp.up)
			}
			promise(res, nil)
			return
		}
		if !spoolable(ctx, err) {
			promise(res, err)
			return
		}
		// On the callback goroutine: waiting for room here holds back the
		// callbacks, hence the slots, hence new sends.
		sp.enqueue(context.Background(), spoolReq{m, promise, err})
	}
	if !sp.cp.trySendAsync(ctx, m, cb) {
		sp.enqueue(ctx, spoolReq{m, promise, errWindowFull})
	}
}

// spoolable reports whether a send that failed with err goes to the
// spool: the brokers could not be reached, the connection was lost or
// the send timed out (its outcome is unknown), no partition is listed,
// or a broker replied 5xx. Not when ctx (the caller's) is done, nor for
// an invalid message, an unknown topic, a selector's failure, a 4xx
// reply (403 included) or a refused authentication: those the promise
// gets.
func spoolable(ctx context.Context, err error) bool {
	if ctx.Err() != nil {
		return false
	}
	var be *BrokerError
	var ce *connError
	var ne net.Error
	switch {
	case errors.Is(err, ErrUnknownTopic), errors.Is(err, ErrInvalidMessage), errors.Is(err, ErrUnauthorized):
		return false
	case errors.As(err, &be):
		return be.Code >= 500
	case errors.As(err, &ce), errors.Is(err, ErrConnectionLost), errors.Is(err, ErrTimeout),
		errors.Is(err, ErrClosed), errors.Is(err, ErrNoPartitions), errors.Is(err, errWindowFull),
		errors.Is(err, context.DeadlineExceeded), errors.As(err, &ne):
		return true
	}
	return false
}

// enqueue hands r to the writer, waiting (within ctx) for room.
func (sp *spooler) enqueue(ctx context.Context, r spoolReq) {
	sp.mu.Lock()
	if sp.closed {
		sp.mu.Unlock()
		sp.fail(r, ErrClosed)
		return
	}
	sp.enq.Add(1)
	sp.mu.Unlock()
	defer sp.enq.Done()
	select {
	case sp.q <- r:
	case <-ctx.Done():
		sp.fail(r, ctx.Err())
	}
}

// fail completes r with err: it is not in the spool.
func (sp *spooler) fail(r spoolReq, err error) {
	if r.m == nil {
		r.promise(SendResult{}, err)
		return
	}
	sp.cp.cbs.push(r.promise, SendResult{}, fmt.Errorf("metaq: send to %s failed (%w) and it was not spooled: %w",
		r.m.Topic, r.cause, err), nil)
}

// spooledResult is the result of a message written to the spool.
func spooledResult(m *message.Message) SendResult {
	return SendResult{Topic: m.Topic, Partition: -1, Offset: -1, ID: -1, BrokerID: -1, Spooled: true}
}

// write is the writer: it writes the requests in batches, one fsync each,
// and completes their promises in order on the callback goroutine.
func (sp *spooler) write() {
	defer close(sp.writerDone)
	var batch []spoolReq
	for r := range sp.q {
		batch = append(batch[:0], r)
	more:
		for len(batch) < spoolWriteBatch {
			select {
			case r, ok := <-sp.q:
				if !ok {
					break more
				}
				batch = append(batch, r)
			default:
				break more
			}
		}
		sp.writeBatch(batch)
		clear(batch)
	}
}

func (sp *spooler) writeBatch(batch []spoolReq) {
	msgs := make([]*message.Message, 0, len(batch))
	for _, r := range batch {
		if r.m != nil {
			msgs = append(msgs, r.m)
		}
	}
	var err error
	if len(msgs) > 0 {
		if err = sp.store.putAll(msgs); err == nil {
			if sp.backlog.Add(int64(len(msgs))) == int64(len(msgs)) {
				var cause error
				for _, r := range batch {
					if r.m != nil {
						cause = r.cause
						break
					}
				}
				sp.logger.Warn("metaq: messages not sent are written to the spool and resent later", "dir", sp.dir,
					"err", cause)
			}
			signal(sp.newMsgs)
		} else {
			sp.logger.Error("metaq: could not write to the spool; the messages' promises get the error", "dir", sp.dir,
				"messages", len(msgs), "err", err)
		}
	}
	for _, r := range batch {
		switch {
		case r.m == nil:
			sp.cp.cbs.push(r.promise, SendResult{}, nil, nil)
		case err != nil:
			sp.cp.cbs.push(r.promise, SendResult{}, fmt.Errorf("metaq: send to %s failed (%w) and the spool failed: %w",
				r.m.Topic, r.cause, err), nil)
		default:
			sp.cp.cbs.push(r.promise, spooledResult(r.m), nil, nil)
		}
	}
}

// flush waits until every message handed to the spool before the call is
// written (its promise has run), or ctx is done.
func (sp *spooler) flush(ctx context.Context) error {
	done := make(chan error, 1)
	sp.enqueue(ctx, spoolReq{promise: func(_ SendResult, err error) { done <- err }})
	select {
	case err := <-done:
		return err
	case <-ctx.Done():
		return ctx.Err()
	}
}

// resend is the resender: while the spool holds messages it resends them
// in rounds, backing off after a round with failures, until stop.
func (sp *spooler) resend() {
	defer close(sp.resenderDone)
	fails := 0
	for {
		if sp.backlog.Load() == 0 {
			select {
			case <-sp.newMsgs:
			case <-sp.up:
			case <-sp.stop:
				return
			}
			continue
		}
		sent, err := sp.round()
		select {
		case <-sp.stop:
			return
		default:
		}
		if err == nil || sent > 0 {
			fails = 0
			if err == nil {
				continue
			}
		}
		fails++
		t := time.NewTimer(spoolPoll.Delay(fails))
		select {
		case <-t.C:
		case <-sp.up:
			t.Stop()
		case <-sp.stop:
			t.Stop()
			return
		}
	}
}

// round resends up to spoolRound messages, the oldest first, and removes
// those a broker acknowledged. It starts no more sends after one failed
// for want of a broker. err is a failure, if any.
//
// The round takes the in-flight slot of each resend itself, before
// starting it, so that at most one resend waits for a slot: resends that
// each waited for one would take it in turn while a Flush holds the
// others (Flush takes every slot that frees until it has them all), one
// send timeout each when no broker answers, and the Flush would wait for
// all of them.
func (sp *spooler) round() (sent int, err error) {
	ents := sp.store.pending()
	if len(ents) > spoolRound {
		ents = ents[:spoolRound]
	}
	var (
		mu       sync.Mutex
		acked    []uint64
		firstErr error
		wg       sync.WaitGroup
	)
	down := make(chan struct{}) // a resend found no broker
	var downOnce sync.Once
	// note records the outcome of the resend of the message seq.
	note := func(seq uint64, m *message.Message, err error) {
		mu.Lock()
		defer mu.Unlock()
		if err == nil {
			acked = append(acked, seq)
			return
		}
		if firstErr == nil {
			firstErr = err
		}
		if spoolable(sp.resendCtx, err) {
			downOnce.Do(func() { close(down) })
			return
		}
		if n := sp.refusals.Add(1); n == 1 || n%spoolLogEvery == 0 {
			sp.logger.Error("metaq: a broker refuses a spooled message; it stays in the spool and is retried",
				"dir", sp.dir, "topic", m.Topic, "refusals", n, "err", err)
		}
	}
	// admitCtx ends the wait for an in-flight slot when the round stops.
	admitCtx, stopAdmit := context.WithCancel(sp.resendCtx)
	defer stopAdmit()
	go func() {
		select {
		case <-down:
		case <-sp.stop:
		case <-admitCtx.Done():
		}
		stopAdmit()
	}()
	stopped := func() bool {
		select {
		case <-down:
			return true
		case <-sp.stop:
			return true
		default:
			return false
		}
	}
	slots := make(chan struct{}, max(1, min(spoolResenders, sp.cp.cfg.maxInFlight/2)))
launch:
	for _, e := range ents {
		select {
		case slots <- struct{}{}:
		case <-down:
			break launch
		case <-sp.stop:
			break launch
		}
		if stopped() {
			<-slots
			break launch
		}
		// A copy: the reply sets its ID and offset, and the store may be
		// reading the original (compaction).
		m := *e.msg
		if err := sp.cp.begin(admitCtx, &m); err != nil {
			<-slots
			if admitCtx.Err() != nil {
				break launch
			}
			note(e.seq, &m, err) // refused before sending (closed, invalid)
			continue
		}
		if stopped() { // a slot freed as the round stopped
			sp.cp.end()
			<-slots
			break launch
		}
		wg.Go(func() {
			defer func() { <-slots }()
			_, err := sp.cp.send(sp.resendCtx, &m)
			note(e.seq, &m, err) // before the slot frees: a failure stops the launches first
			sp.cp.end()
		})
	}
	wg.Wait()
	if len(acked) > 0 {
		sp.remove(acked)
	}
	if firstErr != nil && len(acked) == 0 {
		sp.logger.Debug("metaq: spooled messages not resent yet", "dir", sp.dir, "err", firstErr)
	}
	return len(acked), firstErr
}

// remove deletes acknowledged messages from the spool, retrying until
// stop: they must not be sent again.
func (sp *spooler) remove(seqs []uint64) {
	for i := 1; ; i++ {
		n, err := sp.store.removeAll(seqs)
		if err == nil {
			if sp.backlog.Add(-int64(n)) == 0 {
				sp.logger.Info("metaq: spool drained", "dir", sp.dir)
			}
			return
		}
		sp.logger.Error("metaq: could not remove resent messages from the spool; retrying (after a restart they "+
			"would be sent again)", "dir", sp.dir, "err", err)
		t := time.NewTimer(spoolPoll.Delay(i))
		select {
		case <-t.C:
		case <-sp.stop:
			t.Stop()
			return
		}
	}
}

// stopResend stops the resender: it starts no more resends and its
// resends in flight get until ctx is done, then are cancelled (they stay
// in the spool). Idempotent.
func (sp *spooler) stopResend(ctx context.Context) error {
	sp.stopOnce.Do(func() {
		close(sp.stop)
		select {
		case <-sp.resenderDone:
		case <-ctx.Done():
			sp.stopErr = fmt.Errorf("metaq: spool close: %w", ctx.Err())
		}
		sp.cancelResend()
		<-sp.resenderDone
	})
	return sp.stopErr
}

// close writes what was handed to the spool and closes it; call it after
// stopResend and after the producer's Close, when no send can fail any
// more. Idempotent.
func (sp *spooler) close() {
	sp.closeOnce.Do(func() {
		sp.mu.Lock()
		sp.closed = true
		sp.mu.Unlock()
		sp.enq.Wait()
		close(sp.q)
		<-sp.writerDone
		sp.store.release()
		releaseSpoolDir(sp.dir)
	})
}
