package filters_test

import (
	"context"
	"errors"
	"os"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/metaq-go/metaq/filters"
	"github.com/metaq-go/metaq/filters/attr"
	"github.com/metaq-go/metaq/filters/expr"
	"github.com/metaq-go/metaq/filters/filtertest"
	"github.com/metaq-go/metaq/filters/internal/cases"
	"github.com/metaq-go/metaq/plugins"
	"github.com/metaq-go/metaq/plugins/host"
)

// helperEnv makes the test binary run as a filter plugin (go-plugin's
// helper-process pattern): its value picks the filter to serve.
const helperEnv = "METAQ_FILTERS_TEST_PLUGIN"

func TestMain(m *testing.M) {
	switch os.Getenv(helperEnv) {
	case "":
		code := m.Run()
		removeBuilt()
		os.Exit(code)
	case "attr":
		filters.Serve(attr.New())
	case "expr":
		filters.Serve(expr.New())
	case "probe":
		filters.Serve(filtertest.Probe())
	case "record":
		serveRecordFilter()
	case "recstore":
		serveRecordStore()
	case "slow":
		filters.Serve(slowFilter{filters.NewRecordFilter(keepAll)})
	case "panic":
		filters.Serve(panicFilter{filters.NewRecordFilter(keepAll)})
	case "slowsome":
		filters.Serve(slowSomeFilter{filters.NewRecordFilter(keepAll)})
	case "old":
		filters.ServeOld(attr.New(), false)
	case "oldpacked":
		filters.ServeOld(attr.New(), true)
	case "props":
		filters.Serve(filters.PropsCheckFilter())
	case "oldprops":
		filters.ServeOld(filters.PropsCheckFilter(), false)
	case "oldpackedprops":
		filters.ServeOld(filters.PropsCheckFilter(), true)
	case "attrprops":
		filters.Serve(filters.WithProperties(attr.New()))
	case "noprops":
		filters.Serve(filters.NoPropsFilter())
	}
	os.Exit(0)
}

func keepAll(*filters.InitRequest) (func(*filters.Record) bool, bool, error) {
	return func(*filters.Record) bool { return true }, false, nil
}

// slowFilter takes 2 s per Accept (or until its context ends).
type slowFilter struct{ filters.Filter }

func (f slowFilter) Accept(ctx context.Context, req *filters.AcceptRequest) (*filters.AcceptResponse, error) {
	select {
	case <-time.After(2 * time.Second):
	case <-ctx.Done():
		return nil, ctx.Err()
	}
	return f.Filter.Accept(ctx, req)
}

// slowSomeFilter takes 2 s (or until its context ends) for a batch whose
// first record has MsgID 777, and keeps everything.
type slowSomeFilter struct{ filters.Filter }

func (f slowSomeFilter) Accept(ctx context.Context, req *filters.AcceptRequest) (*filters.AcceptResponse, error) {
	if len(req.Records) > 0 && req.Records[0].MsgID == 777 {
		select {
		case <-time.After(2 * time.Second):
		case <-ctx.Done():
			return nil, ctx.Err()
		}
	}
	return f.Filter.Accept(ctx, req)
}

// panicFilter panics on a batch whose first record has MsgID 666.
type panicFilter struct{ filters.Filter }

func (f panicFilter) Accept(ctx context.Context, req *filters.AcceptRequest) (*filters.AcceptResponse, error) {
	if len(req.Records) > 0 && req.Records[0].MsgID == 666 {
		panic("boom")
	}
	return f.Filter.Accept(ctx, req)
}

// launchHelper starts the test binary as a filter plugin serving which.
func launchHelper(tb testing.TB, which string) (*host.Supervisor, *host.Plugin) {
	tb.Helper()
	sup := host.NewSupervisor(host.Options{})
	tb.Cleanup(func() { sup.Close() })
	exe, err := os.Executable()
	if err != nil {
		tb.Fatal(err)
	}
	p, err := filters.LaunchPlugin(sup, host.Spec{
		Kind: plugins.KindFilter, Name: "helper-" + which, Path: exe,
		Args: []string{"-test.run=^$"}, Env: []string{helperEnv + "=" + which, "GORACE=" + os.Getenv("GORACE")},
	})
	if err != nil {
		tb.Fatalf("launch helper %s: %v", which, err)
	}
	return sup, p
}

func TestRemoteConformance(t *testing.T) {
	t.Parallel()
	t.Run("attr", func(t *testing.T) {
		_, p := launchHelper(t, "attr")
		filtertest.Run(t, func(*testing.T) filters.Filter { return filters.NewRemote(p) }, cases.Attr()...)
	})
	t.Run("expr", func(t *testing.T) {
		_, p := launchHelper(t, "expr")
		filtertest.Run(t, func(*testing.T) filters.Filter { return filters.NewRemote(p) }, cases.Expr()...)
	})
}

func TestRemoteTransport(t *testing.T) {
	t.Parallel()
	_, p := launchHelper(t, "probe")
	filtertest.RunTransport(t, func(*testing.T) filters.Filter { return filters.NewRemote(p) })
}

var builtins = map[string]func() filters.Filter{attr.Name: attr.New, expr.Name: expr.New}

func TestOpenBuiltin(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	in, err := filters.Open(ctx, filters.OpenOptions{Name: "expr", Topic: "t", Group: "g", Builtins: builtins,
		Config: map[string]string{"expr": `attribute == "red"`}})
	if err != nil {
		t.Fatal(err)
	}
	defer in.Close()
	if in.ID() != "t/g" || in.Name() != "expr" || in.NeedBodies() || in.Policy() != filters.FailOpen {
		t.Errorf("instance %s %s bodies=%v policy=%v", in.ID(), in.Name(), in.NeedBodies(), in.Policy())
	}
	keep, err := in.Accept(ctx, 0, filtertest.Sample())
	if err != nil {
		t.Fatal(err)
	}
	if want := []bool{true, false, false, false, false, false, true, false}; !equal(keep, want) {
		t.Errorf("keep = %v, want %v", keep, want)
	}
	if calls, errs := in.Stats(); calls != 1 || errs != 0 {
		t.Errorf("stats = %d calls, %d errors", calls, errs)
	}
	if err := in.Close(); err != nil {
		t.Fatal(err)
	}
	if _, err := in.Accept(ctx, 0, nil); !errors.Is(err, filters.ErrClosed) {
		t.Errorf("Accept after Close: %v", err)
	}

	_, err = filters.Open(ctx, filters.OpenOptions{Name: "expr", Builtins: builtins, Config: map[string]string{"expr": "size <"}})
	if !errors.Is(err, filters.ErrBadConfig) {
		t.Errorf("bad expr: err = %v, want ErrBadConfig", err)
	}
	_, err = filters.Open(ctx, filters.OpenOptions{Name: "nope", Builtins: builtins})
	if !errors.Is(err, filters.ErrUnknownFilter) {
		t.Errorf("unknown filter: err = %v, want ErrUnknownFilter", err)
	}
	if _, err := filters.ParseFailurePolicy("sometimes"); !errors.Is(err, filters.ErrBadConfig) {
		t.Errorf("ParseFailurePolicy(sometimes): %v", err)
	}
}

func TestOpenRemote(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	sup, p := launchHelper(t, "probe")
	a, err := filters.Open(ctx, filters.OpenOptions{Name: "probe", Topic: "t", Group: "a", Launched: p,
		Config: map[string]string{"bodies": "true"}, FailurePolicy: filters.FailClosed})
	if err != nil {
		t.Fatal(err)
	}
	defer a.Close()
	b, err := filters.Open(ctx, filters.OpenOptions{Name: "probe", Topic: "t", Group: "b", Launched: p})
	if err != nil {
		t.Fatal(err)
	}
	defer b.Close()
	if !a.NeedBodies() || b.NeedBodies() || a.Policy() != filters.FailClosed {
		t.Fatalf("NeedBodies a=%v b=%v, policy a=%v", a.NeedBodies(), b.NeedBodies(), a.Policy())
	}
	// An instance that asked for bodies gets one per record (empty ones
	// too); one that did not gets none.
	keep, err := a.Accept(ctx, 1, []filters.Record{{MsgID: 1, Body: []byte("x")}, {MsgID: 2, Body: []byte{}}})
	if err != nil || !equal(keep, []bool{true, true}) {
		t.Fatalf("a: keep = %v, err = %v", keep, err)
	}
	keep, err = b.Accept(ctx, 1, []filters.Record{{MsgID: 1}, {MsgID: 2}})
	if err != nil || !equal(keep, []bool{false, false}) {
		t.Fatalf("b: keep = %v, err = %v", keep, err)
	}
	if _, err := filters.Open(ctx, filters.OpenOptions{Name: "probe", Launched: p, Config: map[string]string{"fail": "true"}}); !errors.Is(err, filters.ErrBadConfig) {
		t.Errorf("bad config over gRPC: err = %v, want ErrBadConfig", err)
	}
	var info host.Info
	for _, i := range sup.List() {
		info = i
	}
	if info.Calls < 1 {
		t.Errorf("supervisor saw %d calls", info.Calls)
	}
}

func TestRemoteTimeout(t *testing.T) {
	t.Parallel()
	_, p := launchHelper(t, "slow")
	in, err := filters.Open(context.Background(), filters.OpenOptions{Name: "slow", Topic: "t", Group: "g", Launched: p,
		Timeout: 100 * time.Millisecond})
	if err != nil {
		t.Fatal(err)
	}
	start := time.Now()
	_, err = in.Accept(context.Background(), 0, filtertest.Sample())
	if !errors.Is(err, context.DeadlineExceeded) {
		t.Errorf("err = %v, want DeadlineExceeded", err)
	}
	if d := time.Since(start); d > time.Second {
		t.Errorf("Accept took %v with a 100ms timeout", d)
	}
	if _, errs := in.Stats(); errs != 1 {
		t.Errorf("errors = %d, want 1", errs)
	}
}

func TestRemotePanicIsAnError(t *testing.T) {
	t.Parallel()
	_, p := launchHelper(t, "panic")
	in, err := filters.Open(context.Background(), filters.OpenOptions{Name: "panic", Topic: "t", Group: "g", Launched: p})
	if err != nil {
		t.Fatal(err)
	}
	_, err = in.Accept(context.Background(), 0, []filters.Record{{MsgID: 666}})
	if !errors.Is(err, filters.ErrPlugin) || !strings.Contains(err.Error(), "boom") {
		t.Errorf("err = %v, want ErrPlugin mentioning the panic", err)
	}
	// The process survived the panic.
	keep, err := in.Accept(context.Background(), 0, []filters.Record{{MsgID: 1}})
	if err != nil || !equal(keep, []bool{true}) {
		t.Errorf("after a panic: keep = %v, err = %v", keep, err)
	}
}

// TestRemoteRestart kills the plugin process: calls fail fast with
// plugins.ErrUnavailable while it is down, and once the supervisor has
// restarted it the instance is re-initialised and judges as before.
func TestRemoteRestart(t *testing.T) {
	t.Parallel()
	_, p := launchHelper(t, "attr")
	ctx := context.Background()
	in, err := filters.Open(ctx, filters.OpenOptions{Name: "attr", Topic: "t", Group: "g", Launched: p,
		Config: map[string]string{"equals": "red"}})
	if err != nil {
		t.Fatal(err)
	}
	want := []bool{true, false, false, false, false, false, true, false}
	if keep, err := in.Accept(ctx, 0, filtertest.Sample()); err != nil || !equal(keep, want) {
		t.Fatalf("before kill: keep = %v, err = %v", keep, err)
	}
	_, gen0, _ := p.Client()
	pid := p.Info().PID
	if pid <= 0 {
		t.Fatalf("no pid for the plugin: %+v", p.Info())
	}
	if err := syscall.Kill(pid, syscall.SIGKILL); err != nil {
		t.Fatal(err)
	}
	sawDown := false
	deadline := time.Now().Add(5 * time.Second)
	for time.Now().Before(deadline) {
		start := time.Now()
		keep, err := in.Accept(ctx, 0, filtertest.Sample())
		if err != nil {
			if !errors.Is(err, plugins.ErrUnavailable) {
				t.Fatalf("while down: err = %v, want ErrUnavailable", err)
			}
			if d := time.Since(start); d > 500*time.Millisecond {
				t.Errorf("a call while down took %v", d)
			}
			sawDown = true
			time.Sleep(10 * time.Millisecond)
			continue
		}
		_, gen, _ := p.Client()
		if gen == gen0 {
			t.Fatalf("a call succeeded on the killed process (generation %d)", gen)
		}
		if !equal(keep, want) {
			t.Fatalf("after restart: keep = %v, want %v", keep, want)
		}
		if !sawDown {
			t.Log("the restart happened before the first call noticed the kill")
		}
		return
	}
	t.Fatalf("the plugin was not restarted within 5 s (info %+v)", p.Info())
}

func equal(a, b []bool) bool {
	if len(a) != len(b) {
		return false
	}
	for i := range a {
		if a[i] != b[i] {
			return false
		}
	}
	return true
}
