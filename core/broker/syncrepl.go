package broker

import (
	"bufio"
	"errors"
	"fmt"
	"math"
	"net"
	"strconv"
	"sync"
	"sync/atomic"
	"time"

	"github.com/go-zookeeper/zk"

	"github.com/metaq-go/metaq/core/registry"
	"github.com/metaq-go/metaq/core/store"
	"github.com/metaq-go/metaq/sdk/protocol"
)

// Sync replication, the master side (MetaQ's samsa, reference §9), with
// replication = "sync".
//
// The master finds its slave in ZooKeeper (the lowest slave<N> under
// ids/<id>) and keeps one connection to it, the link. A partition is in
// sync once the slave has caught up with it: the joiner holds the
// partition's puts back, waits for the puts in flight, and waits until the
// slave's end (an `offset ... MaxInt64` to the slave) equals the master's;
// the slave gets there by pulling, as an async slave does. From then on
// every put and mput to the partition takes its msgIds here and, under the
// partition's lock (so the slave sees the partition's puts in the master's
// append order), is appended locally and shipped to the slave as one
// `sync` per message on the link. The put is answered once both are done:
// 200 with the master's offset if both succeeded, 500 naming the side that
// failed otherwise. In group-commit mode both sides answer after their
// fsync, so an acknowledged message is durable on both copies.
//
// A lost link (an error, or a sync unanswered within sync_timeout) takes
// every partition out of sync. A put to a partition that is not in sync
// gets MetaQ's `500 Slave is disconnected`, or with sync_degrade = true is
// stored on the master alone (async), with a log line when that starts and
// the sync_degraded_puts counter. The manager reconnects and joins the
// partitions again as soon as a slave is registered.
//
// Transactions (MetaQ's samsa had none) are shipped as txsync frames on
// the same link: txrepl.go.

// syncMaster is a sync master's replication state.
type syncMaster struct {
	b       *Broker
	degrade bool
	timeout time.Duration

	mu    sync.Mutex
	parts map[*store.Log]*syncPart

	link     atomic.Pointer[syncLink]
	linkSeq  atomic.Int64
	degraded atomic.Bool // puts are being degraded (logged once per episode)
	// degradeSeq counts degraded puts begun (failover: naming a slave in
	// sync checks that none began meanwhile).
	degradeSeq atomic.Int64

	shipped      atomic.Int64 // syncs acknowledged by the slave
	failed       atomic.Int64 // puts failed for the slave's side
	degradedPuts atomic.Int64 // puts stored on the master alone (sync_degrade)
	refused      atomic.Int64 // puts refused: slave disconnected

	tx txReplState // transactions (txrepl.go)
}

// syncPart is one partition of a sync master.
type syncPart struct {
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
	// is in sync (set by join; transaction commits tell the slave their
	// batches' offsets, txrepl.go).
	end int64
}

func newSyncMaster(b *Broker) *syncMaster {
	return &syncMaster{
		b:       b,
		degrade: b.config().SyncDegrade,
		timeout: time.Duration(b.config().SyncTimeout) * time.Millisecond,
		parts:   map[*store.Log]*syncPart{},
	}
}

func (sm *syncMaster) part(topic string, p int32, l *store.Log) *syncPart {
	sm.mu.Lock()
	defer sm.mu.Unlock()
	sp := sm.parts[l]
	if sp == nil {
		sp = &syncPart{topic: topic, p: p, l: l}
		sm.parts[l] = sp
	}
	return sp
}

// inSync reports whether sp is in sync under a live link, and the link.
func (sm *syncMaster) inSync(sp *syncPart) (*syncLink, bool) {
	lk := sm.link.Load()
	if lk == nil || lk.isDead() || sp.gen.Load() != lk.id {
		return nil, false
	}
	return lk, true
}

// appendReplicated is appendEntries on a sync master.
func (c *conn) appendReplicated(t *topic, l *store.Log, p int32, opaque int32, mput bool, size int64) {
	sm := c.b.sync
	token := uint64(uint32(opaque)) | uint64(uint16(p))<<32
	if mput {
		token |= uint64(len(c.entries)) << 48
	}
	sp := sm.part(t.name, p, l)
	sp.mu.Lock()
	if f := c.b.fo; f != nil {
		if code, msg := f.lateRefusal(); msg != "" { // rejoin.go
			sp.mu.Unlock()
			c.b.stats.putFailed.Add(1)
			c.reply(code, msg, opaque)
			return
		}
	}
	lk, ok := sm.inSync(sp)
	if !ok {
		if !sm.degrade {
			sp.mu.Unlock()
			sm.refused.Add(1)
			c.putFail(opaque, "Slave is disconnected ")
			return
		}
		if f := c.b.fo; f != nil {
			// failover.go: a put stored here alone must not be
			// acknowledged while ZooKeeper names a slave in sync.
			if f.insync.Load() >= 0 {
				sp.mu.Unlock()
				sm.refused.Add(1)
				f.clearInSyncSoon()
				c.putFail(opaque, "Slave is disconnected (unnaming the in-sync slave in ZooKeeper before storing puts on the master alone)")
				return
			}
			sm.degradeSeq.Add(1)
		}
		if !sm.degraded.Swap(true) {
			c.b.logf("sync: %s-%d: the slave is not in sync; storing puts on the master alone (sync_degrade = true) until it is", t.name, p)
		}
		sm.degradedPuts.Add(int64(len(c.entries)))
		w := &trackWaiter{w: c, sp: sp}
		sp.inflight.Add(1)
		c.addPending(1)
		err := l.Append(c.entries, w, token)
		if err == nil {
			sp.end += entriesSize(c.entries)
		}
		sp.mu.Unlock()
		if err != nil {
			sp.inflight.Add(-1)
			c.addPending(-1)
			c.b.disks.wakeOn(err)
			c.putFail(opaque, "append failed: "+err.Error())
			return
		}
		c.realtimePut(t, size)
		return
	}
	n := len(c.entries)
	first := c.b.ids.Next(n)
	for i := range c.entries {
		c.entries[i].ID = first + int64(i)
	}
	w := &syncWait{c: c, sp: sp, token: token}
	w.left.Store(int32(n + 1))
	sp.inflight.Add(1)
	c.addPending(1)
	if err := l.Append(c.entries, w, token); err != nil {
		sp.mu.Unlock()
		sp.inflight.Add(-1)
		c.addPending(-1)
		c.b.disks.wakeOn(err)
		c.putFail(opaque, "append failed: "+err.Error())
		return
	}
	sp.end += entriesSize(c.entries)
	lk.ship(t.name, p, c.entries, w)
	sp.mu.Unlock()
	c.realtimePut(t, size)
}

// realtimePut counts a put in the topic's realtime stats.
func (c *conn) realtimePut(t *topic, size int64) {
	if t.conf().Stat {
		t.rt.put.add(int64(len(c.entries)))
		t.rt.size.add(size)
	}
}

// trackWaiter completes an append counted in sp.inflight (a degraded,
// master-only put, or a replicated transaction batch's local append) and
// hands the completion on to w.
type trackWaiter struct {
	w  store.Waiter
	sp *syncPart
}

func (w *trackWaiter) AppendDone(token uint64, firstID, firstOffset int64, err error) {
	w.sp.inflight.Add(-1)
	w.w.AppendDone(token, firstID, firstOffset, err)
}

// syncWait completes a replicated put once its local append and each of
// its syncs are done.
type syncWait struct {
	c     *conn
	sp    *syncPart
	token uint64
	left  atomic.Int32

	mu       sync.Mutex
	firstID  int64
	offset   int64
	err      error // local
	slaveErr error
}

func (w *syncWait) AppendDone(_ uint64, firstID, firstOffset int64, err error) {
	w.mu.Lock()
	w.firstID, w.offset, w.err = firstID, firstOffset, err
	w.mu.Unlock()
	w.done()
}

// slaveDone is one sync's outcome.
func (w *syncWait) slaveDone(err error) {
	if err != nil {
		w.mu.Lock()
		if w.slaveErr == nil {
			w.slaveErr = err
		}
		w.mu.Unlock()
	}
	w.done()
}

func (w *syncWait) done() {
	if w.left.Add(-1) != 0 {
		return
	}
	w.sp.inflight.Add(-1)
	w.mu.Lock()
	firstID, off, err, serr := w.firstID, w.offset, w.err, w.slaveErr
	w.mu.Unlock()
	c := w.c
	switch {
	case err != nil:
		c.AppendDone(w.token, 0, 0, err)
	case serr != nil:
		c.addPending(-1)
		c.b.sync.failed.Add(1)
		c.putFail(int32(uint32(w.token)), serr.Error())
	default:
		c.AppendDone(w.token, firstID, off, nil)
	}
}

// syncLink is the master's connection to its slave.
type syncLink struct {
	sm   *syncMaster
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
	w  slaveWaiter // a put's syncWait, or a transaction's (txrepl.go)
	at time.Time
}

func (lk *syncLink) isDead() bool {
	lk.pmu.Lock()
	defer lk.pmu.Unlock()
	return lk.dead
}

// register takes the next op for w and records it as pending; on a dead
// link it tells w why and returns false. Callers hold wmu.
func (lk *syncLink) register(w slaveWaiter, now time.Time) (int32, bool) {
	lk.pmu.Lock()
	if lk.dead {
		err := lk.deadErr
		lk.pmu.Unlock()
		w.slaveDone(err)
		return 0, false
	}
	lk.op++
	if lk.op <= 0 {
		lk.op = 1
	}
	op := lk.op
	lk.pending[op] = pendingSync{w: w, at: now}
	lk.pmu.Unlock()
	return op, true
}

// writeBuf writes lk.buf; a failed write fails the link. Callers hold wmu.
func (lk *syncLink) writeBuf() {
	if _, err := lk.w.Write(lk.buf); err != nil {
		lk.fail(fmt.Errorf("Slave is disconnected (write: %v)", err))
	}
}

// ship writes one sync per entry and registers them for their replies.
// Callers hold the partition's lock.
func (lk *syncLink) ship(topic string, p int32, entries []store.Entry, w *syncWait) {
	lk.wmu.Lock()
	defer lk.wmu.Unlock()
	now := time.Now()
	for i := range entries {
		e := &entries[i]
		op, ok := lk.register(w, now)
		if !ok {
			continue
		}
		lk.buf = protocol.AppendSync(lk.buf[:0], topic, p, e.Flag, e.ID, int64(e.CRC), op, e.Data)
		lk.writeBuf()
	}
	if cap(lk.buf) > maxRetainedSyncBuf {
		lk.buf = nil
	}
	select { // the flusher writes what is buffered, for many puts at once
	case lk.kick <- struct{}{}:
	default:
	}
}

// flusher writes the buffered syncs to the slave whenever ship kicks it.
func (lk *syncLink) flusher() {
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
			lk.fail(fmt.Errorf("Slave is disconnected (write: %v)", err))
			return
		}
	}
}

const maxRetainedSyncBuf = 1 << 20

// fail kills the link: every pending sync fails with err.
func (lk *syncLink) fail(err error) {
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
	lk.sm.b.logf("sync: link to slave %s lost: %v; its partitions are out of sync", lk.addr, err)
	for _, ps := range pend {
		ps.w.slaveDone(err)
	}
}

// readLoop matches the slave's replies to the pending syncs.
func (lk *syncLink) readLoop() {
	dec := protocol.NewDecoder(lk.nc, protocol.Limits{})
	defer dec.Release()
	var r protocol.Request
	for {
		if err := dec.Decode(&r); err != nil {
			lk.fail(fmt.Errorf("Slave is disconnected (%v)", err))
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
			if _, put := ps.w.(*syncWait); put {
				lk.sm.shipped.Add(1)
			} else {
				lk.sm.tx.shipped.Add(1) // a txsync frame (txrepl.go)
			}
			ps.w.slaveDone(nil)
		} else {
			ps.w.slaveDone(fmt.Errorf("slave failed the sync: %d %s", r.Code, protocol.Printable(r.Body)))
		}
	}
}

// sweep fails the link when a sync waits longer than sync_timeout.
func (lk *syncLink) sweep() {
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
			lk.fail(fmt.Errorf("Slave is disconnected (no answer within sync_timeout %v)", lk.sm.timeout))
			return
		}
	}
}

// run keeps a link to the registered slave and its partitions in sync
// until the broker closes.
func (sm *syncMaster) run() {
	b := sm.b
	defer b.wg.Done()
	b.mu.RLock()
	reg := b.reg
	b.mu.RUnlock()
	logged := ""
	for !b.closed.Load() && sm.syncActive() { // rejoin.go
		slaves, watch, err := reg.Slaves()
		if err != nil || len(slaves) == 0 {
			msg := "no slave registered"
			if err != nil {
				msg = err.Error()
			}
			if msg != logged {
				b.logf("sync: %s; puts %s", msg, sm.refusal())
				logged = msg
			}
			select {
			case <-watch:
			case <-b.done:
				return
			case <-time.After(time.Second):
			}
			continue
		}
		target := slaves[0]
		lk, err := sm.dial(target)
		if err != nil {
			if msg := err.Error(); msg != logged {
				b.logf("sync: slave %d at %s: %v; retrying", target.ID, target.Addr, err)
				logged = msg
			}
			sm.sleep(200 * time.Millisecond)
			continue
		}
		logged = ""
		b.logf("sync: shipping puts to slave %d at %s", target.ID, target.Addr)
		sm.link.Store(lk)
		sm.serve(lk, target, watch)
		lk.fail(errors.New("Slave is disconnected"))
	}
}

func (sm *syncMaster) refusal() string {
	if sm.degrade {
		return "are stored on the master alone (sync_degrade = true)"
	}
	return `get "500 Slave is disconnected"`
}

func (sm *syncMaster) sleep(d time.Duration) {
	select {
	case <-time.After(d):
	case <-sm.b.done:
	}
}

// dial opens a link to slave s.
func (sm *syncMaster) dial(s registry.SlaveNode) (*syncLink, error) {
	nc, err := sm.b.replDialPeer(s.Addr, s.TLS, 2*time.Second) // repllink.go
	if err != nil {
		return nil, err
	}
	if f := sm.b.fo; f != nil {
		if err := f.bindLink(nc, sm.timeout); err != nil {
			nc.Close()
			return nil, err
		}
	}
	lk := &syncLink{sm: sm, id: sm.linkSeq.Add(1), nc: nc, addr: s.Addr, tls: s.TLS, w: bufio.NewWriterSize(nc, 64<<10),
		pending: map[int32]pendingSync{}, done: make(chan struct{}), kick: make(chan struct{}, 1)}
	go lk.readLoop()
	go lk.flusher()
	go lk.sweep()
	return lk, nil
}

// serve joins the partitions not in sync under lk, again and again, until
// lk dies, the slave set changes or the broker closes.
func (sm *syncMaster) serve(lk *syncLink, target registry.SlaveNode, watch <-chan zk.Event) {
	b := sm.b
	ctl, err := sm.control(target)
	if err != nil {
		b.logf("sync: slave %s: %v", target.Addr, err)
		return
	}
	defer ctl.nc.Close()
	if f := b.fo; f != nil && f.insync.Load() >= 0 && int(f.insync.Load()) != target.ID {
		// failover.go: the slave named in sync misses what this link's
		// slave will acknowledge: unname it before anything is joined.
		if err := f.setInSync(-1); err != nil {
			b.logf("sync: failover: clearing the in-sync slave before linking to slave %d: %v", target.ID, err)
			return
		}
	}
	tk := time.NewTicker(100 * time.Millisecond)
	defer tk.Stop()
	for {
		all := true
		if sm.tx.gen.Load() != lk.id {
			// txrepl.go: the slave gets the prepared branches first.
			if err := sm.syncTxState(lk); err != nil {
				all = false
				if lk.isDead() {
					return
				}
				b.logf("sync: shipping the prepared transactions: %v", err)
			}
		}
		for _, t := range b.topicList() {
			for p, l := range t.parts {
				sp := sm.part(t.name, int32(p), l)
				if sp.gen.Load() == lk.id {
					continue
				}
				if err := sm.join(lk, ctl, sp); err != nil {
					all = false
					if lk.isDead() {
						return
					}
					if msg := err.Error(); msg != sp.joinErr {
						b.logf("sync: %s-%d not in sync yet: %v", t.name, p, err)
						sp.joinErr = msg
					}
					continue
				}
				if sp.joinErr != "" {
					b.logf("sync: %s-%d in sync", t.name, p)
					sp.joinErr = ""
				}
			}
		}
		if f := b.fo; all && f != nil && f.role.Load() == foMaster && int(f.insync.Load()) != target.ID {
			if err := f.nameInSync(target.ID, func() bool { return sm.allInSync(lk) }); err != nil {
				b.logf("sync: failover: naming slave %d in sync: %v", target.ID, err)
			}
		}
		if all && sm.degraded.Swap(false) {
			b.logf("sync: every partition is in sync with slave %d again", target.ID)
		}
		select {
		case <-lk.done:
			return
		case <-watch:
			// ids/<id>'s children changed: keep the link if its slave is
			// still the one to ship to.
			b.mu.RLock()
			reg := b.reg
			b.mu.RUnlock()
			slaves, w, err := reg.Slaves()
			if err != nil || len(slaves) == 0 || slaves[0] != target {
				return
			}
			watch = w
		case <-b.done:
			return
		case <-tk.C:
			if !sm.syncActive() {
				return
			}
		}
	}
}

// control opens the joiner's own connection to the slave, for offsets.
func (sm *syncMaster) control(s registry.SlaveNode) (*roundConn, error) {
	nc, err := sm.b.replDialPeer(s.Addr, s.TLS, 2*time.Second) // repllink.go
	if err != nil {
		return nil, err
	}
	return &roundConn{timeout: sm.timeout, nc: nc, w: bufio.NewWriter(nc), dec: protocol.NewDecoder(nc, protocol.Limits{})}, nil
}

// join brings sp in sync under lk. First, with puts going on, it waits
// until the slave has pulled up to where the master was when it looked
// (so that a slave far behind, or one that cannot hold the topic, never
// holds puts back); then, with the partition's puts held back and none in
// flight, until the slave's end equals the master's. Each phase waits at
// most sync_timeout.
func (sm *syncMaster) join(lk *syncLink, ctl *roundConn, sp *syncPart) error {
	if err := sm.waitSlave(lk, ctl, sp, sp.l.MaxOffset(), false); err != nil {
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
	if err := sm.waitSlave(lk, ctl, sp, sp.l.MaxOffset(), true); err != nil {
		return err
	}
	sp.end = sp.l.MaxOffset()
	sp.gen.Store(lk.id)
	return nil
}

// waitSlave waits (at most sync_timeout) until the slave's end of sp is
// at least want, or with exact exactly want.
func (sm *syncMaster) waitSlave(lk *syncLink, ctl *roundConn, sp *syncPart, want int64, exact bool) error {
	deadline := time.Now().Add(sm.timeout)
	for {
		r, err := ctl.roundTrip(protocol.AppendOffset(ctl.buf[:0], sp.topic, "meta-sync-join", sp.p, math.MaxInt64, 1))
		if err != nil {
			return err
		}
		if r.Code != protocol.StatusOK {
			return fmt.Errorf("the slave's end: %d %s", r.Code, protocol.Printable(r.Body))
		}
		have, _ := protocol.ParseInt64(r.Body)
		switch {
		case have == want, have > want && !exact:
			return nil
		case have > want:
			return fmt.Errorf("the slave's end %d is past the master's %d (the copies diverged)", have, want)
		}
		if time.Now().After(deadline) || lk.isDead() {
			return fmt.Errorf("the slave is at %d, the master at %d", have, want)
		}
		time.Sleep(time.Millisecond)
	}
}

// syncStats are the sync master's lines of stats.
func (sm *syncMaster) statsLines(kv func(k string, v any)) {
	lk := sm.link.Load()
	addr := "none"
	n, in := 0, 0
	if lk != nil && !lk.isDead() {
		addr = lk.addr
	}
	sm.mu.Lock()
	for _, sp := range sm.parts {
		n++
		if _, ok := sm.inSync(sp); ok {
			in++
		}
	}
	sm.mu.Unlock()
	kv("sync_slave", addr)
	kv("sync_partitions_in_sync", strconv.Itoa(in)+"/"+strconv.Itoa(n))
	kv("sync_shipped", sm.shipped.Load())
	kv("sync_failed", sm.failed.Load())
	kv("sync_refused", sm.refused.Load())
	kv("sync_degraded_puts", sm.degradedPuts.Load())
	kv("sync_tx_shipped", sm.tx.shipped.Load())
}

// allInSync reports whether every partition is in sync under lk.
func (sm *syncMaster) allInSync(lk *syncLink) bool {
	for _, t := range sm.b.topicList() {
		for p, l := range t.parts {
			if sm.part(t.name, int32(p), l).gen.Load() != lk.id || lk.isDead() {
				return false
			}
		}
	}
	return sm.tx.gen.Load() == lk.id // txrepl.go
}
