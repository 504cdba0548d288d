package security

import (
	"errors"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/metaq-go/metaq/conf"
)

var (
	alice = &conf.User{Name: "alice", Publish: []string{"orders*"}, Subscribe: []string{"orders*", "audit"}, Groups: []string{"billing-*"}}
	bob   = &conf.User{Name: "bob", Publish: []string{"orders", "audit"}, Groups: []string{"shipping"}}
	root  = &conf.User{Name: "root", Admin: true}
	none  = &conf.User{Name: "none"}
)

// TestAuthorize is the verdict table: each user, action and name, with
// the denial text every door gives.
func TestAuthorize(t *testing.T) {
	for _, tc := range []struct {
		u    *conf.User
		act  Action
		name string
		want string // "" allowed
	}{
		{alice, Publish, "orders", ""},
		{alice, Publish, "orders-eu", ""},
		{alice, Publish, "secret", `user "alice" may not publish to topic "secret"`},
		{alice, Publish, "audit", `user "alice" may not publish to topic "audit"`},
		{alice, Subscribe, "orders", ""},
		{alice, Subscribe, "audit", ""},
		{alice, Subscribe, "secret", `user "alice" may not subscribe to topic "secret"`},
		{alice, UseGroup, "billing-web", ""},
		{alice, UseGroup, "shipping", `user "alice" may not use group "shipping"`},
		{alice, Describe, "orders", ""},
		{alice, Describe, "audit", ""}, // subscribe only
		{alice, Describe, "secret", `user "alice" may not see topic "secret" (it needs publish or subscribe)`},
		{alice, Admin, "run stats config", `user "alice" may not run stats config (admin only)`},
		{alice, Admin, "GET /ui/config", `user "alice" may not GET /ui/config (admin only)`},
		{bob, Publish, "orders", ""},
		{bob, Subscribe, "orders", `user "bob" may not subscribe to topic "orders"`},
		{bob, Describe, "orders", ""}, // publish only: a producer learns the partitions
		{bob, Describe, "orders-eu", `user "bob" may not see topic "orders-eu" (it needs publish or subscribe)`},
		{bob, UseGroup, "shipping", ""},
		{bob, UseGroup, "billing-web", `user "bob" may not use group "billing-web"`},
		{none, Describe, "orders", `user "none" may not see topic "orders" (it needs publish or subscribe)`},
		{none, UseGroup, "g", `user "none" may not use group "g"`},
		{root, Publish, "secret", ""},
		{root, Subscribe, "secret", ""},
		{root, UseGroup, "anything", ""},
		{root, Describe, "secret", ""},
		{root, Admin, "run stats config", ""},
	} {
		err := Authorize(true, tc.u, tc.act, tc.name)
		if tc.want == "" {
			require.NoError(t, err, "%s %s %s", tc.u.Name, tc.act, tc.name)
			require.True(t, Allowed(true, tc.u, tc.act, tc.name))
			continue
		}
		require.EqualError(t, err, tc.want)
		var d *Denied
		require.True(t, errors.As(err, &d))
		require.Equal(t, tc.u.Name, d.User)
		require.Equal(t, tc.act, d.Action)
		require.Equal(t, tc.name, d.Name)
		require.False(t, Allowed(true, tc.u, tc.act, tc.name))
	}
}

// TestAuthorizeAuthOff: with auth off everything is allowed, a nil user
// included; with auth on a nil user is ErrUnauthenticated, never a
// *Denied.
func TestAuthorizeAuthOff(t *testing.T) {
	for _, act := range []Action{Publish, Subscribe, UseGroup, Describe, Admin} {
		require.NoError(t, Authorize(false, nil, act, "secret"))
		require.NoError(t, Authorize(false, none, act, "secret"))
		err := Authorize(true, nil, act, "secret")
		require.ErrorIs(t, err, ErrUnauthenticated)
		var d *Denied
		require.False(t, errors.As(err, &d))
	}
}

// TestDeniedQuoting: client names are quoted and cut to 64 bytes as the
// protocol port quotes them; an admin operation keeps its words and note.
func TestDeniedQuoting(t *testing.T) {
	long := strings.Repeat("x", 800)
	err := Authorize(true, alice, Subscribe, long)
	require.EqualError(t, err, `user "alice" may not subscribe to topic "`+strings.Repeat("x", 64)+`"...`)
	require.Less(t, len(err.Error()), 140)
	err = Authorize(true, alice, UseGroup, "a\r\nb\x00")
	require.EqualError(t, err, `user "alice" may not use group "a\r\nb\x00"`)
	// A multi-byte rune is not split.
	err = Authorize(true, alice, Publish, strings.Repeat("x", 63)+"é")
	require.EqualError(t, err, `user "alice" may not publish to topic "`+strings.Repeat("x", 63)+`"...`)
	d := &Denied{User: "alice", Action: Admin, Name: "ship syncs", Note: ": a sync master's replication_user"}
	require.EqualError(t, d, `user "alice" may not ship syncs (admin only: a sync master's replication_user)`)
	require.Equal(t, "use group", UseGroup.String())
	require.Equal(t, "action(99)", Action(99).String())
}

// TestGroupTopic: a group's positions on a topic need the group and
// subscribe on the topic, checked in that order.
func TestGroupTopic(t *testing.T) {
	require.NoError(t, GroupTopic(true, alice, "billing-web", "orders"))
	require.EqualError(t, GroupTopic(true, alice, "billing-web", "secret"), `user "alice" may not subscribe to topic "secret"`)
	require.EqualError(t, GroupTopic(true, alice, "shipping", "secret"), `user "alice" may not use group "shipping"`)
	require.EqualError(t, GroupTopic(true, bob, "shipping", "orders"), `user "bob" may not subscribe to topic "orders"`)
	require.NoError(t, GroupTopic(true, root, "x", "y"))
	require.NoError(t, GroupTopic(false, nil, "x", "y"))
	require.ErrorIs(t, GroupTopic(true, nil, "x", "y"), ErrUnauthenticated)
}
