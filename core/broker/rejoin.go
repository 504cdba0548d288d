package broker

import (
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"time"

	"github.com/metaq-go/metaq/core/repl"
	"github.com/metaq-go/metaq/internal/fsutil"
	"github.com/metaq-go/metaq/sdk/protocol"
)

// A former holder rejoins as a slave (docs/replication.md, Failover):
//
//   - Every member keeps data_dir/epochs (epochs.go): where each epoch
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
	epochStartItem = "epoch-start:"
	switchoverItem = "switchover"
)

// epochStart answers `stats epoch-start:<E>` on the holder: the start of
// the first epoch after E it knows, per partition.
func (c *conn) epochStart(arg string, opaque int32) {
	b := c.b
	f := b.fo
	e, err := strconv.ParseInt(arg, 10, 64)
	switch {
	case err != nil || e < 0:
		c.reply(protocol.StatusBadRequest, "stats "+epochStartItem+": bad epoch "+strconv.Quote(repl.ProtocolLine(arg)), opaque)
		return
	case f == nil:
		c.reply(protocol.StatusInternalError, "epoch-start: failover is off on this broker", opaque)
		return
	case !f.role.Load().Holds() || f.role.Load() == repl.RolePromoting:
		c.reply(protocol.StatusInternalError, "epoch-start: this broker does not hold the epoch now ("+f.whyNot()+")", opaque)
		return
	}
	cur := f.epoch.Load()
	f.bookMu.Lock()
	en, ok := f.book.FirstAfter(e)
	f.bookMu.Unlock()
	if !ok {
		c.replyBytes(protocol.StatusOK, repl.FormatStarts(0, cur, nil), opaque)
		return
	}
	starts := make(map[repl.PartKey]int64, len(en.Starts))
	for k, v := range en.Starts {
		starts[k] = v
	}
	if en.Epoch == cur {
		// A partition created in this epoch: all its records are of it.
		for _, t := range b.topicList() {
			for p, l := range t.parts {
				if k := (repl.PartKey{Topic: t.name, P: int32(p)}); !hasKey(starts, k) {
					starts[k] = l.MinOffset()
				}
			}
		}
	}
	c.replyBytes(protocol.StatusOK, repl.FormatStarts(en.Epoch, cur, starts), opaque)
}

func hasKey(m map[repl.PartKey]int64, k repl.PartKey) bool { _, ok := m[k]; return ok }

func (f *failover) whyNot() string {
	if p := f.why.Load(); p != nil {
		return *p
	}
	return "not the holder"
}

// recordHeld records, durably, that this member takes epoch e with its
// partitions' ends as the epoch's starts. Appends in flight are waited
// for (a promoted slave's last syncs).
func (f *failover) recordHeld(e int64) error {
	starts := map[repl.PartKey]int64{}
	for _, t := range f.b.topicList() {
		for p, l := range t.parts {
			end, err := l.Settle()
			if err != nil {
				return fmt.Errorf("%s-%d: %w", t.name, p, err)
			}
			starts[repl.PartKey{Topic: t.name, P: int32(p)}] = end
		}
	}
	f.bookMu.Lock()
	defer f.bookMu.Unlock()
	nb := f.book.UpTo(e - 1)
	nb.Add(repl.EpochEntry{Epoch: e, Held: true, Starts: starts})
	if err := nb.Save(f.b.config().DataDir); err != nil {
		return err
	}
	f.book = nb
	return nil
}

// loadBook reads data_dir/epochs at start. A data directory marked
// failover-held without it (written before epochs were recorded) cannot
// be rejoined safely: it is refused, as before.
func (f *failover) loadBook() error {
	dir := f.b.config().DataDir
	eb, err := repl.LoadEpochs(dir)
	if err != nil {
		return fmt.Errorf("failover: %w", err)
	}
	f.book = eb
	if eb.Last() > 0 {
		return nil
	}
	path := filepath.Join(dir, heldFile)
	data, err := os.ReadFile(path)
	if errors.Is(err, os.ErrNotExist) {
		return nil
	}
	if err != nil {
		return fmt.Errorf("failover: %w", err)
	}
	return fmt.Errorf("failover: %s says %q but there is no %s recording where the epochs it held start: "+
		"its tail cannot be checked against the holder; move the data directory away and start the slave on an empty one (it copies everything afresh)",
		path, string(data), repl.EpochsFile)
}

// dropHeld deletes data_dir/failover-held once the rejoin is recorded.
func (f *failover) dropHeld() error {
	dir := f.b.config().DataDir
	err := os.Remove(filepath.Join(dir, heldFile))
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
func (f *failover) Rejoin(addr string, tlsMaster bool) error {
	b := f.b
	s := b.slave
	f.bookMu.Lock()
	last := f.book.Last()
	f.bookMu.Unlock()
	nc, err := b.replDial(context.Background(), addr, tlsMaster, repl.DialTimeout) // repllink.go
	if err != nil {
		return err
	}
	defer nc.Close()
	rc := repl.NewRoundConn(nc, repl.DialTimeout+f.st)
	defer rc.Close()
	ask := func(e int64) (int64, int64, map[repl.PartKey]int64, error) {
		r, err := rc.RoundTrip(protocol.AppendStats(nil, epochStartItem+strconv.FormatInt(e, 10), 1))
		if err != nil {
			return 0, 0, nil, err
		}
		if r.Code != protocol.StatusOK {
			return 0, 0, nil, fmt.Errorf("stats %s%d: %d %s", epochStartItem, e, r.Code, protocol.Printable(r.Body))
		}
		return repl.ParseStarts(r.Body)
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
		who = memberName(b.config().BrokerID, d.Holder)
	}
	if last > 0 {
		for _, t := range b.topicList() {
			for p, l := range t.parts {
				k := repl.PartKey{Topic: t.name, P: int32(p)}
				off, ok := starts[k]
				if !ok {
					if l.MaxOffset() > l.MinOffset() {
						b.logf("failover: partition %s: the holder has no start of epoch %d for it (it has no such partition); not cut", k, next)
					}
					continue
				}
				if off >= l.MaxOffset() {
					continue
				}
				sl := s.LogState(l)
				sl.Lock()
				cut, err := l.Truncate(off)
				sl.Reset(l.LastID(), l.MaxOffset()) // the next append lands at the cut
				sl.Unlock()
				if err != nil {
					return fmt.Errorf("partition %s: cutting at %d (epoch %d starts there on %s): %w", k, off, next, who, err)
				}
				b.logf("failover: partition %s: cut %d bytes %d..%d never acknowledged (epoch %d starts at %d on %s); %d records, last id now %d",
					k, cut.Bytes(), cut.From, cut.To, next, off, who, cut.Records, cut.LastID)
			}
		}
	}
	// The holder's epochs after last (its history, up to its own).
	f.bookMu.Lock()
	nb := f.book.UpTo(last)
	f.bookMu.Unlock()
	nb.Add(repl.EpochEntry{Epoch: next, Starts: starts})
	for e := next; e < cur; {
		n, _, st, err := ask(e)
		if err != nil {
			return err
		}
		if n <= e {
			break
		}
		nb.Add(repl.EpochEntry{Epoch: n, Starts: st})
		e = n
	}
	if err := nb.Save(b.config().DataDir); err != nil {
		return err
	}
	f.bookMu.Lock()
	f.book = nb
	f.bookMu.Unlock()
	if err := f.dropHeld(); err != nil {
		return err
	}
	b.logf("failover: member %s of broker %d copies from %s at epoch %d (the epochs after %d recorded in %s)",
		memberLabel(f.me()), b.config().BrokerID, who, cur, last, repl.EpochsFile)
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
func (f *failover) demote(why string) {
	b := f.b
	if b.closed.Load() {
		return
	}
	f.mu.Lock()
	if f.role.MoveFrom(repl.RoleSlave, repl.RoleFenced, repl.RoleHandover) == 0 {
		f.mu.Unlock()
		return
	}
	if f.me() < 0 {
		f.member.Store(int32(b.config().FailoverSlaveID))
	}
	f.insync.Store(-1)
	f.setWhy("a slave of the holder (" + why + ")")
	f.mu.Unlock()
	b.slave.ClearMaster()
	if reg := f.reg(); reg != nil {
		reg.Demote(f.me())
	}
	b.logf("failover: member of broker %d rejoins as slave %d: %s", b.config().BrokerID, f.me(), why)
	f.startSlave()
}

// startSlave runs the slave loop (replica.go) unless it runs already;
// it ends when this member is promoted.
func (f *failover) startSlave() {
	b := f.b
	if !f.slaveRunning.CompareAndSwap(false, true) {
		return
	}
	b.wg.Add(1)
	go func() {
		for {
			b.runSlave()
			f.slaveRunning.Store(false)
			if b.closed.Load() || f.role.Load() != repl.RoleSlave || !f.slaveRunning.CompareAndSwap(false, true) {
				return
			}
			b.wg.Add(1) // demoted again meanwhile
		}
	}()
}

// startSync runs the sync master's loop (syncrepl.go) unless it runs
// already; it ends when this member stops holding the epoch.
func (f *failover) startSync() {
	b := f.b
	if b.sync == nil || !f.syncRunning.CompareAndSwap(false, true) {
		return
	}
	b.wg.Add(1)
	go func() {
		for {
			b.sync.run()
			f.syncRunning.Store(false)
			if b.closed.Load() || !f.role.Load().Holds() || !f.syncRunning.CompareAndSwap(false, true) {
				return
			}
			b.wg.Add(1)
		}
	}()
}

// syncActive reports whether a sync master's loop should run: always
// without failover, else while this member holds the epoch.
func (sm *syncMaster) syncActive() bool {
	f := sm.b.fo
	return f == nil || f.role.Load().Holds()
}

// switchover answers `stats switchover` on the holder (metaq failover):
// it stops taking puts, waits until its in-sync slave has every message
// it stored, fences itself so that the slave promotes with epoch+1, and
// rejoins as a slave.
func (c *conn) switchover(opaque int32) {
	b := c.b
	f := b.fo
	if f == nil {
		c.reply(protocol.StatusInternalError, "switchover: failover is off on this broker", opaque)
		return
	}
	go func() { // the handover takes up to seconds; the connection goes on
		code, msg := f.switchover()
		c.connAudit(auditSwitchover, "status", code, "result", msg) // audit.go
		c.reply(code, msg, opaque)
	}()
}

// switchover is the handover itself; it returns the reply.
func (f *failover) switchover() (int, string) {
	b := f.b
	sm := b.sync
	if r := f.role.Load(); r == repl.RoleDraining || r == repl.RoleHandover {
		return protocol.StatusInternalError, "switchover: one is running already"
	}
	drained := false
	refuse := func(why string) (int, string) {
		if drained {
			f.role.Move(repl.RoleDraining, repl.RoleMaster)
		}
		return protocol.StatusInternalError, "switchover refused: " + why
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
	b.logf("failover: switchover to slave %d requested: refusing puts, waiting for the slave to have everything", slave)
	if !f.role.Move(repl.RoleMaster, repl.RoleDraining) {
		if r := f.role.Load(); r == repl.RoleDraining || r == repl.RoleHandover {
			return protocol.StatusInternalError, "switchover: one is running already"
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
	for _, t := range b.topicList() {
		for p, l := range t.parts {
			sp := sm.Part(t.name, int32(p), l)
			// A barrier: a put that passed switchoverRefuses before
			// draining was set counts itself in flight under sp.mu, or
			// sees draining there and is refused (lateRefusal).
			sp.Lock()
			sp.Unlock() //nolint:staticcheck // a barrier
			for sp.InFlight() > 0 {
				if time.Now().After(deadline) {
					return refuse(fmt.Sprintf("%s-%d: puts in flight did not complete", t.name, p))
				}
				time.Sleep(time.Millisecond)
			}
			if err := l.Flush(); err != nil {
				return refuse(err.Error())
			}
			if err := sm.WaitSlave(lk, ctl.SlaveEnd, sp, l.MaxOffset(), true); err != nil {
				return refuse(fmt.Sprintf("%s-%d: %v", t.name, p, err))
			}
		}
	}
	if lk.Dead() || int(f.insync.Load()) != slave || f.epoch.Load() != epoch {
		return refuse("the sync link to the slave was lost meanwhile")
	}
	// Fenced into RoleHandover: no claim again, puts get 503 until this
	// member is a slave.
	f.fenceTo(repl.RoleHandover, "switchover to slave "+strconv.Itoa(slave)+" (metaq failover)")
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
			f.demote("switchover: " + memberLabel(d.Holder) + " holds epoch " + strconv.FormatInt(d.Epoch, 10))
			if d.Holder != slave {
				return protocol.StatusInternalError, "switchover: epoch " + d.String() + " was taken by " + memberLabel(d.Holder) + ", not slave " + strconv.Itoa(slave)
			}
			return protocol.StatusOK, "switchover: slave " + strconv.Itoa(slave) + " holds epoch " + strconv.FormatInt(d.Epoch, 10) + "; member " + memberLabel(f.me()) + " rejoins as its slave"
		}
		if time.Now().After(wait) || b.closed.Load() {
			f.role.Move(repl.RoleHandover, repl.RoleFenced)
			b.wg.Add(1)
			go f.claimAtStart() // nobody took over: claim again (or rejoin)
			return protocol.StatusInternalError, "switchover: slave " + strconv.Itoa(slave) + " did not take the epoch within " + (2*f.st + 5*time.Second).String() + "; this member claims it again"
		}
		time.Sleep(20 * time.Millisecond)
	}
}

// switchoverRefuses answers a put while a switchover drains this holder.
func (c *conn) switchoverRefuses(r *protocol.Request) bool {
	f := c.b.fo
	if !f.role.Load().Retry() {
		return false
	}
	switch r.Op {
	case protocol.OpPut, protocol.OpMPut, protocol.OpTransaction:
	default:
		return false
	}
	if r.Op != protocol.OpTransaction {
		c.b.stats.cmdPut.Add(1)
		c.b.stats.putFailed.Add(1)
	}
	c.reply(protocol.StatusBusy, f.drainRefusal(), r.Opaque)
	return true
}

// drainRefusal is the reply body of a put refused while a switchover
// drains this holder or while it takes the epoch.
func (f *failover) drainRefusal() string {
	what := "switching over to its in-sync slave (metaq failover)"
	if f.role.Load() == repl.RolePromoting {
		what = "taking the epoch"
	}
	id := strconv.Itoa(f.b.config().BrokerID)
	return "broker " + id + " is " + what + "; retry: the new master registers in ids/" + id + "/master in a moment"
}

// lateRefusal is, under the partition's sp.mu, the reply to a put that
// passed failoverRefuses but must not be appended after all ("" if it
// may): a switchover began to drain this holder (its barrier on sp.mu
// orders the two: the drain waits for the puts counted in flight before
// it, and those after it see draining), or this member stopped holding
// the epoch meanwhile. So no put is appended here once the drain has
// taken a partition's end.
func (f *failover) lateRefusal() (int, string) {
	switch {
	case f.role.Load().Retry():
		return protocol.StatusBusy, f.drainRefusal()
	case !f.role.Load().Holds():
		return protocol.StatusInternalError, f.refusal()
	}
	return 0, ""
}
