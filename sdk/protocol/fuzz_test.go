package protocol

import (
	"bytes"
	"errors"
	"io"
	"strings"
	"testing"
)

// FuzzDecode feeds arbitrary bytes to the decoder: it must never panic, never
// return a body over the limit, account its body buffer exactly in its
// Budget, never put a raw control byte in an error, and always make progress
// or stop.
func FuzzDecode(f *testing.F) {
	f.Add([]byte("put meta-test 0 5 0 907060870 7\r\nhello"))
	f.Add([]byte("get meta-test g 0 0 1048576 1\r\noffset t g 0 0 2\r\n"))
	f.Add([]byte("stats topics 3\r\nversion\r\nquit\r\n"))
	f.Add([]byte("mput t 0 13 1 6\r\n\x00\x00\x00\x00\x00\x00\x00\x01\xff\xff\xff\xffa"))
	f.Add([]byte("result 200 5 1\r\n1 2 3value 3 2\r\nabc"))
	f.Add([]byte("transaction TX:1:2 sess BEGIN 5 9\r\nsync t 0 1 0 12 -1 4\r\nz"))
	f.Add([]byte("txsync commit 3 7\r\nabctxsync bogus 0 8\r\ntxsync state x 9\r\n"))
	f.Add([]byte("put t 0 -1 0 1\r\n\x00\xff"))
	f.Add([]byte("commit g 13 1\r\nt 0 100 -1\r\nfetch g 5 2\r\nt 0\r\n"))
	f.Add([]byte("fvalue 4 1 99\r\nabcd"))
	f.Add(AppendFilter(AppendFilter(nil, "t", "g", "TagA || TagB", 5), "t", "g", "", 6))
	f.Add([]byte("filter t g 3 x\r\nabcfilter t  0 1\r\nfilter t g -1 2\r\n"))
	f.Add([]byte("join g t c1 default 1\r\nheartbeat g t c1 3 2\r\nleave g t c1 3\r\n"))
	f.Add([]byte("heartbeat g t c1 -1 2\r\njoin g t  default 1\r\nleave g t c1\r\n"))
	// Floods and short bodies (issue 7).
	f.Add(bytes.Repeat([]byte("\n"), 100))
	f.Add([]byte(strings.Repeat("\r\n", 32) + "version 1\r\n" + strings.Repeat("\n", 33) + "version 2\r\n"))
	f.Add(bytes.Repeat([]byte(" \r\n"), 100))
	f.Add(bytes.Repeat([]byte("\r"), 300))
	f.Add(bytes.Repeat([]byte("\x00\n"), 100))
	f.Add([]byte("put t 0 2147483647 0 1\r\nshort"))
	f.Add([]byte("put t 0 200 0 1\r\nshort"))
	f.Add([]byte("result 200 60 1\r\nshort"))
	f.Add([]byte("mput t 0 1000000 1 1\r\n\x00\x00"))
	f.Add(AppendAuthPlain(nil, "alice", "secret", 1))
	f.Add([]byte("auth PLAIN 9999 1\r\n\x00a\x00b"))
	f.Add([]byte("auth  4 2\r\n\x00a\x00b\nauth PLAIN 4 x\r\n\x00a\x00b"))
	f.Add([]byte("put t 0 150000 0 1\r\nshort"))
	f.Fuzz(func(t *testing.T, data []byte) {
		// Tiny limits, and limits over bodyChunk (not a power of two), whose
		// large bodies take pooled buffers (growth past bodyChunk, which
		// needs more input than fuzzing makes, is TestBodyPool's).
		fuzzDecode(t, data, Limits{MaxLine: 128, MaxBody: 64, MaxDiscard: 256})
		fuzzDecode(t, data, Limits{MaxLine: 128, MaxBody: 200 << 10, MaxDiscard: 800 << 10})
	})
}

// fuzzDecode checks FuzzDecode's invariants for one set of limits.
func fuzzDecode(t *testing.T, data []byte, lim Limits) {
	var b budget
	lim.Budget = &b
	d := NewDecoder(bytes.NewReader(data), lim)
	defer func() {
		d.Release()
		if b.held() != 0 {
			t.Fatalf("budget holds %d after Release", b.held())
		}
	}()
	var req Request
	for i := 0; i <= len(data); i++ {
		err := d.Decode(&req)
		if len(req.Body) > lim.MaxBody {
			t.Fatalf("body %d over limit", len(req.Body))
		}
		if b.held() > lim.MaxBody || b.held() != cap(d.body) {
			t.Fatalf("budget holds %d, body buffer %d, limit %d", b.held(), cap(d.body), lim.MaxBody)
		}
		if err == nil {
			if req.Op == OpMPut {
				body := req.Body
				for n := 0; n < req.Count; n++ {
					_, body = NextMPutEntry(body)
				}
				if len(body) != 0 {
					t.Fatal("mput body not consumed")
				}
			}
			continue
		}
		var pe *Error
		if errors.As(err, &pe) {
			requireNoControlBytes(t, pe.Msg)
			if !pe.Fatal {
				continue
			}
		}
		if err != io.EOF && err != io.ErrUnexpectedEOF && !errors.As(err, &pe) {
			t.Fatalf("unexpected error %v", err)
		}
		return
	}
	t.Fatal("decoder made no progress")
}
