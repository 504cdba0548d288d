package client_test

// The test binary's main: the broker of the testable examples, and the
// consumer process the kill tests (offsets_e2e_test.go) run. The tests
// themselves are internal (package client); only the examples are
// external.

import (
	"bufio"
	"context"
	"fmt"
	"log/slog"
	"os"
	"path/filepath"
	"sync"
	"testing"
	"time"

	"github.com/metaq-go/metaq/internal/brokertest"
	"github.com/metaq-go/metaq/internal/testsvc"
	"github.com/metaq-go/metaq/sdk/client"
	"github.com/metaq-go/metaq/sdk/message"
)

// consumerHelperEnv makes the test binary a consumer process that prints
// "<partition> <offset>" per handled message until it is killed.
const consumerHelperEnv = "METAQ_CLIENT_TEST_CONSUMER"

// consumerHelperTopicEnv names the topic the consumer helper reads.
const consumerHelperTopicEnv = "METAQ_CLIENT_TEST_CONSUMER_TOPIC"

// TestMain runs the consumer helper, or the tests with one ZooKeeper
// shared by the whole test binary (each ZooKeeper test keeps to its own
// root).
func TestMain(m *testing.M) {
	if addr := os.Getenv(consumerHelperEnv); addr != "" {
		runConsumerHelper(addr)
		return
	}
	stop := startExampleBroker()
	// One ZooKeeper for the package's tests (each keeps to its own root),
	// stopped after them.
	code := testsvc.Run(m)
	stop()
	os.Exit(code)
}

// startExampleBroker runs the broker of the testable examples (one
// partition per topic, so their output is in order) and points
// brokerAddr at it.
func startExampleBroker() (stop func()) {
	brokerAddr, exampleBase, stop = brokertest.StartMain("ex-quick", "ex-produce", "ex-group", "ex-ordered", "ex-broadcast", "ex-ack")
	return stop
}

// exampleBase is the examples' scratch directory.
var exampleBase string

// exampleDir is a scratch directory of the examples.
func exampleDir(name string) string { return filepath.Join(exampleBase, name) }

func runConsumerHelper(addr string) {
	c, err := client.New(client.Brokers(addr), client.ConsumeTopics(os.Getenv(consumerHelperTopicEnv)),
		client.Logger(slog.New(slog.DiscardHandler)), client.ConsumerGroup("killed"),
		client.CommitInterval(100*time.Millisecond), client.FetchMaxWait(50*time.Millisecond))
	if err != nil {
		os.Exit(3)
	}
	var mu sync.Mutex
	out := bufio.NewWriter(os.Stdout)
	_ = c.Consume(context.Background(), func(_ context.Context, m *message.Message) error {
		time.Sleep(3 * time.Millisecond) // progress spread over several commit periods
		mu.Lock()
		fmt.Fprintf(out, "%d %d\n", m.Partition, m.Offset)
		out.Flush()
		mu.Unlock()
		return nil
	})
	os.Exit(0)
}
