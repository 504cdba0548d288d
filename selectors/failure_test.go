package selectors_test

import (
	"context"
	"errors"
	"net"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/metaq-go/metaq/sdk/message"
	"github.com/metaq-go/metaq/selectors"
	"github.com/metaq-go/metaq/selectors/selectortest"
)

// TestFailurePolicy: whatever goes wrong in the plugin, Select answers
// a choice (round robin), and the burst is logged once.
func TestFailurePolicy(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		name, impl, topic string
		timeout           time.Duration
	}{
		{"out-of-range", "bad", "t", 0},
		{"negative", "bad", "negative", 0},
		{"plugin-error", "bad", "error", 0},
		{"plugin-no-partitions", "bad", "nopartitions", 0},
		{"panic", "panic", "t", 0},
		{"timeout", "slow", "t", 100 * time.Millisecond},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			log, logs := testLogger(t)
			s := openHelper(t, tc.impl, func(o *selectors.OpenOptions) { o.Logger, o.Timeout = log, tc.timeout })
			const calls = 5
			for range calls {
				c, err := s.Select(ctxT(t, 10*time.Second), tc.topic, selectortest.Partitions(4), selectortest.Messages(1, 0)[0])
				require.NoError(t, err)
				require.True(t, c >= 0 && c < 4)
			}
			require.EqualValues(t, calls, selectors.Fallbacks(s))
			require.Equal(t, 1, logs.count("choosing round robin"), "%s", logs)
		})
	}
}

// TestCallerCancel: the caller's own cancel or deadline fails Select; it
// is not a plugin failure and does not fall back. Both cases are
// deterministic: the cancel comes once the plugin has the call in hand (it
// connects back to the test), and the deadline case uses a context whose
// deadline has passed but whose timer has not fired yet, the state a loaded
// machine leaves it in (gRPC then fails the call by the clock while
// ctx.Err() is still nil).
func TestCallerCancel(t *testing.T) {
	t.Parallel()
	ps, m := selectortest.Partitions(4), selectortest.Messages(1, 0)[0]
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	require.NoError(t, err)
	t.Cleanup(func() { ln.Close() })
	s := openHelper(t, "block", func(o *selectors.OpenOptions) {
		o.Plugin = helperSpec(t, "block", helperCalledEnv+"="+ln.Addr().String())
		o.Timeout = time.Minute
	})

	t.Run("cancel", func(t *testing.T) {
		ctx, cancel := context.WithCancel(context.Background())
		defer cancel()
		res := make(chan error, 1)
		go func() {
			_, err := s.Select(ctx, "t", ps, m)
			res <- err
		}()
		called := make(chan error, 1)
		go func() {
			c, err := ln.Accept()
			if err == nil {
				_, err = c.Read(make([]byte, 1))
				c.Close()
			}
			called <- err
		}()
		select {
		case err := <-called:
			require.NoError(t, err)
		case err := <-res:
			t.Fatalf("Select returned %v before the plugin had the call", err)
		case <-time.After(30 * time.Second):
			t.Fatal("the plugin never got the call")
		}
		cancel()
		select {
		case err := <-res:
			require.ErrorIs(t, err, context.Canceled)
		case <-time.After(30 * time.Second):
			t.Fatal("Select did not return after its caller cancelled")
		}
	})

	t.Run("deadline passed, timer not fired", func(t *testing.T) {
		ctx := lateTimer{Context: context.Background(), deadline: time.Now().Add(-time.Millisecond)}
		_, err := s.Select(ctx, "t", ps, m)
		require.ErrorIs(t, err, context.DeadlineExceeded)
	})
	require.Zero(t, selectors.Fallbacks(s))
}

// lateTimer is a context whose deadline has passed but which does not
// report it yet, as when its timer goroutine has not run.
type lateTimer struct {
	context.Context
	deadline time.Time
}

func (c lateTimer) Deadline() (time.Time, bool) { return c.deadline, true }

// TestRemoteErrors: the plugin's sentinels cross the process boundary.
func TestRemoteErrors(t *testing.T) {
	t.Parallel()
	s := rawAdapter(t, helperSpec(t, "bad"))
	ctx := ctxT(t, 10*time.Second)
	sel := func(topic string) error {
		_, err := s.Select(ctx, topic, selectortest.Partitions(2), selectortest.Messages(1, 0)[0])
		return err
	}
	require.ErrorIs(t, sel("nopartitions"), selectors.ErrNoPartitions)
	require.ErrorIs(t, sel("error"), selectors.ErrRemote)
	require.ErrorContains(t, sel("error"), "plugin-side failure")

	p := rawAdapter(t, helperSpec(t, "panic"))
	_, err := p.Select(ctx, "t", selectortest.Partitions(2), selectortest.Messages(1, 0)[0])
	require.ErrorIs(t, err, selectors.ErrRemote)
	require.ErrorContains(t, err, "selector bug")
}

func TestOpen(t *testing.T) {
	t.Parallel()
	ctx := ctxT(t, 30*time.Second)
	for _, tc := range []struct {
		opts selectors.OpenOptions
		want error
	}{
		{selectors.OpenOptions{Name: "nope"}, selectors.ErrUnknownSelector},
		{selectors.OpenOptions{Name: "fixed"}, selectors.ErrBadConfig},
		{selectors.OpenOptions{Name: "fixed", Config: map[string]string{"partition": "-1"}}, selectors.ErrBadConfig},
		{selectors.OpenOptions{Name: "fixed", Config: map[string]string{"partition": "x"}}, selectors.ErrBadConfig},
		{selectors.OpenOptions{Name: "hash", Config: map[string]string{"seed": "1"}}, selectors.ErrBadConfig},
		{selectors.OpenOptions{Plugin: &selectors.Plugin{Path: "x"}, Config: map[string]string{"a": "b"}}, selectors.ErrBadConfig},
	} {
		_, err := selectors.Open(ctx, tc.opts)
		require.ErrorIs(t, err, tc.want, "%+v", tc.opts)
	}
	_, err := selectors.Open(ctx, selectors.OpenOptions{Plugin: &selectors.Plugin{Path: "/nonexistent/selector"}})
	require.Error(t, err)

	s, err := selectors.Open(ctx, selectors.OpenOptions{})
	require.NoError(t, err)
	var got []int
	for range 4 {
		c, err := s.Select(ctx, "t", selectortest.Partitions(3), &message.Message{})
		require.NoError(t, err)
		got = append(got, c)
	}
	require.Equal(t, []int{0, 1, 2, 0}, got, "the zero OpenOptions is round robin")

	f, err := selectors.Open(ctx, selectors.OpenOptions{Name: "fixed", Config: map[string]string{"partition": "5"}})
	require.NoError(t, err)
	_, err = f.Select(ctx, "t", selectortest.Partitions(3), &message.Message{})
	require.ErrorIs(t, err, selectors.ErrBadChoice)

	// Closing the selector stops its private supervisor's plugin.
	r := openHelper(t, "roundrobin", nil)
	require.NoError(t, r.Close())
	_, err = r.Select(ctx, "t", selectortest.Partitions(3), &message.Message{})
	require.True(t, errors.Is(err, selectors.ErrClosed), "%v", err)
}
