package broker

import (
	"context"
	"errors"
	"net"
	"time"
)

// Graceful stop (metaq-server's SIGTERM and SIGINT).
//
// Shutdown unregisters from ZooKeeper (deleting the broker's ephemeral
// znodes at once, so clients stop choosing it) while it stops accepting
// and drains the connections: each connection reads for drainRead more
// what its client has already sent, finishes those requests (their
// replies, put acknowledgements included, are written), stops reading,
// and closes. What is still open when the
// context ends is closed by force. Then, as Close, it closes the filters,
// offset store and plugins and flushes and closes every log and journal
// (a final fsync and checkpoint), so that everything acknowledged is on
// disk before it returns.

// drainRead is how long, once Shutdown starts, connections go on reading
// what clients have already sent (requests in the socket buffer, or half
// received), so that those are answered too.
const drainRead = 100 * time.Millisecond

// Shutdown stops the broker gracefully, draining connections until ctx is
// done (see above). It is idempotent, and Close after it does nothing.
func (b *Broker) Shutdown(ctx context.Context) error { return b.shutdown(ctx, ctx != nil) }

// AbortStart makes a Start (or Serve) that waits for the first ZooKeeper
// registration stop waiting and return; the broker keeps running until
// Shutdown or Close. metaq-server calls it on SIGTERM during start-up.
func (b *Broker) AbortStart() { b.startCancel() }

// Close stops the broker at once: it stops accepting, closes every
// connection (requests in flight get no reply), waits for them, then
// flushes and closes every log. It is idempotent.
func (b *Broker) Close() error { return b.shutdown(context.TODO(), false) }

// shutdown is Shutdown (drain: drain until ctx is done) and Close (no
// drain; ctx is not used).
func (b *Broker) shutdown(ctx context.Context, drain bool) error {
	b.startCancel()
	if b.closed.Swap(true) {
		return nil
	}
	start := time.Now()
	// Unregister first, so clients stop choosing this broker; with
	// ZooKeeper down that may take up to the registry's close timeout, so
	// it runs while the connections drain.
	regDone := b.registry().CloseAsync(b.logf, b.log.Warn)
	for _, l := range []net.Listener{b.ln, b.tlsLn} {
		if l != nil {
			l.Close()
		}
	}
	b.closeHTTP()   // http.go: before the stores its handlers read
	b.peers.Close() // core/httpapi peeroffsets.go
	if drain {
		n := b.drain(ctx)
		if n > 0 {
			b.log.Warn("shutdown: closing connections that did not finish in time", "connections", n)
		}
	}
	close(b.done)
	b.connsMu.Lock()
	for c := range b.conns {
		c.close()
	}
	b.connsMu.Unlock()
	b.wg.Wait()
	b.committed.SaveAtClose()
	errs := []error{b.closeFilters(), b.offsets.Close(), b.plugins.Close()}
	errs = append(errs, b.closeStores())
	<-regDone
	err := errors.Join(errs...)
	if drain && err == nil {
		b.logf("shutdown: stopped in %v (logs flushed, journal checkpointed)", time.Since(start).Round(time.Millisecond))
	}
	return err
}

// drain asks every connection to finish what it received and close, and
// waits for them until ctx is done. It returns how many are left.
func (b *Broker) drain(ctx context.Context) int {
	dl := time.Now().Add(drainRead)
	b.draining.Store(dl.UnixNano())
	b.connsMu.Lock()
	n := len(b.conns)
	for c := range b.conns {
		c.nc.SetReadDeadline(dl)
	}
	b.connsMu.Unlock()
	if n > 0 {
		b.logf("shutdown: draining %d connection(s)", n)
	}
	tk := time.NewTicker(5 * time.Millisecond)
	defer tk.Stop()
	for {
		b.connsMu.Lock()
		n = len(b.conns)
		b.connsMu.Unlock()
		if n == 0 {
			return 0
		}
		select {
		case <-ctx.Done():
			return n
		case <-tk.C:
		}
	}
}
