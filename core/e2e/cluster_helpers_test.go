package e2e

// A harness for multi-process cluster tests: N real metaq-server processes
// started from ONE config file, registered in a real ZooKeeper (internal/testsvc)
// under a root of the test's own. Each broker has a fixed id, 127.0.0.1 port
// and data directory, so it can be killed with SIGKILL and restarted as the
// same broker. The ClusterProducer load generator and the read-back check
// at the end let tests assert that no acknowledged message is lost.
//
//	c := startCluster(t, clusterSpec{Brokers: 3})
//	p := c.newProducer(t)
//	l := startClusterLoad(t, p, clusterTopic, 4)
//	c.broker(2).kill9(t)
//	c.waitUnregistered(t, 2, 15*time.Second)
//	c.broker(2).restart(t)
//	c.waitRegistered(t, 2, 15*time.Second)
//	l.halt()
//	acks, errs := l.snapshot()
//	c.verifyAcked(t, acks)

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"hash/crc32"
	"io"
	"log/slog"
	"net"
	"os"
	"path/filepath"
	"sort"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/go-zookeeper/zk"
	"github.com/stretchr/testify/require"

	"github.com/metaq-go/metaq/conf"
	"github.com/metaq-go/metaq/internal/brokertest"
	"github.com/metaq-go/metaq/internal/testsvc"
	"github.com/metaq-go/metaq/internal/zkpath"
	mqclient "github.com/metaq-go/metaq/sdk/client"
	"github.com/metaq-go/metaq/sdk/cluster"
	"github.com/metaq-go/metaq/sdk/message"
)

// clusterTopic is the topic cluster tests send to: conf/server.toml's
// meta-test (4 partitions, group commit).
const clusterTopic = "meta-test"

// clusterSessionTimeout is the brokers' and the test clients' ZooKeeper
// session timeout unless a spec says otherwise: a killed broker's znodes
// vanish this long after the kill.
const clusterSessionTimeout = 4 * time.Second

// clusterSpec describes a cluster for startCluster.
type clusterSpec struct {
	// Brokers is how many brokers startCluster starts, with ids 1..Brokers.
	// More can be added later with (*testCluster).startBroker.
	Brokers int
	// Config is the server.toml text every broker is started from, without
	// a [zookeeper] table (the harness appends one). "" means the module's
	// conf/server.toml, the shipped sample.
	Config string
	// SessionTimeout is the brokers' ZooKeeper session timeout; 0 means
	// clusterSessionTimeout.
	SessionTimeout time.Duration
	// SniffSessions routes each broker's ZooKeeper connection through a
	// proxy of the test that records its session id and password, so that
	// (*clusterBroker).expireSession can expire it.
	SniffSessions bool
}

// testCluster is a running cluster: one ZooKeeper, one config file, brokers.
type testCluster struct {
	// ZK is the ZooKeeper connect string ("127.0.0.1:port").
	ZK string
	// Root is the test's own ZooKeeper root (the config's [zookeeper] root).
	Root string
	// ConfigPath is the one config file every broker is started from.
	ConfigPath string
	// Cfg is that file, parsed.
	Cfg *conf.Config
	// ConfigCRC is the CRC32 of the file: what master_config_checksum holds.
	ConfigCRC uint32

	spec clusterSpec
	bin  string // the metaq-server binary
	dir  string
	zk   *zk.Conn // the test's own ZooKeeper client

	// dialer, if not nil, is how the test's raw clients connect to the
	// brokers (TLS, a login); nil is dialClient.
	dialer func(addr string) (*client, error)

	mu      sync.Mutex
	brokers map[int]*clusterBroker
}

// clusterBroker is one broker of a testCluster. Its id, port and data
// directory stay the same across kill9 and restart.
type clusterBroker struct {
	c       *testCluster
	ID      int
	Port    int
	Addr    string // "127.0.0.1:port"
	DataDir string

	proxy *zkProxy // nil unless the spec sniffs sessions

	procs
}

// startCluster starts a ZooKeeper (testsvc.ZooKeeper: the test binary's
// shared one under testsvc.Main, else one of t's own), writes the config
// file with a [zookeeper] table naming a fresh root, starts spec.Brokers
// brokers (ids 1..n) concurrently and waits until all are registered.
// Everything is killed at the end of the test; when the test failed, the
// brokers' logs are dumped.
func startCluster(t testing.TB, spec clusterSpec) *testCluster {
	t.Helper()
	if spec.SessionTimeout <= 0 {
		spec.SessionTimeout = clusterSessionTimeout
	}
	bin := brokertest.ServerBinary(t) // build first: it can take a while
	zkAddr := testsvc.ZooKeeper(t)
	base := spec.Config
	if base == "" {
		root, err := moduleRoot()
		require.NoError(t, err)
		b, err := os.ReadFile(filepath.Join(root, "conf", "server.toml"))
		require.NoError(t, err)
		// The sample as shipped but with 1 MiB journal files: each broker's
		// fresh data directory pre-writes and fsyncs three of them (192 MiB
		// at the sample's 64 MiB).
		const shipped = "\njournal_file_size = 67108864\n"
		require.Contains(t, string(b), shipped, "conf/server.toml's journal_file_size")
		base = strings.Replace(string(b), shipped, "\njournal_file_size = 1048576\n", 1)
	}
	c := &testCluster{
		bin:     bin,
		ZK:      zkAddr,
		Root:    fmt.Sprintf("/e2e/%s-%d", zkSafeName(t.Name()), time.Now().UnixNano()),
		spec:    spec,
		dir:     t.TempDir(),
		brokers: map[int]*clusterBroker{},
	}
	c.ConfigPath = filepath.Join(c.dir, "server.toml")
	text := fmt.Sprintf("%s\n\n# Appended by the e2e cluster harness.\n[zookeeper]\nconnect = %q\nroot = %q\nsession_timeout = %d\nconnection_timeout = 10000\n",
		strings.TrimRight(base, "\n"), zkAddr, c.Root, spec.SessionTimeout.Milliseconds())
	require.NoError(t, os.WriteFile(c.ConfigPath, []byte(text), 0o644))
	cfg, err := conf.Load(c.ConfigPath)
	require.NoError(t, err, "cluster config")
	require.NoError(t, cfg.Validate(), "cluster config")
	c.Cfg = cfg
	c.ConfigCRC = crc32.ChecksumIEEE([]byte(text))

	conn, _, err := zk.Connect([]string{zkAddr}, 10*time.Second, zk.WithLogInfo(false), zk.WithLogger(zkQuiet{}))
	require.NoError(t, err)
	c.zk = conn
	t.Cleanup(func() {
		c.mu.Lock()
		bs := make([]*clusterBroker, 0, len(c.brokers))
		for _, b := range c.brokers {
			bs = append(bs, b)
		}
		c.mu.Unlock()
		sort.Slice(bs, func(i, j int) bool { return bs[i].ID < bs[j].ID })
		for _, b := range bs {
			p := b.current()
			if p != nil {
				p.Kill()
			}
			if b.proxy != nil {
				b.proxy.close()
			}
			if t.Failed() {
				t.Logf("broker %d (%s) log:\n%s", b.ID, b.Addr, b.logs(6<<10))
			}
		}
		conn.Close()
	})

	// Start the brokers concurrently: each start is a process exec plus a
	// ZooKeeper registration.
	errs := make([]error, spec.Brokers)
	var wg sync.WaitGroup
	for i := range spec.Brokers {
		b, err := c.newBroker(i + 1)
		require.NoError(t, err)
		wg.Add(1)
		go func() {
			defer wg.Done()
			errs[i] = b.startFirst()
		}()
	}
	wg.Wait()
	require.NoError(t, errors.Join(errs...))
	for id := 1; id <= spec.Brokers; id++ {
		c.waitRegistered(t, id, 20*time.Second)
	}
	return c
}

// zkSafeName turns a test name into one znode name.
func zkSafeName(s string) string {
	return strings.Map(func(r rune) rune {
		if r == '/' || r == ' ' {
			return '_'
		}
		return r
	}, s)
}

type zkQuiet struct{}

func (zkQuiet) Printf(string, ...any) {}

// newBroker makes broker id's directory (and proxy) without starting it.
func (c *testCluster) newBroker(id int) (*clusterBroker, error) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if _, ok := c.brokers[id]; ok {
		return nil, fmt.Errorf("broker %d already exists", id)
	}
	b := &clusterBroker{c: c, ID: id, DataDir: filepath.Join(c.dir, fmt.Sprintf("broker-%d", id))}
	if err := os.MkdirAll(b.DataDir, 0o755); err != nil {
		return nil, err
	}
	if c.spec.SniffSessions {
		p, err := startZKProxy(c.ZK)
		if err != nil {
			return nil, err
		}
		b.proxy = p
	}
	c.brokers[id] = b
	return b, nil
}

// startBroker adds a broker with a new id to the running cluster, from the
// same config file, and waits until it is registered.
func (c *testCluster) startBroker(t testing.TB, id int) *clusterBroker {
	t.Helper()
	b, err := c.newBroker(id)
	require.NoError(t, err)
	require.NoError(t, b.startFirst())
	c.waitRegistered(t, id, 20*time.Second)
	return b
}

// broker returns broker id (the test fails if there is none).
func (c *testCluster) broker(id int) *clusterBroker {
	c.mu.Lock()
	defer c.mu.Unlock()
	b := c.brokers[id]
	if b == nil {
		panic(fmt.Sprintf("no broker %d in the cluster", id))
	}
	return b
}

// dialAddr connects a raw client to addr with the cluster's dialer.
func (c *testCluster) dialAddr(addr string) (*client, error) {
	if c.dialer != nil {
		return c.dialer(addr)
	}
	return dialClient(addr)
}

// dial is dialAddr that fails t on an error and closes the connection at
// the end of the test.
func (c *testCluster) dial(t testing.TB, addr string) *client {
	t.Helper()
	cl, err := c.dialAddr(addr)
	require.NoError(t, err)
	t.Cleanup(func() { cl.nc.Close() })
	return cl
}

// zkConn is the test's own ZooKeeper client (do not close it).
func (c *testCluster) zkConn() *zk.Conn { return c.zk }

// layout reads the cluster as sdk/cluster.ReadLayout sees it.
func (c *testCluster) layout(t testing.TB) *cluster.Layout {
	t.Helper()
	l, err := cluster.ReadLayout(c.zk, c.Root)
	require.NoError(t, err)
	return l
}

// registration checks that broker id is fully registered under c.Root with
// MetaQ's §5 layout: ids/<id> (persistent) and ids/<id>/master hold
// meta://127.0.0.1:port, ids/<id>/master_config_checksum the CRC32 of the
// config file, and for every topic of the config topics/<t>/<id>-m
// (numPartitions), topics-pub/<t>/<id>-m (if accept_publish) and
// topics-sub/<t>/<id>-m (if accept_subscribe, both
// {"numParts":N,"broker":"<id>-m"}), all ephemeral and owned by one
// session. It returns that session, or an error saying what is missing.
func (c *testCluster) registration(id int) (int64, error) {
	b := c.broker(id)
	want := c.wantNodes(id, b.Port)
	ids, master := zkpath.Broker(c.Root, id), zkpath.Master(c.Root, id)
	_, st, err := c.zk.Get(master)
	if err != nil {
		return 0, fmt.Errorf("%s: %w", master, err)
	}
	sess := st.EphemeralOwner
	if sess == 0 {
		return 0, fmt.Errorf("%s is not ephemeral", master)
	}
	for _, p := range sortedKeys(want) {
		data, st, err := c.zk.Get(p)
		if err != nil {
			return 0, fmt.Errorf("%s: %w", p, err)
		}
		if string(data) != want[p] {
			return 0, fmt.Errorf("%s = %q, want %q", p, data, want[p])
		}
		owner := sess
		if p == ids {
			owner = 0
		}
		if st.EphemeralOwner != owner {
			return 0, fmt.Errorf("%s: ephemeral owner %#x, want %#x", p, st.EphemeralOwner, owner)
		}
	}
	return sess, nil
}

// wantNodes is every node (path -> data) broker id on port registers.
func (c *testCluster) wantNodes(id, port int) map[string]string {
	uri := fmt.Sprintf("meta://127.0.0.1:%d", port)
	m := map[string]string{
		zkpath.Broker(c.Root, id):         uri,
		zkpath.Master(c.Root, id):         uri,
		zkpath.MasterChecksum(c.Root, id): strconv.FormatUint(uint64(c.ConfigCRC), 10),
	}
	leaf := zkpath.MasterName(id)
	for _, name := range c.Cfg.TopicNames() {
		tc, _ := c.Cfg.TopicConfig(name)
		js := fmt.Sprintf(`{"numParts":%d,"broker":"%s"}`, tc.NumPartitions, leaf)
		m[zkpath.Topics.Node(c.Root, name, leaf)] = strconv.Itoa(tc.NumPartitions)
		if tc.AcceptPublish {
			m[zkpath.TopicsPub.Node(c.Root, name, leaf)] = js
		}
		if tc.AcceptSubscribe {
			m[zkpath.TopicsSub.Node(c.Root, name, leaf)] = js
		}
	}
	return m
}

func sortedKeys(m map[string]string) []string {
	ks := make([]string, 0, len(m))
	for k := range m {
		ks = append(ks, k)
	}
	sort.Strings(ks)
	return ks
}

// waitRegistered waits (at most timeout) until broker id is fully
// registered (see registration) and returns its ZooKeeper session.
func (c *testCluster) waitRegistered(t testing.TB, id int, timeout time.Duration) int64 {
	t.Helper()
	return c.waitRegisteredOther(t, id, 0, timeout)
}

// waitRegisteredOther waits (at most timeout) until broker id is fully
// registered under a session other than old and returns it.
func (c *testCluster) waitRegisteredOther(t testing.TB, id int, old int64, timeout time.Duration) int64 {
	t.Helper()
	deadline := time.Now().Add(timeout)
	for {
		sess, err := c.registration(id)
		if err == nil && sess == old {
			err = fmt.Errorf("still registered under session %#x", old)
		}
		if err == nil {
			return sess
		}
		if b := c.broker(id); !b.running() {
			t.Fatalf("broker %d is not running while waiting for its registration (%v):\n%s", id, err, b.logs(4<<10))
		}
		if time.Now().After(deadline) {
			t.Fatalf("broker %d not registered in ZooKeeper within %v: %v", id, timeout, err)
		}
		time.Sleep(25 * time.Millisecond)
	}
}

// waitUnregistered waits (at most timeout) until none of broker id's
// ephemeral nodes is left (after a kill: its session has expired).
func (c *testCluster) waitUnregistered(t testing.TB, id int, timeout time.Duration) {
	t.Helper()
	b := c.broker(id)
	deadline := time.Now().Add(timeout)
	for {
		var left []string
		for _, p := range sortedKeys(c.wantNodes(id, b.Port)) {
			if p == zkpath.Broker(c.Root, id) {
				continue // persistent
			}
			ok, _, err := c.zk.Exists(p)
			if err != nil || ok {
				left = append(left, p)
			}
		}
		if len(left) == 0 {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("broker %d still registered in ZooKeeper after %v: %v", id, timeout, left)
		}
		time.Sleep(25 * time.Millisecond)
	}
}

// args are the broker's command line: the one config file plus its own
// id, port, data directory and ZooKeeper address.
func (b *clusterBroker) args() []string {
	zkAddr := b.c.ZK
	if b.proxy != nil {
		zkAddr = b.proxy.Addr()
	}
	return []string{"--config", b.c.ConfigPath, "--broker-id", strconv.Itoa(b.ID),
		"--host", "127.0.0.1", "--port", strconv.Itoa(b.Port), "--http-port", "0", "--data-dir", b.DataDir, "--zk", zkAddr}
}

// startFirst starts the broker the first time, on a free port (picked
// again if another process takes it first).
func (b *clusterBroker) startFirst() error {
	return testsvc.StartOnFreePort(func(port int) error {
		b.Port, b.Addr = port, net.JoinHostPort("127.0.0.1", strconv.Itoa(port))
		return b.launch()
	})
}

// launch starts a process for the broker and waits for its ready line
// (metaq-server prints it once registered, or after connection_timeout).
func (b *clusterBroker) launch() error {
	p, err := brokertest.Launch(b.c.bin, nil, b.args()...)
	if p != nil {
		b.started(p)
	}
	if err != nil {
		return fmt.Errorf("broker %d: %w", b.ID, err)
	}
	if p.Addr != b.Addr {
		p.Kill()
		return fmt.Errorf("broker %d: ready on %s, want %s", b.ID, p.Addr, b.Addr)
	}
	b.setCurrent(p)
	return nil
}

// kill9 kills the broker's process with SIGKILL and waits until it is
// reaped. Its ZooKeeper nodes stay until its session times out.
func (b *clusterBroker) kill9(t testing.TB) {
	t.Helper()
	p := b.current()
	require.NotNil(t, p, "broker %d never started", b.ID)
	p.Kill()
	select {
	case <-p.Exited:
	default:
		t.Fatalf("broker %d (pid %d) not reaped after SIGKILL", b.ID, p.Cmd.Process.Pid)
	}
}

// restart starts the (killed) broker again with the same id, port, data
// directory and config, and waits for its ready line. It does not wait for
// the registration: while the killed process's session has not expired,
// the new one cannot register (use waitRegistered).
func (b *clusterBroker) restart(t testing.TB) {
	t.Helper()
	require.False(t, b.running(), "broker %d is still running", b.ID)
	require.NoError(t, b.launch())
}

// running reports whether the broker's current process is alive.
func (b *clusterBroker) running() bool {
	p := b.current()
	if p == nil {
		return false
	}
	select {
	case <-p.Exited:
		return false
	default:
		return true
	}
}

// pid is the current process's pid.
func (b *clusterBroker) pid() int {
	return b.current().Cmd.Process.Pid
}

// logs returns the last n bytes of every process's log, oldest first.
func (b *clusterBroker) logs(n int) string {
	runs := b.all()
	var sb strings.Builder
	for i, p := range runs {
		fmt.Fprintf(&sb, "--- process %d of broker %d ---\n%s\n", i+1, b.ID, p.Logs.Tail(n))
	}
	return sb.String()
}

// logContains reports whether the current process logged s.
func (b *clusterBroker) logContains(s string) bool {
	p := b.current()
	return p != nil && strings.Contains(p.Logs.String(), s)
}

// zkSession returns the ZooKeeper session id and password the broker's
// client got last (the spec must sniff sessions).
func (b *clusterBroker) zkSession(t testing.TB) (int64, []byte) {
	t.Helper()
	require.NotNil(t, b.proxy, "clusterSpec.SniffSessions is off")
	return b.proxy.sniff.Session()
}

// expireSession expires the broker's ZooKeeper session from outside (a
// second client joins it with its id and password and closes it: see
// testsvc.ExpireSession) and returns the expired session id. The session
// must be the one its nodes are registered under.
func (b *clusterBroker) expireSession(t testing.TB) int64 {
	t.Helper()
	id, pw := b.zkSession(t)
	require.NotZero(t, id, "no session sniffed for broker %d", b.ID)
	testsvc.ExpireSession(t, b.c.ZK, id, pw)
	return id
}

// ---------------------------------------------------------------------------
// ZooKeeper session-sniffing proxy
// ---------------------------------------------------------------------------

// zkProxy forwards TCP connections to a ZooKeeper server, recording the
// session id and password of every connect response (testsvc.SessionSniffer)
// so that the test can expire the session of a client in another process.
type zkProxy struct {
	ln     net.Listener
	target string
	sniff  testsvc.SessionSniffer

	mu     sync.Mutex
	conns  map[net.Conn]bool
	closed bool
	wg     sync.WaitGroup
}

func startZKProxy(target string) (*zkProxy, error) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return nil, err
	}
	p := &zkProxy{ln: ln, target: target, conns: map[net.Conn]bool{}}
	p.wg.Add(1)
	go p.serve()
	return p, nil
}

// Addr is the address clients connect to instead of the server's.
func (p *zkProxy) Addr() string { return p.ln.Addr().String() }

func (p *zkProxy) track(c net.Conn) bool {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.closed {
		return false
	}
	p.conns[c] = true
	return true
}

func (p *zkProxy) untrack(c net.Conn) {
	p.mu.Lock()
	delete(p.conns, c)
	p.mu.Unlock()
	c.Close()
}

func (p *zkProxy) serve() {
	defer p.wg.Done()
	for {
		down, err := p.ln.Accept()
		if err != nil {
			return
		}
		if !p.track(down) {
			down.Close()
			return
		}
		up, err := p.sniff.Dial("tcp", p.target, 5*time.Second)
		if err != nil || !p.track(up) {
			if up != nil {
				up.Close()
			}
			p.untrack(down)
			continue
		}
		p.wg.Add(2)
		// Either direction ending closes both connections.
		go func() {
			defer p.wg.Done()
			io.Copy(up, down)
			p.untrack(up)
			p.untrack(down)
		}()
		go func() {
			defer p.wg.Done()
			io.Copy(down, up) // up's reads go through the sniffer
			p.untrack(up)
			p.untrack(down)
		}()
	}
}

func (p *zkProxy) close() {
	p.mu.Lock()
	p.closed = true
	conns := p.conns
	p.conns = map[net.Conn]bool{}
	p.mu.Unlock()
	p.ln.Close()
	for c := range conns {
		c.Close()
	}
	p.wg.Wait()
}

// ---------------------------------------------------------------------------
// Producer load and read-back
// ---------------------------------------------------------------------------

// newProducer returns a producing Client of the cluster through ZooKeeper
// (retries on, the brokers' session timeout, 1 s dial timeout, 5 s produce
// timeout unless opts say otherwise), closed at the end of the test. Its
// log (its last 64 KiB, enough for the retries of a failover) goes to the
// test log when the test fails.
func (c *testCluster) newProducer(t testing.TB, opts ...mqclient.Opt) *mqclient.Client {
	t.Helper()
	lb := &logBuf{}
	base := []mqclient.Opt{
		mqclient.Logger(slog.New(slog.NewTextHandler(lb, &slog.HandlerOptions{Level: slog.LevelDebug}))),
		mqclient.ZooKeeper(c.ZK, c.Root), mqclient.ZooKeeperSessionTimeout(c.spec.SessionTimeout),
		mqclient.DialTimeout(time.Second), mqclient.ProduceTimeout(5 * time.Second),
		mqclient.ProduceRetries(true),
	}
	p, err := mqclient.New(append(base, opts...)...)
	require.NoError(t, err)
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		if err := p.Close(ctx); err != nil {
			t.Errorf("producer close: %v", err)
		}
		if t.Failed() {
			t.Logf("producer log:\n%s", lb.Tail(64<<10))
		}
	})
	return p
}

// clusterAck is one acknowledged send: where the SendResult says the
// message is, and its body.
type clusterAck struct {
	At     time.Time
	Topic  string
	Broker int
	Part   int32
	Offset int64
	Body   string
}

// clusterLoad sends from several goroutines until halted, recording every
// ack and every error.
type clusterLoad struct {
	loadStop
	acks   []clusterAck
	errs   []error
	counts map[int]int
	seq    atomic.Int64
}

// startClusterLoad starts workers goroutines that each send one message
// at a time to topic (body "<test>-<seq>") with a short pause between
// sends. It is halted at the end of the test at the latest.
func startClusterLoad(t testing.TB, p *mqclient.Client, topic string, workers int) *clusterLoad {
	l := &clusterLoad{loadStop: loadStop{stop: make(chan struct{})}, counts: map[int]int{}}
	prefix := zkSafeName(t.Name())
	for range workers {
		l.wg.Add(1)
		go func() {
			defer l.wg.Done()
			for {
				select {
				case <-l.stop:
					return
				default:
				}
				body := fmt.Sprintf("%s-%d", prefix, l.seq.Add(1))
				rs, err := p.ProduceSync(context.Background(), &message.Message{Topic: topic, Body: []byte(body)})
				l.mu.Lock()
				if err != nil {
					l.errs = append(l.errs, err)
				} else {
					r := rs[0]
					l.acks = append(l.acks, clusterAck{time.Now(), topic, r.BrokerID, r.Partition, r.Offset, body})
					l.counts[r.BrokerID]++
				}
				l.mu.Unlock()
				time.Sleep(2 * time.Millisecond)
			}
		}()
	}
	t.Cleanup(l.halt)
	return l
}

// count is how many sends broker id acknowledged so far.
func (l *clusterLoad) count(id int) int {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.counts[id]
}

// errCount is how many sends failed so far.
func (l *clusterLoad) errCount() int {
	l.mu.Lock()
	defer l.mu.Unlock()
	return len(l.errs)
}

// snapshot copies the acks and errors so far.
func (l *clusterLoad) snapshot() ([]clusterAck, []error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	return append([]clusterAck(nil), l.acks...), append([]error(nil), l.errs...)
}

// waitCount waits (at most timeout) until broker id has acknowledged more
// than n sends in all.
func (l *clusterLoad) waitCount(t testing.TB, id, n int, timeout time.Duration) {
	t.Helper()
	deadline := time.Now().Add(timeout)
	for l.count(id) <= n {
		if time.Now().After(deadline) {
			_, errs := l.snapshot()
			t.Fatalf("broker %d acknowledged %d sends, not more than %d, within %v (%d send errors, last: %v)",
				id, l.count(id), n, timeout, len(errs), lastErr(errs))
		}
		time.Sleep(10 * time.Millisecond)
	}
}

func lastErr(errs []error) error {
	if len(errs) == 0 {
		return nil
	}
	return errs[len(errs)-1]
}

// verifyAcked reads back, with raw gets, every partition that acks name
// on the broker they name, and checks that each acked message is there at
// its acked offset with its body. It returns the number checked per broker.
func (c *testCluster) verifyAcked(t testing.TB, acks []clusterAck) map[int]int {
	t.Helper()
	type bp struct {
		broker int
		topic  string
		part   int32
	}
	byPart := map[bp][]clusterAck{}
	for _, a := range acks {
		k := bp{a.Broker, a.Topic, a.Part}
		byPart[k] = append(byPart[k], a)
	}
	keys := make([]bp, 0, len(byPart))
	for k := range byPart {
		keys = append(keys, k)
	}
	sort.Slice(keys, func(i, j int) bool {
		if keys[i].broker != keys[j].broker {
			return keys[i].broker < keys[j].broker
		}
		return keys[i].part < keys[j].part
	})
	checked := map[int]int{}
	conns := map[int]*client{}
	for _, k := range keys {
		cl := conns[k.broker]
		if cl == nil {
			b := c.broker(k.broker)
			require.True(t, b.running(), "broker %d is not running", k.broker)
			var err error
			cl, err = dialClient(b.Addr)
			require.NoError(t, err)
			defer cl.close()
			conns[k.broker] = cl
		}
		recs, _, err := readPartition(cl, k.topic, k.part, 1<<20)
		require.NoError(t, err, "read back broker %d %s-%d", k.broker, k.topic, k.part)
		at := make(map[int64][]byte, len(recs))
		for _, r := range recs {
			// The payload: the producer's properties block (the idempotent
			// producer's id and sequence) is not part of the body sent.
			m, err := (&message.Record{Offset: r.Offset, ID: r.ID, Flag: r.Flag, Data: r.Data}).Message(k.topic, k.part)
			require.NoError(t, err, "broker %d %s-%d offset %d", k.broker, k.topic, k.part, r.Offset)
			at[r.Offset] = m.Body
		}
		var missing []string
		for _, a := range byPart[k] {
			data, ok := at[a.Offset]
			switch {
			case !ok:
				missing = append(missing, fmt.Sprintf("%q acked at offset %d: no record there", a.Body, a.Offset))
			case !bytes.Equal(data, []byte(a.Body)):
				missing = append(missing, fmt.Sprintf("%q acked at offset %d: record there is %q", a.Body, a.Offset, data))
			default:
				checked[k.broker]++
			}
		}
		if len(missing) > 0 {
			if len(missing) > 10 {
				missing = append(missing[:10], fmt.Sprintf("... %d more", len(missing)-10))
			}
			t.Fatalf("broker %d %s-%d: %d of %d acknowledged messages lost (%d records read):\n%s",
				k.broker, k.topic, k.part, len(missing), len(byPart[k]), len(recs), strings.Join(missing, "\n"))
		}
	}
	return checked
}

// ---------------------------------------------------------------------------
// zkCli.sh
// ---------------------------------------------------------------------------

// zkCliScript runs Debian's zkCli.sh once against addr with commands on its
// standard input and returns the lines it printed without its connection
// chatter (testsvc.ZkCliScript).
func zkCliScript(t testing.TB, addr string, commands ...string) []string {
	t.Helper()
	lines, err := testsvc.ZkCliScript(t, addr, commands...)
	require.NoError(t, err)
	return lines
}
