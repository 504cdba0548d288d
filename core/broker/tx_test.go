package broker

import (
	"bufio"
	"fmt"
	"io"
	"net"
	"regexp"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/metaq-go/metaq/conf"
	"github.com/metaq-go/metaq/sdk/message"
	"github.com/metaq-go/metaq/sdk/protocol"
	"github.com/stretchr/testify/require"
)

// wireConn exchanges raw bytes with a broker and reads whole reply frames
// as the bytes they are on the wire.
type wireConn struct {
	t  testing.TB
	nc net.Conn
	br *bufio.Reader
}

func dialWire(t testing.TB, addr string) *wireConn {
	t.Helper()
	nc, err := net.DialTimeout("tcp", addr, 5*time.Second)
	require.NoError(t, err)
	t.Cleanup(func() { nc.Close() })
	nc.SetDeadline(time.Now().Add(time.Minute))
	return &wireConn{t: t, nc: nc, br: bufio.NewReader(nc)}
}

func (w *wireConn) send(s string) {
	w.t.Helper()
	_, err := io.WriteString(w.nc, s)
	require.NoError(w.t, err)
}

// frame reads one reply: its header line with "\r\n" and its body.
func (w *wireConn) frame() string {
	w.t.Helper()
	line, err := w.br.ReadString('\n')
	require.NoError(w.t, err)
	tok := strings.Split(strings.TrimSuffix(line, "\r\n"), " ")
	require.GreaterOrEqual(w.t, len(tok), 3, "reply %q", line)
	n, err := strconv.Atoi(tok[len(tok)-2])
	if tok[0] == "value" {
		n, err = strconv.Atoi(tok[1])
	}
	require.NoError(w.t, err, "reply %q", line)
	body := make([]byte, n)
	_, err = io.ReadFull(w.br, body)
	require.NoError(w.t, err)
	return line + string(body)
}

// call sends s and returns the next reply frame.
func (w *wireConn) call(s string) string {
	w.t.Helper()
	w.send(s)
	return w.frame()
}

func txPut(topic string, p int, key, data string, opaque int) string {
	return fmt.Sprintf("put %s %d %d 0 -1 %s %d\r\n%s", topic, p, len(data), key, opaque, data)
}

// TestTxWire is §10's wire cases, raw bytes on a TCP connection: each step
// sends bytes and the reply must match want (a regexp of the whole frame)
// exactly; an empty want means no reply, checked by the version that
// follows being the next frame.
func TestTxWire(t *testing.T) {
	t.Parallel()
	b := startBroker(t, 0)
	xaErr := func(code int, op int) string {
		return `result 500 \d+ ` + strconv.Itoa(op) + `\r\nXAException:code=` + regexp.QuoteMeta(strconv.Itoa(code)) + `,msg=[^\r\n]+`
	}
	type step struct{ send, want string }
	cases := []struct {
		name  string
		steps []step
	}{
		{"begin commit empty", []step{
			{"transaction TX:s:1 s BEGIN 7\r\n", `result 200 0 7\r\n`},
			{"transaction TX:s:1 s COMMIT_ONE_PHASE 8\r\n", `result 200 0 8\r\n`},
		}},
		{"put commit", []step{
			{"transaction TX:s:1 s BEGIN 30 1\r\n", `result 200 0 1\r\n`},
			{txPut("t", 0, "TX:s:1", "hello", 2), `result 200 \d+ 2\r\n\d+ 0 -1`},
			{"put t 1 5 0 TX:s:1 3\r\nworld", `result 200 \d+ 3\r\n\d+ 1 -1`},
			{"transaction TX:s:1 s END 4\r\n", ``},
			{"transaction TX:s:1 s COMMIT_ONE_PHASE 5\r\n", `result 200 0 5\r\n`},
			{"transaction TX:s:1 s COMMIT_ONE_PHASE 6\r\n", `result 500 \d+ 6\r\ntransaction TX:s:1 is not begun on this connection[^\r\n]*`},
		}},
		{"rollback", []step{
			{"transaction TX:s:2 s BEGIN 1\r\n", `result 200 0 1\r\n`},
			{txPut("t", 0, "TX:s:2", "x", 2), `result 200 \d+ 2\r\n\d+ 0 -1`},
			{"transaction TX:s:2 s ROLLBACK 3\r\n", `result 200 0 3\r\n`},
			{"transaction TX:s:2 s ROLLBACK 4\r\n", `result 500 \d+ 4\r\ntransaction TX:s:2 is not begun[^\r\n]*`},
		}},
		{"canonical key", []step{
			{"transaction TX:s:007 s BEGIN 1\r\n", `result 200 0 1\r\n`},
			{txPut("t", 0, "TX:s:7", "x", 2), `result 200 \d+ 2\r\n\d+ 0 -1`},
			{"transaction TX:s:7 s BEGIN 3\r\n", `result 500 \d+ 3\r\ntransaction TX:s:7 is already begun on this connection`},
			{"transaction TX:s:07 s COMMIT_ONE_PHASE 4\r\n", `result 200 0 4\r\n`},
		}},
		{"put refusals", []step{
			{txPut("t", 0, "TX:s:3", "x", 1), `result 500 \d+ 1\r\ntransaction TX:s:3 is not begun[^\r\n]*`},
			{"transaction TX:s:3 s BEGIN 2\r\n", `result 200 0 2\r\n`},
			{txPut("t", -1, "TX:s:3", "x", 3), `result 500 \d+ 3\r\na transactional put must name its partition \(got -1\)`},
			{txPut("t", 9, "TX:s:3", "x", 4), `result 500 \d+ 4\r\n[^\r\n]*9 for topic t \(0\.\.1\)`},
			{txPut("nosuch", 0, "TX:s:3", "x", 5), `result 500 \d+ 5\r\nThe server do not accept topic nosuch`},
			{"put t 0 1 0 5 TX:s:3 6\r\nx", `result 500 \d+ 6\r\nchecksum mismatch[^\r\n]*`},
			{txPut("t", 0, "TX:bad", "x", 7), `result 500 \d+ 7\r\ntransaction key "TX:bad"[^\r\n]*`},
			{txPut("t", 0, "XID:1:ab:cd:q", "x", 8), xaErr(protocol.XAErNotA, 8)},
		}},
		{"local misuse", []step{
			{"transaction TX:s:4 s BEGIN 1\r\n", `result 200 0 1\r\n`},
			{"transaction TX:s:4 s PREPARE 2\r\n", xaErr(protocol.XAErRMErr, 2)},
			{"transaction TX:s:4 s FORGET 3\r\n", `result 500 \d+ 3\r\ntransaction TX:s:4 is local[^\r\n]*`},
			{"transaction TX:s:4 s COMMIT_TWO_PHASE 4\r\n", `result 200 0 4\r\n`},
		}},
		{"recover", []step{
			{"transaction null s RECOVER XAMessageProducer-h 1\r\n", `result 200 0 1\r\n`},
			{"transaction null s RECOVER 2\r\n", `result 200 0 2\r\n`},
		}},
		{"xa two phase", []step{
			{"transaction XID:1:ab:cd:q s BEGIN 10 q 1\r\n", `result 200 0 1\r\n`},
			{txPut("t", 1, "XID:1:AB:CD:q", "x", 2), `result 200 \d+ 2\r\n\d+ 1 -1`},
			{"transaction XID:1:ab:cd:q s END q 3\r\n", ``},
			{"transaction XID:1:ab:cd:q s PREPARE q 4\r\n", `result 200 1 4\r\n0`},
			{txPut("t", 1, "XID:1:ab:cd:q", "x", 5), `result 500 \d+ 5\r\nXAException:code=-6,msg=transaction XID:1:ab:cd:q is prepared: it takes no more messages`},
			{"transaction XID:1:ab:cd:q s PREPARE q 6\r\n", xaErr(protocol.XAErProto, 6)},
			{"transaction XID:2:ab:cd:q s BEGIN q 7\r\n", `result 200 0 7\r\n`},
			{txPut("t", 0, "XID:2:ab:cd:q", "y", 8), `result 200 \d+ 8\r\n\d+ 0 -1`},
			{"transaction XID:2:ab:cd:q s PREPARE q 9\r\n", `result 200 1 9\r\n0`},
			{"transaction null s RECOVER q 10\r\n", `result 200 28 10\r\nXID:1:ab:cd:q\r\nXID:2:ab:cd:q`},
			{"transaction null s RECOVER other 11\r\n", `result 200 0 11\r\n`},
			{"transaction XID:1:ab:cd:q s COMMIT_ONE_PHASE q 12\r\n", xaErr(protocol.XAErProto, 12)},
			{"transaction XID:1:ab:cd:q s COMMIT_TWO_PHASE q 13\r\n", `result 200 0 13\r\n`},
			{"transaction XID:2:ab:cd:q s ROLLBACK q 14\r\n", `result 200 0 14\r\n`},
			{"transaction XID:1:ab:cd:q s COMMIT_TWO_PHASE q 15\r\n", xaErr(protocol.XAErNotA, 15)},
			{"transaction null s RECOVER q 16\r\n", `result 200 0 16\r\n`},
		}},
		{"xa one phase and misuse", []step{
			{"transaction XID:3:ab:cd:q s COMMIT_TWO_PHASE q 1\r\n", xaErr(protocol.XAErNotA, 1)},
			{"transaction XID:3:ab:cd:q s ROLLBACK q 2\r\n", xaErr(protocol.XAErNotA, 2)},
			{"transaction XID:3:ab:cd:q s FORGET q 3\r\n", xaErr(protocol.XAErNotA, 3)},
			{"transaction XID:3:ab:cd:q s BEGIN q 4\r\n", `result 200 0 4\r\n`},
			{"transaction XID:3:ab:cd:q s BEGIN q 5\r\n", xaErr(protocol.XAErDupID, 5)},
			{"transaction XID:3:ab:cd:q s COMMIT_TWO_PHASE q 6\r\n", xaErr(protocol.XAErProto, 6)},
			{txPut("t", 0, "XID:3:ab:cd:q", "z", 7), `result 200 \d+ 7\r\n\d+ 0 -1`},
			{"transaction XID:3:ab:cd:q s COMMIT_ONE_PHASE q 8\r\n", `result 200 0 8\r\n`},
			{"transaction XID:4:ab:cd:q s BEGIN q 9\r\n", `result 200 0 9\r\n`},
			{"transaction XID:4:ab:cd:q s PREPARE q 10\r\n", `result 200 1 10\r\n3`},
			{"transaction XID:4:ab:cd:q s COMMIT_TWO_PHASE q 11\r\n", xaErr(protocol.XAErNotA, 11)},
		}},
		{"malformed", []step{
			{"transaction TX:s:1 s begin 1\r\n", `result 400 \d+ 1\r\ntransaction: unknown type "begin"`},
			{"transaction null s BEGIN 2\r\n", `result 400 \d+ 2\r\n[^\r\n]*transaction key "null"[^\r\n]*`},
			{"transaction TX:s:1 s BEGIN a:b 3\r\n", `result 400 \d+ 3\r\n[^\r\n]*qualifier[^\r\n]*`},
			{"transaction TX:s:1 4\r\n", `result 400 \d+ 4\r\n[^\r\n]*want 5 to 7 tokens, got 3`},
		}},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			w := dialWire(t, b.Addr())
			for i, s := range tc.steps {
				if s.want == "" {
					got := w.call(s.send + "version 999\r\n")
					require.Equal(t, "result 200 "+strconv.Itoa(len(Version))+" 999\r\n"+Version, got, "step %d: %q has a reply", i, s.send)
					continue
				}
				got := w.call(s.send)
				require.Regexp(t, "^"+s.want+"$", got, "step %d: %q", i, s.send)
			}
		})
	}
}

// txClient drives transactions over a raw connection.
type txClient struct {
	*wireConn
	op int
}

func (c *txClient) ok(s string) string {
	c.t.Helper()
	got := c.call(s)
	require.True(c.t, strings.HasPrefix(got, "result 200 "), "%q → %q", s, got)
	_, body, _ := strings.Cut(got, "\r\n")
	return body
}

func (c *txClient) begin(key string) {
	c.t.Helper()
	c.op++
	c.ok(fmt.Sprintf("transaction %s s BEGIN %d\r\n", key, c.op))
}
func (c *txClient) commit(key string) {
	c.t.Helper()
	c.op++
	c.ok(fmt.Sprintf("transaction %s s COMMIT_ONE_PHASE %d\r\n", key, c.op))
}

// put puts data in key's transaction and returns the id it was answered.
func (c *txClient) put(key string, p int, data string) int64 {
	c.t.Helper()
	c.op++
	id, part, off, _, err := protocol.ParsePutResult([]byte(c.ok(txPut("t", p, key, data, c.op))))
	require.NoError(c.t, err)
	require.Equal(c.t, int32(p), part)
	require.Equal(c.t, int64(-1), off)
	return id
}

func (c *txClient) plainPut(p int, data string) {
	c.t.Helper()
	c.op++
	c.ok(fmt.Sprintf("put t %d %d 0 -1 %d\r\n%s", p, len(data), c.op, data))
}

// records reads every record of partition p. A get may answer less than
// its max size (it stops where the segment's written part meets its
// in-memory tail), so it reads on from where each answer ended.
func (c *txClient) records(p int) []message.Record {
	c.t.Helper()
	var out []message.Record
	var offset int64
	for range 1000 {
		c.op++
		got := c.call(fmt.Sprintf("get t g %d %d 1048576 %d\r\n", p, offset, c.op))
		if strings.HasPrefix(got, "result 404 ") {
			return out
		}
		require.True(c.t, strings.HasPrefix(got, "value "), "%q", got)
		_, body, _ := strings.Cut(got, "\r\n")
		it := message.NewIterator([]byte(body), offset, 0)
		n := len(out)
		for it.Next() {
			r := *it.Record()
			r.Data = append([]byte(nil), r.Data...)
			out = append(out, r)
		}
		require.NoError(c.t, it.Err())
		if len(out) == n {
			return out
		}
		offset = it.NextOffset()
	}
	c.t.Fatal("partition does not end")
	return nil
}

func (c *txClient) stat(item, key string) string {
	c.t.Helper()
	c.op++
	body := c.ok(fmt.Sprintf("stats %s %d\r\n", item, c.op))
	for _, l := range strings.Split(body, "\r\n") {
		if k, v, ok := strings.Cut(l, " "); ok && k == key {
			return v
		}
	}
	c.t.Fatalf("no %s in stats %s: %q", key, item, body)
	return ""
}

// TestTxCommitVisibility: uncommitted messages are invisible and take no
// partition space; the commit appends each partition's messages as one
// contiguous batch in put order, with the ids their puts were answered
// with; a rollback appends nothing.
func TestTxCommitVisibility(t *testing.T) {
	t.Parallel()
	for _, threshold := range []int{0, 1} {
		t.Run("threshold="+strconv.Itoa(threshold), func(t *testing.T) {
			b := startBroker(t, threshold)
			c := &txClient{wireConn: dialWire(t, b.Addr())}
			other := &txClient{wireConn: dialWire(t, b.Addr())}
			c.begin("TX:s:1")
			c.begin("TX:s:2")
			var ids0, ids1 []int64
			for i := 0; i < 3; i++ {
				ids0 = append(ids0, c.put("TX:s:1", 0, "a"+strconv.Itoa(i)))
				ids1 = append(ids1, c.put("TX:s:1", 1, "b"+strconv.Itoa(i)))
				c.put("TX:s:2", 0, "rolled")
				other.plainPut(0, "plain"+strconv.Itoa(i))
			}
			require.Equal(t, int64(0), b.topics.Get("t").Parts[1].MaxOffset(), "uncommitted messages take no space")
			flushed := func(p int, n int64) {
				l := b.topics.Get("t").Parts[p]
				require.Eventually(t, func() bool { return l.MessageCount() == n }, 10*time.Second, time.Millisecond)
				require.NoError(t, l.Flush()) // threshold mode: readable once flushed
			}
			flushed(0, 3)
			require.Len(t, other.records(0), 3, "only the plain puts are visible")
			require.Empty(t, other.records(1))
			require.Equal(t, "2", c.stat("", "tx_begin"))
			require.Equal(t, "2 buffered_bytes 30", c.stat("transactions", "open"))

			c.ok("transaction TX:s:2 s ROLLBACK 100\r\n")
			c.commit("TX:s:1")
			other.plainPut(0, "after")
			flushed(0, 7)
			flushed(1, 3)
			recs := other.records(0)
			require.Len(t, recs, 7)
			for i := 0; i < 3; i++ {
				require.Equal(t, "plain"+strconv.Itoa(i), string(recs[i].Data))
				require.Equal(t, "a"+strconv.Itoa(i), string(recs[3+i].Data), "contiguous, in put order")
				require.Equal(t, ids0[i], recs[3+i].ID, "the id the put was answered with")
			}
			require.Equal(t, "after", string(recs[6].Data))
			recs = other.records(1)
			require.Len(t, recs, 3)
			for i := 0; i < 3; i++ {
				require.Equal(t, "b"+strconv.Itoa(i), string(recs[i].Data))
				require.Equal(t, ids1[i], recs[i].ID)
			}
			require.Equal(t, "1", c.stat("", "tx_commit"))
			require.Equal(t, "1", c.stat("", "tx_rollback"))
			require.Equal(t, "0 buffered_bytes 0", c.stat("transactions", "open"))
			// The committed batches count in the topic's in-counters (the
			// rolled-back puts do not), as plain puts do.
			pc := b.topics.Get("t").PC
			require.Equal(t, int64(7), pc[0].MsgsIn.Load())
			require.Equal(t, int64(3), pc[1].MsgsIn.Load())
			require.Equal(t, int64(6), pc[1].BytesIn.Load())
			require.Equal(t, 10.0, metricValue(t, scrapeOf(t, b), `metaq_topic_messages_in_total{topic="t"}`))
		})
	}
}

// TestTxRollbackOnClose: a connection's local transactions are rolled back
// when it closes, and another connection cannot touch them.
func TestTxRollbackOnClose(t *testing.T) {
	t.Parallel()
	b := startBroker(t, 0)
	c := &txClient{wireConn: dialWire(t, b.Addr())}
	c.begin("TX:s:1")
	c.put("TX:s:1", 0, "lost")
	other := &txClient{wireConn: dialWire(t, b.Addr())}
	got := other.call("transaction TX:s:1 s COMMIT_ONE_PHASE 1\r\n")
	require.Contains(t, got, "is not begun on this connection", "local transactions are the connection's")
	require.Equal(t, "1 buffered_bytes 4", other.stat("transactions", "open"))
	c.nc.Close()
	require.Eventually(t, func() bool { return other.stat("", "tx_rollback") == "1" }, 10*time.Second, 5*time.Millisecond)
	require.Equal(t, "0 buffered_bytes 0", other.stat("transactions", "open"))
	require.Empty(t, other.records(0))
}

// TestTxTimeout: a transaction not committed within its BEGIN's timeout,
// or tx_default_timeout, is rolled back; the cap is 60 s.
func TestTxTimeout(t *testing.T) {
	t.Parallel()
	b := startBroker(t, 0, func(c *conf.Config) { c.TxDefaultTimeout = 1 })
	c := &txClient{wireConn: dialWire(t, b.Addr())}
	c.ok("transaction TX:s:1 s BEGIN 1 1\r\n")
	c.begin("TX:s:2") // tx_default_timeout
	c.ok("transaction TX:s:3 s BEGIN 3600 2\r\n")
	c.put("TX:s:1", 0, "x")
	body := c.ok("stats transactions 3\r\n")
	require.Contains(t, body, "TX:s:3 type local state active session s messages 0 bytes 0 age_ms ")
	require.Contains(t, body, " timeout_s 60\r\n", "a BEGIN's timeout is capped at 60 s")
	require.Eventually(t, func() bool { return c.stat("", "tx_rollback") == "2" }, 20*time.Second, 10*time.Millisecond)
	got := c.call("transaction TX:s:1 s COMMIT_ONE_PHASE 4\r\n")
	require.Contains(t, got, "is not begun on this connection (or was rolled back: timed out)")
	require.Equal(t, "1 buffered_bytes 0", c.stat("transactions", "open"))
	require.Empty(t, c.records(0))
}

// TestTxLimits: a put beyond tx_max_bytes or tx_max_buffered_bytes is
// refused with a clear error and the transaction stays usable.
func TestTxLimits(t *testing.T) {
	t.Parallel()
	b := startBroker(t, 0, func(c *conf.Config) { c.TxMaxBytes = 1024; c.TxMaxBufferedBytes = 1500 })
	c := &txClient{wireConn: dialWire(t, b.Addr())}
	c.begin("TX:s:1")
	c.begin("TX:s:2")
	c.put("TX:s:1", 0, strings.Repeat("x", 1000))
	got := c.call(txPut("t", 0, "TX:s:1", strings.Repeat("y", 25), 50))
	require.Regexp(t, `^result 500 \d+ 50\r\ntransaction TX:s:1 would hold 1025 message bytes, over tx_max_bytes 1024; the put is refused$`, got)
	c.put("TX:s:2", 0, strings.Repeat("z", 500))
	got = c.call(txPut("t", 0, "TX:s:2", "w", 51))
	require.Regexp(t, `^result 500 \d+ 51\r\nopen transactions hold 1500 message bytes, tx_max_buffered_bytes is 1500; the put is refused$`, got)
	c.commit("TX:s:1")
	c.commit("TX:s:2")
	require.Eventually(t, func() bool { return b.topics.Get("t").Parts[0].MessageCount() == 2 }, 10*time.Second, time.Millisecond)
	recs := c.records(0)
	require.Len(t, recs, 2)
	require.Equal(t, strings.Repeat("x", 1000), string(recs[0].Data))
}

// TestTxACL: with auth on, a transactional put needs publish on its topic;
// stats transactions is admin only.
func TestTxACL(t *testing.T) {
	t.Parallel()
	b := startBrokerWith(t, func(c *conf.Config) {
		c.Topics = []conf.Topic{{Name: "orders"}, {Name: "secret"}}
		c.Auth = conf.Auth{Enabled: true, Users: hashedUsers(t)}
	})
	c := &txClient{wireConn: dialWire(t, b.Addr())}
	got := c.call("transaction TX:s:1 s BEGIN 1\r\n")
	require.Regexp(t, `^result 401 `, got)
	got = c.call(string(protocol.AppendAuthPlain(nil, "alice", "alice-pw", 2)))
	require.Regexp(t, `^result 200 `, got)
	c.begin("TX:s:1")
	got = c.call("put orders 0 1 0 -1 TX:s:1 3\r\nx")
	require.Regexp(t, `^result 200 \d+ 3\r\n\d+ 0 -1$`, got)
	got = c.call("put secret 0 1 0 -1 TX:s:1 4\r\nx")
	require.Regexp(t, `^result 403 \d+ 4\r\nuser "alice" may not publish to topic "secret"$`, got)
	require.Regexp(t, `^result 403 `, c.call("stats transactions 5\r\n"))
	c.commit("TX:s:1")

	// XA: another user may neither use nor see alice's branch; root may.
	c.ok("transaction XID:1:aa:bb:q s BEGIN q 6\r\n")
	c.ok("put orders 0 1 0 -1 XID:1:aa:bb:q 7\r\nx")
	require.Equal(t, "0", c.ok("transaction XID:1:aa:bb:q s PREPARE q 8\r\n"))
	require.Regexp(t, `^result 403 \d+ 9\r\nuser "alice" may not complete transactions heuristically \(admin only\)$`,
		c.call("transaction XID:1:aa:bb:q s HEURISTIC_COMMIT 9\r\n"))
	other := &txClient{wireConn: dialWire(t, b.Addr())}
	require.Regexp(t, `^result 200 `, other.call(string(protocol.AppendAuthPlain(nil, "nosub", "nosub-pw", 1))))
	require.Equal(t, "", other.ok("transaction null s RECOVER q 2\r\n"))
	require.Regexp(t, `XAException:code=-3,msg=transaction XID:1:aa:bb:q belongs to another user$`,
		other.call("transaction XID:1:aa:bb:q s COMMIT_TWO_PHASE q 3\r\n"))
	root := &txClient{wireConn: dialWire(t, b.Addr())}
	require.Regexp(t, `^result 200 `, root.call(string(protocol.AppendAuthPlain(nil, "root", "root-pw", 1))))
	require.Equal(t, "XID:1:aa:bb:q", root.ok("transaction null s RECOVER q 2\r\n"))
	root.ok("transaction XID:1:aa:bb:q s COMMIT_TWO_PHASE q 3\r\n")
}

// TestTxXABrokerWide: an XA transaction prepared on one connection,
// which then closes, is listed by RECOVER on another, which commits it;
// its messages then appear, in order, with their ids. A prepared one does
// not time out; an unprepared one does.
func TestTxXABrokerWide(t *testing.T) {
	t.Parallel()
	b := startBroker(t, 0, func(c *conf.Config) { c.TxDefaultTimeout = 1 })
	a := &txClient{wireConn: dialWire(t, b.Addr())}
	const key = "XID:7:0102:03:app-1"
	a.ok("transaction " + key + " s BEGIN app-1 1\r\n")
	a.ok("transaction XID:8:01:02:app-1 s BEGIN app-1 2\r\n") // left to time out
	ids := []int64{a.put(key, 0, "m0"), a.put(key, 0, "m1"), a.put(key, 1, "m2")}
	require.Equal(t, "0", a.ok("transaction "+key+" s PREPARE app-1 3\r\n"))
	a.nc.Close()
	c := &txClient{wireConn: dialWire(t, b.Addr())}
	require.Eventually(t, func() bool { return c.stat("", "tx_rollback") == "1" }, 20*time.Second, 10*time.Millisecond, "the unprepared one times out")
	require.Equal(t, key, c.ok("transaction null s RECOVER app-1 4\r\n"), "the prepared one is still there")
	require.Empty(t, c.records(0))
	c.ok("transaction " + key + " s COMMIT_TWO_PHASE app-1 5\r\n")
	recs := c.records(0)
	require.Len(t, recs, 2)
	require.Equal(t, ids[0], recs[0].ID)
	require.Equal(t, "m1", string(recs[1].Data))
	recs = c.records(1)
	require.Len(t, recs, 1)
	require.Equal(t, ids[2], recs[0].ID)
	require.Equal(t, "2", c.stat("", "tx_xa_begin"))
	require.Equal(t, "1", c.stat("", "tx_commit"))
}

// TestTxHostile: malformed transaction commands and transactional puts get
// error replies and the broker goes on serving the connection.
func TestTxHostile(t *testing.T) {
	t.Parallel()
	b := startBroker(t, 0)
	w := dialWire(t, b.Addr())
	bad := []string{
		"transaction\r\n", "transaction TX:s:1\r\n", "transaction   \r\n",
		"transaction TX:s:1 s BEGIN 99999999999999999999 1\r\n",
		"transaction XID:1:" + strings.Repeat("ab", 65) + ":cd:q s BEGIN 1\r\n",
		"transaction TX:\x00:1 \x00 BEGIN 1\r\n", "transaction TX:s:1 s COMMIT_ONE_PHASE x y z 1\r\n",
		"transaction XID:1:ab:cd:q:extra s BEGIN 1\r\n", "transaction TX:s:1 s \xff\xfe 1\r\n",
		"put t 0 1 0 -1 TX:s:99999999999999999999 1\r\nx", "put t 0 1 0 -1 XID:::: 1\r\nx",
		"put t 0 1 0 -1 TX:s:1 1\r\nx", "transaction TX:s:1 s ROLLBACK 1\r\n",
		"transaction TX:s:1 s BEGIN 0 0 1\r\n", "transaction TX:s:1 s ROLLBACK 1\r\n",
	}
	for _, s := range bad {
		got := w.call(s)
		require.Regexp(t, `^result (200|400|500) `, got, "%q", s)
	}
	require.Equal(t, "result 200 "+strconv.Itoa(len(Version))+" 7\r\n"+Version, w.call("version 7\r\n"))
}

// TestTxCommitOneRound: a local commit whose partitions are group-commit
// partitions of one data directory costs one round of the store journal
// (one fdatasync) and no fsync of the transaction journal: its batches
// are one atomic group (core/tx/atomic.go), and no commit record is written.
// An XA commit keeps its commit record, fsynced before its batches.
func TestTxCommitOneRound(t *testing.T) {
	t.Parallel()
	b := startBroker(t, 0, func(c *conf.Config) { c.JournalCheckpointInterval = 3600_000 })
	c := &txClient{wireConn: dialWire(t, b.Addr())}
	j := b.topics.Get("t").Parts[0].Journal()
	require.NotNil(t, j)
	require.Same(t, j, b.topics.Get("t").Parts[1].Journal())
	c.begin("TX:s:99")
	c.put("TX:s:99", 0, "warm")
	c.commit("TX:s:99")
	txSynced := func() int64 { return b.txm.Status().JournalSynced }
	// A checkpoint (the partitions' registration asks for one) may add a
	// round to a commit's; the best of the commits shows the commit alone.
	best := [2]int64{1 << 40, 1 << 40}
	for n := range 3 {
		key := fmt.Sprintf("TX:s:%d", n)
		c.begin(key)
		for i := range 4 {
			c.put(key, i%2, fmt.Sprintf("m%d-%d", n, i))
		}
		synced, st := txSynced(), j.Stats()
		c.commit(key)
		after := j.Stats()
		require.Equal(t, synced, txSynced(), "the transaction journal was not fsynced")
		if d := after.Rounds - st.Rounds; d < best[0] {
			best = [2]int64{d, after.Fsyncs - st.Fsyncs}
		}
	}
	require.Equal(t, [2]int64{1, 1}, best, "one journal round, one fdatasync")
	require.Equal(t, "4", c.stat("", "tx_commit"))
	require.Equal(t, "0 buffered_bytes 0", c.stat("transactions", "open"))
	require.Equal(t, int64(7), b.topics.Get("t").Parts[0].MessageCount())
	require.Equal(t, int64(6), b.topics.Get("t").Parts[1].MessageCount())

	// XA: the decision first, fsynced, then the batch.
	x := "XID:1:01:02:q"
	c.ok(fmt.Sprintf("transaction %s s BEGIN 90\r\n", x))
	c.put(x, 0, "xa")
	c.send(fmt.Sprintf("transaction %s s END 91\r\n", x)) // no reply
	c.ok(fmt.Sprintf("transaction %s s PREPARE 92\r\n", x))
	synced := txSynced()
	c.ok(fmt.Sprintf("transaction %s s COMMIT_TWO_PHASE 93\r\n", x))
	require.Greater(t, txSynced(), synced, "an XA commit record is fsynced")
	require.Equal(t, int64(8), b.topics.Get("t").Parts[0].MessageCount())
}
