package testsvc_test

import (
	"errors"
	"fmt"
	"net"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/go-zookeeper/zk"
	"github.com/stretchr/testify/require"

	"github.com/metaq-go/metaq/internal/testsvc"
)

func TestMain(m *testing.M) { testsvc.Main(m) }

// cutter dials through a SessionSniffer and can close the current
// connection, which makes the client re-attach to its session.
type cutter struct {
	sn   testsvc.SessionSniffer
	mu   sync.Mutex
	conn net.Conn
}

func (c *cutter) Dial(network, addr string, timeout time.Duration) (net.Conn, error) {
	conn, err := c.sn.Dial(network, addr, timeout)
	if err == nil {
		c.mu.Lock()
		c.conn = conn
		c.mu.Unlock()
	}
	return conn, err
}

func (c *cutter) cut() {
	c.mu.Lock()
	defer c.mu.Unlock()
	_ = c.conn.Close()
}

// TestSessionSnifferReattach: a client with many watches re-attaches to its
// session while it keeps sending requests, so that replies arrive while
// go-zookeeper re-sets the watches. Through the sniffer, -race reports
// nothing (without it, go-zookeeper v1.0.4's lastZxid race shows here), the
// watches still fire after the re-attachment, and the session is the same.
func TestSessionSnifferReattach(t *testing.T) {
	addr := testsvc.ZooKeeper(t)
	d := &cutter{}
	conn, _, err := zk.Connect([]string{addr}, 10*time.Second, zk.WithDialer(d.Dial), zk.WithLogger(quiet{}))
	require.NoError(t, err)
	defer conn.Close()
	require.Eventually(t, func() bool { return conn.State() == zk.StateHasSession }, 10*time.Second, 5*time.Millisecond)
	sess := conn.SessionID()

	// Enough watches, with long paths, that SetWatches takes a while to
	// build and spans several packets.
	root := "/sniffer-reattach"
	if _, err := conn.Create(root, nil, 0, zk.WorldACL(zk.PermAll)); err != nil && !errors.Is(err, zk.ErrNodeExists) {
		require.NoError(t, err)
	}
	const watches = 3000
	long := strings.Repeat("x", 120)
	events := make([]<-chan zk.Event, watches)
	var wg sync.WaitGroup
	errs := make(chan error, watches)
	for i := range watches {
		wg.Go(func() {
			_, _, ev, err := conn.ExistsW(fmt.Sprintf("%s/%s-%d", root, long, i))
			events[i] = ev
			if err != nil {
				errs <- err
			}
		})
		if i%64 == 63 {
			wg.Wait()
		}
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		require.NoError(t, err)
	}

	// Requests in flight all along.
	stop := make(chan struct{})
	var busy sync.WaitGroup
	for range 4 {
		busy.Go(func() {
			for {
				select {
				case <-stop:
					return
				default:
				}
				_, _, _ = conn.Exists(root)
			}
		})
	}
	for range 3 {
		d.cut()
		time.Sleep(20 * time.Millisecond)
		require.Eventually(t, func() bool { return conn.State() == zk.StateHasSession }, 10*time.Second, time.Millisecond)
		_, _, err := conn.Exists(root)
		require.NoError(t, err)
	}
	close(stop)
	busy.Wait()
	require.Equal(t, sess, conn.SessionID(), "re-attached to the same session")

	// The watches were re-set: creating a node fires its watch.
	path := fmt.Sprintf("%s/%s-%d", root, long, 7)
	_, err = conn.Create(path, nil, zk.FlagEphemeral, zk.WorldACL(zk.PermAll))
	require.NoError(t, err)
	select {
	case ev := <-events[7]:
		require.Equal(t, zk.EventNodeCreated, ev.Type)
	case <-time.After(10 * time.Second):
		t.Fatal("the watch did not fire after the re-attachments")
	}
}

type quiet struct{}

func (quiet) Printf(string, ...any) {}
