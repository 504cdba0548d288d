package registry

import (
	"errors"

	"github.com/go-zookeeper/zk"

	"github.com/metaq-go/metaq/internal/zkpath"
)

// What automatic failover reads and writes through the registry's
// session (docs/replication.md, Failover): the epoch node ids/<id>/epoch,
// and the switch of the registration from slave (or standby) to master,
// or to nothing.

// Wanted roles (Registry.role).
const (
	roleAsOpened = iota
	roleMaster
	roleNone
	roleSlave
)

// ErrEpochChanged is WriteEpoch's error when the epoch node is not at the
// version given (another member wrote it first).
var ErrEpochChanged = errors.New("registry: the epoch node changed meanwhile")

// ReadEpoch returns the epoch node's data and version; ok is false when it
// does not exist. watch, when not nil, fires when the node changes.
func (r *Registry) ReadEpoch() (d zkpath.EpochData, version int32, ok bool, err error) {
	data, st, err := r.conn.Get(r.epochPath())
	if errors.Is(err, zk.ErrNoNode) {
		return d, 0, false, nil
	}
	if err != nil {
		return d, 0, false, err
	}
	d, err = zkpath.ParseEpochData(data)
	return d, st.Version, err == nil, err
}

// WriteEpoch writes d to the epoch node if it is at version, or creates it
// if create is true (then version is ignored). It returns ErrEpochChanged
// when another write came first.
func (r *Registry) WriteEpoch(d zkpath.EpochData, version int32, create bool) error {
	if create {
		if err := r.ensureParents(r.epochPath()); err != nil {
			return err
		}
		_, err := r.conn.Create(r.epochPath(), d.Bytes(), 0, r.aclFor(r.epochPath()))
		if errors.Is(err, zk.ErrNodeExists) {
			return ErrEpochChanged
		}
		return err
	}
	_, err := r.conn.Set(r.epochPath(), d.Bytes(), version)
	if errors.Is(err, zk.ErrBadVersion) || errors.Is(err, zk.ErrNoNode) {
		return ErrEpochChanged
	}
	return err
}

func (r *Registry) epochPath() string { return zkpath.Epoch(r.root, r.opts.BrokerID) }

// MasterExists reports whether ids/<id>/master exists, and who owns it.
func (r *Registry) MasterExists() (bool, int64, error) {
	ok, st, err := r.conn.Exists(r.master)
	if err != nil || !ok {
		return false, 0, err
	}
	return true, st.EphemeralOwner, nil
}

// Promote switches the registration to master of the broker id (MetaQ's
// layout: ids/<id>/master, its topics as <id>-m); a slave's nodes are
// deleted. It does not wait: see Wait.
func (r *Registry) Promote() {
	r.role.Store(roleMaster)
	r.gen.Add(1)
	r.nudge()
}

// Fence switches the registration off: the nodes this session made are
// deleted (a fenced master must not hold ids/<id>/master). It does not
// wait.
func (r *Registry) Fence() {
	r.role.Store(roleNone)
	r.gen.Add(1)
	r.nudge()
}

// Demote switches the registration to slave slaveID of the broker id
// (ids/<id>/slave<N>, its topics as <id>-s<N>): a failover member that
// lost the epoch rejoins as a slave. It does not wait.
func (r *Registry) Demote(slaveID int) {
	r.demoteTo.Store(int32(slaveID))
	r.role.Store(roleSlave)
	r.gen.Add(1)
	r.nudge()
}

// applyRole applies a Promote, Fence or Demote (the loop goroutine).
func (r *Registry) applyRole() {
	switch r.role.Load() {
	case roleSlave:
		n := int(r.demoteTo.Load())
		if !r.opts.Slave || r.opts.Standby || r.opts.SlaveID != n {
			r.opts.Slave, r.opts.Standby, r.opts.SlaveID = true, false, n
			r.self = zkpath.Slave(r.root, r.opts.BrokerID, n)
		}
	case roleMaster:
		if r.opts.Slave || r.opts.Standby {
			r.opts.Slave, r.opts.Standby = false, false
			r.self = r.master
		}
	case roleNone:
		r.opts.Standby = true
	}
}
