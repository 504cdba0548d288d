package repl

import (
	"strconv"
	"sync/atomic"
)

// Role is what a broker is in replication, and with failover where it is
// in the failover state machine. The transitions are in one place,
// transitions below; RoleVar enforces them.
type Role int32

const (
	// RoleMaster takes puts: a master without failover, or the holder of
	// the epoch.
	RoleMaster Role = iota + 1
	// RoleSlave copies from a master (a slave, or a failover member that
	// rejoined the holder).
	RoleSlave
	// RolePromoting holds the epoch just taken by an election and records
	// where it starts; puts are refused with a retry until it is RoleMaster.
	RolePromoting
	// RoleDraining holds the epoch while a switchover waits for the in-sync
	// slave to have everything; puts are refused with a retry.
	RoleDraining
	// RoleFenced does not hold the epoch: a failover master before its first
	// claim, or a holder whose lease or session ended. It acknowledges
	// nothing; it claims again or rejoins as a slave.
	RoleFenced
	// RoleHandover is fenced by a switchover: it does not claim again, and
	// refuses puts with a retry until it rejoins the new holder as a
	// slave (or claims again if none took over).
	RoleHandover
)

var roleNames = [...]string{RoleMaster: "master", RoleSlave: "slave", RolePromoting: "promoting", RoleDraining: "draining", RoleFenced: "fenced", RoleHandover: "handover"}

func (r Role) String() string {
	if r < RoleMaster || r > RoleHandover {
		return "unknown"
	}
	return roleNames[r]
}

// Title is the broker's role as the dashboard's header shows it: the
// slave's id (s) while it is a slave, a master's replication mode (sync:
// it is a sync master) otherwise.
func (r Role) Title(s *Slave, sync bool) string {
	switch {
	case r == RoleSlave:
		return "slave " + strconv.Itoa(s.ID())
	case sync:
		return "master (sync replication)"
	}
	return "master"
}

// Holds reports whether the role holds the epoch (with failover): it
// may renew its lease and ship to its slaves.
func (r Role) Holds() bool { return r == RoleMaster || r == RolePromoting || r == RoleDraining }

// Retry reports whether puts are refused with a retry (503): the
// broker is between roles and a master takes puts in a moment.
func (r Role) Retry() bool { return r == RolePromoting || r == RoleDraining || r == RoleHandover }

// transitions are the failover state machine's moves, from -> to:
//
//	RoleFenced    -> RoleMaster     claim (at start, or again after a fence)
//	RoleFenced    -> RoleSlave      demote: another member holds the epoch
//	RoleSlave     -> RolePromoting  elect: no master registered, the epoch taken
//	RolePromoting -> RoleMaster     the epoch's starts recorded
//	RolePromoting -> RoleFenced     lost the epoch while recording
//	RoleMaster    -> RoleDraining   switchover begins
//	RoleMaster    -> RoleFenced     fence: lease or session lost, epoch moved
//	RoleDraining  -> RoleMaster     switchover refused
//	RoleDraining  -> RoleHandover   switchover fenced this member
//	RoleDraining  -> RoleFenced     lost the epoch while draining
//	RoleHandover  -> RoleSlave      the in-sync slave took the epoch: rejoin it
//	RoleHandover  -> RoleFenced     nobody took over: claim again
var transitions = map[Role][]Role{
	RoleFenced:    {RoleMaster, RoleSlave},
	RoleSlave:     {RolePromoting},
	RolePromoting: {RoleMaster, RoleFenced},
	RoleMaster:    {RoleDraining, RoleFenced},
	RoleDraining:  {RoleMaster, RoleHandover, RoleFenced},
	RoleHandover:  {RoleSlave, RoleFenced},
}

// CanMove reports whether from -> to is a transition.
func CanMove(from, to Role) bool {
	for _, r := range transitions[from] {
		if r == to {
			return true
		}
	}
	return false
}

// RoleVar holds a role; its moves follow transitions.
type RoleVar struct{ v atomic.Int32 }

// NewRoleVar returns a RoleVar in role r.
func NewRoleVar(r Role) *RoleVar {
	rv := &RoleVar{}
	rv.v.Store(int32(r))
	return rv
}

// Load returns the role.
func (rv *RoleVar) Load() Role { return Role(rv.v.Load()) }

// Move moves from -> to if the role is from and the move is a
// transition; it reports whether it moved.
func (rv *RoleVar) Move(from, to Role) bool {
	return CanMove(from, to) && rv.v.CompareAndSwap(int32(from), int32(to))
}

// MoveFrom moves to `to` from whichever of froms the role is (each
// from -> to must be a transition); it returns the role it moved from,
// or 0 if it did not move.
func (rv *RoleVar) MoveFrom(to Role, froms ...Role) Role {
	for {
		cur := rv.Load()
		ok := false
		for _, f := range froms {
			if f == cur {
				ok = true
			}
		}
		if !ok || !CanMove(cur, to) {
			return 0
		}
		if rv.v.CompareAndSwap(int32(cur), int32(to)) {
			return cur
		}
	}
}

// FailoverStatus is a failover member's state, for stats and metrics.
type FailoverStatus struct {
	Role Role
	// Epoch is the epoch held, or for a slave the highest one seen.
	Epoch int64
	// LeaseMs is what is left of the holder's lease; InSync the slave
	// it named in sync (-1: none). Both only when Role.Holds().
	LeaseMs int64
	InSync  int
}
