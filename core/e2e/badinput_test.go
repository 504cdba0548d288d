package e2e

import (
	"bytes"
	"errors"
	"fmt"
	"math/rand/v2"
	"net"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/metaq-go/metaq/sdk/message"
	"github.com/metaq-go/metaq/sdk/protocol"
)

// want is one expected reply: its code and a substring of its body.
type want struct {
	code   int
	substr string
}

// healthyLoop does put+get round trips on its own connection until stop is
// closed, and reports every failure; opTimeout bounds each read and write.
func healthyLoop(addr, topic string, opTimeout time.Duration, stop <-chan struct{}, rounds *atomic.Int64) error {
	c, err := dialClient(addr)
	if err != nil {
		return err
	}
	defer c.close()
	c.timeout = opTimeout
	for i := 0; ; i++ {
		select {
		case <-stop:
			return nil
		default:
		}
		data := fmt.Appendf(nil, "healthy %d %s", i, strings.Repeat("h", i%500))
		r, err := c.put(topic, 0, data)
		if err != nil {
			return fmt.Errorf("healthy put %d: %w", i, err)
		}
		if r.Op != protocol.OpResult || r.Code != protocol.StatusOK {
			return fmt.Errorf("healthy put %d: %v", i, r)
		}
		id, _, off, _, err := protocol.ParsePutResult(r.Body)
		if err != nil {
			return err
		}
		r, err = c.get(topic, 0, off, 4096)
		if err != nil {
			return fmt.Errorf("healthy get %d: %w", i, err)
		}
		if r.Op != protocol.OpValue {
			return fmt.Errorf("healthy get %d at %d: %v", i, off, r)
		}
		it := message.NewIterator(r.Body, off, 0)
		if !it.Next() || it.Record().ID != id || !bytes.Equal(it.Record().Data, data) {
			return fmt.Errorf("healthy get %d at %d: record does not match the put (err %v)", i, off, it.Err())
		}
		rounds.Add(1)
	}
}

// TestBadInput sends malformed requests, each on its own connection, to a
// running broker and checks each reply (code and body) or that the
// connection is closed when framing is lost, and that a connection that
// survives still serves a valid request. Meanwhile a healthy client must see
// every one of its put+get round trips succeed.
func TestBadInput(t *testing.T) {
	t.Parallel()
	const topic = "bad"
	// max_message_size 4096 < decoder body limit max(4096, 8192) = 8192 <
	// discard limit 4 × 8192 = 32768.
	top := "max_message_size = 4096\nmax_transfer_size = 8192\nmax_line_length = 1024\n"
	tb := startBroker(t, brokerConfig(t.TempDir(), top,
		fmt.Sprintf("[[topic]]\nname = %q\nnum_partitions = 4\n", topic)))

	stop := make(chan struct{})
	var rounds atomic.Int64
	var healthyErr error
	var wg sync.WaitGroup
	wg.Add(1)
	go func() {
		defer wg.Done()
		healthyErr = healthyLoop(tb.Addr, topic, ioTimeout, stop, &rounds)
	}()
	stopHealthy := sync.OnceFunc(func() {
		close(stop)
		wg.Wait()
	})
	t.Cleanup(stopHealthy)

	hello := []byte("hello")
	crcHello := strconv.FormatUint(uint64(message.Checksum(hello)), 10)
	mputBody := func(datas ...string) []byte {
		var b []byte
		for _, d := range datas {
			b = protocol.AppendMPutEntry(b, 0, -1, []byte(d))
		}
		return b
	}
	two := mputBody("one", "two")
	badCRC := protocol.AppendMPutEntry(nil, 0, 12345, []byte("one"))
	overrun := mputBody("one")
	overrun[7]++ // the entry claims one byte more than the body holds
	longLine := "put " + strings.Repeat("a", 5000) + " 0 0 0 -1 1\r\n"
	noNewline := strings.Repeat("x", 100<<10)
	var okPuts []byte
	for i := 0; i < 30; i++ {
		okPuts = append(okPuts, putFrame(topic, 2, fmt.Appendf(nil, "fine %d", i), int32(100+i))...)
	}

	cases := []struct {
		name    string
		send    []byte
		replies []want
		closed  bool // the broker must close the connection after the replies
	}{
		// Too few tokens. A put's body length is unknown, so framing is lost.
		{"put too few tokens", []byte("put bad 0 5 1\r\nhello"), []want{{400, "want 6 to 8 tokens"}}, true},
		{"put one token", []byte("put\r\n"), []want{{400, "want 6 to 8 tokens"}}, true},
		{"get too few tokens", []byte("get bad g 0 0 7\r\n"), []want{{400, "get: want 7 tokens"}}, false},
		{"get too many tokens", []byte("get bad g 0 0 100 7 8\r\n"), []want{{400, "get: want 7 tokens"}}, false},
		{"offset too few tokens", []byte("offset bad g 0 9\r\n"), []want{{400, "offset: want 6 tokens"}}, false},
		// Body lengths.
		{"non-numeric length", []byte("put bad 0 abc 0 -1 3\r\nabc"), []want{{400, "bad length"}}, true},
		{"negative length", []byte("put bad 0 -5 0 -1 3\r\n"), []want{{400, "bad length"}}, true},
		{"huge length", []byte("put bad 0 2147483647 0 -1 3\r\n"), []want{{400, "exceeds limit"}}, true},
		{"length over discard limit", []byte("put bad 0 40000 0 -1 3\r\n" + strings.Repeat("x", 1000)), []want{{400, "exceeds limit"}}, true},
		{"over max_message_size", append([]byte("put bad 0 5000 0 -1 3\r\n"), bytes.Repeat([]byte("x"), 5000)...),
			[]want{{400, "exceeds max_message_size"}}, false},
		{"over body limit under discard limit", append([]byte("put bad 0 20000 0 -1 3\r\n"), bytes.Repeat([]byte("x"), 20000)...),
			[]want{{400, "exceeds limit"}}, false},
		{"mput over discard limit", []byte("mput bad 0 99999 2 3\r\n"), []want{{400, "exceeds limit"}}, true},
		// Refused puts and gets (framing intact).
		{"bad checksum", []byte("put bad 0 5 0 12345 3\r\nhello"), []want{{500, "checksum mismatch"}}, false},
		{"bad checksum token", []byte("put bad 0 5 0 12x45 3\r\nhello"), []want{{400, "bad checksum"}}, false},
		{"good checksum", []byte("put bad 3 5 0 " + crcHello + " 3\r\nhello"), []want{{200, " 3 "}}, false},
		{"attribute flag without attribute", []byte("put bad 3 2 1 -1 3\r\nhi"), []want{{400, "attribute"}}, false},
		{"unknown topic put", []byte("put nope 0 5 0 -1 3\r\nhello"), []want{{500, "do not accept topic nope"}}, false},
		{"unknown partition put", []byte("put bad 9 5 0 -1 3\r\nhello"), []want{{500, "out of range"}}, false},
		{"partition -2 put", []byte("put bad -2 5 0 -1 3\r\nhello"), []want{{400, "bad partition"}}, false},
		{"unknown topic get", []byte("get nope g 0 0 100 3\r\n"), []want{{500, "unknown topic"}}, false},
		{"unknown partition get", []byte("get bad g 9 0 100 3\r\n"), []want{{500, "out of range"}}, false},
		{"unknown partition offset", []byte("offset bad g 9 0 3\r\n"), []want{{500, "out of range"}}, false},
		{"get maxSize 0", []byte("get bad g 0 0 0 3\r\n"), []want{{400, "maxSize"}}, false},
		{"get maxSize -1", []byte("get bad g 0 0 -1 3\r\n"), []want{{400, "maxSize"}}, false},
		{"get bad offset", []byte("get bad g 0 x 100 3\r\n"), []want{{400, "bad offset"}}, false},
		{"unknown command", []byte("hello world 3\r\n"), []want{{400, "unknown command"}}, false},
		{"transaction bad key", []byte("transaction TX:1 s1 BEGIN 3\r\n"), []want{{400, "want TX:<sessionId>:<n>"}}, false},
		{"transaction unknown", []byte("transaction TX:s1:1 s1 COMMIT_ONE_PHASE 3\r\n"), []want{{500, "not begun"}}, false},
		{"transactional put bad key", []byte("put bad 0 5 0 TX:1 3\r\nhello"), []want{{500, "want TX:<sessionId>:<n>"}}, false},
		{"transactional put no transaction", []byte("put bad 0 5 0 TX:s1:1 3\r\nhello"), []want{{500, "not begun"}}, false},
		{"sync", []byte("sync bad 0 5 0 99 -1 3\r\nhello"), []want{{500, "not a slave"}}, false},
		// mput bodies that do not match their header.
		{"mput count above body", append([]byte(fmt.Sprintf("mput bad 0 %d 3 3\r\n", len(two))), two...),
			[]want{{400, "does not hold the declared entries"}}, false},
		{"mput count below body", append([]byte(fmt.Sprintf("mput bad 0 %d 1 3\r\n", len(two))), two...),
			[]want{{400, "does not hold the declared entries"}}, false},
		{"mput entry overruns body", append([]byte(fmt.Sprintf("mput bad 0 %d 1 3\r\n", len(overrun))), overrun...),
			[]want{{400, "does not hold the declared entries"}}, false},
		{"mput count 0", []byte("mput bad 0 0 0 3\r\n"), []want{{400, "bad count"}}, false},
		{"mput bad crc", append([]byte(fmt.Sprintf("mput bad 0 %d 1 3\r\n", len(badCRC))), badCRC...),
			[]want{{500, "checksum mismatch"}}, false},
		{"mput too few tokens", []byte("mput bad 0 10 3\r\n"), []want{{400, "want 6 tokens"}}, true},
		// Header lines.
		{"over-long header line", []byte(longLine), []want{{400, "header line too long"}}, true},
		{"line without newline over the read buffer", []byte(noNewline), []want{{400, "header line too long"}}, true},
		{"empty lines are ignored", []byte("\r\n\r\n\n"), nil, false},
		{"too many consecutive errors", bytes.Repeat([]byte("bogus\r\n"), 40), repeatWant(32, want{400, "unknown command"}), true},
		// A framing error after pipelined puts: the puts were accepted (and
		// are stored), so their replies must still come before the close,
		// as they do for quit and for a half-close.
		{"fatal error after pipelined puts", append(bytes.Clone(okPuts), "put bad 0 abc 0 -1 3\r\n"...),
			append(repeatWant(30, want{200, " 2 "}), want{400, "bad length"}), true},
	}

	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			c := dial(t, tb.Addr)
			require.NoError(t, c.write(tc.send))
			var gotReplies []reply
			for range tc.replies {
				r, err := c.read()
				require.NoError(t, err, "after %d replies %v", len(gotReplies), gotReplies)
				gotReplies = append(gotReplies, r)
			}
			// Replies may come in any order (a put is answered after its
			// fsync): match them as a multiset.
			matched := make([]bool, len(gotReplies))
			for _, w := range tc.replies {
				found := false
				for i, r := range gotReplies {
					if !matched[i] && r.Op == protocol.OpResult && r.Code == w.code && strings.Contains(string(r.Body), w.substr) {
						matched[i], found = true, true
						break
					}
				}
				require.True(t, found, "no reply %d %q among %v", w.code, w.substr, gotReplies)
			}
			if tc.closed {
				require.NoError(t, c.expectClosed())
				return
			}
			// The connection survives: a valid request still works.
			r := ok(t)(c.call(protocol.AppendVersion(nil, 4242), 4242))
			require.NotEmpty(t, r.Body)
			ok(t)(c.put(topic, 3, []byte("still works")))
		})
	}

	t.Run("disconnect mid-body", func(t *testing.T) {
		c := dial(t, tb.Addr)
		before := partOffsets(t, c)[topic+"-1"]
		for _, cut := range []int{0, 1, 50, 999} {
			d := dial(t, tb.Addr)
			frame := append([]byte("put bad 1 1000 0 -1 3\r\n"), bytes.Repeat([]byte("m"), 1000)...)
			require.NoError(t, d.write(frame[:len("put bad 1 1000 0 -1 3\r\n")+cut]))
			d.close()
		}
		d := dial(t, tb.Addr)
		require.NoError(t, d.write([]byte("put bad 1 1000 0 -1 3\r\nabc")))
		d.nc.(*net.TCPConn).CloseWrite()
		require.NoError(t, d.expectClosed(), "half-closed mid-body")
		time.Sleep(50 * time.Millisecond)
		require.Equal(t, before, partOffsets(t, c)[topic+"-1"], "a torn put was stored")
	})

	t.Run("client that never reads", func(t *testing.T) {
		// Thousands of pipelined gets whose replies are never read: the
		// broker must block only this connection, and drop it once it is
		// closed.
		for rounds.Load() < 50 {
			time.Sleep(5 * time.Millisecond) // let the healthy client fill partition 0
		}
		c := dial(t, tb.Addr)
		var buf []byte
		for i := 0; i < 3000; i++ {
			buf = protocol.AppendGet(buf, topic, "slow", 0, 0, 8192, int32(i+1))
		}
		require.NoError(t, c.write(buf))
		before := rounds.Load()
		time.Sleep(300 * time.Millisecond)
		require.Greater(t, rounds.Load(), before, "the healthy client is stuck behind a client that does not read")
		c.close()
	})

	t.Run("binary garbage", func(t *testing.T) {
		rng := rand.New(rand.NewPCG(3, 4))
		for i := 0; i < 8; i++ {
			garbage := make([]byte, 2048+rng.IntN(4096))
			for j := range garbage {
				garbage[j] = byte(rng.IntN(256))
				if rng.IntN(40) == 0 {
					garbage[j] = '\n'
				}
			}
			c := dial(t, tb.Addr)
			require.NoError(t, c.write(garbage))
			c.nc.(*net.TCPConn).CloseWrite()
			// Only 400s may come back, then the connection closes.
			for n := 0; ; n++ {
				require.Less(t, n, 10000)
				r, err := c.read()
				if err != nil {
					var ne net.Error
					require.False(t, errors.As(err, &ne) && ne.Timeout(), "garbage connection %d not closed", i)
					break
				}
				require.Equal(t, protocol.StatusBadRequest, r.Code, "garbage %d got %v", i, r)
			}
		}
	})

	stopHealthy()
	require.NoError(t, healthyErr, "the healthy client saw a failure")
	require.Positive(t, rounds.Load(), "the healthy client made no round trip")
	t.Logf("healthy client: %d put+get round trips", rounds.Load())

	// stats still answers, and every other connection is gone.
	c := dial(t, tb.Addr)
	deadline := time.Now().Add(10 * time.Second)
	for {
		st := parseStats(t, ok(t)(c.stats("")).Body)
		if st["curr_connections"] == "1" {
			break
		}
		require.True(t, time.Now().Before(deadline), "curr_connections stays at %s", st["curr_connections"])
		time.Sleep(20 * time.Millisecond)
	}
}

func repeatWant(n int, w want) []want {
	out := make([]want, n)
	for i := range out {
		out[i] = w
	}
	return out
}
