package main

import (
	"bufio"
	"fmt"
	"net"
	"strings"
	"testing"
	"time"

	"github.com/metaq-go/metaq/sdk/protocol"
)

// txConn is a raw connection for TestCLITx's coordinator side.
type txConn struct {
	t   *testing.T
	nc  net.Conn
	dec *protocol.Decoder
	op  int32
}

func (c *txConn) call(frame func(op int32) []byte) (int, string) {
	c.t.Helper()
	c.op++
	if _, err := c.nc.Write(frame(c.op)); err != nil {
		c.t.Fatal(err)
	}
	var r protocol.Request
	if err := c.dec.Decode(&r); err != nil {
		c.t.Fatal(err)
	}
	return r.Code, string(r.Body)
}

func (c *txConn) tx(key string, typ protocol.TxType) (int, string) {
	return c.call(func(op int32) []byte { return protocol.AppendTransaction(nil, key, "s", typ, 0, "q", op) })
}

// TestCLITx: metaq tx list shows a prepared XA branch; tx commit and tx
// rollback complete branches heuristically, after which the coordinator's
// commit gets XA_HEURCOM or XA_HEURRB; tx forget removes the outcome; a
// local key or an unknown XID is refused.
func TestCLITx(t *testing.T) {
	t.Parallel()
	if testing.Short() {
		t.Skip("builds and starts a broker")
	}
	addr, _ := testServer(t)
	a := "--addr=" + addr
	nc, err := net.DialTimeout("tcp", addr, 5*time.Second)
	if err != nil {
		t.Fatal(err)
	}
	defer nc.Close()
	nc.SetDeadline(time.Now().Add(time.Minute))
	c := &txConn{t: t, nc: nc, dec: protocol.NewDecoder(bufio.NewReader(nc), protocol.Limits{})}
	keys := []string{"XID:1:0a:01:q", "XID:2:0a:01:q"}
	for _, key := range keys {
		if code, body := c.tx(key, protocol.TxBegin); code != 200 {
			t.Fatalf("begin: %d %s", code, body)
		}
		code, body := c.call(func(op int32) []byte {
			return append(protocol.AppendTxPutHeader(nil, "meta-test", 0, 3, 0, protocol.NoChecksum, key, op), "msg"...)
		})
		if code != 200 || !strings.HasSuffix(body, " 0 -1") {
			t.Fatalf("put: %d %s", code, body)
		}
		if code, body := c.tx(key, protocol.TxPrepare); code != 200 || body != "0" {
			t.Fatalf("prepare: %d %s", code, body)
		}
	}
	r := cli("", a, "tx", "list")
	mustOK(t, r, "tx list")
	if !strings.HasPrefix(r.stdout, "open 2 buffered_bytes 6\n") || !strings.Contains(r.stdout, keys[0]+" type xa state prepared ") ||
		!strings.HasSuffix(r.stdout, "heuristic 0\n") {
		t.Fatalf("tx list: %q", r.stdout)
	}
	r = cli("", a, "tx", "commit", "XID:1:0A:01:q")
	mustOK(t, r, "tx commit")
	if r.stdout != keys[0]+" committed heuristically\n" {
		t.Fatalf("tx commit: %q", r.stdout)
	}
	mustOK(t, cli("", a, "tx", "rollback", keys[1]), "tx rollback")
	for i, want := range []int{protocol.XAHeurCom, protocol.XAHeurRB} {
		code, body := c.tx(keys[i], protocol.TxCommitTwoPhase)
		if got, _, ok := protocol.ParseXAError([]byte(body)); code != 500 || !ok || got != want {
			t.Fatalf("late commit of %s: %d %s, want XA code %d", keys[i], code, body, want)
		}
	}
	r = cli("", a, "tx", "list")
	mustOK(t, r, "tx list")
	if !strings.HasSuffix(r.stdout, fmt.Sprintf("heuristic 2\n%s type xa state heuristic_committed\n%s type xa state heuristic_rolled_back\n", keys[0], keys[1])) {
		t.Fatalf("tx list: %q", r.stdout)
	}
	mustOK(t, cli("", a, "tx", "forget", keys[0]), "tx forget")
	if r := cli("", a, "tx", "forget", keys[0]); r.code != 1 || !strings.Contains(r.stderr, "XAException:code=-4") {
		t.Fatalf("second forget: exit %d %q", r.code, r.stderr)
	}
	if r := cli("", a, "tx", "commit", "TX:s:1"); r.code != 2 || !strings.Contains(r.stderr, "applies to XA branches") {
		t.Fatalf("local key: exit %d %q", r.code, r.stderr)
	}
	if r := cli("", a, "tx", "commit", "nonsense"); r.code != 2 {
		t.Fatalf("bad key: exit %d %q", r.code, r.stderr)
	}
}
