package metaqbroker_test

import (
	"context"
	"fmt"
	"iter"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/metaq-go/metaq/internal/brokertest"
	"github.com/metaq-go/metaq/sdk/client"
	"github.com/metaq-go/metaq/sdk/message"
	"github.com/metaq-go/metaq/txn"
	"github.com/metaq-go/metaq/txn/metaqbroker"
	"github.com/metaq-go/metaq/txn/txntest"
)

// TestResourceConformance runs the txn.Resource suite against the real
// broker: each subtest on a broker of its own; a session is a Client (its
// connection), a crash closes it; the work is one message in the branch,
// counted by reading the topic up to a plain marker put after it.
func TestResourceConformance(t *testing.T) {
	t.Parallel()
	txntest.RunResource(t, func(t *testing.T) *txntest.ResourceEnv {
		br := brokertest.Start(t, brokertest.Topics(topic), brokertest.Partitions(1), brokertest.Quiet())
		var mu sync.Mutex
		clients := map[txn.Resource]*client.Client{}
		plainCl := newClient(t, client.Brokers(br.Addr()))
		rd := newClient(t, client.Brokers(br.Addr()), client.ConsumeTopics(topic), client.FetchMaxWait(20*time.Millisecond))
		c, cancel := context.WithTimeout(context.Background(), 60*time.Second)
		next, stop := iter.Pull2(rd.Messages(c))
		t.Cleanup(func() { stop(); cancel() })
		seen := map[string]int{}
		markers := 0
		return &txntest.ResourceEnv{
			Open: func(t *testing.T) txn.Resource {
				cl, err := client.New(client.Brokers(br.Addr()))
				require.NoError(t, err)
				t.Cleanup(func() { _ = cl.Close(context.Background()) })
				r := resource(t, cl)
				mu.Lock()
				clients[r] = cl
				mu.Unlock()
				return r
			},
			Work: func(t *testing.T, r txn.Resource, tag string) {
				_, err := r.(*metaqbroker.Resource).Produce(ctx(t), &message.Message{Topic: topic, Body: []byte(tag)})
				require.NoError(t, err)
			},
			Count: func(t *testing.T, tag string) int {
				markers++
				marker := fmt.Sprintf("marker-%d", markers)
				plain(t, plainCl, marker)
				for {
					m, err, ok := next()
					require.True(t, ok)
					require.NoError(t, err)
					if string(m.Body) == marker {
						return seen[tag]
					}
					seen[string(m.Body)]++
				}
			},
			Crash: func(t *testing.T, r txn.Resource) {
				mu.Lock()
				cl := clients[r]
				mu.Unlock()
				require.NoError(t, cl.Close(ctx(t)))
			},
			ReadOnlyVote: true,
		}
	})
}
