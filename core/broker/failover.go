package broker

import (
	"errors"
	"fmt"
	"net"
	"os"
	"path/filepath"
	"strconv"
	"sync"
	"sync/atomic"
	"time"

	"github.com/metaq-go/metaq/core/registry"
	"github.com/metaq-go/metaq/core/repl"
	"github.com/metaq-go/metaq/internal/zkpath"
	"github.com/metaq-go/metaq/sdk/protocol"
)

// Automatic failover with fencing (failover = true; docs/replication.md,
// Failover).
//
// The members of a broker id are the broker started as master (slave_id
// -1, "m") and its slaves ("s<N>"). ids/<id>/epoch (persistent) holds
// "<epoch> <holder> <insync>" (zkpath.EpochData): the epoch, a fencing
// token that rises on every claim, the member that holds it, and the slave
// the holder declared in sync. Every write to it is version-checked, so of
// two members that read one version, one writes.
//
//   - The master claims the epoch at start (creating the node with epoch 1,
//     or raising it if it is the holder already) and registers only then
//     (the registry starts in standby). If a slave holds the epoch, the
//     master rejoins it as slave failover_slave_id (rejoin.go), cutting
//     the tail the holder never had first.
//   - A holder acknowledges a put only under a lease: after a read of the
//     epoch node, under the session the epoch was claimed in, shows it
//     still holds the epoch, acknowledgements may go out until the read's
//     send time + session_timeout/2. ZooKeeper expires a session at the
//     earliest session_timeout after it last heard from the client, which
//     is after that send time, so the lease ends before any other member
//     can see the holder's ids/<id>/master go and promote itself. The
//     lease is read again every session_timeout/6.
//   - The holder is fenced (acknowledges nothing more, refuses puts,
//     deletes its registration) when a read shows another epoch or holder,
//     or when its session has expired (the registry then registers nothing
//     again: FenceOnExpiry).
//   - A sync master writes insync = s<N> once every partition is in sync
//     under a link to slave N, and clears it before it links to another
//     slave. sync_degrade is refused with failover, so from that write on
//     every put the master acknowledges in this epoch was acknowledged by
//     slave N first: slave N has every acknowledged message ("in sync").
//   - A slave whose master node is gone (the holder's session ended) and
//     which the epoch node names in sync (or any slave with
//     unclean_election = true) writes epoch+1 with itself as holder; the
//     one whose write lands stops pulling, registers as master with
//     MetaQ's layout and takes puts. A promoted slave refuses every sync.
//   - A member that takes an epoch records where it starts in each
//     partition (data_dir/epochs) before it acknowledges anything in it;
//     a fenced member that does not hold the epoch rejoins the holder as
//     a slave, cutting its divergent tail (rejoin.go).
type failover struct {
	b *Broker
	// member is this member: -1 the master, N slave N (f.me); the master
	// becomes slave failover_slave_id when it rejoins (demote).
	member  atomic.Int32
	st      time.Duration
	unclean bool

	// role is where the member is in the failover state machine
	// (repl.Role: its transitions are listed in core/repl/role.go).
	role   *repl.RoleVar
	epoch  atomic.Int64
	lease  atomic.Int64 // monoNow until which acknowledgements may go out
	sess   atomic.Int64 // ZooKeeper session the epoch was claimed under
	insync atomic.Int32 // the insync written by this holder (-1: none)
	why    atomic.Pointer[string]
	// known is the highest epoch a slave has seen (syncs bound to a lower
	// one are refused).
	known atomic.Int64
	// clearing is set while clearInSyncSoon runs.
	clearing atomic.Bool
	// rejoin.go: the epochs recorded in data_dir/epochs (under bookMu);
	// the loops running (one of each at a time).
	bookMu       sync.Mutex
	book         *repl.EpochBook
	claiming     atomic.Bool
	slaveRunning atomic.Bool
	syncRunning  atomic.Bool

	mu     sync.Mutex   // serialises this member's epoch writes
	claims atomic.Int64 // claims made; a lease loop serves the latest
	logged string       // the last election outcome logged (slave's run loop)
	// Owned by the slave's run loop: the epoch last read, since when, and
	// whether a master was registered under it (an epoch only just claimed
	// gets its holder's registration awaited: elect).
	seenEpoch  int64
	seenAt     time.Time
	seenMaster bool
}

func newFailover(b *Broker) *failover {
	f := &failover{b: b, st: time.Duration(b.config().ZooKeeper.SessionTimeout) * time.Millisecond,
		unclean: b.config().UncleanElection}
	f.member.Store(int32(b.config().SlaveID))
	if b.config().IsSlave() {
		f.role = repl.NewRoleVar(repl.RoleSlave)
	} else {
		f.role = repl.NewRoleVar(repl.RoleFenced) // until it claims
		f.setWhy("not holding the epoch yet")
	}
	f.insync.Store(-1)
	f.book = &repl.EpochBook{}
	return f
}

func (f *failover) setWhy(s string) { f.why.Store(&s) }

// me is this member (-1: the master; N: slave N).
func (f *failover) me() int { return int(f.member.Load()) }

func memberLabel(n int) string {
	if n < 0 {
		return "m"
	}
	return "s" + strconv.Itoa(n)
}

func (f *failover) reg() *registry.Registry {
	f.b.mu.RLock()
	defer f.b.mu.RUnlock()
	return f.b.reg
}

// mayAck reports whether a put may be acknowledged now.
func (f *failover) mayAck() bool {
	switch r := f.role.Load(); {
	case r == repl.RoleSlave:
		return true // a slave acknowledges syncs only
	case r.Holds():
		return monoNow() < f.lease.Load()
	}
	return false
}

// isSlave reports whether the member copies from a holder.
func (f *failover) isSlave() bool { return f.role.Load() == repl.RoleSlave }

// refusal is the reply body of a put that cannot be acknowledged.
func (f *failover) refusal() string {
	why := ""
	if p := f.why.Load(); p != nil {
		why = *p
	}
	if f.role.Load().Holds() {
		why = "no valid ZooKeeper lease on epoch " + strconv.FormatInt(f.epoch.Load(), 10)
	}
	return "fenced: broker " + strconv.Itoa(f.b.config().BrokerID) + " member " + memberLabel(f.me()) + " does not acknowledge puts (" + why + ")"
}

// claimAtStart is the claim loop of the master at start, and of a holder
// fenced by the expiry of its session (ZooKeeper may have lost every
// session, and no other member claimed): it claims the epoch if this
// member holds it (or, for the master, if there is none yet), else it
// stays in standby.
func (f *failover) claimAtStart() {
	b := f.b
	defer b.wg.Done()
	if !f.claiming.CompareAndSwap(false, true) {
		return
	}
	defer f.claiming.Store(false)
	for !b.closed.Load() && f.role.Load() == repl.RoleFenced {
		reg := f.reg()
		if reg == nil {
			return
		}
		t0 := monoNow()
		sess := reg.SessionID()
		if sess == 0 {
			select {
			case <-b.done:
				return
			case <-time.After(20 * time.Millisecond):
			}
			continue
		}
		d, ver, ok, err := reg.ReadEpoch()
		if err == nil {
			next := zkpath.EpochData{Epoch: 1, Holder: f.me(), InSync: -1}
			switch {
			case !ok && f.me() >= 0:
				msg := "the epoch node is gone; this member stays fenced in standby"
				f.setWhy(msg)
				b.logf("failover: %s", msg)
				return
			case !ok && f.book.Last() > 0:
				msg := "the epoch node is gone, but this data directory held epoch " + strconv.FormatInt(f.book.Last(), 10) + "; this member stays fenced in standby"
				f.setWhy(msg)
				b.logf("failover: %s", msg)
				return
			case !ok:
				err = reg.WriteEpoch(next, 0, true)
			case f.me() < 0 && d.Holder == b.config().FailoverSlaveID:
				// This master rejoined as slave failover_slave_id and took
				// the epoch as such before its restart.
				f.member.Store(int32(d.Holder))
				fallthrough
			case d.Holder == f.me():
				next = zkpath.EpochData{Epoch: d.Epoch + 1, Holder: f.me(), InSync: d.InSync}
				err = reg.WriteEpoch(next, ver, false)
			default:
				f.demote("epoch " + d.String() + " is held by " + memberLabel(d.Holder)) // rejoin.go
				return
			}
			if err == nil && reg.SessionID() == sess && sess != 0 {
				f.become(reg, next, sess, t0)
				return
			}
		}
		if err != nil && !errors.Is(err, registry.ErrEpochChanged) {
			b.logf("failover: claiming the epoch: %v; retrying", err)
		}
		select {
		case <-b.done:
			return
		case <-time.After(200 * time.Millisecond):
		}
	}
}

// become makes this member the holder of epoch d, claimed under sess with
// the read sent at t0.
func (f *failover) become(reg *registry.Registry, d zkpath.EpochData, sess int64, t0 int64) {
	// Where epoch d starts, recorded before anything is acknowledged in
	// it (rejoin.go).
	if err := f.recordHeld(d.Epoch); err != nil {
		f.b.logf("failover: ERROR: recording where epoch %d starts in %s: %v (a former holder rejoining this one may keep a divergent tail)", d.Epoch, repl.EpochsFile, err)
	}
	f.mu.Lock()
	f.epoch.Store(d.Epoch)
	f.sess.Store(sess)
	f.insync.Store(int32(d.InSync))
	f.lease.Store(t0 + int64(f.st/2))
	f.role.Move(repl.RoleFenced, repl.RoleMaster) // a claim; an election is RolePromoting until below
	f.mu.Unlock()
	if err := f.markHeld(d); err != nil {
		f.b.logf("failover: ERROR: writing %s: %v", heldFile, err)
	}
	reg.Promote()
	f.role.Move(repl.RolePromoting, repl.RoleMaster)
	f.b.logf("failover: member %s of broker %d holds epoch %d (%s); registering as master", memberLabel(f.me()), f.b.config().BrokerID, d.Epoch, d)
	f.b.wg.Add(1)
	go f.leaseLoop(f.claims.Add(1))
	f.startSync() // rejoin.go
}

// leaseLoop renews the holder's lease until it is fenced or the broker
// closes.
func (f *failover) leaseLoop(claim int64) {
	b := f.b
	defer b.wg.Done()
	every := max(f.st/6, 10*time.Millisecond)
	tk := time.NewTicker(every)
	defer tk.Stop()
	for f.role.Load().Holds() && f.claims.Load() == claim {
		select {
		case <-b.done:
			return
		case <-tk.C:
		}
		f.renew()
	}
}

// renew reads the epoch node and extends the lease if this member still
// holds the epoch under its session; it fences it if not.
func (f *failover) renew() {
	reg := f.reg()
	t0 := monoNow()
	sess := reg.SessionID()
	d, _, ok, err := reg.ReadEpoch()
	if err != nil {
		return // the lease runs out by itself
	}
	switch {
	case sess != f.sess.Load() || reg.SessionID() != sess:
		f.fence("its ZooKeeper session expired")
	case !ok:
		f.fence("the epoch node is gone")
	case d.Epoch != f.epoch.Load() || d.Holder != f.me():
		f.fence("the epoch node says " + d.String() + ", this member held epoch " + strconv.FormatInt(f.epoch.Load(), 10))
	default:
		f.lease.Store(t0 + int64(f.st/2))
	}
}

// fence stops acknowledging and unregisters.
func (f *failover) fence(why string) { f.fenceTo(repl.RoleFenced, why) }

// fenceTo fences this holder into role to: RoleFenced (it claims again
// or rejoins), or RoleHandover (a switchover: it waits for the slave to
// take the epoch).
func (f *failover) fenceTo(to repl.Role, why string) {
	f.mu.Lock()
	if f.role.MoveFrom(to, repl.RoleMaster, repl.RolePromoting, repl.RoleDraining) == 0 {
		f.mu.Unlock()
		return
	}
	f.lease.Store(0)
	f.setWhy("fenced at epoch " + strconv.FormatInt(f.epoch.Load(), 10) + ": " + why)
	f.mu.Unlock()
	if reg := f.reg(); reg != nil {
		reg.Fence()
	}
	f.b.logf("failover: FENCED: member %s of broker %d acknowledges nothing more: %s; registered nowhere until it claims the epoch again or rejoins as a slave",
		memberLabel(f.me()), f.b.config().BrokerID, why)
	if to == repl.RoleFenced && !f.b.closed.Load() {
		f.b.wg.Add(1)
		go f.claimAtStart() // holding it still: claim again; else rejoin as a slave
	}
}

// onExpired is the registry's FenceOnExpiry callback: fenced, it claims
// again if nobody else claimed meanwhile.
func (f *failover) onExpired() {
	f.fence("its ZooKeeper session expired")
	if f.b.closed.Load() || f.role.Load() != repl.RoleFenced {
		return
	}
	f.b.wg.Add(1)
	go f.claimAtStart() // one runs at a time
}

// SetInSync writes insync = slave (-1: none) to the epoch node as the
// holder; the in-memory insync changes only once ZooKeeper has it, so
// while a slave is being unnamed, puts that would be stored here alone
// are still refused. It fences this member if it does not hold the epoch.
func (f *failover) SetInSync(slave int) error {
	f.mu.Lock()
	if !f.role.Load().Holds() {
		f.mu.Unlock()
		return errors.New("not the holder")
	}
	reg := f.reg()
	d, ver, ok, err := reg.ReadEpoch()
	if err != nil {
		f.mu.Unlock()
		return err
	}
	if !ok || d.Epoch != f.epoch.Load() || d.Holder != f.me() {
		f.mu.Unlock()
		f.fence("the epoch node says " + d.String())
		return errors.New("fenced")
	}
	if d.InSync != slave {
		d.InSync = slave
		if err := reg.WriteEpoch(d, ver, false); err != nil {
			f.mu.Unlock()
			return err
		}
		f.b.logf("failover: epoch node %s: %s", d, map[bool]string{true: "slave " + strconv.Itoa(slave) + " is in sync (it may be promoted)", false: "no slave in sync"}[slave >= 0])
	}
	f.insync.Store(int32(slave))
	f.mu.Unlock()
	return nil
}

// NameInSync names slave in sync in the epoch node if inSync still holds
// once puts that would be stored here alone see it named: it is named in
// memory first (such puts are refused from then on, and unname it), then
// inSync is checked, then ZooKeeper is written; if a degraded put began
// meanwhile it is unnamed again.
func (f *failover) NameInSync(slave int, inSync func() bool) error {
	sm := f.b.sync
	f.insync.Store(int32(slave))
	seq := sm.DegradeSeq()
	if !inSync() {
		return f.SetInSync(-1)
	}
	if err := f.SetInSync(slave); err != nil {
		return err // still named in memory: degraded puts unname it first
	}
	if sm.DegradeSeq() != seq {
		return f.SetInSync(-1)
	}
	return nil
}

// clearInSyncSoon unnames the in-sync slave in the background (one at a
// time).
func (f *failover) clearInSyncSoon() {
	if !f.clearing.CompareAndSwap(false, true) {
		return
	}
	go func() {
		defer f.clearing.Store(false)
		if err := f.SetInSync(-1); err != nil {
			f.b.logf("failover: unnaming the in-sync slave: %v", err)
		}
	}()
}

// Elect runs one election for a slave that sees no master registered. It
// reports whether this slave now holds the epoch.
func (f *failover) Elect() bool {
	b := f.b
	reg := f.reg()
	t0 := monoNow()
	sess := reg.SessionID()
	d, ver, ok, err := reg.ReadEpoch()
	say := func(msg string) {
		if msg != f.logged {
			b.logf("failover: slave %d: %s", f.me(), msg)
			f.logged = msg
		}
	}
	switch {
	case err != nil:
		say("reading the epoch: " + err.Error())
		return false
	case !ok:
		say("no epoch node: the master never claimed an epoch (is failover = true on it?); not promoting")
		return false
	case d.InSync != f.me() && !f.unclean:
		say("epoch " + d.String() + ": this slave is not the one in sync; not promoting (unclean_election = false)")
		return false
	}
	if d.Epoch != f.seenEpoch {
		f.seenEpoch, f.seenAt, f.seenMaster = d.Epoch, time.Now(), false
	}
	if !f.seenMaster && time.Since(f.seenAt) < f.st {
		// Epoch d was claimed while no master was registered (a master's
		// restart, or a holder claiming again after its session expired):
		// its holder registers in a moment. Should it have died instead,
		// its lease has run out session_timeout after the claim.
		say("epoch " + d.String() + " is new; waiting up to session_timeout for its holder to register")
		return false
	}
	if there, _, err := reg.MasterExists(); err != nil || there {
		return false
	}
	next := zkpath.EpochData{Epoch: d.Epoch + 1, Holder: f.me(), InSync: -1}
	if err := reg.WriteEpoch(next, ver, false); err != nil {
		if !errors.Is(err, registry.ErrEpochChanged) {
			say("writing the epoch: " + err.Error())
		}
		return false
	}
	if reg.SessionID() != sess {
		return false // the lease loop of a later claim would fence it anyway
	}
	if d.InSync != f.me() {
		b.logf("failover: slave %d: UNCLEAN election (unclean_election = true): epoch %s named slave %s in sync; acknowledged messages this slave lacks are lost",
			f.me(), d, memberLabel(d.InSync))
	}
	// The puller has stopped (elect runs in its loop); syncs are refused
	// from here on, under the partitions' locks.
	f.mu.Lock()
	if b.sync != nil {
		b.sync.SetDegrade(true) // acknowledge alone until a slave is in sync
	}
	f.epoch.Store(next.Epoch)
	// handleSync refuses from now on; puts wait until the epoch's starts
	// are recorded (become).
	f.role.Move(repl.RoleSlave, repl.RolePromoting)
	f.mu.Unlock()
	b.slave.Barrier() // wait for syncs being appended
	b.slave.ClearMaster()
	f.become(reg, next, sess, t0) // and ships to the slaves that join
	return true
}

// Status is the member's failover state.
func (f *failover) Status() repl.FailoverStatus {
	st := repl.FailoverStatus{Role: f.role.Load(), Epoch: f.epoch.Load(), InSync: -1}
	if st.Role == repl.RoleSlave {
		st.Epoch = max(st.Epoch, f.known.Load()) // a slave holds none: the highest it has seen
	}
	if st.Role.Holds() {
		st.LeaseMs = max(0, (f.lease.Load()-monoNow())/1e6)
		st.InSync = int(f.insync.Load())
	}
	return st
}

func memberLabelOr(n int) string {
	if n < 0 {
		return "-"
	}
	return memberLabel(n)
}

// failoverRefuses answers a put, mput or transaction that this member may
// not take (it does not hold the epoch) and reports whether it did.
func (c *conn) failoverRefuses(r *protocol.Request) bool {
	f := c.b.fo
	switch r.Op {
	case protocol.OpPut, protocol.OpMPut, protocol.OpTransaction:
	default:
		return false
	}
	if c.switchoverRefuses(r) { // rejoin.go
		return true
	}
	if f.role.Load().Holds() {
		return false
	}
	if r.Op != protocol.OpTransaction {
		c.b.stats.cmdPut.Add(1)
		c.b.stats.putFailed.Add(1)
	}
	c.reply(protocol.StatusInternalError, f.refusal(), r.Opaque)
	return true
}

// syncEpochItem is the stats item that binds a sync connection to an
// epoch: `stats sync-epoch:<E>` (docs/protocol.md).
const syncEpochItem = "sync-epoch:"

// BindLink binds a new sync link to this holder's epoch: the slave checks
// it against ZooKeeper and refuses syncs on the connection once it knows
// a higher one.
func (f *failover) BindLink(nc net.Conn, timeout time.Duration) error {
	e := f.epoch.Load()
	if !f.role.Load().Holds() || e == 0 {
		return errors.New("not holding the epoch (failover): no sync link yet")
	}
	nc.SetDeadline(time.Now().Add(timeout))
	defer nc.SetDeadline(time.Time{})
	if _, err := nc.Write(protocol.AppendStats(nil, syncEpochItem+strconv.FormatInt(e, 10), 1)); err != nil {
		return err
	}
	dec := protocol.NewDecoder(nc, protocol.Limits{}) // the slave sends nothing more before the first sync
	defer dec.Release()
	var r protocol.Request
	if err := dec.Decode(&r); err != nil {
		return fmt.Errorf("binding the link to epoch %d: %w", e, err)
	}
	if r.Op != protocol.OpResult || r.Code != protocol.StatusOK {
		return fmt.Errorf("binding the link to epoch %d: %d %s", e, r.Code, protocol.Printable(r.Body))
	}
	return nil
}

// bindSyncEpoch answers stats sync-epoch:<E> on a slave: the connection
// takes syncs of epoch E if E is the epoch ZooKeeper holds now.
func (c *conn) bindSyncEpoch(arg string, opaque int32) {
	f := c.b.fo
	e, err := strconv.ParseInt(arg, 10, 64)
	switch {
	case err != nil || e <= 0:
		c.reply(protocol.StatusBadRequest, "stats "+syncEpochItem+": bad epoch "+strconv.Quote(arg), opaque)
		return
	case f == nil || !f.isSlave():
		c.reply(protocol.StatusInternalError, "sync refused: this broker is not a failover slave", opaque)
		return
	case f.rejoinPending():
		// rejoin.go: until it has cut its divergent tail, a former holder
		// must not be joined (its end may equal the holder's by chance)
		// nor named in sync.
		c.reply(protocol.StatusInternalError, "sync refused: this member held an epoch ("+heldFile+
			") and has not checked its copy against the holder yet (rejoin); retry once it has", opaque)
		return
	}
	d, _, ok, err := f.reg().ReadEpoch()
	switch {
	case err != nil:
		c.reply(protocol.StatusInternalError, "sync-epoch: reading the epoch: "+err.Error(), opaque)
		return
	case !ok || d.Epoch != e:
		c.reply(protocol.StatusInternalError, "sync refused: epoch "+arg+" is not the current epoch ("+d.String()+")", opaque)
		return
	}
	f.see(e)
	c.syncEpoch.Store(e)
	c.reply(protocol.StatusOK, "sync-epoch "+arg, opaque)
}

// see raises the highest epoch known to e.
func (f *failover) see(e int64) {
	for {
		k := f.known.Load()
		if e <= k || f.known.CompareAndSwap(k, e) {
			return
		}
	}
}

// LearnEpoch reads the epoch node (a slave's run loop, when a master is
// registered).
func (f *failover) LearnEpoch() {
	if d, _, ok, err := f.reg().ReadEpoch(); err == nil && ok {
		f.see(d.Epoch)
		f.seenEpoch, f.seenAt, f.seenMaster = d.Epoch, time.Now(), true
	}
}

// heldFile, in data_dir, records that this data directory held an epoch:
// its tail may have diverged from the next holder's (messages stored but
// never acknowledged). A rejoin (rejoin.go) cuts that tail and deletes
// it; without data_dir/epochs (written before epochs were recorded) a
// failover member refuses to start on it.
const heldFile = "failover-held"

// rejoinPending reports whether data_dir/failover-held is there: this
// member held an epoch and has not rejoined the holder since (a rejoin
// deletes it once its tail is cut).
func (f *failover) rejoinPending() bool {
	_, err := os.Stat(filepath.Join(f.b.config().DataDir, heldFile))
	return err == nil
}

// markHeld writes heldFile (synced) before this member acknowledges
// anything in epoch d.
func (f *failover) markHeld(d zkpath.EpochData) error {
	path := filepath.Join(f.b.config().DataDir, heldFile)
	fh, err := os.OpenFile(path, os.O_WRONLY|os.O_CREATE|os.O_TRUNC, 0o644)
	if err != nil {
		return err
	}
	_, err = fmt.Fprintf(fh, "broker %d member %s held epoch %d\n", f.b.config().BrokerID, memberLabel(f.me()), d.Epoch)
	if err == nil {
		err = fh.Sync()
	}
	if cerr := fh.Close(); err == nil {
		err = cerr
	}
	return err
}

// Named reports whether this holder named a slave in sync
// (repl.SyncFailover).
func (f *failover) Named() bool { return f.insync.Load() >= 0 }

// UnnameSoon unnames it in the background (repl.SyncFailover).
func (f *failover) UnnameSoon() { f.clearInSyncSoon() }

// Holds reports whether this member holds the epoch (repl.SyncFailover).
func (f *failover) Holds() bool { return f.role.Load().Holds() }

// InSyncSlave is the slave this holder named in sync, -1 for none
// (repl.SyncFailover).
func (f *failover) InSyncSlave() int { return int(f.insync.Load()) }
