package broker

import (
	"net"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/metaq-go/metaq/conf"
	"github.com/metaq-go/metaq/internal/testsvc"
	"github.com/metaq-go/metaq/internal/zkpath"
	"github.com/metaq-go/metaq/sdk/protocol"
)

// TestClusterTLSRegistration: a broker with both listeners registers
// meta:// in master and metaqs:// in master_tls; a TLS-only one registers
// metaqs:// in master.
func TestClusterTLSRegistration(t *testing.T) {
	t.Parallel()
	addr := testsvc.ZooKeeper(t)
	root := "/tlsreg"
	certs := testsvc.NewCerts(t)
	cf, kf, _ := certs.Server(t, "server")
	start := func(id int, plain bool) *Broker {
		var b *Broker
		require.NoError(t, testsvc.StartOnFreePort(func(port int) error {
			cfg := testConfig()
			// Port 0: no plaintext listener for Start (TLS only); the
			// broker with both gets its listeners from ServeListeners.
			cfg.Port, cfg.BrokerID, cfg.DataDir = 0, id, t.TempDir()
			cfg.Topics = []conf.Topic{{Name: "t"}}
			cfg.TLS.CertFile, cfg.TLS.KeyFile, cfg.TLSPort = cf, kf, port
			cfg.ZooKeeper.Connect, cfg.ZooKeeper.Root = addr, root
			cfg.ZooKeeper.SessionTimeout, cfg.ZooKeeper.ConnectionTimeout = 4000, 5000
			nb, err := New(cfg, Options{Logf: t.Logf})
			if err != nil {
				return err
			}
			if plain {
				ln, err := net.Listen("tcp", "127.0.0.1:0")
				if err != nil {
					nb.Close()
					return err
				}
				tln, err := net.Listen("tcp", "127.0.0.1:"+strconv.Itoa(port))
				if err != nil {
					ln.Close()
					nb.Close()
					return err
				}
				err = nb.ServeListeners(ln, tln)
				if err != nil {
					nb.Close()
					return err
				}
			} else if err := nb.Start(); err != nil {
				nb.Close()
				return err
			}
			b = nb
			return nil
		}))
		t.Cleanup(func() { b.Close() })
		return b
	}
	both := start(1, true)
	tlsOnly := start(2, false)
	c := zkClient(t, addr)
	waitFor(t, 10*time.Second, func() error {
		for p, want := range map[string]string{
			zkpath.Master(root, 1):    "meta://" + both.Addr(),
			zkpath.MasterTLS(root, 1): "metaqs://" + both.TLSAddr(),
			zkpath.Master(root, 2):    "metaqs://" + tlsOnly.TLSAddr(),
		} {
			v, err := zkGet(c, p)
			if err != nil {
				return err
			}
			if v != want {
				return &mismatch{p, v, want}
			}
		}
		return nil
	})
}

type mismatch struct{ path, got, want string }

func (m *mismatch) Error() string { return m.path + ": " + m.got + ", want " + m.want }

// TestReadHandleClosedWithConnection: the segment file a connection's get
// opened for sendfile is closed when the connection ends.
func TestReadHandleClosedWithConnection(t *testing.T) {
	t.Parallel()
	// Threshold mode: the bytes are in the segment file at once (a
	// group-commit put is served from memory until a checkpoint).
	b := startBroker(t, 1)
	c := dialRaw(t, b.Addr())
	r := c.roundTrip(t, protocol.AppendPut(nil, "t", 0, 0, protocol.NoChecksum, 1, []byte("hello")))
	require.Equal(t, protocol.StatusOK, r.Code)
	r = c.roundTrip(t, protocol.AppendPut(nil, "t", 0, 0, protocol.NoChecksum, 1, []byte("hello"))) // over the threshold: flushed, readable
	require.Equal(t, protocol.StatusOK, r.Code)
	require.Eventually(t, func() bool { return b.topics.Get("t").Parts[0].MaxOffset() > 0 }, 5*time.Second, time.Millisecond)
	r = c.roundTrip(t, protocol.AppendGet(nil, "t", "g", 0, 0, 1024, 2))
	require.Equal(t, protocol.OpValue, r.Op)
	seg := filepath.Join(b.config().DataDir, "t-0")
	require.Equal(t, 2, openUnder(t, seg), "the log's own handle and the connection's")
	c.nc.Close()
	require.Eventually(t, func() bool { return openUnder(t, seg) == 1 }, 5*time.Second, 5*time.Millisecond)
}

// openUnder counts this process's descriptors open on .meta files in dir.
func openUnder(t *testing.T, dir string) int {
	ents, err := os.ReadDir("/proc/self/fd")
	require.NoError(t, err)
	n := 0
	for _, e := range ents {
		p, err := os.Readlink(filepath.Join("/proc/self/fd", e.Name()))
		if err == nil && strings.HasPrefix(p, dir+"/") && strings.HasSuffix(p, ".meta") {
			n++
		}
	}
	return n
}
