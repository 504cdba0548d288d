package selectors_test

import (
	"context"
	"fmt"
	"os"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/metaq-go/metaq/selectors"
	"github.com/metaq-go/metaq/selectors/hash"
	"github.com/metaq-go/metaq/selectors/roundrobin"
)

// The helper-process pattern: the test binary re-run with helperEnv set
// serves a selector plugin instead of running the tests.
const (
	helperEnv    = "METAQ_SELECTOR_TEST_PLUGIN"
	helperPIDEnv = "METAQ_SELECTOR_TEST_PIDFILE"
)

func TestMain(m *testing.M) {
	if impl := os.Getenv(helperEnv); impl != "" {
		if f := os.Getenv(helperPIDEnv); f != "" {
			_ = os.WriteFile(f, []byte(strconv.Itoa(os.Getpid())), 0o600)
		}
		selectors.Serve(helperImpl(impl))
		os.Exit(0)
	}
	os.Exit(m.Run())
}

// helperImpl returns the selector a helper process serves.
func helperImpl(name string) selectors.Selector {
	switch name {
	case "hash":
		return hash.New()
	case "byattr":
		return byAttr{}
	case "last":
		return lastSelector{}
	case "bad":
		return badSelector{}
	case "slow":
		return slowSelector{}
	case "panic":
		return panicSelector{}
	}
	return roundrobin.New()
}

// byAttr sends a message whose attribute is "p<N>" to partition index
// N modulo the partition count, others to index 0.
type byAttr struct{}

func (byAttr) Select(ctx context.Context, req *selectors.SelectRequest) (*selectors.SelectResponse, error) {
	if err := ctx.Err(); err != nil {
		return nil, err
	}
	if len(req.Partitions) == 0 {
		return nil, selectors.ErrNoPartitions
	}
	out := make([]int, len(req.Messages))
	for i, m := range req.Messages {
		if n, err := strconv.Atoi(strings.TrimPrefix(m.Attribute, "p")); err == nil && n >= 0 {
			out[i] = n % len(req.Partitions)
		}
	}
	return &selectors.SelectResponse{Choices: out}, nil
}

func (byAttr) Close() error { return nil }

// lastSelector sends everything to the last partition.
type lastSelector struct{}

func (lastSelector) Select(ctx context.Context, req *selectors.SelectRequest) (*selectors.SelectResponse, error) {
	if len(req.Partitions) == 0 {
		return nil, selectors.ErrNoPartitions
	}
	out := make([]int, len(req.Messages))
	for i := range out {
		out[i] = len(req.Partitions) - 1
	}
	return &selectors.SelectResponse{Choices: out}, nil
}

func (lastSelector) Close() error { return nil }

// badSelector answers out of range, or with too few choices, or fails.
type badSelector struct{}

func (badSelector) Select(_ context.Context, req *selectors.SelectRequest) (*selectors.SelectResponse, error) {
	switch req.Topic {
	case "short":
		return &selectors.SelectResponse{Choices: make([]int, len(req.Messages)/2)}, nil
	case "error":
		return nil, fmt.Errorf("plugin-side failure for %s", req.Topic)
	case "nopartitions":
		return nil, selectors.ErrNoPartitions
	case "nil":
		return nil, nil
	}
	out := make([]int, len(req.Messages))
	for i := range out {
		out[i] = len(req.Partitions) + i
	}
	return &selectors.SelectResponse{Choices: out}, nil
}

func (badSelector) Close() error { return nil }

// slowSelector answers after a second, or when ctx ends.
type slowSelector struct{}

func (slowSelector) Select(ctx context.Context, req *selectors.SelectRequest) (*selectors.SelectResponse, error) {
	select {
	case <-time.After(time.Second):
	case <-ctx.Done():
		return nil, ctx.Err()
	}
	return roundrobin.New().Select(ctx, req)
}

func (slowSelector) Close() error { return nil }

// panicSelector panics: the plugin's recovery turns it into an error.
type panicSelector struct{}

func (panicSelector) Select(context.Context, *selectors.SelectRequest) (*selectors.SelectResponse, error) {
	panic("selector bug")
}

func (panicSelector) Close() error { return nil }
