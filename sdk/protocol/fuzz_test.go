package protocol

import (
	"bytes"
	"errors"
	"io"
	"testing"
)

// FuzzDecode feeds arbitrary bytes to the decoder: it must never panic, never
// return a body over the limit, and always make progress or stop.
func FuzzDecode(f *testing.F) {
	f.Add([]byte("put meta-test 0 5 0 907060870 7\r\nhello"))
	f.Add([]byte("get meta-test g 0 0 1048576 1\r\noffset t g 0 0 2\r\n"))
	f.Add([]byte("stats topics 3\r\nversion\r\nquit\r\n"))
	f.Add([]byte("mput t 0 13 1 6\r\n\x00\x00\x00\x00\x00\x00\x00\x01\xff\xff\xff\xffa"))
	f.Add([]byte("result 200 5 1\r\n1 2 3value 3 2\r\nabc"))
	f.Add([]byte("transaction TX:1:2 sess BEGIN 5 9\r\nsync t 0 1 0 12 -1 4\r\nz"))
	f.Add([]byte("put t 0 -1 0 1\r\n\x00\xff"))
	f.Add([]byte("commit g 13 1\r\nt 0 100 -1\r\nfetch g 5 2\r\nt 0\r\n"))
	f.Add([]byte("fvalue 4 1 99\r\nabcd"))
	f.Add([]byte("join g t c1 default 1\r\nheartbeat g t c1 3 2\r\nleave g t c1 3\r\n"))
	f.Add([]byte("heartbeat g t c1 -1 2\r\njoin g t  default 1\r\nleave g t c1\r\n"))
	lim := Limits{MaxLine: 128, MaxBody: 64, MaxDiscard: 256}
	f.Fuzz(func(t *testing.T, data []byte) {
		d := NewDecoder(bytes.NewReader(data), lim)
		var req Request
		for i := 0; i <= len(data); i++ {
			err := d.Decode(&req)
			if len(req.Body) > lim.MaxBody {
				t.Fatalf("body %d over limit", len(req.Body))
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
			if errors.As(err, &pe) && !pe.Fatal {
				continue
			}
			if err != io.EOF && err != io.ErrUnexpectedEOF && !errors.As(err, &pe) {
				t.Fatalf("unexpected error %v", err)
			}
			return
		}
		t.Fatal("decoder made no progress")
	})
}
