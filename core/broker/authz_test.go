package broker

import (
	"strings"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/metaq-go/metaq/conf"
	"github.com/metaq-go/metaq/internal/testsvc"
	"github.com/metaq-go/metaq/sdk/protocol"
)

// TestAuthzStatsLists: over the protocol port a user's stats lists name
// only the topics they may publish or subscribe to, and the rest is
// refused with the text every door gives; an admin sees everything.
func TestAuthzStatsLists(t *testing.T) {
	t.Parallel()
	certs := testsvc.NewCerts(t)
	b := secureBroker(t, certs, &syncLog{}, 10)
	root := dialAuth(t, b.Addr(), nil)
	code, body := root.login("root", "root-pw")
	require.Equal(t, 200, code, body)
	for _, topic := range []string{"orders", "secret"} {
		code, body = root.put(topic)
		require.Equal(t, 200, code, body)
	}
	nosub := dialAuth(t, b.Addr(), nil) // publish orders* only
	code, body = nosub.login("nosub", "nosub-pw")
	require.Equal(t, 200, code, body)

	for _, item := range []string{"topics", "offsets", "partitions"} {
		code, body = root.stats(item)
		require.Equal(t, 200, code, body)
		require.Contains(t, body, "\r\nsecret ")
		require.Contains(t, body, "\r\norders ")
		code, body = nosub.stats(item)
		require.Equal(t, 200, code, body)
		require.NotContains(t, body, "secret", "stats %s", item)
		require.Contains(t, body, "\r\norders ", "stats %s", item)
	}
	code, body = nosub.stats("")
	require.Equal(t, 200, code, body)
	require.Contains(t, body, "\r\ntopics 1\r\n")
	require.Contains(t, body, "\r\ntotal_messages 1\r\n")
	code, body = root.stats("")
	require.Equal(t, 200, code, body)
	require.Contains(t, body, "\r\ntopics 2\r\n")

	code, body = nosub.stats("orders")
	require.Equal(t, 200, code, body) // a producer describes its topic
	code, body = nosub.stats("secret")
	require.Equal(t, 403, code, body)
	require.Equal(t, `user "nosub" may not see topic "secret" (it needs publish or subscribe)`, body)
	code, body = nosub.stats("count:orders:0:0")
	require.Equal(t, 403, code, body)
	require.Equal(t, `user "nosub" may not subscribe to topic "orders"`, body)
	code, body = nosub.stats("count:orders:x") // malformed: the handler's 400, not a denial
	require.Equal(t, 400, code, body)
	for _, item := range []string{"config", "plugins", "transactions", "reset", "epoch-start:1", "sync-epoch:1", "switchover"} {
		code, body = nosub.stats(item)
		require.Equal(t, 403, code, "stats %s: %s", item, body)
		require.Equal(t, `user "nosub" may not run stats `+item+` (admin only)`, body)
	}
	long := strings.Repeat("y", 300)
	code, body = nosub.stats(long)
	require.Equal(t, 403, code, body)
	require.Equal(t, `user "nosub" may not see topic "`+strings.Repeat("y", 64)+`"... (it needs publish or subscribe)`, body)
	code, body = nosub.stats("sync-epoch:" + long)
	require.Equal(t, 403, code, body)
	require.Less(t, len(body), 160, "a client's item is cut in the denial")
	for _, item := range []string{"help", "disks", "groups", "members", "realtime"} {
		code, body = nosub.stats(item)
		require.Equal(t, 200, code, "stats %s: %s", item, body)
	}
}

// TestAuthzAdminLikeAuthOff: the stats lists an admin gets with auth on
// are byte for byte those of a broker with auth off holding the same data,
// and a user's lines are a subset of them.
func TestAuthzAdminLikeAuthOff(t *testing.T) {
	t.Parallel()
	setup := func(b *Broker, c *authClient) {
		for _, topic := range []string{"orders", "secret"} {
			code, body := c.put(topic)
			require.Equal(t, 200, code, body)
		}
		for _, gt := range [][2]string{{"billing-1", "orders"}, {"billing-1", "secret"}, {"other", "orders"}} {
			code, body := c.call(func(d []byte, op int32) []byte { return protocol.AppendJoin(d, gt[0], gt[1], "m1", "default", op) })
			require.Equal(t, 200, code, body)
		}
	}
	off := startBrokerWith(t, func(c *conf.Config) {
		c.Host = "127.0.0.1"
		c.NumPartitions = 1
		c.Topics = []conf.Topic{{Name: "orders"}, {Name: "secret"}}
	})
	oc := dialAuth(t, off.Addr(), nil)
	setup(off, oc)
	on := secureBroker(t, testsvc.NewCerts(t), &syncLog{}, 10)
	root := dialAuth(t, on.Addr(), nil)
	code, body := root.login("root", "root-pw")
	require.Equal(t, 200, code, body)
	setup(on, root)
	alice := dialAuth(t, on.Addr(), nil)
	code, body = alice.login("alice", "alice-pw")
	require.Equal(t, 200, code, body)
	for _, item := range []string{"topics", "offsets", "partitions", "groups", "members"} {
		code, want := oc.stats(item)
		require.Equal(t, 200, code, want)
		code, got := root.stats(item)
		require.Equal(t, 200, code, got)
		require.Equal(t, want, got, "stats %s", item)
		code, mine := alice.stats(item)
		require.Equal(t, 200, code, mine)
		lines := strings.Split(got, "\r\n")
		for _, l := range strings.Split(mine, "\r\n") {
			require.Contains(t, lines, l, "stats %s as alice", item)
		}
		require.Contains(t, mine, "orders", "stats %s as alice", item)
		require.NotContains(t, mine, "secret", "stats %s as alice", item)
		require.NotContains(t, mine, "other ", "stats %s as alice", item)
	}
}
