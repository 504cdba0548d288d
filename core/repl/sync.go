// Package repl is replication and failover: the slave's puller, the sync
// master and its link to the slave, failover with fencing, rejoin and the
// epoch checkpoint (docs/replication.md). It reaches the partition logs
// through core/partition and the broker's small adapters; it writes no
// protocol reply (core/broker maps its typed errors, and renders its
// Status as stats).
//
// Other components take part in sync replication through Extension (the
// master) and SlaveExtension (the slave): transactions (core/tx) ship
// their journal records as txsync frames on the sync link, and know what
// the puller copies, without this package knowing about transactions.
package repl

import (
	"bufio"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"sync"
	"sync/atomic"
	"time"

	"github.com/metaq-go/metaq/core/store"
	"github.com/metaq-go/metaq/internal/logx"
	"github.com/metaq-go/metaq/sdk/message"
	"github.com/metaq-go/metaq/sdk/protocol"
)

// Extension is what another component registers on the sync master
// (SyncMaster.Register): state the slave must hold before the link counts
// as in sync (before failover may name the slave in sync).
type Extension interface {
	// InSync reports whether the slave of link id holds the extension's
	// state.
	InSync(link int64) bool
	// SyncState ships the extension's state on lk (frames through
	// Link.ShipFrames) and waits for the slave; the joiner calls it
	// whenever InSync(lk.ID()) is false.
	SyncState(lk *Link) error
}

// Frame is one frame an extension ships on the link: a txsync frame of
// the given kind.
type Frame struct {
	Kind string
	Body []byte
}

// Waiter gets the outcome of one shipped sync or frame: nil once the
// slave answered 200, else why not (a *Error).
type Waiter interface{ SlaveDone(err error) }

// SyncMaster is a sync master's replication state: its partitions, the
// link to the slave and the counters.
type SyncMaster struct {
	timeout time.Duration
	degrade atomic.Bool
	logf    func(format string, args ...any)
	host    Host
	ext     Extension
	fo      SyncFailover

	mu    sync.Mutex
	parts map[*store.Log]*Part

	link     atomic.Pointer[Link]
	linkSeq  atomic.Int64
	degraded atomic.Bool // puts are being degraded (logged once per episode)
	// degradeSeq counts degraded puts begun (failover: naming a slave in
	// sync checks that none began meanwhile).
	degradeSeq atomic.Int64

	shipped      atomic.Int64 // syncs acknowledged by the slave
	extShipped   atomic.Int64 // extension frames acknowledged by the slave
	failed       atomic.Int64 // puts failed for the slave's side
	degradedPuts atomic.Int64 // puts stored on the master alone (sync_degrade)
	refused      atomic.Int64 // puts refused: slave disconnected
}

// NewSyncMaster returns the state of a sync master with cfg.
func NewSyncMaster(cfg Config, host Host, log *slog.Logger) *SyncMaster {
	sm := &SyncMaster{
		host:    host,
		timeout: cfg.SyncTimeout,
		logf:    logx.Printf(log, slog.LevelInfo),
		parts:   map[*store.Log]*Part{},
	}
	sm.degrade.Store(cfg.SyncDegrade)
	return sm
}

// Register sets the extension (one; transactions). Call it before the
// broker starts.
func (sm *SyncMaster) Register(e Extension) { sm.ext = e }

// SetFailover sets failover's side (with failover = true).
func (sm *SyncMaster) SetFailover(f SyncFailover) { sm.fo = f }

// Timeout is sync_timeout.
func (sm *SyncMaster) Timeout() time.Duration { return sm.timeout }

// Degrade reports whether puts that cannot be replicated are stored on
// the master alone (sync_degrade, or a promoted slave).
func (sm *SyncMaster) Degrade() bool { return sm.degrade.Load() }

// SetDegrade sets it (a slave promoted under failover acknowledges alone
// until a slave is in sync).
func (sm *SyncMaster) SetDegrade(v bool) { sm.degrade.Store(v) }

// Part returns partition p of topic (log l), registering it.
func (sm *SyncMaster) Part(topic string, p int32, l *store.Log) *Part {
	sm.mu.Lock()
	defer sm.mu.Unlock()
	sp := sm.parts[l]
	if sp == nil {
		sp = &Part{topic: topic, p: p, l: l}
		sm.parts[l] = sp
	}
	return sp
}

// Lookup returns l's partition, nil if it never took part.
func (sm *SyncMaster) Lookup(l *store.Log) *Part {
	sm.mu.Lock()
	defer sm.mu.Unlock()
	return sm.parts[l]
}

// Link returns the live link, nil if there is none.
func (sm *SyncMaster) Link() *Link {
	lk := sm.link.Load()
	if lk == nil || lk.Dead() {
		return nil
	}
	return lk
}

// InSync returns the live link if sp is in sync under it.
func (sm *SyncMaster) InSync(sp *Part) (*Link, bool) {
	lk := sm.Link()
	if lk == nil || sp.gen.Load() != lk.id {
		return nil, false
	}
	return lk, true
}

// ExtInSync reports whether the extension's state is in sync under lk
// (true without an extension).
func (sm *SyncMaster) ExtInSync(lk *Link) bool {
	return sm.ext == nil || lk != nil && sm.ext.InSync(lk.id)
}

// DegradeOK reports whether what a sync master stores alone may be
// acknowledged now (sync_degrade, and with failover no slave named in
// sync; if one is, it is unnamed soon and the caller refuses). The first
// degraded one of an episode logs line().
func (sm *SyncMaster) DegradeOK(line func() string) bool {
	if !sm.degrade.Load() {
		return false
	}
	if sm.fo != nil {
		if sm.fo.Named() {
			sm.fo.UnnameSoon()
			return false
		}
		sm.degradeSeq.Add(1)
	}
	if !sm.degraded.Swap(true) {
		sm.logf("%s", line())
	}
	return true
}

// Refuse counts a refused put, commit, prepare or rollback and returns
// its error: the slave is disconnected (with sync_degrade and failover, a
// slave named in sync is being unnamed first). what is "puts" or
// "transactions".
func (sm *SyncMaster) Refuse(what string) *Error {
	sm.refused.Add(1)
	switch {
	case sm.degrade.Load():
		return errorf(Disconnected, "Slave is disconnected (unnaming the in-sync slave in ZooKeeper before storing "+what+" on the master alone)")
	case what == "puts":
		return errorf(Disconnected, "Slave is disconnected ") // MetaQ's text, space and all
	}
	return errorf(Disconnected, "Slave is disconnected")
}

// CountFailed counts a put or commit failed for the slave's side.
func (sm *SyncMaster) CountFailed() { sm.failed.Add(1) }

// CountDegraded counts n messages stored on the master alone.
func (sm *SyncMaster) CountDegraded(n int) { sm.degradedPuts.Add(int64(n)) }

// Part is one partition of a sync master.
type Part struct {
	topic string
	p     int32
	l     *store.Log
	// mu orders the partition's appends and their shipping, and holds
	// puts back while the partition joins.
	mu sync.Mutex
	// gen is the link the partition is in sync under (0: none).
	gen atomic.Int64
	// inflight counts the partition's appends not completed yet.
	inflight atomic.Int64
	// joinErr is the last join failure logged (owned by the manager).
	joinErr string
	// end is where the partition's next append lands, under mu, while it
	// is in sync (set by join; extensions tell the slave their batches'
	// offsets).
	end int64
}

// Topic and P name the partition.
func (sp *Part) Topic() string { return sp.topic }

// P is the partition number.
func (sp *Part) P() int32 { return sp.p }

// Lock takes the partition's lock: it orders its appends and their
// shipping (extensions take it before their own locks).
func (sp *Part) Lock() { sp.mu.Lock() }

// Unlock releases it.
func (sp *Part) Unlock() { sp.mu.Unlock() }

// InSyncUnder reports whether sp is in sync under lk (nil: no).
func (sp *Part) InSyncUnder(lk *Link) bool { return lk != nil && sp.gen.Load() == lk.id }

// Unsync takes sp out of sync: it joins again.
func (sp *Part) Unsync() { sp.gen.Store(0) }

// End is where the next append lands (under the lock, while in sync).
func (sp *Part) End() int64 { return sp.end }

// Advance moves End by n bytes, after an append (under the lock).
func (sp *Part) Advance(n int64) { sp.end += n }

// Hold counts an append in flight on sp (join waits for none to be
// before it holds puts back); Release ends it.
func (sp *Part) Hold() { sp.inflight.Add(1) }

// InFlight is the number of appends held.
func (sp *Part) InFlight() int64 { return sp.inflight.Load() }

// Release ends a Hold, or a Track whose append was not made.
func (sp *Part) Release() { sp.inflight.Add(-1) }

// Track holds sp until w's completion: the returned waiter releases it
// and hands the completion on to w.
func (sp *Part) Track(w store.Waiter) store.Waiter {
	sp.Hold()
	return &trackWaiter{w: w, sp: sp}
}

// trackWaiter completes an append counted in sp.inflight and hands the
// completion on to w.
type trackWaiter struct {
	w  store.Waiter
	sp *Part
}

func (w *trackWaiter) AppendDone(token uint64, firstID, firstOffset int64, err error) {
	w.sp.inflight.Add(-1)
	w.w.AppendDone(token, firstID, firstOffset, err)
}

// Link is the master's connection to its slave.
type Link struct {
	sm   *SyncMaster
	id   int64
	nc   net.Conn
	addr string
	tls  bool // the slave is TLS-only (its control connections dial TLS too)

	wmu sync.Mutex // frames are written whole, in ship order
	w   *bufio.Writer
	buf []byte

	pmu     sync.Mutex
	pending map[int32]pendingSync
	op      int32
	dead    bool
	deadErr error
	done    chan struct{}
	kick    chan struct{} // wakes the flusher
}

type pendingSync struct {
	w   Waiter
	ext bool // an extension's frame
	at  time.Time
	off int64 // a sync's offset on the master (-1: not known)
}

// newLink makes nc, a connection to the slave at addr, a link and starts
// its reader, flusher and sweeper.
func (sm *SyncMaster) newLink(nc net.Conn, addr string, tls bool) *Link {
	lk := &Link{sm: sm, id: sm.linkSeq.Add(1), nc: nc, addr: addr, tls: tls, w: bufio.NewWriterSize(nc, 64<<10),
		pending: map[int32]pendingSync{}, done: make(chan struct{}), kick: make(chan struct{}, 1)}
	go lk.readLoop()
	go lk.flusher()
	go lk.sweep()
	return lk
}

// ID is the link's number (a partition in sync names it).
func (lk *Link) ID() int64 { return lk.id }

// Addr and TLS are the slave's address and whether it is TLS-only.
func (lk *Link) Addr() string { return lk.addr }

// TLS reports whether the slave is TLS-only.
func (lk *Link) TLS() bool { return lk.tls }

// Done is closed once the link is dead.
func (lk *Link) Done() <-chan struct{} { return lk.done }

// Dead reports whether the link failed.
func (lk *Link) Dead() bool {
	lk.pmu.Lock()
	defer lk.pmu.Unlock()
	return lk.dead
}

// register takes the next op for w and records it as pending; on a dead
// link it tells w why and returns false. Callers hold wmu.
func (lk *Link) register(w Waiter, ext bool, off int64, now time.Time) (int32, bool) {
	lk.pmu.Lock()
	if lk.dead {
		err := lk.deadErr
		lk.pmu.Unlock()
		w.SlaveDone(err)
		return 0, false
	}
	lk.op++
	if lk.op <= 0 {
		lk.op = 1
	}
	op := lk.op
	lk.pending[op] = pendingSync{w: w, ext: ext, at: now, off: off}
	lk.pmu.Unlock()
	return op, true
}

// writeBuf writes lk.buf; a failed write fails the link. Callers hold wmu.
func (lk *Link) writeBuf() {
	if _, err := lk.w.Write(lk.buf); err != nil {
		lk.Fail(errorf(Disconnected, fmt.Sprintf("Slave is disconnected (write: %v)", err)))
	}
}

// Ship writes one sync per entry and registers them for their replies
// (w is told once per entry). first is the master's offset of entries[0]
// (-1: not known): a slave that answers a sync with another offset than
// the master's has diverged (readLoop). Callers hold the partition's
// lock.
func (lk *Link) Ship(topic string, p int32, first int64, entries []store.Entry, w Waiter) {
	lk.wmu.Lock()
	defer lk.wmu.Unlock()
	now := time.Now()
	off := first
	for i := range entries {
		e := &entries[i]
		op, ok := lk.register(w, false, off, now)
		if off >= 0 {
			off += int64(message.HeaderSize + len(e.Data))
		}
		if !ok {
			continue
		}
		lk.buf = protocol.AppendSync(lk.buf[:0], topic, p, e.Flag, e.ID, int64(e.CRC), op, e.Data)
		lk.writeBuf()
	}
	lk.shipped()
}

// ShipFrames writes whole txsync frames, in order, and registers w once
// per frame. Extensions serialise their own shipments.
func (lk *Link) ShipFrames(frames []Frame, w Waiter) {
	lk.wmu.Lock()
	defer lk.wmu.Unlock()
	now := time.Now()
	for _, f := range frames {
		op, ok := lk.register(w, true, -1, now)
		if !ok {
			continue
		}
		lk.buf = protocol.AppendTxSyncHeader(lk.buf[:0], f.Kind, len(f.Body), op)
		lk.buf = append(lk.buf, f.Body...)
		lk.writeBuf()
	}
	lk.shipped()
}

// shipped ends a shipment. Callers hold wmu.
func (lk *Link) shipped() {
	if cap(lk.buf) > maxRetainedSyncBuf {
		lk.buf = nil
	}
	select { // the flusher writes what is buffered, for many puts at once
	case lk.kick <- struct{}{}:
	default:
	}
}

// flusher writes the buffered syncs to the slave whenever a shipment
// kicks it.
func (lk *Link) flusher() {
	for {
		select {
		case <-lk.done:
			return
		case <-lk.kick:
		}
		lk.wmu.Lock()
		var err error
		if lk.w.Buffered() > 0 {
			lk.nc.SetWriteDeadline(time.Now().Add(lk.sm.timeout))
			err = lk.w.Flush()
		}
		lk.wmu.Unlock()
		if err != nil {
			lk.Fail(errorf(Disconnected, fmt.Sprintf("Slave is disconnected (write: %v)", err)))
			return
		}
	}
}

const maxRetainedSyncBuf = 1 << 20

// Fail kills the link: every pending sync fails with err.
func (lk *Link) Fail(err error) {
	lk.pmu.Lock()
	if lk.dead {
		lk.pmu.Unlock()
		return
	}
	lk.dead, lk.deadErr = true, err
	pend := lk.pending
	lk.pending = nil
	lk.pmu.Unlock()
	lk.nc.Close()
	close(lk.done)
	lk.sm.logf("sync: link to slave %s lost: %v; its partitions are out of sync", lk.addr, err)
	for _, ps := range pend {
		ps.w.SlaveDone(err)
	}
}

// diverged is the error of a sync the slave answered 200 (body) at
// another offset than the master's (nil when it is the same, when either
// is not known, or when the puller had copied it: -1).
func (ps *pendingSync) diverged(body []byte) error {
	if ps.ext || ps.off < 0 {
		return nil
	}
	_, _, off, _, err := protocol.ParsePutResult(body)
	if err != nil || off < 0 || off == ps.off {
		return nil
	}
	return errorf(SlaveFailed, fmt.Sprintf("slave stored the sync at offset %d, the master at %d (the copies diverged)", off, ps.off))
}

// readLoop matches the slave's replies to the pending syncs.
func (lk *Link) readLoop() {
	dec := protocol.NewDecoder(lk.nc, protocol.Limits{})
	defer dec.Release()
	var r protocol.Request
	for {
		if err := dec.Decode(&r); err != nil {
			lk.Fail(errorf(Disconnected, fmt.Sprintf("Slave is disconnected (%v)", err)))
			return
		}
		lk.pmu.Lock()
		ps, ok := lk.pending[r.Opaque]
		delete(lk.pending, r.Opaque)
		lk.pmu.Unlock()
		if !ok {
			continue
		}
		if r.Op == protocol.OpResult && r.Code == protocol.StatusOK {
			if err := ps.diverged(r.Body); err != nil {
				// The slave stored it elsewhere than the master: every
				// later record of the partition would be too. Fail the
				// put and the link; the next one cannot join the
				// partition while the copies differ (WaitSlave).
				ps.w.SlaveDone(err)
				lk.Fail(err)
				return
			}
			if ps.ext {
				lk.sm.extShipped.Add(1)
			} else {
				lk.sm.shipped.Add(1)
			}
			ps.w.SlaveDone(nil)
		} else {
			err := errorf(SlaveFailed, fmt.Sprintf("slave failed the sync: %d %s", r.Code, protocol.Printable(r.Body)))
			ps.w.SlaveDone(err)
			if !ps.ext {
				// The master stored what the slave did not: the next
				// sync of that partition would land at a lower offset
				// there. The link goes (every partition out of sync, the
				// slave refuses the syncs still coming on it: SyncGate);
				// the next one joins each partition again once the slave
				// has pulled what it lacks.
				lk.Fail(err)
				return
			}
		}
	}
}

// sweep fails the link when a sync waits longer than sync_timeout.
func (lk *Link) sweep() {
	tk := time.NewTicker(min(lk.sm.timeout/4+time.Millisecond, 100*time.Millisecond))
	defer tk.Stop()
	for {
		select {
		case <-lk.done:
			return
		case <-tk.C:
		}
		now := time.Now()
		late := false
		lk.pmu.Lock()
		for _, ps := range lk.pending {
			if now.Sub(ps.at) > lk.sm.timeout {
				late = true
				break
			}
		}
		lk.pmu.Unlock()
		if late {
			lk.Fail(errorf(Disconnected, fmt.Sprintf("Slave is disconnected (no answer within sync_timeout %v)", lk.sm.timeout)))
			return
		}
	}
}

// DegradeSeq counts the degraded puts begun (failover: naming a slave in
// sync checks that none began meanwhile).
func (sm *SyncMaster) DegradeSeq() int64 { return sm.degradeSeq.Load() }

// SyncExt ships the extension's state on lk unless the slave has it.
func (sm *SyncMaster) SyncExt(lk *Link) error {
	if sm.ext == nil || sm.ext.InSync(lk.id) {
		return nil
	}
	return sm.ext.SyncState(lk)
}

// SyncStatus is the sync master's state, for stats and metrics.
type SyncStatus struct {
	// Slave is the address of the slave linked to ("" when none).
	Slave string
	// Partitions took part; InSync are in sync with the slave now.
	Partitions, InSync int
	// Shipped syncs and ExtShipped extension frames the slave
	// acknowledged; Failed puts failed for the slave's side; Refused
	// puts refused (slave disconnected); Degraded messages stored on the
	// master alone.
	Shipped, ExtShipped, Failed, Refused, Degraded int64
}

// Status returns the sync master's state now.
func (sm *SyncMaster) Status() SyncStatus {
	var st SyncStatus
	if lk := sm.Link(); lk != nil {
		st.Slave = lk.addr
	}
	sm.mu.Lock()
	for _, sp := range sm.parts {
		st.Partitions++
		if _, ok := sm.InSync(sp); ok {
			st.InSync++
		}
	}
	sm.mu.Unlock()
	st.Shipped = sm.shipped.Load()
	st.ExtShipped = sm.extShipped.Load()
	st.Failed = sm.failed.Load()
	st.Refused = sm.refused.Load()
	st.Degraded = sm.degradedPuts.Load()
	return st
}

// NoteJoin records a join's outcome (the joiner's, for its log lines): it
// reports whether it differs from the last one recorded, with nil
// differing only from a failure.
func (sp *Part) NoteJoin(err error) bool {
	msg := ""
	if err != nil {
		msg = err.Error()
	}
	if msg == sp.joinErr {
		return false
	}
	sp.joinErr = msg
	return true
}

// Join brings sp in sync under lk. First, with puts going on, it waits
// until the slave has pulled up to where the master was when it looked
// (so that a slave far behind, or one that cannot hold the topic, never
// holds puts back); then, with the partition's puts held back and none in
// flight, until the slave's end equals the master's. Each phase waits at
// most sync_timeout. slaveEnd asks the slave its end of a partition.
func (sm *SyncMaster) Join(lk *Link, slaveEnd func(topic string, p int32) (int64, error), sp *Part) error {
	if err := sm.WaitSlave(lk, slaveEnd, sp, sp.l.MaxOffset(), false); err != nil {
		return err
	}
	sp.mu.Lock()
	defer sp.mu.Unlock()
	deadline := time.Now().Add(sm.timeout)
	for sp.inflight.Load() > 0 {
		if time.Now().After(deadline) {
			return errors.New("puts in flight did not complete")
		}
		time.Sleep(200 * time.Microsecond)
	}
	// Threshold mode: make everything written readable, so that the
	// slave can pull it before the next put is shipped.
	if err := sp.l.Flush(); err != nil {
		return err
	}
	if err := sm.WaitSlave(lk, slaveEnd, sp, sp.l.MaxOffset(), true); err != nil {
		return err
	}
	sp.end = sp.l.MaxOffset()
	sp.gen.Store(lk.id)
	return nil
}

// WaitSlave waits (at most sync_timeout) until the slave's end of sp is
// at least want, or with exact exactly want.
func (sm *SyncMaster) WaitSlave(lk *Link, slaveEnd func(topic string, p int32) (int64, error), sp *Part, want int64, exact bool) error {
	deadline := time.Now().Add(sm.timeout)
	for {
		have, err := slaveEnd(sp.topic, sp.p)
		if err != nil {
			return err
		}
		switch {
		case have == want, have > want && !exact:
			return nil
		case have > want:
			return fmt.Errorf("the slave's end %d is past the master's %d (the copies diverged)", have, want)
		}
		if time.Now().After(deadline) || lk.Dead() {
			return fmt.Errorf("the slave is at %d, the master at %d", have, want)
		}
		time.Sleep(time.Millisecond)
	}
}
