package broker

import (
	"github.com/metaq-go/metaq/internal/testsvc"
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/metaq-go/metaq/conf"
	"github.com/metaq-go/metaq/sdk/protocol"
)

func (c *rawClient) roundTrip(t *testing.T, frame []byte) protocol.Request {
	t.Helper()
	_, err := c.bw.Write(frame)
	require.NoError(t, err)
	require.NoError(t, c.bw.Flush())
	var req protocol.Request
	require.NoError(t, c.dec.Decode(&req))
	req.Body = append([]byte(nil), req.Body...)
	return req
}

func offsetBroker(t *testing.T, mod func(*conf.Config)) (*Broker, *conf.Config) {
	t.Helper()
	cfg := testConfig()
	cfg.Port = 8123
	cfg.DataDir = t.TempDir()
	cfg.NumPartitions = 2
	cfg.Topics = []conf.Topic{{Name: "t"}, {Name: "u"}}
	if mod != nil {
		mod(cfg)
	}
	b, err := New(cfg, Options{Logf: func(string, ...any) {}})
	require.NoError(t, err)
	cfg.Port = 0
	require.NoError(t, b.Start())
	t.Cleanup(func() { b.Close() })
	return b, cfg
}

func commitFrame(group string, es []protocol.OffsetEntry) []byte {
	return protocol.AppendCommit(nil, group, es, 11)
}

func fetchFrame(group string, es []protocol.OffsetEntry) []byte {
	return protocol.AppendFetch(nil, group, es, 12)
}

func TestCommitFetchFileStore(t *testing.T) {
	t.Parallel()
	b, cfg := offsetBroker(t, nil)
	c := dialRaw(t, b.Addr())
	es := []protocol.OffsetEntry{
		{Topic: "t", Partition: 0, Offset: 120, MsgID: 7},
		{Topic: "t", Partition: 1, Offset: 1 << 60, MsgID: 1<<62 + 3},
		{Topic: "u", Partition: 1, Offset: 0, MsgID: -1},
	}
	r := c.roundTrip(t, commitFrame("g1", es))
	require.Equal(t, protocol.StatusOK, r.Code, string(r.Body))
	require.Equal(t, int32(11), r.Opaque)

	ask := []protocol.OffsetEntry{{Topic: "t", Partition: 1}, {Topic: "u", Partition: 0}, {Topic: "t", Partition: 0}}
	r = c.roundTrip(t, fetchFrame("g1", ask))
	require.Equal(t, protocol.StatusOK, r.Code, string(r.Body))
	got, err := protocol.ParseOffsetLines(r.Body, true)
	require.NoError(t, err)
	require.Equal(t, []protocol.OffsetEntry{es[1], {Topic: "u", Partition: 0, Offset: -1, MsgID: -1}, es[0]}, got)

	// Groups are separate.
	r = c.roundTrip(t, fetchFrame("g2", ask[:1]))
	got, err = protocol.ParseOffsetLines(r.Body, true)
	require.NoError(t, err)
	require.Equal(t, int64(-1), got[0].Offset)

	// Bad requests: 400 and the connection carries on.
	for _, tc := range []struct {
		frame []byte
		want  string
	}{
		{commitFrame("g1", []protocol.OffsetEntry{{Topic: "nope", Partition: 0, Offset: 1}}), "unknown topic"},
		{commitFrame("g1", []protocol.OffsetEntry{{Topic: "t", Partition: 2, Offset: 1}}), "out of range"},
		{commitFrame("g1", []protocol.OffsetEntry{{Topic: "t", Partition: 0, Offset: -1}}), "negative offset"},
		{fetchFrame("g1", []protocol.OffsetEntry{{Topic: "t", Partition: 5}}), "out of range"},
		{[]byte("commit g1 7 13\r\nt 0 1\r\n"), "bad offset line"},
		{[]byte("commit g1 8 13\r\nt x 1 2\n"), "bad"},
		// Group names (message.ValidateGroup), escaped in the reply.
		{commitFrame("g\xff", es[:1]), `commit: group "g\xff": message: bad group name: invalid UTF-8 at byte 1`},
		{fetchFrame("g\xfe", ask[:1]), `fetch: group "g\xfe": message: bad group name: invalid UTF-8`},
		{commitFrame("g\x01\x1b[2J", es[:1]), `commit: group "g\x01\x1b[2J": message: bad group name: control character U+0001 at byte 1`},
		{commitFrame("a/b", es[:1]), `group "a/b": message: bad group name: '/' at byte 1`},
		{fetchFrame("..", ask[:1]), "reserved"},
		{commitFrame(strings.Repeat("g", 256), es[:1]), "256 bytes, longer than 255"},
	} {
		r = c.roundTrip(t, tc.frame)
		require.Equal(t, protocol.StatusBadRequest, r.Code, string(tc.frame))
		require.Contains(t, string(r.Body), tc.want)
		for _, ch := range r.Body {
			require.False(t, ch < 0x20 || ch >= 0x7f, "reply %q echoes a raw byte", r.Body)
		}
	}
	// A valid non-ASCII group works.
	r = c.roundTrip(t, commitFrame("消费者-1", es[:1]))
	require.Equal(t, protocol.StatusOK, r.Code, string(r.Body))

	// The file store keeps them across a restart.
	require.NoError(t, b.Close())
	_, err = os.Stat(cfg.OffsetStoreFilePath())
	require.NoError(t, err)
	b2, err := New(cfg, Options{Logf: func(string, ...any) {}})
	require.NoError(t, err)
	require.NoError(t, b2.Start())
	defer b2.Close()
	c2 := dialRaw(t, b2.Addr())
	r = c2.roundTrip(t, fetchFrame("g1", ask[2:]))
	got, err = protocol.ParseOffsetLines(r.Body, true)
	require.NoError(t, err)
	require.Equal(t, es[0], got[0])
}

// TestCommitFetchPlugin runs the broker with the example offset-store
// plugin; after kill -9 of the plugin, commits fail with a clear 500 until
// the supervisor has restarted it, then succeed again with the offsets
// committed before the kill still there.
func TestCommitFetchPlugin(t *testing.T) {
	t.Parallel()
	if testing.Short() {
		t.Skip("builds a plugin")
	}
	dir := t.TempDir()
	bin := filepath.Join(dir, "offsetstore-plugin")
	testsvc.GoBuildTo(t, "github.com/metaq-go/metaq/examples/offsetstore-plugin", bin)
	b, _ := offsetBroker(t, func(cfg *conf.Config) {
		cfg.PluginDir = dir
		cfg.Plugins = []conf.Plugin{{Kind: conf.PluginKindOffsetStore, Name: "jsonl", Path: "offsetstore-plugin",
			Config: map[string]string{"path": filepath.Join(dir, "offsets.jsonl")}}}
		cfg.OffsetStore = "jsonl"
	})
	c := dialRaw(t, b.Addr())
	es := []protocol.OffsetEntry{{Topic: "t", Partition: 0, Offset: 40, MsgID: 4}}
	r := c.roundTrip(t, commitFrame("g", es))
	require.Equal(t, protocol.StatusOK, r.Code, string(r.Body))

	list := b.plugins.List()
	require.Len(t, list, 1)
	require.NoError(t, syscall.Kill(list[0].PID, syscall.SIGKILL))

	es2 := []protocol.OffsetEntry{{Topic: "t", Partition: 1, Offset: 80, MsgID: 8}}
	sawFailure := false
	deadline := time.Now().Add(10 * time.Second)
	for {
		r = c.roundTrip(t, commitFrame("g", es2))
		if r.Code == protocol.StatusOK && sawFailure {
			break
		}
		if r.Code != protocol.StatusOK {
			require.Equal(t, protocol.StatusInternalError, r.Code)
			require.True(t, strings.Contains(string(r.Body), "unavailable"), "unclear failure: %s", r.Body)
			sawFailure = true
		}
		require.True(t, time.Now().Before(deadline), "plugin not back after 10 s (last reply %d %s)", r.Code, r.Body)
		time.Sleep(5 * time.Millisecond)
	}
	r = c.roundTrip(t, fetchFrame("g", []protocol.OffsetEntry{{Topic: "t", Partition: 0}, {Topic: "t", Partition: 1}}))
	require.Equal(t, protocol.StatusOK, r.Code, string(r.Body))
	got, err := protocol.ParseOffsetLines(r.Body, true)
	require.NoError(t, err)
	require.Equal(t, []protocol.OffsetEntry{es[0], es2[0]}, got, "restarted plugin was re-initialised and replayed its file")
}

func TestUnknownOffsetStoreRefused(t *testing.T) {
	t.Parallel()
	cfg := testConfig()
	cfg.DataDir = t.TempDir()
	cfg.Topics = []conf.Topic{{Name: "t"}}
	cfg.PluginDir = t.TempDir()
	cfg.Plugins = []conf.Plugin{{Kind: conf.PluginKindOffsetStore, Name: "gone", Path: "missing-binary"}}
	cfg.OffsetStore = "gone"
	_, err := New(cfg, Options{Logf: func(string, ...any) {}})
	require.ErrorContains(t, err, "offset store")
}
