package repl

import (
	"context"
	"net"
	"time"

	"github.com/go-zookeeper/zk"

	"github.com/metaq-go/metaq/core/partition"
	"github.com/metaq-go/metaq/core/registry"
)

// The sync master's manager (MetaQ's samsa, reference §9): it finds its
// slave in ZooKeeper (the lowest slave<N> under ids/<id>), keeps one link
// to it, and joins every partition (Join) under that link, again and
// again, until the link dies, the slave set changes or the broker closes.

// SyncFailover is failover's side of the sync master (failover = true).
type SyncFailover interface {
	// Named reports whether this holder named a slave in sync; a put
	// stored here alone must not be acknowledged then. UnnameSoon
	// unnames it in the background.
	Named() bool
	UnnameSoon()
	// Holds reports whether this member holds the epoch (the manager
	// runs only then).
	Holds() bool
	// BindLink binds a new link to the holder's epoch.
	BindLink(nc net.Conn, timeout time.Duration) error
	// InSyncSlave is the slave named in sync (-1: none); SetInSync
	// writes it; NameInSync names slave if inSync still holds once puts
	// stored alone see it named.
	InSyncSlave() int
	SetInSync(slave int) error
	NameInSync(slave int, inSync func() bool) error
	// LateRefusal refuses a put under its partition's lock when this
	// member may not take puts now (SyncMaster.Put).
	LateRefusal() error
}

// Host is what replication needs of the broker: its partitions, the
// registry, dialing a replication peer, and whether it is closing.
type Host interface {
	partition.Source
	Registry() *registry.Registry
	// Dial opens a replication connection to the peer at addr (Dialer).
	Dial(ctx context.Context, addr string, tlsPeer bool, timeout time.Duration) (net.Conn, error)
	// Done is closed when the broker closes; Closed reports it (set
	// first).
	Done() <-chan struct{}
	Closed() bool
}

// active reports whether the manager should run: always without
// failover, else while this member holds the epoch.
func (sm *SyncMaster) active() bool { return sm.fo == nil || sm.fo.Holds() }

// Run keeps a link to the registered slave and its partitions in sync
// until the broker closes (or, with failover, this member stops holding
// the epoch).
func (sm *SyncMaster) Run() {
	h := sm.host
	reg := h.Registry()
	logged := ""
	for !h.Closed() && sm.active() {
		slaves, watch, err := reg.Slaves()
		if err != nil || len(slaves) == 0 {
			msg := "no slave registered"
			if err != nil {
				msg = err.Error()
			}
			if msg != logged {
				sm.logf("sync: %s; puts %s", msg, sm.refusal())
				logged = msg
			}
			select {
			case <-watch:
			case <-h.Done():
				return
			case <-time.After(time.Second):
			}
			continue
		}
		target := slaves[0]
		lk, err := sm.dial(target)
		if err != nil {
			if msg := err.Error(); msg != logged {
				sm.logf("sync: slave %d at %s: %v; retrying", target.ID, target.Addr, err)
				logged = msg
			}
			sm.sleep(200 * time.Millisecond)
			continue
		}
		logged = ""
		sm.logf("sync: shipping puts to slave %d at %s", target.ID, target.Addr)
		sm.link.Store(lk)
		sm.serve(lk, target, watch)
		lk.Fail(errorf(Disconnected, "Slave is disconnected"))
	}
}

func (sm *SyncMaster) refusal() string {
	if sm.Degrade() {
		return "are stored on the master alone (sync_degrade = true)"
	}
	return `get "500 Slave is disconnected"`
}

func (sm *SyncMaster) sleep(d time.Duration) {
	select {
	case <-time.After(d):
	case <-sm.host.Done():
	}
}

// dial opens a link to slave s.
func (sm *SyncMaster) dial(s registry.SlaveNode) (*Link, error) {
	nc, err := sm.host.Dial(context.Background(), s.Addr, s.TLS, 2*time.Second)
	if err != nil {
		return nil, err
	}
	if sm.fo != nil {
		if err := sm.fo.BindLink(nc, sm.timeout); err != nil {
			nc.Close()
			return nil, err
		}
	}
	return sm.newLink(nc, s.Addr, s.TLS), nil
}

// serve joins the partitions not in sync under lk, again and again, until
// lk dies, the slave set changes or the broker closes.
func (sm *SyncMaster) serve(lk *Link, target registry.SlaveNode, watch <-chan zk.Event) {
	h := sm.host
	ctl, err := sm.Control(target.Addr, target.TLS)
	if err != nil {
		sm.logf("sync: slave %s: %v", target.Addr, err)
		return
	}
	defer ctl.Close()
	if f := sm.fo; f != nil && f.InSyncSlave() >= 0 && f.InSyncSlave() != target.ID {
		// Failover: the slave named in sync misses what this link's
		// slave will acknowledge: unname it before anything is joined.
		if err := f.SetInSync(-1); err != nil {
			sm.logf("sync: failover: clearing the in-sync slave before linking to slave %d: %v", target.ID, err)
			return
		}
	}
	tk := time.NewTicker(100 * time.Millisecond)
	defer tk.Stop()
	for {
		all := true
		// The extension (transactions: the prepared branches) first.
		if err := sm.SyncExt(lk); err != nil {
			all = false
			if lk.Dead() {
				return
			}
			sm.logf("sync: shipping the prepared transactions: %v", err)
		}
		sm.eachPart(func(sp *Part) bool {
			if sp.InSyncUnder(lk) {
				return true
			}
			if err := sm.Join(lk, ctl.SlaveEnd, sp); err != nil {
				all = false
				if lk.Dead() {
					return false
				}
				if sp.NoteJoin(err) {
					sm.logf("sync: %s-%d not in sync yet: %v", sp.topic, sp.p, err)
				}
				return true
			}
			if sp.NoteJoin(nil) {
				sm.logf("sync: %s-%d in sync", sp.topic, sp.p)
			}
			return true
		})
		if lk.Dead() {
			return
		}
		if f := sm.fo; all && f != nil && f.Holds() && f.InSyncSlave() != target.ID {
			if err := f.NameInSync(target.ID, func() bool { return sm.AllInSync(lk) }); err != nil {
				sm.logf("sync: failover: naming slave %d in sync: %v", target.ID, err)
			}
		}
		if all && sm.degraded.Swap(false) {
			sm.logf("sync: every partition is in sync with slave %d again", target.ID)
		}
		select {
		case <-lk.Done():
			return
		case <-watch:
			// ids/<id>'s children changed: keep the link if its slave is
			// still the one to ship to.
			slaves, w, err := h.Registry().Slaves()
			if err != nil || len(slaves) == 0 || slaves[0] != target {
				return
			}
			watch = w
		case <-h.Done():
			return
		case <-tk.C:
			if !sm.active() {
				return
			}
		}
	}
}

// eachPart calls fn with every partition of every topic, in order, until
// it returns false.
func (sm *SyncMaster) eachPart(fn func(sp *Part) bool) {
	for _, name := range sm.host.Topics() {
		n, err := sm.host.Partitions(name)
		if err != nil {
			continue // deleted meanwhile
		}
		for p := range n {
			l, err := sm.host.Log(name, p)
			if err != nil {
				break
			}
			if !fn(sm.Part(name, int32(p), l)) {
				return
			}
		}
	}
}

// Control opens a connection of its own to the slave at addr, for
// offsets (the joiner's, a switchover's).
func (sm *SyncMaster) Control(addr string, tls bool) (*RoundConn, error) {
	nc, err := sm.host.Dial(context.Background(), addr, tls, 2*time.Second)
	if err != nil {
		return nil, err
	}
	return NewRoundConn(nc, sm.timeout), nil
}

// AllInSync reports whether every partition, and the extension's state,
// is in sync under lk.
func (sm *SyncMaster) AllInSync(lk *Link) bool {
	all := true
	sm.eachPart(func(sp *Part) bool {
		all = sp.InSyncUnder(lk) && !lk.Dead()
		return all
	})
	return all && sm.ExtInSync(lk)
}
