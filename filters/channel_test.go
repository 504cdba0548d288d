package filters

import (
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"math/rand/v2"
	"net"
	"os"
	"path/filepath"
	"slices"
	"sync"
	"testing"
	"time"

	"github.com/metaq-go/metaq/plugins"
	"github.com/metaq-go/metaq/plugins/host"
)

// testFilter keeps records with an even MsgID; a batch whose first record
// has MsgID 777 takes 2 s (or until its context ends), one with MsgID 666
// panics, one with MsgID 555 answers an error.
func testFilter() Filter {
	return slowFilter{NewRecordFilter(func(*InitRequest) (func(*Record) bool, bool, error) {
		return func(r *Record) bool { return r.MsgID%2 == 0 }, false, nil
	})}
}

type slowFilter struct{ Filter }

func (f slowFilter) Accept(ctx context.Context, req *AcceptRequest) (*AcceptResponse, error) {
	if len(req.Records) > 0 {
		switch req.Records[0].MsgID {
		case 777:
			select {
			case <-time.After(2 * time.Second):
			case <-ctx.Done():
				return nil, ctx.Err()
			}
		case 666:
			panic("boom")
		case 555:
			return nil, fmt.Errorf("%w: no", ErrBadConfig)
		}
	}
	return f.Filter.Accept(ctx, req)
}

// pipe connects a host-side muxConn to a plugin-side chanServer serving f
// over a unix socket pair, in process.
func pipe(t *testing.T, f Filter) (*muxConn, *grpcClient) {
	t.Helper()
	dir := t.TempDir()
	l, err := net.Listen("unix", filepath.Join(dir, "s"))
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	conn, err := net.Dial("unix", filepath.Join(dir, "s"))
	if err != nil {
		t.Fatal(err)
	}
	pconn, err := l.Accept()
	if err != nil {
		t.Fatal(err)
	}
	go (&grpcServer{impl: f}).serveChannel(pconn)
	m := newMuxConn(conn)
	t.Cleanup(func() { m.fail(errors.New("test over")) })
	return m, &grpcClient{}
}

func mkRecs(first int64, n int) []Record {
	recs := make([]Record, n)
	for i := range recs {
		recs[i] = Record{Offset: int64(i) * 30, MsgID: first + int64(i), Flag: 1, Attribute: "a", HasAttribute: true, Size: 10}
	}
	return recs
}

func wantKeep(recs []Record) []bool {
	keep := make([]bool, len(recs))
	for i, r := range recs {
		keep[i] = r.MsgID%2 == 0
	}
	return keep
}

func callMux(ctx context.Context, m *muxConn, c *grpcClient, recs []Record) ([]bool, error) {
	dl, _ := ctx.Deadline()
	resp, err := m.start(ctx, dl, c, &AcceptRequest{Instance: "i", Topic: "t", Group: "g", Records: recs}, false)(false)
	if err != nil {
		return nil, err
	}
	return resp.Keep, nil
}

// TestChannelMux runs many concurrent calls over one connection, some of
// them slow (they time out), some failing, some panicking: every call gets
// its own verdicts or its own error, and the connection survives.
func TestChannelMux(t *testing.T) {
	t.Parallel()
	f := testFilter()
	if _, err := f.Init(context.Background(), &InitRequest{Instance: "i"}); err != nil {
		t.Fatal(err)
	}
	m, c := pipe(t, f)
	var wg sync.WaitGroup
	errs := make(chan error, 1000)
	for g := range 16 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			rng := rand.New(rand.NewPCG(uint64(g), 1))
			for i := range 60 {
				first := int64(rng.IntN(1000)) * 2
				recs := mkRecs(first+int64(i%2), rng.IntN(300))
				timeout := 2 * time.Second
				special := i%25 == 7 && len(recs) > 0
				if special {
					recs[0].MsgID = []int64{777, 666, 555}[rng.IntN(3)]
					if recs[0].MsgID == 777 { // the slow one: it must time out
						timeout = 50 * time.Millisecond
					}
				}
				ctx, cancel := context.WithTimeout(context.Background(), timeout)
				keep, err := callMux(ctx, m, c, recs)
				cancel()
				switch {
				case special && recs[0].MsgID == 777:
					if !errors.Is(err, context.DeadlineExceeded) {
						errs <- fmt.Errorf("slow call: err = %v, want DeadlineExceeded", err)
					}
				case special && recs[0].MsgID == 666:
					if !errors.Is(err, ErrPlugin) {
						errs <- fmt.Errorf("panicking call: err = %v, want ErrPlugin", err)
					}
				case special:
					if !errors.Is(err, ErrBadConfig) {
						errs <- fmt.Errorf("failing call: err = %v, want ErrBadConfig", err)
					}
				case err != nil:
					errs <- err
				case !slices.Equal(keep, wantKeep(recs)):
					errs <- fmt.Errorf("%d records from %d: wrong verdicts", len(recs), first)
				}
			}
		}()
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		t.Error(err)
	}
	if m.broken.Load() {
		t.Fatal("the connection broke")
	}
	m.mu.Lock()
	defer m.mu.Unlock()
	if len(m.calls) != 0 || m.reader != 0 {
		t.Errorf("left behind: %d calls, reader %d", len(m.calls), m.reader)
	}
}

// TestChannelSlowCallHandsOff checks that a slow call running on the
// plugin's reader does not hold up the calls behind it.
func TestChannelSlowCallHandsOff(t *testing.T) {
	t.Parallel()
	f := testFilter()
	f.Init(context.Background(), &InitRequest{Instance: "i"})
	m, c := pipe(t, f)
	slow := make(chan error, 1)
	go func() {
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer cancel()
		_, err := callMux(ctx, m, c, mkRecs(777, 1))
		slow <- err
	}()
	time.Sleep(20 * time.Millisecond)
	start := time.Now()
	for i := range 20 {
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		keep, err := callMux(ctx, m, c, mkRecs(int64(i), 3))
		cancel()
		if err != nil || !slices.Equal(keep, wantKeep(mkRecs(int64(i), 3))) {
			t.Fatalf("call %d behind the slow one: %v, %v", i, keep, err)
		}
	}
	if d := time.Since(start); d > time.Second {
		t.Errorf("20 calls behind a slow one took %v", d)
	}
	if err := <-slow; err != nil {
		t.Errorf("slow call: %v", err)
	}
}

// TestChannelStartWaitDiscard checks calls that are sent together and
// waited for in any order, or given up.
func TestChannelStartWaitDiscard(t *testing.T) {
	t.Parallel()
	f := testFilter()
	f.Init(context.Background(), &InitRequest{Instance: "i"})
	m, c := pipe(t, f)
	type call struct {
		recs []Record
		wait acceptFunc
	}
	var calls []call
	for i := range 8 {
		recs := mkRecs(int64(i*10), i+1)
		calls = append(calls, call{recs, m.start(context.Background(), time.Now().Add(5*time.Second), c,
			&AcceptRequest{Instance: "i", Records: recs}, true)})
	}
	m.w.flush()
	for i := len(calls) - 1; i >= 0; i-- {
		cl := calls[i]
		if i%3 == 1 {
			cl.wait(true) // given up (its reply may have arrived: either is fine)
			continue
		}
		resp, err := cl.wait(false)
		if err != nil || !slices.Equal(resp.Keep, wantKeep(cl.recs)) {
			t.Fatalf("call %d: %v, %v", i, resp, err)
		}
	}
	m.mu.Lock()
	defer m.mu.Unlock()
	if len(m.calls) != 0 {
		t.Errorf("%d calls left behind", len(m.calls))
	}
}

// TestChannelBrokenFailsCalls checks that a connection the plugin closes
// fails its waiting calls with ErrUnavailable.
func TestChannelBrokenFailsCalls(t *testing.T) {
	t.Parallel()
	a, b := net.Pipe()
	m := newMuxConn(a)
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	go func() {
		buf := make([]byte, 1)
		b.Read(buf) // the first byte of the request
		b.Close()
	}()
	_, err := callMux(ctx, m, &grpcClient{}, mkRecs(0, 3))
	if !errors.Is(err, plugins.ErrUnavailable) {
		t.Fatalf("err = %v, want ErrUnavailable", err)
	}
	if !m.broken.Load() {
		t.Fatal("not broken")
	}
	if _, err := callMux(ctx, m, &grpcClient{}, mkRecs(0, 3)); !errors.Is(err, plugins.ErrUnavailable) {
		t.Fatalf("after breaking: err = %v", err)
	}
}

// TestFrameReaderDeadline checks that a read that gives up in the middle
// of a frame leaves it for the next one.
func TestFrameReaderDeadline(t *testing.T) {
	t.Parallel()
	a, b := net.Pipe()
	defer a.Close()
	defer b.Close()
	fr := frameReader{conn: a}
	frame := binary.LittleEndian.AppendUint32(nil, 5)
	frame = append(frame, "hello"...)
	go b.Write(frame[:6])
	time.Sleep(20 * time.Millisecond)
	a.SetReadDeadline(time.Now().Add(20 * time.Millisecond))
	if _, err := fr.next(); !errors.Is(err, os.ErrDeadlineExceeded) {
		t.Fatalf("err = %v, want a deadline", err)
	}
	a.SetReadDeadline(time.Time{})
	go b.Write(frame[6:])
	got, err := fr.next()
	if err != nil || string(got) != "hello" {
		t.Fatalf("next = %q, %v", got, err)
	}
}

// TestChanCtx checks the timer-free context of plugin-side channel calls.
func TestChanCtx(t *testing.T) {
	t.Parallel()
	c := &chanCtx{deadline: time.Now().Add(30 * time.Millisecond)}
	if dl, ok := c.Deadline(); !ok || !dl.Equal(c.deadline) {
		t.Fatalf("Deadline = %v, %v", dl, ok)
	}
	if c.Err() != nil {
		t.Fatalf("Err before the deadline: %v", c.Err())
	}
	child, cancel := context.WithCancel(c)
	defer cancel()
	select {
	case <-child.Done():
	case <-time.After(5 * time.Second):
		t.Fatal("Done not closed 5 s after the deadline")
	}
	if !errors.Is(c.Err(), context.DeadlineExceeded) || !errors.Is(child.Err(), context.DeadlineExceeded) {
		t.Fatalf("Err = %v, child %v", c.Err(), child.Err())
	}
	c.release()

	past := &chanCtx{deadline: time.Now().Add(-time.Millisecond)}
	if !errors.Is(past.Err(), context.DeadlineExceeded) {
		t.Fatalf("past deadline: Err = %v", past.Err())
	}
	select {
	case <-past.Done():
	default:
		t.Fatal("past deadline: Done not closed")
	}
	past.release()

	// A call that returns before its deadline stops being watched.
	c = &chanCtx{deadline: time.Now().Add(time.Hour)}
	c.Done()
	c.release()
	chanWatch.mu.Lock()
	_, watched := chanWatch.ctxs[c]
	chanWatch.mu.Unlock()
	if watched {
		t.Fatal("a released context is still watched")
	}
}

// launch starts the test binary as filter plugin which (see TestMain).
func launch(t *testing.T, which string) *host.Plugin {
	t.Helper()
	sup := host.NewSupervisor(host.Options{})
	t.Cleanup(func() { sup.Close() })
	exe, err := os.Executable()
	if err != nil {
		t.Fatal(err)
	}
	p, err := LaunchPlugin(sup, host.Spec{Kind: plugins.KindFilter, Name: "chan-" + which, Path: exe,
		Args: []string{"-test.run=^$"}, Env: []string{"METAQ_FILTERS_TEST_PLUGIN=" + which, "GORACE=" + os.Getenv("GORACE")}})
	if err != nil {
		t.Fatal(err)
	}
	return p
}

// clientOf returns the process's grpcClient.
func clientOf(t *testing.T, p *host.Plugin) *grpcClient {
	t.Helper()
	raw, _, err := p.Client()
	if err != nil {
		t.Fatal(err)
	}
	return raw.(*grpcClient)
}

// TestChannelToPlugin checks that calls to a plugin process go over the
// batch channel once it is open, and that a timed-out call leaves it open.
func TestChannelToPlugin(t *testing.T) {
	t.Parallel()
	p := launch(t, "slowsome")
	in, err := Open(context.Background(), OpenOptions{Name: "slowsome", Topic: "t", Group: "g", Launched: p,
		Timeout: 300 * time.Millisecond})
	if err != nil {
		t.Fatal(err)
	}
	c := clientOf(t, p)
	deadline := time.Now().Add(5 * time.Second)
	for c.ch.cur.Load() == nil && time.Now().Before(deadline) {
		time.Sleep(5 * time.Millisecond)
	}
	m := c.ch.cur.Load()
	if m == nil {
		t.Fatal("no batch channel after 5 s")
	}
	m.mu.Lock()
	id0 := m.nextID
	m.mu.Unlock()
	recs := mkRecs(1, 100)
	for range 10 {
		if keep, err := in.Accept(context.Background(), 0, recs); err != nil || len(keep) != 100 {
			t.Fatalf("keep %d, %v", len(keep), err)
		}
	}
	start := time.Now()
	if _, err := in.Accept(context.Background(), 0, mkRecs(777, 2)); !errors.Is(err, context.DeadlineExceeded) {
		t.Fatalf("slow call: err = %v, want DeadlineExceeded", err)
	}
	if d := time.Since(start); d > time.Second {
		t.Errorf("a call with a 300 ms timeout took %v", d)
	}
	for range 10 {
		if keep, err := in.Accept(context.Background(), 0, recs); err != nil || len(keep) != 100 {
			t.Fatalf("after a timeout: keep %d, %v", len(keep), err)
		}
	}
	if c.ch.cur.Load() != m || m.broken.Load() {
		t.Fatal("the batch channel was replaced")
	}
	m.mu.Lock()
	defer m.mu.Unlock()
	if n := m.nextID - id0; n != 21 {
		t.Errorf("%d calls over the batch channel, want 21", n)
	}
}

// TestChannelOldPlugins checks that plugins built before the batch channel
// (and before packed batches) keep working, over gRPC.
func TestChannelOldPlugins(t *testing.T) {
	t.Parallel()
	for _, which := range []string{"old", "oldpacked"} {
		t.Run(which, func(t *testing.T) {
			p := launch(t, which)
			in, err := Open(context.Background(), OpenOptions{Name: which, Topic: "t", Group: "g", Launched: p,
				Config: map[string]string{"equals": "a"}})
			if err != nil {
				t.Fatal(err)
			}
			c := clientOf(t, p)
			if got := c.packed.Load(); got != (which == "oldpacked") {
				t.Fatalf("packed = %v", got)
			}
			recs := mkRecs(1, 50)
			recs[3].Attribute = "b"
			for i := range 20 {
				keep, err := in.Accept(context.Background(), 0, recs)
				if err != nil || len(keep) != 50 || keep[3] || !keep[4] {
					t.Fatalf("call %d: keep %v, %v", i, keep, err)
				}
				time.Sleep(time.Millisecond)
			}
			if c.ch.cur.Load() != nil {
				t.Fatal("a batch channel to a plugin that has none")
			}
			if which == "oldpacked" && !c.ch.off.Load() {
				t.Error("the channel is not off after Unimplemented")
			}
		})
	}
}
