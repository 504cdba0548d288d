package main

import (
	"bytes"
	"io"
	"net"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/metaq-go/metaq/internal/brokertest"
)

// lockedBuf is a bytes.Buffer written by the command and read by the test.
type lockedBuf struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (l *lockedBuf) Write(p []byte) (int, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.b.Write(p)
}

func (l *lockedBuf) String() string {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.b.String()
}

// waitFor waits at most d for cond.
func waitFor(t *testing.T, d time.Duration, what string, cond func() bool) {
	t.Helper()
	for end := time.Now().Add(d); !cond(); {
		if time.Now().After(end) {
			t.Fatalf("not within %v: %s", d, what)
		}
		time.Sleep(50 * time.Millisecond)
	}
}

// TestConsumeGroupBrokerLoss: a group consumer in the CLI says, without
// --log-level, that it lost its broker (one line) and that the broker is
// back (one line), then goes on consuming (issue 23: it used to stay
// silent).
func TestConsumeGroupBrokerLoss(t *testing.T) {
	t.Parallel()
	if testing.Short() {
		t.Skip("starts a broker twice")
	}
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	port := ln.Addr().(*net.TCPAddr).Port
	ln.Close()
	data := filepath.Join(t.TempDir(), "data")
	cfgPath := serverConfig(t)
	start := func() *brokertest.Server {
		return brokertest.StartServer(t, "--config", cfgPath, "--host", "127.0.0.1",
			"--port", strconv.Itoa(port), "--http-port", "0", "--data-dir", data)
	}
	srv := start()
	addr := srv.Addr
	var stderr lockedBuf
	done := make(chan int, 1)
	go func() {
		done <- run([]string{"--addr", addr, "consume", "--topic", "meta-test", "--group", "loss", "--count", "1"},
			strings.NewReader(""), io.Discard, &stderr)
	}()
	time.Sleep(time.Second) // joined and fetching
	srv.Kill()
	waitFor(t, 20*time.Second, "a line saying the broker is lost", func() bool {
		return strings.Contains(stderr.String(), "metaq consume: lost the broker at "+addr)
	})
	start() // stopped when the test ends
	waitFor(t, 20*time.Second, "a line saying the broker is back", func() bool {
		return strings.Contains(stderr.String(), "metaq consume: the broker at "+addr+" is back")
	})
	if r := cli("after\n", "--addr", addr, "produce", "--topic", "meta-test"); r.code != 0 {
		t.Fatalf("produce: %+v", r)
	}
	select {
	case code := <-done:
		if code != 0 {
			t.Fatalf("consume exited %d:\n%s", code, stderr.String())
		}
	case <-time.After(30 * time.Second):
		t.Fatalf("consume did not get the message after the broker came back:\n%s", stderr.String())
	}
	if n := strings.Count(stderr.String(), "lost the broker"); n != 1 {
		t.Fatalf("want one lost line, got %d:\n%s", n, stderr.String())
	}
}
