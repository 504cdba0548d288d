package security

import (
	"strings"
	"testing"

	"github.com/stretchr/testify/require"
	"golang.org/x/crypto/bcrypt"

	"github.com/metaq-go/metaq/conf"
	"github.com/metaq-go/metaq/sdk/protocol"
)

var testItems = StatsItems{
	Admin:         []string{"config", "switchover"},
	AdminPrefixes: []string{"epoch:"},
	Lists:         []string{"", "topics"},
	Count:         "count:",
	CountTopic: func(arg string) (string, bool) {
		i := strings.IndexByte(arg, ':')
		return arg[:max(i, 0)], i > 0
	},
}

// TestCheckRequest checks the rights a request needs: none before auth
// (ErrUnauthenticated), the first missing one's denial, admin stats items
// with their text, count items by their topic, lists open.
func TestCheckRequest(t *testing.T) {
	check := func(u *conf.User, r protocol.Request) string {
		if err := CheckRequest(u, &r, &testItems); err != nil {
			return err.Error()
		}
		return ""
	}
	require.ErrorIs(t, CheckRequest(nil, &protocol.Request{Op: protocol.OpVersion}, &testItems), ErrUnauthenticated)
	require.Equal(t, `user "bob" may not publish to topic "x"`, check(bob, protocol.Request{Op: protocol.OpPut, Topic: []byte("x")}))
	require.Empty(t, check(bob, protocol.Request{Op: protocol.OpPut, Topic: []byte("orders")}))
	require.Equal(t, `user "bob" may not subscribe to topic "orders"`, check(bob, protocol.Request{Op: protocol.OpJoin, Group: []byte("shipping"), Topic: []byte("orders")}))
	require.Equal(t, `user "bob" may not subscribe to topic "orders"`, check(bob, protocol.Request{Op: protocol.OpFilter, Group: []byte("g"), Topic: []byte("orders")}),
		"a consumer filter needs subscribe, as a get does")
	require.Equal(t, `user "alice" may not ship syncs (admin only: a sync master's replication_user)`, check(alice, protocol.Request{Op: protocol.OpSync}))
	require.Equal(t, `user "alice" may not run stats config (admin only)`, check(alice, protocol.Request{Op: protocol.OpStats, Item: []byte("config")}))
	require.Equal(t, `user "alice" may not run stats epoch:7 (admin only)`, check(alice, protocol.Request{Op: protocol.OpStats, Item: []byte("epoch:7")}))
	require.Empty(t, check(alice, protocol.Request{Op: protocol.OpStats, Item: []byte("topics")}))
	require.Empty(t, check(alice, protocol.Request{Op: protocol.OpStats, Item: []byte("count:audit:0:1")}))
	require.Equal(t, `user "bob" may not subscribe to topic "audit"`, check(bob, protocol.Request{Op: protocol.OpStats, Item: []byte("count:audit:0:1")}))
	require.Empty(t, check(bob, protocol.Request{Op: protocol.OpStats, Item: []byte("count:bad")}), "malformed: the handler's 400")
	require.Equal(t, `user "none" may not see topic "audit" (it needs publish or subscribe)`, check(none, protocol.Request{Op: protocol.OpStats, Item: []byte("audit")}))
	require.Empty(t, check(root, protocol.Request{Op: protocol.OpStats, Item: []byte("config")}))
}

// TestCheckPlain checks the SASL layer: an unsupported mechanism and a
// malformed message are refused before any password check.
func TestCheckPlain(t *testing.T) {
	hash, err := bcrypt.GenerateFromPassword([]byte("secret"), bcrypt.MinCost)
	require.NoError(t, err)
	a := &conf.Auth{Enabled: true, Users: []conf.User{{Name: "alice", PasswordHash: string(hash)}}}
	us, err := NewUsers(a)
	require.NoError(t, err)
	_, err = us.CheckPlain(a, "CRAM-MD5", nil, "10.0.0.1:1")
	require.EqualError(t, err, `unsupported SASL mechanism "CRAM-MD5": only PLAIN is supported`)
	why, throttled := LoginWhy(err)
	require.Equal(t, err.Error(), why)
	require.False(t, throttled)
	_, err = us.CheckPlain(a, MechPlain, []byte("alice"), "10.0.0.1:1")
	require.EqualError(t, err, "malformed PLAIN message: want [authzid] NUL user NUL password")
	u, err := us.CheckPlain(a, MechPlain, []byte("\x00alice\x00secret"), "10.0.0.1:1")
	require.NoError(t, err)
	require.Equal(t, "alice", u.Name)
	_, err = us.CheckPlain(a, MechPlain, []byte("\x00alice\x00wrong"), "10.0.0.1:1")
	require.EqualError(t, err, LoginFailed("alice"))
	why, _ = LoginWhy(err)
	require.Equal(t, "the password does not match", why)
}
