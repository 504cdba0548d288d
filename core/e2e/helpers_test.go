package e2e

import (
	"bytes"
	"errors"
	"fmt"
	"net"
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/metaq-go/metaq/conf"
	"github.com/metaq-go/metaq/core/broker"
	"github.com/metaq-go/metaq/internal/brokertest"
	"github.com/metaq-go/metaq/internal/testsvc"
	"github.com/metaq-go/metaq/sdk/message"
	"github.com/metaq-go/metaq/sdk/protocol"
)

// ioTimeout bounds every single network read or write of the tests.
const ioTimeout = 10 * time.Second

// TestMain shares one ZooKeeper and one build of each binary among the
// tests (testsvc.Main), and removes them at the end.
func TestMain(m *testing.M) { testsvc.Main(m) }

// ---------------------------------------------------------------------------
// Log capture
// ---------------------------------------------------------------------------

// logBuf collects log lines (brokertest.Logs).
type logBuf = brokertest.Logs

// ---------------------------------------------------------------------------
// In-process broker
// ---------------------------------------------------------------------------

// testBroker is an in-process broker listening on a free 127.0.0.1 port
// (internal/brokertest).
type testBroker struct {
	*brokertest.Broker
	b    *broker.Broker
	cfg  *conf.Config
	Addr string
	dir  string
}

// brokerConfig renders a server.toml: top is the top-level settings (without
// data_dir, which is set to dataDir), topics the [[topic]] tables. Journal
// files are 1 MiB (the smallest allowed) unless top sets
// journal_file_size: every fresh data directory pre-writes and fsyncs
// three of them, 192 MiB at the default size, which was most of the time
// of the tests that start many brokers or copy data directories.
func brokerConfig(dataDir, top, topics string) string {
	if !strings.Contains(top, "journal_file_size") {
		top = "journal_file_size = 1048576\n" + top
	}
	return fmt.Sprintf("data_dir = %q\nhost = \"127.0.0.1\"\nport = 0\n%s\n%s", dataDir, top, topics)
}

// startBroker parses toml and starts a broker on it (brokerConfig sets
// port 0: a free port).
func startBroker(t testing.TB, toml string) *testBroker {
	t.Helper()
	cfg, err := conf.Parse([]byte(toml), "server.toml")
	require.NoError(t, err)
	b := brokertest.Start(t, brokertest.Config(cfg), brokertest.BrokerOptions(broker.Options{WriteTimeout: ioTimeout}))
	return &testBroker{Broker: b, b: b.Broker, cfg: cfg, Addr: b.Addr(), dir: cfg.DataDir}
}

// ---------------------------------------------------------------------------
// Raw protocol client
// ---------------------------------------------------------------------------

// reply is one decoded reply frame, with its body copied.
type reply struct {
	Op     protocol.Op // OpResult or OpValue
	Code   int
	Opaque int32
	Body   []byte
}

func (r reply) String() string {
	b := r.Body
	if len(b) > 200 {
		b = b[:200]
	}
	return fmt.Sprintf("%s %d op=%d %q", r.Op, r.Code, r.Opaque, b)
}

// client is a raw protocol connection. Its methods return errors rather than
// failing the test, so they can be used from any goroutine.
type client struct {
	nc  net.Conn
	dec *protocol.Decoder
	op  int32
	req protocol.Request
	// timeout bounds each read and write; 0 means ioTimeout.
	timeout time.Duration
}

func dialClient(addr string) (*client, error) {
	nc, err := net.DialTimeout("tcp", addr, ioTimeout)
	if err != nil {
		return nil, err
	}
	return &client{nc: nc, dec: protocol.NewDecoder(nc, protocol.Limits{MaxBody: 64 << 20})}, nil
}

// dial connects to addr and closes the connection at the end of the test.
func dial(t testing.TB, addr string) *client {
	t.Helper()
	c, err := dialClient(addr)
	require.NoError(t, err)
	t.Cleanup(func() { c.nc.Close() })
	return c
}

func (c *client) close() { c.nc.Close() }

// deadline is the deadline of a read or write starting now.
func (c *client) deadline() time.Time {
	if c.timeout > 0 {
		return time.Now().Add(c.timeout)
	}
	return time.Now().Add(ioTimeout)
}

func (c *client) nextOpaque() int32 {
	c.op++
	if c.op <= 0 || c.op == protocol.DefaultOpaque {
		c.op = 1
	}
	return c.op
}

// write sends raw bytes.
func (c *client) write(b []byte) error {
	c.nc.SetWriteDeadline(c.deadline())
	_, err := c.nc.Write(b)
	return err
}

// read decodes the next reply frame.
func (c *client) read() (reply, error) {
	c.nc.SetReadDeadline(c.deadline())
	if err := c.dec.Decode(&c.req); err != nil {
		return reply{}, err
	}
	r := reply{Op: c.req.Op, Code: c.req.Code, Opaque: c.req.Opaque, Body: bytes.Clone(c.req.Body)}
	if r.Op != protocol.OpResult && r.Op != protocol.OpValue {
		return r, fmt.Errorf("unexpected %s frame from the broker", r.Op)
	}
	return r, nil
}

// call sends one request and reads one reply, which must carry opaque.
func (c *client) call(req []byte, opaque int32) (reply, error) {
	if err := c.write(req); err != nil {
		return reply{}, err
	}
	r, err := c.read()
	if err != nil {
		return r, err
	}
	if r.Opaque != opaque {
		return r, fmt.Errorf("reply opaque %d, want %d (%v)", r.Opaque, opaque, r)
	}
	return r, nil
}

func putFrame(topic string, partition int32, data []byte, opaque int32) []byte {
	return protocol.AppendPut(nil, topic, partition, 0, int64(message.Checksum(data)), opaque, data)
}

func (c *client) put(topic string, partition int32, data []byte) (reply, error) {
	op := c.nextOpaque()
	return c.call(putFrame(topic, partition, data, op), op)
}

func (c *client) get(topic string, partition int32, offset int64, maxSize int32) (reply, error) {
	op := c.nextOpaque()
	return c.call(protocol.AppendGet(nil, topic, "e2e-group", partition, offset, maxSize, op), op)
}

func (c *client) offset(topic string, partition int32, offset int64) (reply, error) {
	op := c.nextOpaque()
	return c.call(protocol.AppendOffset(nil, topic, "e2e-group", partition, offset, op), op)
}

func (c *client) stats(item string) (reply, error) {
	op := c.nextOpaque()
	return c.call(protocol.AppendStats(nil, item, op), op)
}

// expectClosed checks that the broker closes the connection without
// sending anything more.
func (c *client) expectClosed() error {
	c.nc.SetReadDeadline(time.Now().Add(ioTimeout))
	err := c.dec.Decode(&c.req)
	if err == nil {
		return fmt.Errorf("unexpected %s frame (code %d, body %.100q) instead of a close", c.req.Op, c.req.Code, c.req.Body)
	}
	var ne net.Error
	if errors.As(err, &ne) && ne.Timeout() {
		return fmt.Errorf("connection still open after %v", ioTimeout)
	}
	return nil // EOF, reset, or a torn frame: closed
}

// ---------------------------------------------------------------------------
// Test-level helpers (main test goroutine only)
// ---------------------------------------------------------------------------

// ok returns a function that requires a (reply, error) pair to be a
// `result 200` and returns the reply: ok(t)(c.stats("")).
func ok(t testing.TB) func(reply, error) reply {
	return func(r reply, err error) reply {
		t.Helper()
		require.NoError(t, err)
		require.Equal(t, protocol.OpResult, r.Op, "reply %v", r)
		require.Equal(t, protocol.StatusOK, r.Code, "reply %v", r)
		return r
	}
}

// got returns a function that requires a (reply, error) pair to have no
// error and returns the reply: got(t)(c.get(...)).
func got(t testing.TB) func(reply, error) reply {
	return func(r reply, err error) reply {
		t.Helper()
		require.NoError(t, err)
		return r
	}
}

// mustPut puts data and returns the acknowledged id and offset.
func mustPut(t testing.TB, c *client, topic string, partition int32, data []byte) (id, offset int64) {
	t.Helper()
	r := ok(t)(c.put(topic, partition, data))
	id, p, off, n, err := protocol.ParsePutResult(r.Body)
	require.NoError(t, err)
	require.Equal(t, partition, p)
	require.Equal(t, 1, n)
	return id, off
}

// mustInt parses a reply body that is a decimal number.
func mustInt(t testing.TB, r reply) int64 {
	t.Helper()
	v, ok := protocol.ParseInt64(r.Body)
	require.True(t, ok, "reply body %q is not a number", r.Body)
	return v
}

// parseStats splits a STATS ... END body into key -> rest of line.
func parseStats(t testing.TB, body []byte) map[string]string {
	t.Helper()
	s := string(body)
	require.True(t, strings.HasPrefix(s, "STATS\r\n"), "stats body %q", s)
	require.True(t, strings.HasSuffix(s, "END\r\n"), "stats body %q", s)
	m := map[string]string{}
	for _, line := range strings.Split(strings.TrimSuffix(strings.TrimPrefix(s, "STATS\r\n"), "END\r\n"), "\r\n") {
		if line == "" {
			continue
		}
		k, v, _ := strings.Cut(line, " ")
		m[k] = v
	}
	return m
}

// statsLines returns the lines between STATS and END.
func statsLines(t testing.TB, body []byte) []string {
	t.Helper()
	s := string(body)
	require.True(t, strings.HasPrefix(s, "STATS\r\n") && strings.HasSuffix(s, "END\r\n"), "stats body %q", s)
	s = strings.TrimSuffix(strings.TrimPrefix(s, "STATS\r\n"), "END\r\n")
	var out []string
	for _, l := range strings.Split(s, "\r\n") {
		if l != "" {
			out = append(out, l)
		}
	}
	return out
}

var offsetsLine = regexp.MustCompile(`^(\S+) part (\d+) min_offset (-?\d+) max_offset (-?\d+)$`)

// partOffsets returns min and max offset of every partition from `stats offsets`.
func partOffsets(t testing.TB, c *client) map[string][2]int64 {
	t.Helper()
	r := ok(t)(c.stats("offsets"))
	out := map[string][2]int64{}
	for _, l := range statsLines(t, r.Body) {
		m := offsetsLine.FindStringSubmatch(l)
		require.NotNil(t, m, "stats offsets line %q", l)
		lo, _ := strconv.ParseInt(m[3], 10, 64)
		hi, _ := strconv.ParseInt(m[4], 10, 64)
		out[m[1]+"-"+m[2]] = [2]int64{lo, hi}
	}
	return out
}

// record is a record read back from the broker; its data is a slice of
// the reply it came in (a copy of its own).
type record struct {
	Offset int64
	ID     int64
	Flag   int32
	Data   []byte
}

// readPartition reads a partition from its minimum to the end with gets of
// maxSize bytes, checking every record's crc (the iterator does) and that
// the broker never serves bytes that are not a whole valid record chain.
// It returns the records and the offset after the last one.
func readPartition(c *client, topic string, partition int32, maxSize int32) (recs []record, end int64, err error) {
	off := int64(0)
	first := true
	for i := 0; i < 1<<20; i++ {
		r, err := c.get(topic, partition, off, maxSize)
		if err != nil {
			return recs, off, err
		}
		switch {
		case r.Op == protocol.OpValue:
			if len(r.Body) == 0 {
				return recs, off, fmt.Errorf("empty value reply at offset %d", off)
			}
			// r.Body is the reply's own copy (client.read): the records'
			// data can stay in it.
			it := message.NewIterator(r.Body, off, 0)
			for it.Next() {
				rec := it.Record()
				recs = append(recs, record{Offset: rec.Offset, ID: rec.ID, Flag: rec.Flag, Data: rec.Data})
			}
			if it.Err() != nil {
				return recs, off, fmt.Errorf("%s-%d: corrupt record served at offset %d: %w", topic, partition, it.NextOffset(), it.Err())
			}
			if it.Consumed() == 0 {
				return recs, off, fmt.Errorf("%s-%d: get at %d returned %d bytes with no whole record", topic, partition, off, len(r.Body))
			}
			off = it.NextOffset()
		case r.Code == protocol.StatusNotFound:
			if want := "Could not find message at position " + strconv.FormatInt(off, 10); string(r.Body) != want {
				return recs, off, fmt.Errorf("404 body %q, want %q", r.Body, want)
			}
			return recs, off, nil
		case r.Code == protocol.StatusMoved && first:
			v, ok := protocol.ParseInt64(r.Body)
			if !ok || v <= off {
				return recs, off, fmt.Errorf("bad 301 at %d: %v", off, r)
			}
			off = v
		default:
			return recs, off, fmt.Errorf("%s-%d: get at %d: unexpected reply %v", topic, partition, off, r)
		}
		first = false
	}
	return recs, off, errors.New("read loop did not end")
}

// ---------------------------------------------------------------------------
// The metaq-server binary
// ---------------------------------------------------------------------------

// moduleRoot walks up from the working directory to go.mod.
func moduleRoot() (string, error) {
	dir, err := os.Getwd()
	if err != nil {
		return "", err
	}
	for i := 0; i < 32; i++ {
		if _, err := os.Stat(filepath.Join(dir, "go.mod")); err == nil {
			return dir, nil
		}
		parent := filepath.Dir(dir)
		if parent == dir {
			break
		}
		dir = parent
	}
	return "", errors.New("go.mod not found above the working directory")
}

// startServer runs metaq-server on config and dataDir on a free port
// (--port 0) and kills it at the end of the test.
func startServer(t testing.TB, config, dataDir string) *brokertest.Server {
	t.Helper()
	return brokertest.StartServer(t, "--config", config, "--port", "0", "--data-dir", dataDir, "--host", "127.0.0.1")
}

// loadStop is the stop signal of a background load in a test (its
// senders loop until stop is closed; wg counts them) and the lock of what
// they record.
type loadStop struct {
	mu   sync.Mutex
	stop chan struct{}
	wg   sync.WaitGroup
}

// halt stops the senders and waits for their last sends; it may be
// called more than once.
func (l *loadStop) halt() {
	l.mu.Lock()
	select {
	case <-l.stop:
	default:
		close(l.stop)
	}
	l.mu.Unlock()
	l.wg.Wait()
}

// procs are the processes of a test broker: the current one (or the last)
// and every one started, for the logs of a failed test.
type procs struct {
	mu   sync.Mutex
	proc *brokertest.Server
	runs []*brokertest.Server
}

// current is the current (or last) process, nil before the first.
func (s *procs) current() *brokertest.Server {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.proc
}

// started notes a process that was launched (ready or not).
func (s *procs) started(p *brokertest.Server) {
	s.mu.Lock()
	s.runs = append(s.runs, p)
	s.mu.Unlock()
}

// setCurrent makes p the current process.
func (s *procs) setCurrent(p *brokertest.Server) {
	s.mu.Lock()
	s.proc = p
	s.mu.Unlock()
}

// all is every process started, oldest first.
func (s *procs) all() []*brokertest.Server {
	s.mu.Lock()
	defer s.mu.Unlock()
	return slices.Clone(s.runs)
}
