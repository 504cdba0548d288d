package main

import (
	"bytes"
	"context"
	"errors"
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/metaq-go/metaq/internal/brokertest"
	"github.com/metaq-go/metaq/sdk/client"
	"github.com/metaq-go/metaq/sdk/message"
)

// TestRetryDocs runs the walkthrough of docs/retry.md command by command
// as written (retry, dead letter, inspect, replay, purge), in a scratch
// directory with bin/metaq built from this tree and METAQ_ADDR naming a
// broker with the topic orders (one partition) and its admin API, while a
// member of the group billing runs the handler the doc shows: it fails
// messages whose body starts with "bad" while the file broken exists, and
// appends the others to handled.txt.
func TestRetryDocs(t *testing.T) {
	t.Parallel()
	if testing.Short() {
		t.Skip("builds the CLI and runs it")
	}
	cmds := docWalkthrough(t, "docs/retry.md", "retry")
	b := brokertest.Start(t, smallJournal(), brokertest.Quiet(), brokertest.HTTP(), brokertest.Topics("orders"), brokertest.Partitions(1))
	sh, dir := cliShell(t, b.Addr())
	defer sh.Close(5 * time.Second)

	c, err := client.New(client.Logger(silentLogger), client.Brokers(b.Addr()), client.ConsumeTopics("orders"),
		client.ConsumerGroup("billing"), client.HandlerRetries(0, 0),
		client.Reject(client.RetryTopics(client.RetryOptions{Backoff: []time.Duration{time.Second}, MaxDeliveries: 3})),
		client.HeartbeatInterval(100*time.Millisecond), client.FetchMaxWait(50*time.Millisecond))
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() {
		done <- c.Consume(ctx, func(_ context.Context, m *message.Message) error {
			if _, err := os.Stat(filepath.Join(dir, "broken")); err == nil && bytes.HasPrefix(m.Body, []byte("bad")) {
				return errors.New("card declined")
			}
			f, err := os.OpenFile(filepath.Join(dir, "handled.txt"), os.O_APPEND|os.O_CREATE|os.O_WRONLY, 0o644)
			if err != nil {
				return err
			}
			_, err = f.Write(append(m.Body, '\n'))
			return errors.Join(err, f.Close())
		})
	}()
	defer func() {
		cancel()
		if err := <-done; err != nil && !errors.Is(err, context.Canceled) {
			t.Errorf("Consume: %v", err)
		}
		c.Close(context.Background())
	}()
	if n := runWalkthrough(t, sh, cmds, 30*time.Second); n < 8 {
		t.Fatalf("compared the output of %d commands, want 8 or more", n)
	}
}
