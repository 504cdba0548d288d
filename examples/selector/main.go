// Command selector sends messages with a custom partition selector: by
// default an in-process one written in Go (urgent messages to the first
// partition, the rest round robin over the others), or, with -plugin, a
// selector plugin binary such as examples/selector-plugin. Either way the
// Client sees the same selector.Selector, and asks it once per message.
package main

import (
	"context"
	"flag"
	"fmt"
	"io"
	"log"
	"os"
	"os/signal"
	"sync/atomic"
	"time"

	"github.com/metaq-go/metaq/sdk/client"
	"github.com/metaq-go/metaq/sdk/message"
	"github.com/metaq-go/metaq/sdk/selector"
	"github.com/metaq-go/metaq/selectors"
)

// urgentFirst sends messages whose attribute is "urgent" to the first
// partition and spreads the others round robin over the remaining ones.
// Like every Selector it must be safe for concurrent use.
type urgentFirst struct{ next atomic.Uint64 }

func (s *urgentFirst) Select(ctx context.Context, topic string, partitions []message.Partition, m *message.Message) (int, error) {
	if err := selector.Check(ctx, topic, partitions); err != nil {
		return 0, err
	}
	n := len(partitions)
	if n == 1 || m.HasAttribute && m.Attribute == "urgent" {
		return 0, nil
	}
	return 1 + int((s.next.Add(1)-1)%uint64(n-1)), nil
}

func main() {
	addr := flag.String("addr", "127.0.0.1:8123", "broker address")
	topic := flag.String("topic", "meta-test", "topic")
	n := flag.Int("n", 12, "number of messages, sent as one batch")
	plugin := flag.String("plugin", "", "use this selector plugin binary instead of the in-process selector")
	flag.Parse()

	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt)
	err := run(ctx, os.Stdout, *addr, *topic, *n, *plugin)
	stop()
	if err != nil {
		log.Print(err)
		os.Exit(1)
	}
}

func run(ctx context.Context, w io.Writer, addr, topic string, n int, plugin string) error {
	var sel selector.Selector = &urgentFirst{}
	if plugin != "" {
		ps, err := selectors.Open(ctx, selectors.OpenOptions{Plugin: &selectors.Plugin{Path: plugin}})
		if err != nil {
			return err
		}
		defer ps.Close() // stops the plugin process
		sel = ps
	}

	p, err := client.New(client.Brokers(addr), client.Selector(sel))
	if err != nil {
		return err
	}
	kinds := []string{"urgent", "orders.created", "payments.settled", "orders.paid"}
	msgs := make([]*message.Message, n)
	for i := range msgs {
		msgs[i] = &message.Message{Topic: topic, Body: fmt.Appendf(nil, "message %d", i),
			Attribute: kinds[i%len(kinds)], HasAttribute: true}
	}
	// One selector call per message (for a plugin, one call to its
	// process), then the messages go out pipelined.
	results, err := p.ProduceSync(ctx, msgs...)
	for i, r := range results {
		if r.Topic != "" {
			fmt.Fprintf(w, "%-16s -> partition %d offset %d\n", msgs[i].Attribute, r.Partition, r.Offset)
		}
	}
	closeCtx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	if cerr := p.Close(closeCtx); cerr != nil && err == nil {
		err = cerr
	}
	return err
}
