package repl

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"os"
	"path/filepath"
	"strconv"
	"sync"
	"sync/atomic"
	"time"

	"github.com/metaq-go/metaq/core/registry"
	"github.com/metaq-go/metaq/core/store"
	"github.com/metaq-go/metaq/internal/fsutil"
	"github.com/metaq-go/metaq/internal/logx"
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
//     master rejoins it as slave failover_slave_id (Rejoin), cutting
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
//     a slave, cutting its divergent tail (Rejoin).
type Failover struct {
	host         FailoverHost
	cfg          Config
	sync         *SyncMaster // nil: not a sync master
	slave        *Slave
	logf, errorf func(format string, args ...any)
	// member is this member: -1 the master, N slave N (f.me); the master
	// becomes slave failover_slave_id when it rejoins (demote).
	member  atomic.Int32
	st      time.Duration
	unclean bool

	// role is where the member is in the failover state machine
	// (Role: its transitions are listed in core/repl/role.go).
	role   *RoleVar
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
	// The epochs recorded in data_dir/epochs (under bookMu);
	// the loops running (one of each at a time).
	bookMu       sync.Mutex
	book         *EpochBook
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

// NewFailover returns the failover state of a member with cfg: sm is its
// sync master (nil if it is none), slave its slave's state (a failover
// master has one for when it rejoins as a slave).
func NewFailover(cfg Config, host FailoverHost, sm *SyncMaster, slave *Slave, log *slog.Logger) *Failover {
	f := &Failover{host: host, cfg: cfg, sync: sm, slave: slave, st: cfg.SessionTimeout, unclean: cfg.UncleanElection,
		logf: logx.Printf(log, slog.LevelInfo), errorf: logx.Printf(log, slog.LevelError)}
	f.member.Store(int32(cfg.SlaveID))
	if cfg.SlaveID >= 0 {
		f.role = NewRoleVar(RoleSlave)
	} else {
		f.role = NewRoleVar(RoleFenced) // until it claims
		f.setWhy("not holding the epoch yet")
	}
	f.insync.Store(-1)
	f.book = &EpochBook{}
	return f
}

func (f *Failover) setWhy(s string) { f.why.Store(&s) }

// me is this member (-1: the master; N: slave N).
func (f *Failover) me() int { return int(f.member.Load()) }

// MemberLabel names member n: "m" the master, "s<N>" slave N.
func MemberLabel(n int) string {
	if n < 0 {
		return "m"
	}
	return "s" + strconv.Itoa(n)
}

func (f *Failover) reg() *registry.Registry { return f.host.Registry() }

// MayAck reports whether a put may be acknowledged now.
func (f *Failover) MayAck() bool {
	switch r := f.role.Load(); {
	case r == RoleSlave:
		return true // a slave acknowledges syncs only
	case r.Holds():
		return monoNow() < f.lease.Load()
	}
	return false
}

// IsSlave reports whether the member copies from a holder.
func (f *Failover) IsSlave() bool { return f.role.Load() == RoleSlave }

// refusal is the reply body of a put that cannot be acknowledged.
func (f *Failover) refusal() string {
	why := ""
	if p := f.why.Load(); p != nil {
		why = *p
	}
	if f.role.Load().Holds() {
		why = "no valid ZooKeeper lease on epoch " + strconv.FormatInt(f.epoch.Load(), 10)
	}
	return "fenced: broker " + strconv.Itoa(f.cfg.BrokerID) + " member " + MemberLabel(f.me()) + " does not acknowledge puts (" + why + ")"
}

// claimAtStart is the claim loop of the master at start, and of a holder
// fenced by the expiry of its session (ZooKeeper may have lost every
// session, and no other member claimed): it claims the epoch if this
// member holds it (or, for the master, if there is none yet), else it
// stays in standby.
func (f *Failover) claimAtStart() {
	if !f.claiming.CompareAndSwap(false, true) {
		return
	}
	defer f.claiming.Store(false)
	for !f.host.Closed() && f.role.Load() == RoleFenced {
		reg := f.reg()
		if reg == nil {
			return
		}
		t0 := monoNow()
		sess := reg.SessionID()
		if sess == 0 {
			select {
			case <-f.host.Done():
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
				f.logf("failover: %s", msg)
				return
			case !ok && f.book.Last() > 0:
				msg := "the epoch node is gone, but this data directory held epoch " + strconv.FormatInt(f.book.Last(), 10) + "; this member stays fenced in standby"
				f.setWhy(msg)
				f.logf("failover: %s", msg)
				return
			case !ok:
				err = reg.WriteEpoch(next, 0, true)
			case f.me() < 0 && d.Holder == f.cfg.FailoverSlaveID:
				// This master rejoined as slave failover_slave_id and took
				// the epoch as such before its restart.
				f.member.Store(int32(d.Holder))
				fallthrough
			case d.Holder == f.me():
				next = zkpath.EpochData{Epoch: d.Epoch + 1, Holder: f.me(), InSync: d.InSync}
				err = reg.WriteEpoch(next, ver, false)
			default:
				f.demote("epoch " + d.String() + " is held by " + MemberLabel(d.Holder)) // rejoins as a slave
				return
			}
			if err == nil && reg.SessionID() == sess && sess != 0 {
				f.become(reg, next, sess, t0)
				return
			}
		}
		if err != nil && !errors.Is(err, registry.ErrEpochChanged) {
			f.logf("failover: claiming the epoch: %v; retrying", err)
		}
		select {
		case <-f.host.Done():
			return
		case <-time.After(200 * time.Millisecond):
		}
	}
}

// become makes this member the holder of epoch d, claimed under sess with
// the read sent at t0.
func (f *Failover) become(reg *registry.Registry, d zkpath.EpochData, sess int64, t0 int64) {
	// Where epoch d starts, recorded before anything is acknowledged in
	// it (Rejoin).
	if err := f.recordHeld(d.Epoch); err != nil {
		f.errorf("failover: ERROR: recording where epoch %d starts in %s: %v (a former holder rejoining this one may keep a divergent tail)", d.Epoch, EpochsFile, err)
	}
	f.mu.Lock()
	f.epoch.Store(d.Epoch)
	f.sess.Store(sess)
	f.insync.Store(int32(d.InSync))
	f.lease.Store(t0 + int64(f.st/2))
	f.role.Move(RoleFenced, RoleMaster) // a claim; an election is RolePromoting until below
	f.mu.Unlock()
	if err := f.markHeld(d); err != nil {
		f.errorf("failover: ERROR: writing %s: %v", HeldFile, err)
	}
	reg.Promote()
	f.role.Move(RolePromoting, RoleMaster)
	f.logf("failover: member %s of broker %d holds epoch %d (%s); registering as master", MemberLabel(f.me()), f.cfg.BrokerID, d.Epoch, d)
	claim := f.claims.Add(1)
	f.host.Go(func() { f.leaseLoop(claim) })
	f.startSync()
}

// leaseLoop renews the holder's lease until it is fenced or the broker
// closes.
func (f *Failover) leaseLoop(claim int64) {
	every := max(f.st/6, 10*time.Millisecond)
	tk := time.NewTicker(every)
	defer tk.Stop()
	for f.role.Load().Holds() && f.claims.Load() == claim {
		select {
		case <-f.host.Done():
			return
		case <-tk.C:
		}
		f.renew()
	}
}

// renew reads the epoch node and extends the lease if this member still
// holds the epoch under its session; it fences it if not.
func (f *Failover) renew() {
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
func (f *Failover) fence(why string) { f.fenceTo(RoleFenced, why) }

// fenceTo fences this holder into role to: RoleFenced (it claims again
// or rejoins), or RoleHandover (a switchover: it waits for the slave to
// take the epoch).
func (f *Failover) fenceTo(to Role, why string) {
	f.mu.Lock()
	if f.role.MoveFrom(to, RoleMaster, RolePromoting, RoleDraining) == 0 {
		f.mu.Unlock()
		return
	}
	f.lease.Store(0)
	f.setWhy("fenced at epoch " + strconv.FormatInt(f.epoch.Load(), 10) + ": " + why)
	f.mu.Unlock()
	if reg := f.reg(); reg != nil {
		reg.Fence()
	}
	f.logf("failover: FENCED: member %s of broker %d acknowledges nothing more: %s; registered nowhere until it claims the epoch again or rejoins as a slave",
		MemberLabel(f.me()), f.cfg.BrokerID, why)
	if to == RoleFenced && !f.host.Closed() {
		f.host.Go(f.claimAtStart) // holding it still: claim again; else rejoin as a slave
	}
}

// OnExpired is the registry's FenceOnExpiry callback: fenced, it claims
// again if nobody else claimed meanwhile.
func (f *Failover) OnExpired() {
	f.fence("its ZooKeeper session expired")
	if f.host.Closed() || f.role.Load() != RoleFenced {
		return
	}
	f.host.Go(f.claimAtStart) // one runs at a time
}

// SetInSync writes insync = slave (-1: none) to the epoch node as the
// holder; the in-memory insync changes only once ZooKeeper has it, so
// while a slave is being unnamed, puts that would be stored here alone
// are still refused. It fences this member if it does not hold the epoch.
func (f *Failover) SetInSync(slave int) error {
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
		f.logf("failover: epoch node %s: %s", d, map[bool]string{true: "slave " + strconv.Itoa(slave) + " is in sync (it may be promoted)", false: "no slave in sync"}[slave >= 0])
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
func (f *Failover) NameInSync(slave int, inSync func() bool) error {
	sm := f.sync
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
func (f *Failover) clearInSyncSoon() {
	if !f.clearing.CompareAndSwap(false, true) {
		return
	}
	go func() {
		defer f.clearing.Store(false)
		if err := f.SetInSync(-1); err != nil {
			f.logf("failover: unnaming the in-sync slave: %v", err)
		}
	}()
}

// Elect runs one election for a slave that sees no master registered. It
// reports whether this slave now holds the epoch.
func (f *Failover) Elect() bool {
	reg := f.reg()
	t0 := monoNow()
	sess := reg.SessionID()
	d, ver, ok, err := reg.ReadEpoch()
	say := func(msg string) {
		if msg != f.logged {
			f.logf("failover: slave %d: %s", f.me(), msg)
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
		f.logf("failover: slave %d: UNCLEAN election (unclean_election = true): epoch %s named slave %s in sync; acknowledged messages this slave lacks are lost",
			f.me(), d, MemberLabel(d.InSync))
	}
	// The puller has stopped (elect runs in its loop); syncs are refused
	// from here on, under the partitions' locks.
	f.mu.Lock()
	if f.sync != nil {
		f.sync.SetDegrade(true) // acknowledge alone until a slave is in sync
	}
	f.epoch.Store(next.Epoch)
	// handleSync refuses from now on; puts wait until the epoch's starts
	// are recorded (become).
	f.role.Move(RoleSlave, RolePromoting)
	f.mu.Unlock()
	f.slave.Barrier() // wait for syncs being appended
	f.slave.ClearMaster()
	f.become(reg, next, sess, t0) // and ships to the slaves that join
	return true
}

// Status is the member's failover state.
func (f *Failover) Status() FailoverStatus {
	st := FailoverStatus{Role: f.role.Load(), Epoch: f.epoch.Load(), InSync: -1}
	if st.Role == RoleSlave {
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
	return MemberLabel(n)
}

// SyncEpochItem is the stats item that binds a sync connection to an
// epoch: `stats sync-epoch:<E>` (docs/protocol.md).
const SyncEpochItem = "sync-epoch:"

// BindLink binds a new sync link to this holder's epoch: the slave checks
// it against ZooKeeper and refuses syncs on the connection once it knows
// a higher one.
func (f *Failover) BindLink(nc net.Conn, timeout time.Duration) error {
	e := f.epoch.Load()
	if !f.role.Load().Holds() || e == 0 {
		return errors.New("not holding the epoch (failover): no sync link yet")
	}
	nc.SetDeadline(time.Now().Add(timeout))
	defer nc.SetDeadline(time.Time{})
	if _, err := nc.Write(protocol.AppendStats(nil, SyncEpochItem+strconv.FormatInt(e, 10), 1)); err != nil {
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

// see raises the highest epoch known to e.
func (f *Failover) see(e int64) {
	for {
		k := f.known.Load()
		if e <= k || f.known.CompareAndSwap(k, e) {
			return
		}
	}
}

// LearnEpoch reads the epoch node (a slave's run loop, when a master is
// registered).
func (f *Failover) LearnEpoch() {
	if d, _, ok, err := f.reg().ReadEpoch(); err == nil && ok {
		f.see(d.Epoch)
		f.seenEpoch, f.seenAt, f.seenMaster = d.Epoch, time.Now(), true
	}
}

// HeldFile, in data_dir, records that this data directory held an epoch:
// its tail may have diverged from the next holder's (messages stored but
// never acknowledged). A rejoin (Rejoin) cuts that tail and deletes
// it; without data_dir/epochs (written before epochs were recorded) a
// failover member refuses to start on it.
const HeldFile = "failover-held"

// rejoinPending reports whether data_dir/failover-held is there: this
// member held an epoch and has not rejoined the holder since (a rejoin
// deletes it once its tail is cut).
func (f *Failover) rejoinPending() bool {
	_, err := os.Stat(filepath.Join(f.cfg.DataDir, HeldFile))
	return err == nil
}

// markHeld writes HeldFile (synced) before this member acknowledges
// anything in epoch d.
func (f *Failover) markHeld(d zkpath.EpochData) error {
	path := filepath.Join(f.cfg.DataDir, HeldFile)
	fh, err := os.OpenFile(path, os.O_WRONLY|os.O_CREATE|os.O_TRUNC, 0o644)
	if err != nil {
		return err
	}
	_, err = fmt.Fprintf(fh, "broker %d member %s held epoch %d\n", f.cfg.BrokerID, MemberLabel(f.me()), d.Epoch)
	if err == nil {
		err = fh.Sync()
	}
	if cerr := fh.Close(); err == nil {
		err = cerr
	}
	return err
}

// Named reports whether this holder named a slave in sync
// (SyncFailover).
func (f *Failover) Named() bool { return f.insync.Load() >= 0 }

// UnnameSoon unnames it in the background (SyncFailover).
func (f *Failover) UnnameSoon() { f.clearInSyncSoon() }

// Holds reports whether this member holds the epoch (SyncFailover).
func (f *Failover) Holds() bool { return f.role.Load().Holds() }

// InSyncSlave is the slave this holder named in sync, -1 for none
// (SyncFailover).
func (f *Failover) InSyncSlave() int { return int(f.insync.Load()) }

// A former holder rejoins as a slave (docs/replication.md, Failover):
//
//   - Every member keeps data_dir/epochs (epochs.go, EpochBook): where each epoch
//     whose records it holds starts, per partition. The holder of epoch E
//     records its own ends when it takes E, before it acknowledges
//     anything in E.
//   - A member that does not hold the epoch copies from the holder as a
//     slave. Before it pulls from a holder whose epoch is above its last
//     recorded one (L), it asks the holder (`stats epoch-start:<L>`) where
//     the first epoch after L starts in each partition, and cuts each of
//     its partitions to min(its end, that offset) (store.Log.Truncate),
//     logging what it cut; then it records the holder's entries after L
//     and deletes data_dir/failover-held.
//   - A master fenced or restarted while another member holds the epoch
//     rejoins this way by itself, as slave failover_slave_id.
//
// Why the cut bytes were never acknowledged: the holder of epoch L+1 took
// it either as the slave named in sync under L (which received, before the
// holder of L acknowledged it, every message acknowledged in L, at the
// same offsets: its end when it took L+1 is at or past every acknowledged
// offset of L), or as the master reclaiming its own epoch (whose end then
// is its whole log). So every byte of the rejoiner at or past the start of
// L+1 was written in L or earlier but never reached the holder of L+1:
// never acknowledged. Only unclean_election = true breaks this (logged as
// UNCLEAN when it happens).

// The stats items of failover (docs/protocol.md).
const (
	EpochStartItem = "epoch-start:"
	SwitchoverItem = "switchover"
)

func (f *Failover) whyNot() string {
	if p := f.why.Load(); p != nil {
		return *p
	}
	return "not the holder"
}

// recordHeld records, durably, that this member takes epoch e with its
// partitions' ends as the epoch's starts. Appends in flight are waited
// for (a promoted slave's last syncs).
func (f *Failover) recordHeld(e int64) error {
	starts := map[PartKey]int64{}
	err := f.eachLog(func(topic string, p int, l *store.Log) error {
		end, err := l.Settle()
		if err != nil {
			return fmt.Errorf("%s-%d: %w", topic, p, err)
		}
		starts[PartKey{Topic: topic, P: int32(p)}] = end
		return nil
	})
	if err != nil {
		return err
	}
	f.bookMu.Lock()
	defer f.bookMu.Unlock()
	nb := f.book.UpTo(e - 1)
	nb.Add(EpochEntry{Epoch: e, Held: true, Starts: starts})
	if err := nb.Save(f.cfg.DataDir); err != nil {
		return err
	}
	f.book = nb
	return nil
}

// LoadBook reads data_dir/epochs at start. A data directory marked
// failover-held without it (written before epochs were recorded) cannot
// be rejoined safely: it is refused, as before.
func (f *Failover) LoadBook() error {
	dir := f.cfg.DataDir
	eb, err := LoadEpochs(dir)
	if err != nil {
		return fmt.Errorf("failover: %w", err)
	}
	f.book = eb
	if eb.Last() > 0 {
		return nil
	}
	path := filepath.Join(dir, HeldFile)
	data, err := os.ReadFile(path)
	if errors.Is(err, os.ErrNotExist) {
		return nil
	}
	if err != nil {
		return fmt.Errorf("failover: %w", err)
	}
	return fmt.Errorf("failover: %s says %q but there is no %s recording where the epochs it held start: "+
		"its tail cannot be checked against the holder; move the data directory away and start the slave on an empty one (it copies everything afresh)",
		path, string(data), EpochsFile)
}

// dropHeld deletes data_dir/failover-held once the rejoin is recorded.
func (f *Failover) dropHeld() error {
	dir := f.cfg.DataDir
	err := os.Remove(filepath.Join(dir, HeldFile))
	if errors.Is(err, os.ErrNotExist) {
		return nil
	}
	if err != nil {
		return err
	}
	return fsutil.SyncDir(dir)
}

// Rejoin runs on a failover slave before it pulls from the holder at
// addr: if the holder's epoch is above the last one recorded here, it
// cuts what follows the start of the next epoch and records the holder's
// epochs (see the top of the file). It dials as the slave's pulls do
// (TLS to a TLS-only holder, the replication user's login).
func (f *Failover) Rejoin(addr string, tlsMaster bool) error {
	s := f.slave
	f.bookMu.Lock()
	last := f.book.Last()
	f.bookMu.Unlock()
	nc, err := f.host.Dial(context.Background(), addr, tlsMaster, DialTimeout)
	if err != nil {
		return err
	}
	defer nc.Close()
	rc := NewRoundConn(nc, DialTimeout+f.st)
	defer rc.Close()
	ask := func(e int64) (int64, int64, map[PartKey]int64, error) {
		r, err := rc.RoundTrip(protocol.AppendStats(nil, EpochStartItem+strconv.FormatInt(e, 10), 1))
		if err != nil {
			return 0, 0, nil, err
		}
		if r.Code != protocol.StatusOK {
			return 0, 0, nil, fmt.Errorf("stats %s%d: %d %s", EpochStartItem, e, r.Code, protocol.Printable(r.Body))
		}
		return ParseStarts(r.Body)
	}
	next, cur, starts, err := ask(last)
	if err != nil {
		return err
	}
	switch {
	case cur == last:
		return f.dropHeld() // copying in an epoch known here already
	case cur < last:
		return fmt.Errorf("the master at %s holds epoch %d, below epoch %d recorded here; waiting for the holder of a later one", addr, cur, last)
	case next == 0:
		return fmt.Errorf("the holder at %s (epoch %d) knows no start of an epoch after %d", addr, cur, last)
	}
	// The puller and the syncs skip by the partitions' append states
	// from here on: they are the logs' own (a former holder appended its
	// puts past what it had as a slave).
	if err := s.ResetLogStates(); err != nil {
		return err
	}
	who := "the holder"
	if d, _, ok, err := f.reg().ReadEpoch(); err == nil && ok && d.Epoch == cur {
		who = memberName(f.cfg.BrokerID, d.Holder)
	}
	if last > 0 {
		err := f.eachLog(func(topic string, p int, l *store.Log) error {
			k := PartKey{Topic: topic, P: int32(p)}
			off, ok := starts[k]
			if !ok {
				if l.MaxOffset() > l.MinOffset() {
					f.logf("failover: partition %s: the holder has no start of epoch %d for it (it has no such partition); not cut", k, next)
				}
				return nil
			}
			if off >= l.MaxOffset() {
				return nil
			}
			sl := s.LogState(l)
			sl.Lock()
			cut, err := l.Truncate(off)
			sl.Reset(l.LastID(), l.MaxOffset()) // the next append lands at the cut
			sl.Unlock()
			if err != nil {
				return fmt.Errorf("partition %s: cutting at %d (epoch %d starts there on %s): %w", k, off, next, who, err)
			}
			f.logf("failover: partition %s: cut %d bytes %d..%d never acknowledged (epoch %d starts at %d on %s); %d records, last id now %d",
				k, cut.Bytes(), cut.From, cut.To, next, off, who, cut.Records, cut.LastID)
			return nil
		})
		if err != nil {
			return err
		}
	}
	// The holder's epochs after last (its history, up to its own).
	f.bookMu.Lock()
	nb := f.book.UpTo(last)
	f.bookMu.Unlock()
	nb.Add(EpochEntry{Epoch: next, Starts: starts})
	for e := next; e < cur; {
		n, _, st, err := ask(e)
		if err != nil {
			return err
		}
		if n <= e {
			break
		}
		nb.Add(EpochEntry{Epoch: n, Starts: st})
		e = n
	}
	if err := nb.Save(f.cfg.DataDir); err != nil {
		return err
	}
	f.bookMu.Lock()
	f.book = nb
	f.bookMu.Unlock()
	if err := f.dropHeld(); err != nil {
		return err
	}
	f.logf("failover: member %s of broker %d copies from %s at epoch %d (the epochs after %d recorded in %s)",
		MemberLabel(f.me()), f.cfg.BrokerID, who, cur, last, EpochsFile)
	return nil
}

// memberName is "broker <id> master" or "broker <id> slave <N>".
func memberName(id, member int) string {
	if member < 0 {
		return "broker " + strconv.Itoa(id) + " master"
	}
	return "broker " + strconv.Itoa(id) + " slave " + strconv.Itoa(member)
}

// demote makes a member that does not hold the epoch a slave of the
// holder: the master becomes slave failover_slave_id. Its slave loop
// rejoins (cutting its divergent tail) before it pulls.
func (f *Failover) demote(why string) {
	if f.host.Closed() {
		return
	}
	f.mu.Lock()
	if f.role.MoveFrom(RoleSlave, RoleFenced, RoleHandover) == 0 {
		f.mu.Unlock()
		return
	}
	if f.me() < 0 {
		f.member.Store(int32(f.cfg.FailoverSlaveID))
	}
	f.insync.Store(-1)
	f.setWhy("a slave of the holder (" + why + ")")
	f.mu.Unlock()
	f.slave.ClearMaster()
	if reg := f.reg(); reg != nil {
		reg.Demote(f.me())
	}
	f.logf("failover: member of broker %d rejoins as slave %d: %s", f.cfg.BrokerID, f.me(), why)
	f.StartSlave()
}

// StartSlave runs the slave loop (Slave.Run) unless it runs already;
// it ends when this member is promoted.
func (f *Failover) StartSlave() {
	if !f.slaveRunning.CompareAndSwap(false, true) {
		return
	}
	f.host.Go(func() {
		for {
			f.slave.Run()
			f.slaveRunning.Store(false)
			if f.host.Closed() || f.role.Load() != RoleSlave || !f.slaveRunning.CompareAndSwap(false, true) {
				return
			}
			// demoted again meanwhile
		}
	})
}

// startSync runs the sync master's loop (syncgo) unless it runs
// already; it ends when this member stops holding the epoch.
func (f *Failover) startSync() {
	if f.sync == nil || !f.syncRunning.CompareAndSwap(false, true) {
		return
	}
	f.host.Go(func() {
		for {
			f.sync.Run()
			f.syncRunning.Store(false)
			if f.host.Closed() || !f.role.Load().Holds() || !f.syncRunning.CompareAndSwap(false, true) {
				return
			}
		}
	})
}

// Switchover is the handover (metaq failover, `stats switchover` on the
// holder): it stops taking puts, waits until its in-sync slave has every
// message it stored, fences itself so that the slave promotes with
// epoch+1, and rejoins as a slave. It returns what happened, or why not
// (a *Error).
func (f *Failover) Switchover() (string, error) {
	sm := f.sync
	if r := f.role.Load(); r == RoleDraining || r == RoleHandover {
		return "", errorf(Refused, "switchover: one is running already")
	}
	drained := false
	refuse := func(why string) (string, error) {
		if drained {
			f.role.Move(RoleDraining, RoleMaster)
		}
		return "", errorf(Refused, "switchover refused: "+why)
	}
	if !f.role.Load().Holds() || sm == nil {
		return refuse("this broker does not hold the epoch (" + f.whyNot() + ")")
	}
	slave := int(f.insync.Load())
	lk := sm.Link()
	if slave < 0 || lk == nil || !sm.AllInSync(lk) {
		return refuse("no slave is in sync (failover_insync " + memberLabelOr(slave) + "): a handover now could lose acknowledged messages; wait until one is (stats: failover_insync s<N>)")
	}
	epoch := f.epoch.Load()
	f.logf("failover: switchover to slave %d requested: refusing puts, waiting for the slave to have everything", slave)
	if !f.role.Move(RoleMaster, RoleDraining) {
		if r := f.role.Load(); r == RoleDraining || r == RoleHandover {
			return "", errorf(Refused, "switchover: one is running already")
		}
		return refuse("this broker does not hold the epoch (" + f.whyNot() + ")")
	}
	drained = true
	deadline := time.Now().Add(sm.Timeout() + f.st)
	ctl, err := sm.Control(lk.Addr(), lk.TLS())
	if err != nil {
		return refuse("the slave's control connection: " + err.Error())
	}
	defer ctl.Close()
	var why string
	f.eachLog(func(topic string, p int, l *store.Log) error {
		sp := sm.Part(topic, int32(p), l)
		// A barrier: a put that passed the dispatch check before draining
		// was set counts itself in flight under sp's lock, or sees
		// draining there and is refused (LateRefusal).
		sp.Lock()
		//lint:ignore SA2001 a barrier, see above
		sp.Unlock()
		for sp.InFlight() > 0 {
			if time.Now().After(deadline) {
				why = fmt.Sprintf("%s-%d: puts in flight did not complete", topic, p)
				return errStop
			}
			time.Sleep(time.Millisecond)
		}
		if err := l.Flush(); err != nil {
			why = err.Error()
			return errStop
		}
		if err := sm.WaitSlave(lk, ctl.SlaveEnd, sp, l.MaxOffset(), true); err != nil {
			why = fmt.Sprintf("%s-%d: %v", topic, p, err)
			return errStop
		}
		return nil
	})
	if why != "" {
		return refuse(why)
	}
	if lk.Dead() || int(f.insync.Load()) != slave || f.epoch.Load() != epoch {
		return refuse("the sync link to the slave was lost meanwhile")
	}
	// Fenced into RoleHandover: no claim again, puts get 503 until this
	// member is a slave.
	f.fenceTo(RoleHandover, "switchover to slave "+strconv.Itoa(slave)+" (metaq failover)")
	// The slave sees ids/<id>/master go and promotes itself (it is named
	// in sync); then this member rejoins it.
	wait := time.Now().Add(2*f.st + 5*time.Second)
	for {
		d, _, ok, err := f.reg().ReadEpoch()
		if err == nil && ok && d.Epoch > epoch {
			for time.Now().Before(wait) { // until the new holder has registered (takes puts)
				if there, _, err := f.reg().MasterExists(); err == nil && there {
					break
				}
				time.Sleep(10 * time.Millisecond)
			}
			f.demote("switchover: " + MemberLabel(d.Holder) + " holds epoch " + strconv.FormatInt(d.Epoch, 10))
			if d.Holder != slave {
				return "", errorf(Refused, "switchover: epoch "+d.String()+" was taken by "+MemberLabel(d.Holder)+", not slave "+strconv.Itoa(slave))
			}
			return "switchover: slave " + strconv.Itoa(slave) + " holds epoch " + strconv.FormatInt(d.Epoch, 10) + "; member " + MemberLabel(f.me()) + " rejoins as its slave", nil
		}
		if time.Now().After(wait) || f.host.Closed() {
			f.role.Move(RoleHandover, RoleFenced)
			f.host.Go(f.claimAtStart) // nobody took over: claim again (or rejoin)
			return "", errorf(Refused, "switchover: slave "+strconv.Itoa(slave)+" did not take the epoch within "+(2*f.st+5*time.Second).String()+"; this member claims it again")
		}
		time.Sleep(20 * time.Millisecond)
	}
}

// drainRefusal is the reply body of a put refused while a switchover
// drains this holder or while it takes the epoch.
func (f *Failover) drainRefusal() string {
	what := "switching over to its in-sync slave (metaq failover)"
	if f.role.Load() == RolePromoting {
		what = "taking the epoch"
	}
	id := strconv.Itoa(f.cfg.BrokerID)
	return "broker " + id + " is " + what + "; retry: the new master registers in ids/" + id + "/master in a moment"
}

// LateRefusal is, under the partition's sync lock, why a put that passed
// Refuses must not be appended after all (nil if it may): a switchover
// began to drain this holder (its barrier on that lock orders the two:
// the drain waits for the puts counted in flight before it, and those
// after it see draining), or this member stopped holding the epoch
// meanwhile. So no put is appended here once the drain has taken a
// partition's end.
func (f *Failover) LateRefusal() error {
	switch {
	case f.role.Load().Retry():
		return errorf(Busy, f.drainRefusal())
	case !f.role.Load().Holds():
		return errorf(Fenced, f.refusal())
	}
	return nil
}

// FailoverHost is what failover needs of the broker: Host, and running
// a goroutine the broker waits for when it closes.
type FailoverHost interface {
	Host
	Go(fn func())
}

// errStop ends an eachLog walk early.
var errStop = errors.New("stop")

// eachLog calls fn with every partition of every topic, in order, until
// it returns an error, which it returns.
func (f *Failover) eachLog(fn func(topic string, p int, l *store.Log) error) error {
	for _, name := range f.host.Topics() {
		n, err := f.host.Partitions(name)
		if err != nil {
			continue // deleted meanwhile
		}
		for p := range n {
			l, err := f.host.Log(name, p)
			if err != nil {
				break
			}
			if err := fn(name, p, l); err != nil {
				return err
			}
		}
	}
	return nil
}

// monoNow is a monotonic clock in nanoseconds (leases).
func monoNow() int64 { return int64(time.Since(monoEpoch)) }

var monoEpoch = time.Now()

// Role is the member's role now.
func (f *Failover) Role() Role { return f.role.Load() }

// Start runs the claim loop of a master at start (it claims the epoch,
// or rejoins the holder as a slave).
func (f *Failover) Start() { f.host.Go(f.claimAtStart) }

// Refusal is why a put is not acknowledged (MayAck false): fenced, or no
// lease.
func (f *Failover) Refusal() error { return errorf(Fenced, f.refusal()) }

// Refuses is why this member takes no put, mput or transaction now (nil
// if it does): a switchover drains it or it is taking the epoch (Busy),
// or it does not hold the epoch (Fenced).
func (f *Failover) Refuses() error {
	r := f.role.Load()
	switch {
	case r.Retry():
		return errorf(Busy, f.drainRefusal())
	case r.Holds():
		return nil
	}
	return errorf(Fenced, f.refusal())
}

// BindSyncEpoch binds a sync connection of a slave to epoch arg (`stats
// sync-epoch:<E>`): it returns E if E is the epoch ZooKeeper holds now.
// The connection takes syncs of E only (SyncRefusal). f may be nil
// (failover is off).
func (f *Failover) BindSyncEpoch(arg string) (int64, error) {
	e, err := strconv.ParseInt(arg, 10, 64)
	switch {
	case err != nil || e <= 0:
		return 0, errorf(Invalid, "stats "+SyncEpochItem+": bad epoch "+strconv.Quote(arg))
	case f == nil || !f.IsSlave():
		return 0, errorf(Refused, "sync refused: this broker is not a failover slave")
	case f.rejoinPending():
		// Until it has cut its divergent tail, a former holder must not
		// be joined (its end may equal the holder's by chance) nor named
		// in sync.
		return 0, errorf(Refused, "sync refused: this member held an epoch ("+HeldFile+
			") and has not checked its copy against the holder yet (rejoin); retry once it has")
	}
	d, _, ok, err := f.reg().ReadEpoch()
	switch {
	case err != nil:
		return 0, errorf(Refused, "sync-epoch: reading the epoch: "+err.Error())
	case !ok || d.Epoch != e:
		return 0, errorf(Refused, "sync refused: epoch "+arg+" is not the current epoch ("+d.String()+")")
	}
	f.see(e)
	return e, nil
}

// SyncRefusal is why this member takes no sync or txsync on a connection
// bound to epoch bound (0: none) now, nil when it does: it is not a
// failover slave any more, or the connection is not bound to the current
// epoch.
func (f *Failover) SyncRefusal(bound int64) error {
	if !f.IsSlave() {
		return errorf(Refused, "sync refused: this broker holds epoch "+strconv.FormatInt(f.epoch.Load(), 10)+" now (failover); it takes no sync")
	}
	if bound == 0 || bound < f.known.Load() {
		return errorf(Refused, "sync refused: the connection is bound to epoch "+strconv.FormatInt(bound, 10)+
			", the current epoch is "+strconv.FormatInt(f.known.Load(), 10)+" (failover: bind it first with stats "+SyncEpochItem+"<epoch>)")
	}
	return nil
}

// EpochStart answers `stats epoch-start:<E>` on the holder: the start of
// the first epoch after E it knows, per partition (FormatStarts). f may
// be nil (failover is off).
func (f *Failover) EpochStart(arg string) ([]byte, error) {
	e, err := strconv.ParseInt(arg, 10, 64)
	switch {
	case err != nil || e < 0:
		return nil, errorf(Invalid, "stats "+EpochStartItem+": bad epoch "+strconv.Quote(ProtocolLine(arg)))
	case f == nil:
		return nil, errorf(Refused, "epoch-start: failover is off on this broker")
	case !f.role.Load().Holds() || f.role.Load() == RolePromoting:
		return nil, errorf(Refused, "epoch-start: this broker does not hold the epoch now ("+f.whyNot()+")")
	}
	cur := f.epoch.Load()
	f.bookMu.Lock()
	en, ok := f.book.FirstAfter(e)
	f.bookMu.Unlock()
	if !ok {
		return FormatStarts(0, cur, nil), nil
	}
	starts := make(map[PartKey]int64, len(en.Starts))
	for k, v := range en.Starts {
		starts[k] = v
	}
	if en.Epoch == cur {
		// A partition created in this epoch: all its records are of it.
		f.eachLog(func(topic string, p int, l *store.Log) error {
			if _, ok := starts[PartKey{Topic: topic, P: int32(p)}]; !ok {
				starts[PartKey{Topic: topic, P: int32(p)}] = l.MinOffset()
			}
			return nil
		})
	}
	return FormatStarts(en.Epoch, cur, starts), nil
}
