package cluster_test

import (
	"context"
	"encoding/binary"
	"fmt"
	"io"
	"net"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/go-zookeeper/zk"
	"github.com/stretchr/testify/require"

	"github.com/metaq-go/metaq/core/testsvc"
	"github.com/metaq-go/metaq/sdk/balance"
	"github.com/metaq-go/metaq/sdk/cluster"
)

func TestMain(m *testing.M) { testsvc.Main(m) }

// zkClient is a plain client that writes the nodes a broker would.
func zkClient(t *testing.T, addr string) *zk.Conn {
	t.Helper()
	c, _, err := zk.Connect([]string{addr}, 10*time.Second, zk.WithLogInfo(false))
	require.NoError(t, err)
	t.Cleanup(c.Close)
	return c
}

func mkdirs(t *testing.T, c *zk.Conn, path string) {
	t.Helper()
	p := ""
	for _, part := range strings.Split(strings.Trim(path, "/"), "/") {
		p += "/" + part
		_, err := c.Create(p, nil, 0, zk.WorldACL(zk.PermAll))
		if err != nil && err != zk.ErrNodeExists {
			require.NoError(t, err)
		}
	}
}

// register writes broker id's §5 nodes: ids/<id> (P), ids/<id>/master (E)
// and topics-pub/<topic>/<id>-<role> (E), role "m" or "s0".
func register(t *testing.T, c *zk.Conn, root string, id int, role, addr, topic string, parts int) {
	t.Helper()
	ids := fmt.Sprintf("%s/brokers/ids/%d", root, id)
	mkdirs(t, c, ids)
	uri := []byte("meta://" + addr)
	if role == "m" {
		_, err := c.Set(ids, uri, -1)
		require.NoError(t, err)
		_, err = c.Create(ids+"/master", uri, zk.FlagEphemeral, zk.WorldACL(zk.PermAll))
		require.NoError(t, err)
	} else {
		_, err := c.Create(ids+"/slave0", uri, zk.FlagEphemeral, zk.WorldACL(zk.PermAll))
		require.NoError(t, err)
	}
	pub := root + "/brokers/topics-pub/" + topic
	mkdirs(t, c, pub)
	data := fmt.Sprintf(`{"numParts":%d,"broker":"%d-m"}`, parts, id)
	_, err := c.Create(fmt.Sprintf("%s/%d-%s", pub, id, role), []byte(data), zk.FlagEphemeral, zk.WorldACL(zk.PermAll))
	require.NoError(t, err)
}

func unregister(t *testing.T, c *zk.Conn, root string, id int, topic string) {
	t.Helper()
	require.NoError(t, c.Delete(fmt.Sprintf("%s/brokers/topics-pub/%s/%d-m", root, topic, id), -1))
	require.NoError(t, c.Delete(fmt.Sprintf("%s/brokers/ids/%d/master", root, id), -1))
}

func open(t *testing.T, o cluster.Options) *cluster.Cluster {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	c, err := cluster.Open(ctx, o)
	require.NoError(t, err)
	t.Cleanup(func() { _ = c.Close() })
	return c
}

func parts(spec ...int) []balance.Partition {
	var out []balance.Partition
	for i := 0; i < len(spec); i += 2 {
		for p := range spec[i+1] {
			out = append(out, balance.Partition{BrokerID: spec[i], Partition: int32(p)})
		}
	}
	return out
}

// waitParts waits until v lists want.
func waitParts(t *testing.T, v *cluster.TopicView, want []balance.Partition) {
	t.Helper()
	deadline := time.Now().Add(15 * time.Second)
	for {
		got := v.Partitions()
		if fmt.Sprint(got) == fmt.Sprint(want) {
			return
		}
		if time.Now().After(deadline) {
			require.Equal(t, want, got)
		}
		select {
		case <-v.Changes():
		case <-time.After(100 * time.Millisecond):
		}
	}
}

func TestDiscoverySortedMastersOnly(t *testing.T) {
	addr := testsvc.ZooKeeper(t)
	root := "/disc"
	w := zkClient(t, addr)
	// Broker 10 before broker 2, so that text order would differ.
	register(t, w, root, 10, "m", "127.0.0.1:9010", "t", 3)
	register(t, w, root, 2, "m", "127.0.0.1:9002", "t", 12)
	register(t, w, root, 2, "s0", "127.0.0.1:9102", "t", 12)
	register(t, w, root, 7, "s0", "127.0.0.1:9107", "t", 5) // a slave without master
	c := open(t, cluster.Options{Connect: addr, Root: root, SessionTimeout: 4 * time.Second})
	v := c.WatchPublish("t")
	require.Same(t, v, c.WatchPublish("t"))
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	require.NoError(t, v.Wait(ctx))
	want := parts(2, 12, 10, 3)
	require.Equal(t, want, v.Partitions())
	require.Equal(t, "127.0.0.1:9002", v.Addr(2))
	require.Equal(t, "127.0.0.1:9010", v.Addr(10))
	require.Equal(t, "", v.Addr(7))

	// A new broker appears; one vanishes; the topic of another view is absent.
	register(t, w, root, 5, "m", "127.0.0.1:9005", "t", 2)
	waitParts(t, v, parts(2, 12, 5, 2, 10, 3))
	unregister(t, w, root, 2, "t")
	waitParts(t, v, parts(5, 2, 10, 3))
	require.Equal(t, "", v.Addr(2))
	// A master URI change (broker restarted elsewhere) is followed.
	_, err := w.Set(root+"/brokers/ids/5/master", []byte("meta://127.0.0.1:9999"), -1)
	require.NoError(t, err)
	require.Eventually(t, func() bool { return v.Addr(5) == "127.0.0.1:9999" }, 10*time.Second, 20*time.Millisecond)

	// A topic created after the view started.
	u := c.WatchPublish("later")
	require.NoError(t, u.Wait(ctx))
	require.Empty(t, u.Partitions())
	register(t, w, root, 3, "m", "127.0.0.1:9003", "later", 4)
	waitParts(t, u, parts(3, 4))
}

// TestSessionExpiryRecovers expires the view's session with a second
// client holding its session id and password; the view must re-read on
// the new session and keep following changes.
func TestSessionExpiryRecovers(t *testing.T) {
	addr := testsvc.ZooKeeper(t)
	root := "/expiry"
	w := zkClient(t, addr)
	register(t, w, root, 1, "m", "127.0.0.1:9001", "t", 2)
	sn := &sessionSniffer{}
	c := open(t, cluster.Options{Connect: addr, Root: root, SessionTimeout: 4 * time.Second, Dialer: sn.dial})
	v := c.WatchPublish("t")
	waitParts(t, v, parts(1, 2))
	for round := range 2 {
		id, pw := sn.get()
		require.NotZero(t, id)
		expireSession(t, addr, id, pw)
		require.Eventually(t, func() bool { s := c.SessionID(); return s != 0 && s != id }, 20*time.Second, 20*time.Millisecond)
		// Changes made after the expiry are seen on the new session.
		bid := 20 + round
		register(t, w, root, bid, "m", fmt.Sprintf("127.0.0.1:%d", 9100+bid), "t", 1)
		want := parts(1, 2)
		for r := 0; r <= round; r++ {
			want = append(want, balance.Partition{BrokerID: 20 + r})
		}
		waitParts(t, v, want)
	}
	unregister(t, w, root, 1, "t")
	waitParts(t, v, []balance.Partition{{BrokerID: 20}, {BrokerID: 21}})
}

// sessionSniffer is a Dialer that records the session id and password of
// each connect response the client receives.
type sessionSniffer struct {
	mu     sync.Mutex
	id     int64
	passwd []byte
}

func (s *sessionSniffer) dial(network, addr string, timeout time.Duration) (net.Conn, error) {
	c, err := net.DialTimeout(network, addr, timeout)
	if err != nil {
		return nil, err
	}
	return &sniffConn{Conn: c, s: s}, nil
}

func (s *sessionSniffer) get() (int64, []byte) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.id, append([]byte(nil), s.passwd...)
}

type sniffConn struct {
	net.Conn
	s    *sessionSniffer
	buf  []byte
	done bool
}

// Read parses the first packet: the connect response (int32 len, int32
// protocolVersion, int32 timeOut, int64 sessionId, int32 passwdLen, passwd).
func (c *sniffConn) Read(p []byte) (int, error) {
	n, err := c.Conn.Read(p)
	if !c.done && n > 0 {
		c.buf = append(c.buf, p[:n]...)
		if len(c.buf) >= 4 && len(c.buf) >= 4+int(binary.BigEndian.Uint32(c.buf)) {
			b := c.buf[4:]
			c.done = true
			if len(b) >= 20 {
				id := int64(binary.BigEndian.Uint64(b[8:16]))
				pl := int(int32(binary.BigEndian.Uint32(b[16:20])))
				if id != 0 && pl >= 0 && len(b) >= 20+pl {
					c.s.mu.Lock()
					c.s.id, c.s.passwd = id, append([]byte(nil), b[20:20+pl]...)
					c.s.mu.Unlock()
				}
			}
		}
	}
	return n, err
}

// expireSession joins session id with its password on a second connection
// and closes it: ZooKeeper's standard way to expire a client's session.
func expireSession(t *testing.T, addr string, id int64, passwd []byte) {
	t.Helper()
	c, err := net.DialTimeout("tcp", addr, 5*time.Second)
	require.NoError(t, err)
	defer c.Close()
	require.NoError(t, c.SetDeadline(time.Now().Add(10*time.Second)))
	req := binary.BigEndian.AppendUint32(nil, 0)
	req = binary.BigEndian.AppendUint64(req, 0)
	req = binary.BigEndian.AppendUint32(req, 4000)
	req = binary.BigEndian.AppendUint64(req, uint64(id))
	req = binary.BigEndian.AppendUint32(req, uint32(len(passwd)))
	req = append(req, passwd...)
	writePacket(t, c, req)
	resp := readPacket(t, c)
	require.GreaterOrEqual(t, len(resp), 16)
	require.Equal(t, id, int64(binary.BigEndian.Uint64(resp[8:16])), "the server did not accept the session's credentials")
	hdr := binary.BigEndian.AppendUint32(nil, 1)
	hdr = binary.BigEndian.AppendUint32(hdr, uint32(0xFFFFFFF5)) // closeSession
	writePacket(t, c, hdr)
	readPacket(t, c)
}

func writePacket(t *testing.T, c net.Conn, b []byte) {
	t.Helper()
	_, err := c.Write(append(binary.BigEndian.AppendUint32(nil, uint32(len(b))), b...))
	require.NoError(t, err)
}

func readPacket(t *testing.T, c net.Conn) []byte {
	t.Helper()
	var l [4]byte
	_, err := io.ReadFull(c, l[:])
	require.NoError(t, err)
	b := make([]byte, binary.BigEndian.Uint32(l[:]))
	_, err = io.ReadFull(c, b)
	require.NoError(t, err)
	return b
}
