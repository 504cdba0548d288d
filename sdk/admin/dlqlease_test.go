package admin

import (
	"context"
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/metaq-go/metaq/conf"
	"github.com/metaq-go/metaq/internal/brokertest"
	"github.com/metaq-go/metaq/sdk/client"
	"github.com/metaq-go/metaq/sdk/message"
)

// TestReplayLeaseAndCheck: a replay's lease on the position group is held
// by one Admin at a time (another Admin's, and a second one in the same
// Admin, fail with ErrReplayRunning) and taken again once released; a
// position moved by something else fails the check a replay makes before
// each send.
func TestReplayLeaseAndCheck(t *testing.T) {
	t.Parallel()
	b := brokertest.Start(t, brokertest.Quiet(), brokertest.Partitions(1), brokertest.Edit(func(c *conf.Config) {
		c.Topics = append(c.Topics, conf.Topic{Name: "orders"}, conf.Topic{Name: "pay.dlq"})
	}))
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	newAdm := func() *Admin {
		cl, err := client.New(client.Brokers(b.Addr()))
		if err != nil {
			t.Fatal(err)
		}
		a := New(cl)
		t.Cleanup(func() { a.Close() })
		return a
	}
	a1, a2 := newAdm(), newAdm()
	m := &message.Message{Topic: "pay.dlq", Body: []byte("x"), Headers: message.Headers{{Key: client.HeaderOriginTopic, Value: []byte("orders")}}}
	if _, err := a1.cl.ProduceSync(ctx, m); err != nil {
		t.Fatal(err)
	}
	dl, err := a1.DeadLetters(ctx, "pay")
	if err != nil {
		t.Fatal(err)
	}
	l, err := a1.leaseReplay(ctx, dl)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := a2.leaseReplay(ctx, dl); !errors.Is(err, ErrReplayRunning) || !strings.Contains(err.Error(), "held on broker") {
		t.Fatalf("a second Admin's lease: %v", err)
	}
	if _, err := a1.leaseReplay(ctx, dl); !errors.Is(err, ErrReplayRunning) || !strings.Contains(err.Error(), "this process") {
		t.Fatalf("a second lease in one Admin: %v", err)
	}
	if _, err := a2.ReplayDeadLetters(ctx, "pay", ReplayOptions{To: ReplayToOrigin, Execute: true}); !errors.Is(err, ErrReplayRunning) {
		t.Fatalf("a replay while the lease is held: %v", err)
	}
	time.Sleep(2 * replayHeartbeat) // heartbeats keep it
	if l.err() != nil {
		t.Fatalf("lease lost: %v", l.err())
	}
	l.release()
	l2, err := a2.leaseReplay(ctx, dl)
	if err != nil {
		t.Fatalf("the lease after release: %v", err)
	}
	l2.release()

	p := dl.Partitions[0]
	if err := a1.checkPosition(ctx, dl, p, p.committed); err != nil {
		t.Fatal(err)
	}
	if err := a1.commitPosition(ctx, dl, p, p.End); err != nil { // another mover
		t.Fatal(err)
	}
	if err := a1.checkPosition(ctx, dl, p, p.committed); !errors.Is(err, ErrReplayRunning) || !strings.Contains(err.Error(), "moved from -1 to") {
		t.Fatalf("a moved position: %v", err)
	}
}
