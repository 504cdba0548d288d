package cluster

import (
	"errors"
	"fmt"
	"slices"
	"strings"

	"github.com/go-zookeeper/zk"
)

// Auth is a ZooKeeper digest identity ("digest" scheme, "user:password").
// The zero Auth is no identity: nodes are then created with ZooKeeper's
// open ACL (world:anyone, all rights), as MetaQ creates them.
//
// With an identity, the nodes a session creates get one of two ACLs
// (docs/security.md lists which node gets which):
//
//   - PrivateACL: the user has all rights, everyone else may only read.
//     Every node under R (R/brokers/..., R/consumers/...) gets it, so a
//     client without the identity can neither forge a broker nor create
//     a group, member, owner or offset node.
//   - SharedACL: the user has all rights, everyone else may read, create
//     and delete children. Only R and its ancestors get it (see ACL), so
//     that a session with another identity (or none) can still create
//     nodes of its own beside R/brokers and R/consumers.
//
// Every broker, offset store and consumer of a cluster with auth therefore
// uses the same identity: consumers register under R/consumers, which only
// that identity may create under.
type Auth struct {
	User     string
	Password string
}

// Enabled reports whether a is an identity.
func (a Auth) Enabled() bool { return a.User != "" }

// Validate checks that user and password come together and that the user
// has no ':' (the digest scheme splits "user:password" at the first one).
func (a Auth) Validate() error {
	switch {
	case (a.User == "") != (a.Password == ""):
		return errors.New("ZooKeeper auth: user and password go together")
	case strings.Contains(a.User, ":"):
		return fmt.Errorf("ZooKeeper auth: user %q must not contain ':'", a.User)
	}
	return nil
}

// String names the identity without its password.
func (a Auth) String() string {
	if !a.Enabled() {
		return "none"
	}
	return "digest:" + a.User
}

// Login adds the identity to conn's session (AddAuth "digest"). It blocks
// until the server answers; run it once per connection, on the first
// session. go-zookeeper then sends the identity again itself, before any
// other request, on every reconnect, including the new session that
// follows an expiry. A no-op without an identity.
func (a Auth) Login(conn *zk.Conn) error {
	if !a.Enabled() {
		return nil
	}
	if err := conn.AddAuth("digest", []byte(a.User+":"+a.Password)); err != nil {
		return fmt.Errorf("ZooKeeper digest auth as %q: %w", a.User, err)
	}
	return nil
}

// PrivateACL is the ACL of a node only its creator may change: the
// identity has all rights, world:anyone may read. Without an identity it
// is the open ACL.
func (a Auth) PrivateACL() []zk.ACL { return a.acl(zk.PermRead) }

// SharedACL is the ACL of a parent node that others must be able to
// create (and delete) children under: the identity has all rights,
// world:anyone may read, create and delete children, but never set the
// node's data or ACL. Without an identity it is the open ACL.
func (a Auth) SharedACL() []zk.ACL { return a.acl(zk.PermRead | zk.PermCreate | zk.PermDelete) }

func (a Auth) acl(world int32) []zk.ACL {
	if !a.Enabled() {
		return zk.WorldACL(zk.PermAll)
	}
	return append(zk.DigestACL(zk.PermAll, a.User, a.Password), zk.WorldACL(world)...)
}

// ACL is the ACL of a node this identity creates at path, under root (R,
// without a trailing slash): SharedACL for R and its ancestors,
// PrivateACL for everything else.
func (a Auth) ACL(root, path string) []zk.ACL {
	if path == root || strings.HasPrefix(root, path+"/") || path == "/" {
		return a.SharedACL()
	}
	return a.PrivateACL()
}

// Owns reports whether acl is one this identity gives the nodes it
// creates (PrivateACL or SharedACL), as a client holding the identity
// reads it back. Without an identity it reports whether acl is open.
func (a Auth) Owns(acl []zk.ACL) bool {
	return sameACL(acl, a.PrivateACL()) || sameACL(acl, a.SharedACL())
}

// IsPrivate reports whether acl is exactly this identity's PrivateACL:
// a node only this identity can have written.
func (a Auth) IsPrivate(acl []zk.ACL) bool { return a.Enabled() && sameACL(acl, a.PrivateACL()) }

// sameACL compares two ACLs as sets.
func sameACL(x, y []zk.ACL) bool {
	if len(x) != len(y) {
		return false
	}
	for _, e := range x {
		if !slices.Contains(y, e) {
			return false
		}
	}
	return true
}

// FormatACL renders acl as zkCli.sh's getAcl does, on one line:
// "digest:metaq:x cdrwa, world:anyone r".
func FormatACL(acl []zk.ACL) string {
	parts := make([]string, len(acl))
	for i, e := range acl {
		perms := ""
		for _, p := range []struct {
			bit int32
			c   string
		}{{zk.PermCreate, "c"}, {zk.PermDelete, "d"}, {zk.PermRead, "r"}, {zk.PermWrite, "w"}, {zk.PermAdmin, "a"}} {
			if e.Perms&p.bit != 0 {
				perms += p.c
			}
		}
		id := e.ID
		if e.Scheme == "digest" {
			if u, _, ok := strings.Cut(id, ":"); ok {
				id = u + ":x" // never a hash in a log line, as ZooKeeper shows it to others
			}
		}
		parts[i] = e.Scheme + ":" + id + " " + perms
	}
	return strings.Join(parts, ", ")
}

// ErrForeignNode is wrapped (with ZooKeeper's zk.ErrNoAuth) by
// ForeignNode's errors.
var ErrForeignNode = errors.New("owned by another ZooKeeper identity")

// ForeignNode is the error for a node that ZooKeeper answered NoAuth for
// (err), or that has an ACL this identity did not give it: it names the
// node, its ACL as far as it can be read, and this identity, and says
// what to do. Someone squatted the node (created it first with their own
// ACL); only its owner or an operator (delete, setAcl) can fix it.
func (a Auth) ForeignNode(conn *zk.Conn, path string, err error) error {
	desc := ""
	if acl, _, gerr := conn.GetACL(path); gerr == nil {
		desc = " (ACL " + FormatACL(acl) + ")"
	}
	if err == nil {
		err = zk.ErrNoAuth
	}
	if !a.Enabled() {
		return fmt.Errorf("ZooKeeper node %s is %w%s and this session has none: it may not write there (%w); "+
			"with ZooKeeper digest auth on, give this client the cluster's identity (auth_user, auth_password; cluster.Options.Auth)",
			path, ErrForeignNode, desc, err)
	}
	return fmt.Errorf("ZooKeeper node %s is %w%s, not %s: it may not write there (%w); "+
		"someone created it before this identity did: delete it or setAcl it (docs/security.md)",
		path, ErrForeignNode, desc, a, err)
}

// IsOpenACL reports whether acl is ZooKeeper's open ACL (world:anyone with
// all rights, ZooDefs.Ids.OPEN_ACL_UNSAFE), which MetaQ gives every node.
func IsOpenACL(acl []zk.ACL) bool {
	return slices.Equal(acl, zk.WorldACL(zk.PermAll))
}

// Restrict sets the ACL of the existing node path to want if the node has
// the open ACL now (a node made before auth was turned on, or by a client
// without it), or this identity's SharedACL where want is another ACL (a
// node an earlier version made shared). It reports whether it changed the
// ACL. A node with any other ACL is left alone. A no-op without an
// identity.
func (a Auth) Restrict(conn *zk.Conn, path string, acl []zk.ACL, want []zk.ACL) (bool, error) {
	if !a.Enabled() || sameACL(acl, want) || !IsOpenACL(acl) && !sameACL(acl, a.SharedACL()) {
		return false, nil
	}
	if _, err := conn.SetACL(path, want, -1); err != nil {
		return false, fmt.Errorf("restrict ACL of %s: %w", path, err)
	}
	return true, nil
}
