package main

import (
	"bufio"
	"context"
	"encoding/json"
	"errors"
	"sync"
	"sync/atomic"
	"time"

	"github.com/metaq-go/metaq/sdk/client"
	"github.com/metaq-go/metaq/sdk/message"
)

type clusterConsumeArgs struct {
	zk, root, topic, group, id, from string
	broadcast, asJSON                bool
	max                              int64
	session                          time.Duration
}

// consumeCluster is `metaq consume --zk`: a ClusterConsumer member of the
// group that prints what it is given until Ctrl-C or --max.
func consumeCluster(e *env, a clusterConsumeArgs) error {
	start := client.Earliest
	switch a.from {
	case "earliest":
	case "latest":
		start = client.Latest
	default:
		return usagef("--from must be earliest or latest with --zk, not %q", a.from)
	}
	if a.topic == "" {
		return usagef("--topic is required")
	}
	opts := []client.ConsumerOption{client.WithLogger(silentLogger), client.WithGroup(a.group), client.WithZKRoot(a.root), client.WithZKSessionTimeout(a.session),
		client.WithStartFrom(start), client.WithDialTimeout(e.timeout), client.WithMaxFetchDelay(500 * time.Millisecond)}
	if a.id != "" {
		opts = append(opts, client.WithConsumerID(a.id))
	}
	if a.broadcast {
		opts = append(opts, client.WithBroadcast())
	}
	ctx, cancel := context.WithTimeout(e.ctx, e.timeout)
	c, err := client.NewClusterConsumer(ctx, a.zk, a.topic, opts...)
	cancel()
	if err != nil {
		return err
	}
	defer c.Close(context.Background())

	var mu sync.Mutex // guards out and enc
	out := bufio.NewWriterSize(e.stdout, 64<<10)
	enc := json.NewEncoder(out)
	enc.SetEscapeHTML(false)
	rctx, rcancel := context.WithCancel(e.ctx)
	defer rcancel()
	var count atomic.Int64
	var werr error
	// A message refused after --max (or a failed write) is not handled:
	// the context is cancelled first, so the consumer neither retries nor
	// rejects it and does not commit past it.
	err = c.Consume(rctx, func(_ context.Context, m *message.Message) error {
		mu.Lock()
		defer mu.Unlock()
		if a.max > 0 && count.Load() >= a.max {
			rcancel()
			return context.Canceled
		}
		if err := printMessage(out, enc, m, a.asJSON); err != nil {
			werr = err
			rcancel()
			return err
		}
		// A message counts as handled (and its offset may be committed)
		// once it is written out, not while it sits in the buffer.
		if err := out.Flush(); err != nil {
			werr = err
			rcancel()
			return err
		}
		if count.Add(1) == a.max {
			rcancel()
		}
		return nil
	})
	mu.Lock()
	ferr := out.Flush()
	mu.Unlock()
	switch {
	case werr != nil:
		return werr
	case errors.Is(err, context.Canceled), errors.Is(err, client.ErrClosed):
		return ferr
	}
	return err
}
