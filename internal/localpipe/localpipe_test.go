package localpipe

import (
	"bytes"
	"errors"
	"io"
	"net"
	"os"
	"testing"
	"time"

	"golang.org/x/net/nettest"
)

// TestLocalPipeConn holds localPipe to what nettest asks of a net.Conn
// (net.Pipe's tests): reads, writes, deadlines, close, concurrent use.
func TestLocalPipeConn(t *testing.T) {
	nettest.TestConn(t, func() (c1, c2 net.Conn, stop func(), err error) {
		a, b := New()
		return a, b, func() { a.Close(); b.Close() }, nil
	})
}

// TestLocalPipe: a small write returns before it is read, a large one
// once it is read; what was copied is read after the writer's close,
// then io.EOF; what was lent and not read is dropped by the lender's
// close; a read times out with os.ErrDeadlineExceeded.
func TestLocalPipe(t *testing.T) {
	a, b := New()
	defer b.Close()
	if n, err := a.Write([]byte("hello")); n != 5 || err != nil { // nothing reads yet: returns
		t.Fatalf("small write: %d %v", n, err)
	}
	big := bytes.Repeat([]byte("x"), CopyMax+1)
	done := make(chan error, 1)
	go func() { _, err := a.Write(big); done <- err }()
	select {
	case err := <-done:
		t.Fatalf("a large write returned before it was read: %v", err)
	case <-time.After(50 * time.Millisecond):
	}
	got := make([]byte, 5+len(big))
	if _, err := io.ReadFull(b, got); err != nil || string(got[:5]) != "hello" || !bytes.Equal(got[5:], big) {
		t.Fatalf("read: %v", err)
	}
	if err := <-done; err != nil {
		t.Fatalf("large write: %v", err)
	}

	// Lent buffers: read in order after copies; dropped on close.
	if err := a.WriteLent([][]byte{[]byte("ab"), nil, []byte("cd")}); err != nil {
		t.Fatal(err)
	}
	buf := make([]byte, 3)
	if n, err := b.Read(buf); n != 3 || err != nil || string(buf) != "abc" {
		t.Fatalf("lent read: %q %v", buf[:n], err)
	}
	a.Write([]byte("ef")) // a copy, behind the lent "d"
	a.Close()
	rest, err := io.ReadAll(b)
	if err != nil || string(rest) != "ef" {
		t.Fatalf("after the lender's close: %q %v (want the copy, not the lent d)", rest, err)
	}
	if _, err := a.Write([]byte("x")); !errors.Is(err, io.ErrClosedPipe) {
		t.Fatalf("write after close: %v", err)
	}

	// A read past its deadline; a lent large write taken back on its
	// deadline.
	c, d := New()
	defer c.Close()
	defer d.Close()
	c.SetReadDeadline(time.Now().Add(time.Hour))
	c.SetReadDeadline(time.Now().Add(20 * time.Millisecond)) // the hour's timer, reset
	if _, err := c.Read(buf); !errors.Is(err, os.ErrDeadlineExceeded) {
		t.Fatalf("read past deadline: %v", err)
	}
	c.SetReadDeadline(time.Now().Add(time.Hour))
	c.SetReadDeadline(time.Time{})
	c.SetReadDeadline(time.Now().Add(20 * time.Millisecond))
	if _, err := c.Read(buf); !errors.Is(err, os.ErrDeadlineExceeded) {
		t.Fatalf("read past a deadline set after a cleared one: %v", err)
	}
	d.SetWriteDeadline(time.Now().Add(20 * time.Millisecond))
	if n, err := d.Write(big); n != 0 || !errors.Is(err, os.ErrDeadlineExceeded) {
		t.Fatalf("unread large write past deadline: %d %v", n, err)
	}
	d.SetWriteDeadline(time.Time{})
	d.Write([]byte("z"))
	c.SetReadDeadline(time.Time{})
	if n, err := c.Read(buf); n != 1 || err != nil || buf[0] != 'z' {
		t.Fatalf("after a taken-back write: %q %v", buf[:n], err)
	}
}
