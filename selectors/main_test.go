package selectors_test

import (
	"context"
	"fmt"
	"net"
	"os"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/metaq-go/metaq/sdk/message"
	"github.com/metaq-go/metaq/sdk/selector"
	"github.com/metaq-go/metaq/selectors"
)

// The helper-process pattern: the test binary re-run with helperEnv set
// serves a selector plugin instead of running the tests.
const (
	helperEnv    = "METAQ_SELECTOR_TEST_PLUGIN"
	helperPIDEnv = "METAQ_SELECTOR_TEST_PIDFILE"
	// helperCalledEnv is the 127.0.0.1 address the "block" helper dials
	// once it has a call in hand.
	helperCalledEnv = "METAQ_SELECTOR_TEST_CALLED"
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
func helperImpl(name string) selector.Selector {
	switch name {
	case "hash":
		return selector.HashByKey()
	case "byattr":
		return selector.Func(byAttr)
	case "last":
		return selector.Func(last)
	case "bad":
		return selector.Func(bad)
	case "slow":
		return selector.Func(slow)
	case "block":
		return blockSelector{addr: os.Getenv(helperCalledEnv)}
	case "panic":
		return selector.Func(func(context.Context, string, []message.Partition, *message.Message) (int, error) {
			panic("selector bug")
		})
	}
	return selector.RoundRobin()
}

// byAttr sends a message whose attribute is "p<N>" to partition index
// N modulo the partition count, others to index 0.
func byAttr(ctx context.Context, topic string, ps []message.Partition, m *message.Message) (int, error) {
	if err := selector.Check(ctx, topic, ps); err != nil {
		return 0, err
	}
	if n, err := strconv.Atoi(strings.TrimPrefix(m.Attribute, "p")); err == nil && n >= 0 {
		return n % len(ps), nil
	}
	return 0, nil
}

// last sends everything to the last partition.
func last(_ context.Context, _ string, ps []message.Partition, _ *message.Message) (int, error) {
	if len(ps) == 0 {
		return 0, selectors.ErrNoPartitions
	}
	return len(ps) - 1, nil
}

// bad answers out of range, or fails, by topic.
func bad(_ context.Context, topic string, ps []message.Partition, _ *message.Message) (int, error) {
	switch topic {
	case "negative":
		return -1, nil
	case "error":
		return 0, fmt.Errorf("plugin-side failure for %s", topic)
	case "nopartitions":
		return 0, selectors.ErrNoPartitions
	}
	return len(ps), nil
}

// slow answers after a second, or when ctx ends.
func slow(ctx context.Context, topic string, ps []message.Partition, m *message.Message) (int, error) {
	select {
	case <-time.After(time.Second):
	case <-ctx.Done():
		return 0, ctx.Err()
	}
	return 0, nil
}

// blockSelector tells the test it has the call (it connects to addr and
// writes one byte), then waits for ctx to end and returns its error.
type blockSelector struct{ addr string }

func (b blockSelector) Select(ctx context.Context, _ string, _ []message.Partition, _ *message.Message) (int, error) {
	c, err := net.Dial("tcp", b.addr)
	if err != nil {
		return 0, err
	}
	_, err = c.Write([]byte{1})
	c.Close()
	if err != nil {
		return 0, err
	}
	<-ctx.Done()
	return 0, ctx.Err()
}
