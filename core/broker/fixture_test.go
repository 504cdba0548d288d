package broker

import (
	"net"
	"testing"
	"time"

	"github.com/metaq-go/metaq/conf"
	"github.com/stretchr/testify/require"
)

// fixture is the one way the white-box tests start a broker (the per-file
// helpers are thin calls of it). Its zero value is a broker on a free
// 127.0.0.1 port with a fresh data directory, topic "t" of 2 partitions,
// and its log discarded. (internal/brokertest is the helper elsewhere; it
// imports this package, so these internal tests cannot use it.)
type fixture struct {
	// dir is the data directory; "" means a fresh tb.TempDir().
	dir string
	// mods change the configuration, in order, after the defaults above.
	mods []func(*conf.Config)
	// opts are the broker's Options; a nil Logf (and LogHandler) means
	// the log is discarded.
	opts Options
	// knobs are the test-only settings (knobs.go).
	knobs knobs
	// listen, if set, is the address the broker serves on (Serve on a
	// listener there, retried for up to 5 s while the port is still
	// taken); "" means Start on the configured host and port.
	listen string
	// serve, if set, starts the broker instead (ServeListeners on
	// listeners the caller made, say).
	serve func(*Broker) error
}

// testJournalFileSize is the journal file size of the tests' brokers
// (testConfig): the smallest accepted. A broker pre-writes its current
// journal file and two spares at its start, 192 MiB written and fsynced at
// the default 64 MiB; the tests' brokers hold little data, and a test
// about the journal's size sets its own.
const testJournalFileSize = 1 << 20

// testConfig is conf.Default() with the tests' journal file size: the
// configuration every broker of these tests starts from.
func testConfig() *conf.Config {
	cfg := conf.Default()
	cfg.JournalFileSize = testJournalFileSize
	return cfg
}

// start opens and starts the broker; it is closed when tb's test ends.
func (f fixture) start(tb testing.TB) *Broker {
	tb.Helper()
	cfg := testConfig()
	if _, bench := tb.(*testing.B); bench {
		cfg.JournalFileSize = conf.Default().JournalFileSize // benchmarks measure a user's broker
	}
	cfg.Port = 0
	cfg.DataDir = f.dir
	if cfg.DataDir == "" {
		cfg.DataDir = tb.TempDir()
	}
	cfg.NumPartitions = 2
	cfg.Topics = []conf.Topic{{Name: "t"}}
	for _, m := range f.mods {
		m(cfg)
	}
	opts := f.opts
	if opts.Logf == nil && opts.LogHandler == nil {
		opts.Logf = func(string, ...any) {}
	}
	b, err := newBroker(cfg, opts, f.knobs)
	require.NoError(tb, err)
	switch {
	case f.serve != nil:
		require.NoError(tb, f.serve(b))
	case f.listen == "":
		require.NoError(tb, b.Start())
	default:
		var ln net.Listener
		require.Eventually(tb, func() bool { ln, err = net.Listen("tcp", f.listen); return err == nil }, 5*time.Second, 20*time.Millisecond)
		require.NoError(tb, b.Serve(ln))
	}
	tb.Cleanup(func() { b.Close() })
	return b
}
