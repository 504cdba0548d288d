package selectors

import (
	"bytes"
	"context"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/hashicorp/go-hclog"

	"github.com/metaq-go/metaq/internal/pluginrpc"
	"github.com/metaq-go/metaq/plugins"
	"github.com/metaq-go/metaq/sdk/message"
	"github.com/metaq-go/metaq/sdk/selector"
)

// fakePlugin stands in for a *host.Plugin.
type fakePlugin struct {
	mu          sync.Mutex
	raw         any
	err         error
	calls, errs int
}

func (f *fakePlugin) Client() (any, uint64, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	return f.raw, 1, f.err
}

func (f *fakePlugin) Observe(err error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.calls++
	if err != nil {
		f.errs++
	}
}

func (f *fakePlugin) set(raw any, err error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.raw, f.err = raw, err
}

// lastIndex always picks the last partition.
var lastIndex = selector.Func(func(_ context.Context, _ string, ps []message.Partition, _ *message.Message) (int, error) {
	return len(ps) - 1, nil
})

// TestMiddlewareBursts: fallbacks are counted on the plugin and logged once
// per burst, with one line when the plugin recovers.
func TestMiddlewareBursts(t *testing.T) {
	t.Parallel()
	var logs bytes.Buffer
	fp := &fakePlugin{err: plugins.ErrUnavailable}
	r := &remote{p: fp, g: pluginrpc.Guard{Obs: fp, Timeout: time.Second}, name: "fake",
		log: hclog.New(&hclog.LoggerOptions{Output: &logs, Level: hclog.Info}), rr: selector.RoundRobin()}
	ps := make([]message.Partition, 4)
	sel := func() []int {
		t.Helper()
		out := make([]int, 4)
		for i := range out {
			c, err := r.Select(context.Background(), "t", ps, &message.Message{})
			if err != nil {
				t.Fatal(err)
			}
			out[i] = c
		}
		return out
	}
	for burst := range 2 {
		for range 3 {
			if c := sel(); c[1] != (c[0]+1)%4 {
				t.Fatalf("burst %d: not round robin: %v", burst, c)
			}
		}
		fp.set(lastIndex, nil)
		for range 2 {
			if c := sel(); c[0] != 3 {
				t.Fatalf("burst %d: the plugin's choice was not used: %v", burst, c)
			}
		}
		fp.set(nil, plugins.ErrUnavailable)
	}
	if n := strings.Count(logs.String(), "choosing round robin"); n != 2 {
		t.Fatalf("%d burst warnings, want 2:\n%s", n, logs.String())
	}
	if n := strings.Count(logs.String(), "fallback_messages=12"); n != 2 {
		t.Fatalf("%d recovery lines with fallback_batches=3, want 2:\n%s", n, logs.String())
	}
	if fp.calls != 40 || fp.errs != 24 || r.fallbacks.Load() != 24 {
		t.Fatalf("calls %d errors %d fallbacks %d, want 40, 24, 24", fp.calls, fp.errs, r.fallbacks.Load())
	}

	// The wrong adapter type is a failure too, not a panic.
	fp.set("not a selector", nil)
	if c := sel(); len(c) != 4 {
		t.Fatal(c)
	}
	if r.fallbacks.Load() != 28 {
		t.Fatal("wrong adapter type did not fall back")
	}
	// No partitions never reach the plugin.
	calls := fp.calls
	if _, err := r.Select(context.Background(), "t", nil, &message.Message{}); err == nil {
		t.Fatal("no partitions: no error")
	}
	if fp.calls != calls {
		t.Fatal("the plugin was called")
	}
}
