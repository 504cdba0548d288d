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
//   - SharedACL: the user has all rights, everyone else may read, create
//     and delete children. It is for the parents under which MetaQ
//     clients without credentials must still register (R, R/consumers,
//     R/consumers/<g>, its ids, owners and owners/<t>).
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

// IsOpenACL reports whether acl is ZooKeeper's open ACL (world:anyone with
// all rights, ZooDefs.Ids.OPEN_ACL_UNSAFE), which MetaQ gives every node.
func IsOpenACL(acl []zk.ACL) bool {
	return slices.Equal(acl, zk.WorldACL(zk.PermAll))
}

// Restrict sets the ACL of the existing node path to want if the node has
// the open ACL now (a node made before auth was turned on, or by a client
// without it). It reports whether it changed the ACL. A node with any
// other ACL is left alone. A no-op without an identity.
func (a Auth) Restrict(conn *zk.Conn, path string, acl []zk.ACL, want []zk.ACL) (bool, error) {
	if !a.Enabled() || !IsOpenACL(acl) {
		return false, nil
	}
	if _, err := conn.SetACL(path, want, -1); err != nil {
		return false, fmt.Errorf("restrict ACL of %s: %w", path, err)
	}
	return true, nil
}
