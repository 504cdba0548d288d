package selectors_test

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/metaq-go/metaq/plugins"
	"github.com/metaq-go/metaq/plugins/host"
	"github.com/metaq-go/metaq/selectors"
	"github.com/metaq-go/metaq/selectors/selectortest"
)

// TestFailurePolicy: whatever goes wrong in the plugin, Select answers
// round robin, and the burst is logged once.
func TestFailurePolicy(t *testing.T) {
	for _, tc := range []struct {
		name, impl, topic string
		timeout           time.Duration
	}{
		{"out-of-range", "bad", "t", 0},
		{"too-few-choices", "bad", "short", 0},
		{"nil-response", "bad", "nil", 0},
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
				req := &selectors.SelectRequest{Topic: tc.topic, Partitions: selectortest.Partitions(4), Messages: selectortest.Messages(8, 0)}
				resp, err := s.Select(ctxT(t, 10*time.Second), req)
				require.NoError(t, err)
				require.Len(t, resp.Choices, 8)
				for j, c := range resp.Choices {
					require.Equal(t, (resp.Choices[0]+j)%4, c, "round robin")
				}
			}
			require.EqualValues(t, calls, selectors.Fallbacks(s))
			require.Equal(t, 1, logs.count("choosing round robin"), "%s", logs)
		})
	}
}

// TestCallerCancel: the caller's own deadline fails Select; it is not a
// plugin failure and does not fall back.
func TestCallerCancel(t *testing.T) {
	s := openHelper(t, "slow", func(o *selectors.OpenOptions) { o.Timeout = 5 * time.Second })
	ctx, cancel := context.WithTimeout(context.Background(), 100*time.Millisecond)
	defer cancel()
	req := &selectors.SelectRequest{Topic: "t", Partitions: selectortest.Partitions(4), Messages: selectortest.Messages(8, 0)}
	start := time.Now()
	_, err := s.Select(ctx, req)
	require.ErrorIs(t, err, context.DeadlineExceeded)
	require.Less(t, time.Since(start), 2*time.Second)
	require.Zero(t, selectors.Fallbacks(s))
}

// TestRemoteErrors: the plugin's sentinels cross the process boundary.
func TestRemoteErrors(t *testing.T) {
	s := rawAdapter(t, helperSpec(t, "bad"))
	ctx := ctxT(t, 10*time.Second)
	sel := func(topic string) error {
		_, err := s.Select(ctx, &selectors.SelectRequest{Topic: topic, Partitions: selectortest.Partitions(2), Messages: selectortest.Messages(2, 0)})
		return err
	}
	require.ErrorIs(t, sel("nopartitions"), selectors.ErrNoPartitions)
	require.ErrorIs(t, sel("error"), selectors.ErrRemote)
	require.ErrorContains(t, sel("error"), "plugin-side failure")
	require.ErrorIs(t, sel("nil"), selectors.ErrRemote)

	p := rawAdapter(t, helperSpec(t, "panic"))
	_, err := p.Select(ctx, &selectors.SelectRequest{Topic: "t", Partitions: selectortest.Partitions(2), Messages: selectortest.Messages(2, 0)})
	require.ErrorIs(t, err, selectors.ErrRemote)
	require.ErrorContains(t, err, "selector bug")
}

func TestOpen(t *testing.T) {
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
		{selectors.OpenOptions{Plugin: &host.Spec{Kind: plugins.KindFilter, Path: "x"}}, plugins.ErrWrongKind},
		{selectors.OpenOptions{Plugin: &host.Spec{Path: "x"}, Config: map[string]string{"a": "b"}}, selectors.ErrBadConfig},
	} {
		_, err := selectors.Open(ctx, tc.opts)
		require.ErrorIs(t, err, tc.want, "%+v", tc.opts)
	}
	_, err := selectors.Open(ctx, selectors.OpenOptions{Plugin: &host.Spec{Path: "/nonexistent/selector"}})
	require.Error(t, err)

	s, err := selectors.Open(ctx, selectors.OpenOptions{})
	require.NoError(t, err)
	resp, err := s.Select(ctx, &selectors.SelectRequest{Partitions: selectortest.Partitions(3), Messages: make([]selectors.Meta, 4)})
	require.NoError(t, err)
	require.Equal(t, []int{0, 1, 2, 0}, resp.Choices, "the zero OpenOptions is round robin")

	f, err := selectors.Open(ctx, selectors.OpenOptions{Name: "fixed", Config: map[string]string{"partition": "5"}})
	require.NoError(t, err)
	_, err = f.Select(ctx, &selectors.SelectRequest{Partitions: selectortest.Partitions(3), Messages: make([]selectors.Meta, 1)})
	require.ErrorIs(t, err, selectors.ErrBadChoice)

	// Closing the selector stops its private supervisor's plugin.
	r := openHelper(t, "roundrobin", nil)
	require.NoError(t, r.Close())
	_, err = r.Select(ctx, &selectors.SelectRequest{Partitions: selectortest.Partitions(3), Messages: make([]selectors.Meta, 1)})
	require.True(t, errors.Is(err, selectors.ErrClosed), "%v", err)
}
