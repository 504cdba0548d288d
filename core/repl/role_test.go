package repl

import "testing"

// TestRoleTransitions checks the failover state machine's table: every
// listed move is allowed, every other one refused, and RoleVar follows it.
func TestRoleTransitions(t *testing.T) {
	all := []Role{RoleMaster, RoleSlave, RolePromoting, RoleDraining, RoleFenced, RoleHandover}
	want := map[[2]Role]bool{
		{RoleFenced, RoleMaster}: true, {RoleFenced, RoleSlave}: true,
		{RoleSlave, RolePromoting}:  true,
		{RolePromoting, RoleMaster}: true, {RolePromoting, RoleFenced}: true,
		{RoleMaster, RoleDraining}: true, {RoleMaster, RoleFenced}: true,
		{RoleDraining, RoleMaster}: true, {RoleDraining, RoleHandover}: true, {RoleDraining, RoleFenced}: true,
		{RoleHandover, RoleSlave}: true, {RoleHandover, RoleFenced}: true,
	}
	for _, from := range all {
		for _, to := range all {
			if got := CanMove(from, to); got != want[[2]Role{from, to}] {
				t.Errorf("CanMove(%v, %v) = %v", from, to, got)
			}
			rv := NewRoleVar(from)
			if got := rv.Move(from, to); got != want[[2]Role{from, to}] {
				t.Errorf("Move(%v, %v) = %v", from, to, got)
			}
			if got, moved := rv.Load(), want[[2]Role{from, to}]; moved && got != to || !moved && got != from {
				t.Errorf("after Move(%v, %v): %v", from, to, got)
			}
		}
	}
	// A move from a role the var is not in does nothing.
	rv := NewRoleVar(RoleSlave)
	if rv.Move(RoleMaster, RoleFenced) || rv.Load() != RoleSlave {
		t.Errorf("Move from a role not held: %v", rv.Load())
	}
	// MoveFrom: a switchover's fence from RoleDraining, not from RoleSlave.
	rv = NewRoleVar(RoleDraining)
	if got := rv.MoveFrom(RoleFenced, RoleMaster, RolePromoting, RoleDraining); got != RoleDraining || rv.Load() != RoleFenced {
		t.Errorf("MoveFrom(RoleFenced) from RoleDraining = %v, now %v", got, rv.Load())
	}
	rv = NewRoleVar(RoleSlave)
	if got := rv.MoveFrom(RoleFenced, RoleMaster, RolePromoting, RoleDraining); got != 0 || rv.Load() != RoleSlave {
		t.Errorf("MoveFrom(RoleFenced) from RoleSlave = %v, now %v", got, rv.Load())
	}
	for _, r := range all {
		if r.String() == "unknown" {
			t.Errorf("role %d has no name", r)
		}
		if r.Holds() != (r == RoleMaster || r == RolePromoting || r == RoleDraining) {
			t.Errorf("%v.Holds() = %v", r, r.Holds())
		}
	}
}

// TestRoleTitle: the dashboard header's role.
func TestRoleTitle(t *testing.T) {
	for _, c := range []struct {
		r    Role
		sync bool
		want string
	}{
		{RoleSlave, false, "slave 2"},
		{RoleSlave, true, "slave 2"},
		{RoleMaster, true, "master (sync replication)"},
		{RolePromoting, false, "master"},
		{RoleMaster, false, "master"},
	} {
		if got := c.r.Title(&Slave{id: 2}, c.sync); got != c.want {
			t.Errorf("%v sync=%v: %q, want %q", c.r, c.sync, got, c.want)
		}
	}
}
