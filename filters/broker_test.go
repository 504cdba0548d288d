package filters_test

import (
	"bufio"
	"context"
	"encoding/binary"
	"fmt"
	"github.com/metaq-go/metaq/internal/testsvc"
	"io"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/metaq-go/metaq/conf"
	"github.com/metaq-go/metaq/core/broker"
	"github.com/metaq-go/metaq/internal/brokertest"
	"github.com/metaq-go/metaq/sdk/client"
	"github.com/metaq-go/metaq/sdk/message"
	"github.com/metaq-go/metaq/sdk/protocol"
)

// Broker-level tests of server-side filters: a real broker on 127.0.0.1,
// builtin filters and filter plugins (the test binary re-run as a plugin,
// or the example plugin built into a temporary folder).

var built struct {
	once sync.Once
	dir  string
	path string
	err  error
}

// examplePlugin builds examples/filter-plugin once per test binary.
func examplePlugin(tb testing.TB) string {
	tb.Helper()
	built.once.Do(func() {
		built.dir, built.err = os.MkdirTemp("", "metaq-filter-plugin-")
		if built.err != nil {
			return
		}
		if p := testsvc.Prebuilt("github.com/metaq-go/metaq/examples/filter-plugin"); p != "" {
			built.path = p
			return
		}
		built.path = filepath.Join(built.dir, "filter-plugin")
		out, err := exec.Command("go", "build", "-o", built.path, "../examples/filter-plugin").CombinedOutput()
		if err != nil {
			built.err = fmt.Errorf("go build: %v\n%s", err, out)
		}
	})
	if built.err != nil {
		tb.Fatal(built.err)
	}
	return built.path
}

func removeBuilt() {
	if built.dir != "" {
		os.RemoveAll(built.dir)
	}
	if builtHeader.dir != "" {
		os.RemoveAll(builtHeader.dir)
	}
}

// helperPlugin is a [[plugin]] running the test binary as filter which.
func helperPlugin(tb testing.TB, name, which string) conf.Plugin {
	exe, err := os.Executable()
	require.NoError(tb, err)
	return conf.Plugin{Kind: conf.PluginKindFilter, Name: name, Path: exe,
		Args: []string{"-test.run=^$"}, Env: []string{helperEnv + "=" + which, "GORACE=" + os.Getenv("GORACE")}}
}

type logBuf struct {
	mu    sync.Mutex
	lines []string
}

func (l *logBuf) logf(format string, args ...any) {
	l.mu.Lock()
	l.lines = append(l.lines, fmt.Sprintf(format, args...))
	l.mu.Unlock()
}

// startBroker runs a broker with topic "t" (one partition) and the given
// filters and plugins.
func startBroker(tb testing.TB, fs []conf.TopicFilter, ps ...conf.Plugin) *broker.Broker {
	tb.Helper()
	return brokertest.Start(tb, smallJournal, brokertest.Edit(func(c *conf.Config) {
		c.Topics = []conf.Topic{{Name: "t", Filters: fs}}
		c.Plugins = ps
	})).Broker
}

func attrFilter(group, equals string) conf.TopicFilter {
	return conf.TopicFilter{Group: group, Filter: "attribute", Config: map[string]string{"equals": equals}}
}

type sent struct {
	attr   string
	has    bool
	offset int64
	id     int64
	body   string
}

// produce sends messages with the given attributes ("-" for none) to t-0.
func produce(tb testing.TB, addr string, attrs ...string) []sent {
	tb.Helper()
	// Without the idempotent producer's field: the records are the
	// attribute and the body alone, whose sizes the tests add up.
	p, err := client.New(client.Brokers(addr), client.Idempotence(false))
	require.NoError(tb, err)
	defer p.Close(context.Background())
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	out := make([]sent, len(attrs))
	for i, a := range attrs {
		m := &message.Message{Topic: "t", Body: fmt.Appendf(nil, "body-%d-%s", i, a)}
		if a != "-" {
			m.Attribute, m.HasAttribute = a, true
		}
		rs, err := p.ProduceSync(ctx, m)
		require.NoError(tb, err)
		res := rs[0]
		require.Equal(tb, int32(0), res.Partition)
		out[i] = sent{attr: a, has: m.HasAttribute, offset: res.Offset, id: res.ID, body: string(m.Body)}
	}
	return out
}

// waitReadable waits until the last of msgs is readable: a put is
// acknowledged before the flush that makes it readable, and a test that
// needs a log that no longer grows (a read-ahead batch taken earlier would
// be a prefix) waits for it. Its get counts in the messages out.
func waitReadable(tb testing.TB, addr string, msgs []sent) {
	tb.Helper()
	c := dial(tb, addr)
	defer c.nc.Close()
	last := msgs[len(msgs)-1].offset
	deadline := time.Now().Add(10 * time.Second)
	for c.get(tb, "unfiltered-readable-check", last, 1<<20).Op != protocol.OpValue {
		require.True(tb, time.Now().Before(deadline), "the last message at %d was not readable within 10 s", last)
		time.Sleep(5 * time.Millisecond)
	}
}

type rawConn struct {
	nc  net.Conn
	bw  *bufio.Writer
	dec *protocol.Decoder
	op  int32
}

func dial(tb testing.TB, addr string) *rawConn {
	tb.Helper()
	nc, err := net.DialTimeout("tcp", addr, 5*time.Second)
	require.NoError(tb, err)
	tb.Cleanup(func() { nc.Close() })
	return &rawConn{nc: nc, bw: bufio.NewWriter(nc), dec: protocol.NewDecoder(nc, protocol.Limits{MaxBody: 16 << 20})}
}

// get sends one get and returns its reply (Body valid until the next call).
func (c *rawConn) get(tb testing.TB, group string, offset int64, maxSize int) *protocol.Request {
	tb.Helper()
	c.op++
	c.nc.SetDeadline(time.Now().Add(10 * time.Second))
	c.bw.Write(protocol.AppendGet(nil, "t", group, 0, offset, int32(maxSize), c.op))
	require.NoError(tb, c.bw.Flush())
	var r protocol.Request
	require.NoError(tb, c.dec.Decode(&r))
	require.Equal(tb, c.op, r.Opaque)
	return &r
}

type gotRec struct {
	offset int64
	rec    message.Record
}

// parseFValue splits an fvalue body into its entries.
func parseFValue(tb testing.TB, body []byte) []gotRec {
	tb.Helper()
	var out []gotRec
	for len(body) > 0 {
		require.GreaterOrEqual(tb, len(body), 8)
		off := int64(binary.BigEndian.Uint64(body))
		r, n, err := message.ParseRecord(body[8:], 0)
		require.NoError(tb, err)
		r.Data = append([]byte(nil), r.Data...)
		out = append(out, gotRec{off, r})
		body = body[8+n:]
	}
	return out
}

func TestBrokerFilteredGet(t *testing.T) {
	t.Parallel()
	b := startBroker(t, []conf.TopicFilter{attrFilter("reds", "red")})
	msgs := produce(t, b.Addr(), "red", "blue", "-", "red", "blue", "blue", "red", "")
	end := msgs[len(msgs)-1].offset + int64(message.HeaderSize) + int64(4+len(msgs[len(msgs)-1].body))
	c := dial(t, b.Addr())

	r := c.get(t, "reds", 0, 1<<20)
	require.Equal(t, protocol.OpFValue, r.Op, string(r.Body))
	require.Equal(t, end, r.Offset, "next offset = offset + bytes scanned")
	got := parseFValue(t, r.Body)
	var want []sent
	for _, m := range msgs {
		if m.attr == "red" {
			want = append(want, m)
		}
	}
	require.Len(t, got, len(want))
	for i, g := range got {
		require.Equal(t, want[i].offset, g.offset)
		require.Equal(t, want[i].id, g.rec.ID)
		m, err := g.rec.Message("t", 0)
		require.NoError(t, err)
		require.Equal(t, "red", m.Attribute)
		require.Equal(t, want[i].body, string(m.Body))
	}

	// From the middle: the first red at or after msgs[2] is msgs[3].
	r = c.get(t, "reds", msgs[2].offset, 1<<20)
	require.Equal(t, protocol.OpFValue, r.Op)
	got = parseFValue(t, r.Body)
	require.Equal(t, msgs[3].offset, got[0].offset)
	require.Len(t, got, 2)

	// A get that covers msgs[0..1] whole and msgs[2] partly: only whole
	// records are scanned, and next is the start of msgs[2].
	r = c.get(t, "reds", 0, int(msgs[2].offset)+10)
	require.Equal(t, protocol.OpFValue, r.Op)
	require.Equal(t, msgs[2].offset, r.Offset)
	require.Len(t, parseFValue(t, r.Body), 1)
}

func TestBrokerNoFilterIsPlainValue(t *testing.T) {
	t.Parallel()
	b := startBroker(t, []conf.TopicFilter{attrFilter("reds", "red")})
	msgs := produce(t, b.Addr(), "red", "blue", "-")
	c := dial(t, b.Addr())
	r := c.get(t, "others", 0, 1<<20) // a group without a filter: sendfile path
	require.Equal(t, protocol.OpValue, r.Op)
	it := message.NewIterator(r.Body, 0, 0)
	n := 0
	for it.Next() {
		require.Equal(t, msgs[n].offset, it.Record().Offset)
		n++
	}
	require.Equal(t, len(msgs), n)
}

func TestBrokerFilterNothingKept(t *testing.T) {
	t.Parallel()
	b := startBroker(t, []conf.TopicFilter{attrFilter("reds", "red")})
	msgs := produce(t, b.Addr(), "blue", "-", "green", "red")
	c := dial(t, b.Addr())
	// Scan msgs[0..2] only: nothing kept -> 301 with the next offset.
	r := c.get(t, "reds", 0, int(msgs[3].offset))
	require.Equal(t, protocol.OpResult, r.Op)
	require.Equal(t, protocol.StatusMoved, r.Code)
	next, ok := protocol.ParseInt64(r.Body)
	require.True(t, ok)
	require.Equal(t, msgs[3].offset, next)
	// Past the end: the usual 404.
	r = c.get(t, "reds", 100000, 1024)
	require.Equal(t, protocol.StatusNotFound, r.Code)
}

func TestBrokerFilterRecordLargerThanGet(t *testing.T) {
	t.Parallel()
	b := startBroker(t, []conf.TopicFilter{attrFilter("reds", "red")})
	produce(t, b.Addr(), "red")
	c := dial(t, b.Addr())
	// No whole record in 16 bytes: the raw bytes go back as a plain value so
	// that the client sees the record's length and grows its get.
	r := c.get(t, "reds", 0, 16)
	require.Equal(t, protocol.OpValue, r.Op)
	require.Len(t, r.Body, 16)
}

func TestBrokerFilterReplyWithinMaxSize(t *testing.T) {
	t.Parallel()
	b := startBroker(t, []conf.TopicFilter{attrFilter("reds", "red")})
	attrs := make([]string, 40)
	for i := range attrs {
		attrs[i] = "red"
	}
	msgs := produce(t, b.Addr(), attrs...)
	c := dial(t, b.Addr())
	size := int(msgs[10].offset) // ten whole records
	var offset int64
	var seen []int64
	for offset < msgs[len(msgs)-1].offset+1 {
		r := c.get(t, "reds", offset, size)
		require.Equal(t, protocol.OpFValue, r.Op)
		require.LessOrEqual(t, len(r.Body), size+8, "reply within maxSize plus one offset prefix")
		for _, g := range parseFValue(t, r.Body) {
			seen = append(seen, g.offset)
		}
		require.Greater(t, r.Offset, offset)
		offset = r.Offset
	}
	require.Len(t, seen, len(msgs))
	for i := range msgs {
		require.Equal(t, msgs[i].offset, seen[i])
	}
}

// TestBrokerFilterBodiesOnlyWhenAsked runs the Probe filter as a plugin: it
// keeps exactly the records that arrived with a body, so a group whose
// instance asked for bodies gets everything and one that did not gets 301.
func TestBrokerFilterBodiesOnlyWhenAsked(t *testing.T) {
	t.Parallel()
	b := startBroker(t, []conf.TopicFilter{
		{Group: "bodies", Filter: "probe", Config: map[string]string{"bodies": "true"}},
		{Group: "meta", Filter: "probe"},
	}, helperPlugin(t, "probe", "probe"))
	msgs := produce(t, b.Addr(), "red", "-", "blue")
	c := dial(t, b.Addr())
	r := c.get(t, "bodies", 0, 1<<20)
	require.Equal(t, protocol.OpFValue, r.Op, string(r.Body))
	require.Len(t, parseFValue(t, r.Body), len(msgs))
	r = c.get(t, "meta", 0, 1<<20)
	require.Equal(t, protocol.StatusMoved, r.Code, "no bodies were sent, so nothing is kept")
}

// consumeAll reads group's messages of t-0 through the SDK until want
// messages arrived (and a little longer, to catch extras).
func consumeAll(t *testing.T, addr, group string, want int) []*message.Message {
	t.Helper()
	c, err := client.New(client.Brokers(addr), client.ConsumeTopics("t"), client.ConsumerGroup(group),
		client.ConsumeFrom(client.Earliest), client.FetchMaxBytes(256), client.FetchMaxWait(50*time.Millisecond))
	require.NoError(t, err)
	defer c.Close(context.Background())
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	var got []*message.Message
	for m, err := range c.Messages(ctx) {
		require.NoError(t, err)
		mm := *m
		mm.Body = append([]byte(nil), m.Body...)
		got = append(got, &mm)
		if len(got) == want {
			time.AfterFunc(300*time.Millisecond, cancel) // and catch extras meanwhile
		}
	}
	return got
}

func TestBrokerFilterConsumer(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		name string
		tf   conf.TopicFilter
		ps   func(t *testing.T) []conf.Plugin
	}{
		{"builtin", conf.TopicFilter{Group: "g", Filter: "expr", Config: map[string]string{"expr": `attribute in ("red", "pink")`}}, nil},
		{"remote", conf.TopicFilter{Group: "g", Filter: "regexp", Config: map[string]string{"match": "^(red|pink)$"}},
			func(t *testing.T) []conf.Plugin {
				return []conf.Plugin{{Kind: conf.PluginKindFilter, Name: "regexp", Path: examplePlugin(t)}}
			}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			var ps []conf.Plugin
			if tc.ps != nil {
				ps = tc.ps(t)
			}
			b := startBroker(t, []conf.TopicFilter{tc.tf}, ps...)
			attrs := make([]string, 300)
			colours := []string{"red", "blue", "-", "pink", "green", "blue", "blue"}
			for i := range attrs {
				attrs[i] = colours[i%len(colours)]
			}
			msgs := produce(t, b.Addr(), attrs...)
			var want []sent
			for _, m := range msgs {
				if m.attr == "red" || m.attr == "pink" {
					want = append(want, m)
				}
			}
			got := consumeAll(t, b.Addr(), "g", len(want))
			require.Len(t, got, len(want), "only matching messages, no duplicates")
			for i, m := range got {
				require.Equal(t, want[i].offset, m.Offset)
				require.Equal(t, want[i].id, m.ID)
				require.Equal(t, want[i].attr, m.Attribute)
				require.Equal(t, want[i].body, string(m.Body))
			}
		})
	}
}

// TestBrokerFilteredMessagesOut: a filtered get counts the records it
// kept as messages out, an unfiltered one every whole record it sent.
func TestBrokerFilteredMessagesOut(t *testing.T) {
	t.Parallel()
	b := brokertest.Start(t, smallJournal, brokertest.HTTP(), brokertest.Edit(func(c *conf.Config) {
		c.Topics = []conf.Topic{{Name: "t", Filters: []conf.TopicFilter{attrFilter("reds", "red")}}}
	}))
	msgs := produce(t, b.Addr(), "red", "blue", "-", "red", "blue", "blue", "red", "")
	c := dial(t, b.Addr())
	r := c.get(t, "reds", 0, 1<<20)
	require.Equal(t, protocol.OpFValue, r.Op, string(r.Body))
	require.Len(t, parseFValue(t, r.Body), 3)
	r = c.get(t, "others", 0, 1<<20)
	require.Equal(t, protocol.OpValue, r.Op)

	resp, err := (&http.Client{Timeout: 10 * time.Second}).Get("http://" + b.HTTPAddr() + "/metrics")
	require.NoError(t, err)
	defer resp.Body.Close()
	body, err := io.ReadAll(resp.Body)
	require.NoError(t, err)
	want := fmt.Sprintf("metaq_topic_messages_out_total{topic=\"t\"} %d\n", 3+len(msgs))
	require.Contains(t, string(body), want)
}

// smallJournal gives the brokers 4 MiB journal files, not 64 MiB: a broker
// pre-writes and fdatasyncs its journal file and two spares when it starts,
// and these tests commit far less than one file.
var smallJournal = brokertest.Edit(func(c *conf.Config) { c.JournalFileSize = 4 << 20 })
