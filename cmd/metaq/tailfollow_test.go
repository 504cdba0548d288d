package main

import (
	"bytes"
	"fmt"
	"math/rand/v2"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/metaq-go/metaq/internal/brokertest"
	"github.com/metaq-go/metaq/internal/testsvc"
)

// syncBuf is a bytes.Buffer for a process's output, read while it runs.
type syncBuf struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (s *syncBuf) Write(p []byte) (int, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.Write(p)
}

func (s *syncBuf) String() string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.String()
}

// shipper is a `metaq tail` process of the real binary.
type shipper struct {
	cmd    *exec.Cmd
	stderr *syncBuf
	done   chan error
}

func startShipper(t *testing.T, bin string, args ...string) *shipper {
	t.Helper()
	s := &shipper{cmd: exec.Command(bin, args...), stderr: &syncBuf{}, done: make(chan error, 1)}
	s.cmd.Stderr = s.stderr
	if err := s.cmd.Start(); err != nil {
		t.Fatal(err)
	}
	go func() { s.done <- s.cmd.Wait() }()
	t.Cleanup(func() { s.cmd.Process.Kill(); <-s.done; s.done <- nil })
	return s
}

// stop sends SIGTERM and waits, bounded, for a clean exit.
func (s *shipper) stop(t *testing.T) {
	t.Helper()
	s.cmd.Process.Signal(syscall.SIGTERM)
	select {
	case err := <-s.done:
		s.done <- err
		if err != nil {
			t.Fatalf("metaq tail after SIGTERM: %v\n%s", err, s.stderr)
		}
	case <-time.After(30 * time.Second):
		t.Fatalf("metaq tail did not exit within 30 s of SIGTERM\n%s", s.stderr)
	}
}

// kill SIGKILLs the shipper and waits for it.
func (s *shipper) kill() {
	s.cmd.Process.Kill()
	err := <-s.done
	s.done <- err
}

// waitFor polls cond every 100 ms for up to d.
func tailWaitFor(t *testing.T, d time.Duration, what string, cond func() bool) {
	t.Helper()
	for end := time.Now().Add(d); !cond(); {
		if time.Now().After(end) {
			t.Fatalf("after %v: %s", d, what)
		}
		time.Sleep(100 * time.Millisecond)
	}
}

// lineCounts counts the shipped bodies.
func lineCounts(msgs []tailMsg) map[string]int {
	c := map[string]int{}
	for _, m := range msgs {
		c[m.body]++
	}
	return c
}

// TestTailFollow: the shipper (the real binary) follows a named file and a
// glob as tail -F does: a rotation by rename (the old file read to its
// end, lines written to it after the rename included, then the new one),
// a copytruncate, new files in the glob, a renamed file the glob still
// matches (not shipped again); every line arrives exactly once, and
// SIGTERM saves the state and exits 0.
func TestTailFollow(t *testing.T) {
	t.Parallel()
	if testing.Short() {
		t.Skip("builds the CLI and runs it")
	}
	b := brokertest.Start(t, smallJournal(), brokertest.Quiet(), brokertest.Topics("logs"))
	bin := testsvc.GoBuild(t, "github.com/metaq-go/metaq/cmd/metaq")
	dir := t.TempDir()
	g := filepath.Join(dir, "g")
	if err := os.Mkdir(g, 0o755); err != nil {
		t.Fatal(err)
	}
	app := filepath.Join(dir, "app.log")
	state := filepath.Join(dir, "state")
	appendFile(t, app, numbered("a-", 0, 100))
	sh := startShipper(t, bin, "--addr", b.Addr(), "tail", "--topic", "logs", "--state", state, "--poll", "50ms", "--record-wait", "300ms",
		"--batch", "100", app, filepath.Join(g, "*"))
	want := 100
	arrived := func() bool {
		c := lineCounts(consumeTail(t, b.Addr(), "logs"))
		for l, n := range c {
			if n != 1 {
				t.Fatalf("%q shipped %d times", l, n)
			}
		}
		return len(c) >= want
	}
	tailWaitFor(t, 30*time.Second, "the first 100 lines", arrived)
	if r := cli("", "--addr", b.Addr(), "tail", "--topic", "logs", "--state", state, "--once", app); r.code != 1 ||
		!strings.Contains(r.stderr, "is in use by another metaq tail") {
		t.Fatalf("a second shipper on the state file: %+v", r)
	}

	// Rename: more lines, the rename, lines the old writer still adds, the
	// new file.
	appendFile(t, app, numbered("b-", 0, 20))
	if err := os.Rename(app, app+".1"); err != nil {
		t.Fatal(err)
	}
	appendFile(t, app+".1", numbered("c-", 0, 10))
	appendFile(t, app, numbered("d-", 0, 30))
	want += 60
	tailWaitFor(t, 30*time.Second, "the lines around the rename", arrived)

	// Copytruncate: the file shrinks, its new lines are read from 0.
	if err := os.Truncate(app, 0); err != nil {
		t.Fatal(err)
	}
	appendFile(t, app, numbered("e-", 0, 5))
	want += 5
	tailWaitFor(t, 30*time.Second, "the lines after the truncation", arrived)
	// Truncated and written again, longer than before, at once (between
	// two looks): the file's first bytes changed.
	f, err := os.OpenFile(app, os.O_WRONLY|os.O_TRUNC, 0)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := f.WriteString(numbered("i-", 0, 50)); err != nil {
		t.Fatal(err)
	}
	f.Close()
	want += 50
	tailWaitFor(t, 30*time.Second, "the lines after a truncation and a longer write", arrived)

	// The glob: a new file, renamed to a name it still matches and
	// written on, and another new file.
	appendFile(t, filepath.Join(g, "x.log"), numbered("f-", 0, 40))
	want += 40
	tailWaitFor(t, 30*time.Second, "a new file of the glob", arrived)
	if err := os.Rename(filepath.Join(g, "x.log"), filepath.Join(g, "x.log.1")); err != nil {
		t.Fatal(err)
	}
	appendFile(t, filepath.Join(g, "x.log.1"), numbered("g-", 0, 5))
	appendFile(t, filepath.Join(g, "y.log"), numbered("h-", 0, 7))
	want += 12
	tailWaitFor(t, 30*time.Second, "the renamed file's new lines and another new file", arrived)
	time.Sleep(300 * time.Millisecond) // nothing more may come
	if !arrived() || len(lineCounts(consumeTail(t, b.Addr(), "logs"))) != want {
		t.Fatalf("want exactly %d lines", want)
	}
	sh.stop(t)
	if !strings.Contains(sh.stderr.String(), "was truncated") || !strings.Contains(sh.stderr.String(), fmt.Sprintf("shipped %d records", want)) {
		t.Fatalf("stderr:\n%s", sh.stderr)
	}
	st, err := loadTailState(state)
	if err != nil || len(st.Files) != 3 { // app.log, g/x.log.1, g/y.log (app.log.1 was drained and closed)
		t.Fatalf("state: %v %+v", err, st)
	}
}

// tailRounds is the number of kill -9 rounds: METAQ_TAIL_ROUNDS (make
// soak), else 4.
func tailRounds(t *testing.T) int {
	if s := os.Getenv("METAQ_TAIL_ROUNDS"); s != "" {
		n, err := strconv.Atoi(s)
		if err != nil || n <= 0 {
			t.Fatalf("METAQ_TAIL_ROUNDS=%q", s)
		}
		return n
	}
	return 4
}

// TestTailKill9: the shipper (the real binary) is killed with SIGKILL at
// random moments while lines are written and the file is rotated, and
// started again on the same state file, several rounds; then --once
// ships the rest. Checked line by line: every line arrives, and the
// duplicates are at most a batch per kill (reported).
func TestTailKill9(t *testing.T) {
	t.Parallel()
	if testing.Short() {
		t.Skip("builds the CLI and runs it")
	}
	b := brokertest.Start(t, smallJournal(), brokertest.Quiet(), brokertest.Topics("logs"))
	bin := testsvc.GoBuild(t, "github.com/metaq-go/metaq/cmd/metaq")
	dir := t.TempDir()
	app := filepath.Join(dir, "app.log")
	state := filepath.Join(dir, "state")
	const batch = 200
	args := []string{"--addr", b.Addr(), "tail", "--topic", "logs", "--state", state, "--poll", "20ms", "--record-wait", "200ms",
		"--batch", strconv.Itoa(batch), app}
	rounds := tailRounds(t)
	seed := uint64(time.Now().UnixNano())
	t.Logf("seed %d, %d rounds", seed, rounds)
	rng := rand.New(rand.NewPCG(seed, 1))
	written, rotations := 0, 0
	for r := 0; r < rounds; r++ {
		sh := startShipper(t, bin, args...)
		if written > 0 {
			// The restarted shipper catches up before this round's writer
			// may rotate again: a file created by the last round's rotation
			// after its kill and renamed away by this one before the
			// shipper first looked would be known to it by no name (the
			// state file never saw it, the argument names app.log only),
			// which docs/tail.md says needs a glob such as 'app.log*'.
			for end := time.Now().Add(60 * time.Second); ; time.Sleep(100 * time.Millisecond) {
				c := lineCounts(consumeTail(t, b.Addr(), "logs"))
				n, first := 0, ""
				for i := 0; i < written; i++ {
					if l := fmt.Sprintf("l-%06d", i); c[l] == 0 {
						if n++; first == "" {
							first = l
						}
					}
				}
				if n == 0 {
					break
				}
				if time.Now().After(end) {
					t.Fatalf("round %d: the restarted shipper did not ship every line written so far in 60 s: %d of %d missing, the first %s; its stderr:\n%s",
						r, n, written, first, sh.stderr.String())
				}
			}
		}
		// The writer: 3000 lines in 30 slices, a rotation by rename in
		// some rounds; the kill comes at a random moment.
		var wg sync.WaitGroup
		wg.Add(1)
		rotateAt := -1
		if rng.IntN(3) > 0 {
			rotateAt = rng.IntN(30)
		}
		go func(from int) {
			defer wg.Done()
			for s := 0; s < 30; s++ {
				if s == rotateAt {
					rotations++
					if err := os.Rename(app, fmt.Sprintf("%s.%d", app, rotations)); err != nil && !os.IsNotExist(err) {
						t.Error(err)
					}
				}
				appendFile(t, app, numbered("l-", from+s*100, from+(s+1)*100))
				time.Sleep(10 * time.Millisecond)
			}
		}(written)
		time.Sleep(time.Duration(100+rng.IntN(500)) * time.Millisecond)
		sh.kill()
		wg.Wait()
		written += 3000
	}
	r := cliWithin(t, 2*time.Minute, "", append([]string{"--timeout", "10s"}, append(args[:len(args)-1], "--once", app)...)...)
	mustOK(t, r, "tail --once after the kills")
	counts := lineCounts(consumeTail(t, b.Addr(), "logs"))
	// The duplicates of a kill are the lines of its unacknowledged batch:
	// runs of consecutive lines (two when the batch spans a rotation),
	// each at most a batch long.
	dups, runs, run := 0, 0, 0
	for i := 0; i < written; i++ {
		l := fmt.Sprintf("l-%06d", i)
		switch n := counts[l]; {
		case n == 0:
			t.Errorf("line %s lost", l)
		case n > 1:
			dups += n - 1
			if run == 0 {
				runs++
			}
			if run++; run > batch {
				t.Errorf("line %s: more than a batch (%d) of consecutive lines sent twice", l, batch)
			}
		default:
			run = 0
		}
		delete(counts, l)
	}
	if runs > 2*rounds {
		t.Errorf("%d runs of duplicates after %d kills", runs, rounds)
	}
	if len(counts) != 0 {
		t.Errorf("lines never written arrived: %d", len(counts))
	}
	t.Logf("%d lines, %d kills, %d rotations: %d duplicates in %d runs (bound: %d, a batch per kill)", written, rounds, rotations, dups, runs, rounds*batch)
	if dups > rounds*batch {
		t.Errorf("%d duplicates, more than a batch (%d) per kill", dups, batch)
	}
}

// TestTailBrokerDown: the real metaq-server stops while the shipper
// follows a file; the lines written meanwhile go to the spool until
// --spool-max, where reading pauses; the shipper is killed with SIGKILL
// and started again while the broker is down; when the broker is back
// every line arrives.
func TestTailBrokerDown(t *testing.T) {
	t.Parallel()
	if testing.Short() {
		t.Skip("builds and starts a broker")
	}
	data := filepath.Join(t.TempDir(), "data")
	cfg := serverConfig(t)
	srv := brokertest.StartServer(t, "--config", cfg, "--host", "127.0.0.1", "--port", "0", "--http-port", "0", "--data-dir", data)
	addr := srv.Addr
	bin := testsvc.GoBuild(t, "github.com/metaq-go/metaq/cmd/metaq")
	dir := t.TempDir()
	app := filepath.Join(dir, "app.log")
	appendFile(t, app, numbered("u-", 0, 200))
	args := []string{"--addr", addr, "--timeout", "1s", "tail", "--topic", "meta-test", "--state", filepath.Join(dir, "state"),
		"--poll", "50ms", "--batch", "100", "--spool-max", "300", app}
	sh := startShipper(t, bin, args...)
	count := func() int { return len(lineCounts(consumeTail(t, addr, "meta-test"))) }
	tailWaitFor(t, 30*time.Second, "200 lines", func() bool { return count() >= 200 })

	srv.Stop(t)
	appendFile(t, app, numbered("v-", 0, 1000))
	tailWaitFor(t, 60*time.Second, "reading paused at --spool-max", func() bool {
		return strings.Contains(sh.stderr.String(), "reading paused")
	})
	// Killed while the broker is down: the spool, fsynced, and the state
	// file agree; the next run resends the spool.
	sh.kill()
	sh = startShipper(t, bin, args...)
	tailWaitFor(t, 30*time.Second, "the restarted shipper's start", func() bool {
		return strings.Contains(sh.stderr.String(), "cannot be reached")
	})
	_, port, _ := strings.Cut(addr, ":")
	brokertest.StartServer(t, "--config", cfg, "--host", "127.0.0.1", "--port", port, "--http-port", "0", "--data-dir", data)
	tailWaitFor(t, 60*time.Second, "all 1200 lines after the broker came back", func() bool { return count() >= 1200 })
	sh.stop(t)
	counts := lineCounts(consumeTail(t, addr, "meta-test"))
	dups := 0
	for _, n := range counts {
		dups += n - 1
	}
	for i := 0; i < 1000; i++ {
		if counts[fmt.Sprintf("v-%06d", i)] == 0 {
			t.Fatalf("v-%06d lost", i)
		}
	}
	t.Logf("broker down and back, the shipper killed meanwhile: 1200 lines, %d duplicates (bound: a batch, 100)", dups)
	if dups > 100 {
		t.Errorf("%d duplicates, more than a batch", dups)
	}
}
