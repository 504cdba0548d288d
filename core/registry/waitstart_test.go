package registry

import (
	"context"
	"fmt"
	"net"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
)

// TestWaitStart: with ZooKeeper unreachable, a starting broker waits out
// its timeout and says it serves anyway; a start-up stopped meanwhile
// says that instead.
func TestWaitStart(t *testing.T) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	require.NoError(t, err)
	addr := ln.Addr().String()
	ln.Close() // nothing listens there now
	ctx, cancel := context.WithCancel(context.Background())
	cancel() // Open does not wait
	r, err := Open(ctx, Options{Connect: addr, BrokerID: 3, URI: "meta://127.0.0.1:8123", Logf: func(string, ...any) {}})
	require.NoError(t, err)
	defer r.Close()
	var lines []string
	logf := func(f string, a ...any) { lines = append(lines, "info "+fmt.Sprintf(f, a...)) }
	warnf := func(f string, a ...any) { lines = append(lines, "warn "+fmt.Sprintf(f, a...)) }
	t0 := time.Now()
	r.WaitStart(context.Background(), 100*time.Millisecond, logf, warnf)
	require.GreaterOrEqual(t, time.Since(t0), 100*time.Millisecond)
	require.Equal(t, []string{"warn registry: broker 3 is not registered in ZooKeeper " + addr +
		" after 100ms; serving anyway and registering in the background"}, lines)
	lines = nil
	stopped, stop := context.WithCancel(context.Background())
	stop()
	r.WaitStart(stopped, time.Minute, logf, warnf)
	require.Equal(t, []string{"info registry: start-up stopped before broker 3 registered in ZooKeeper"}, lines)

	lines = nil
	<-(*Registry)(nil).CloseAsync(logf, warnf) // local mode
	require.Empty(t, lines)
	<-r.CloseAsync(logf, warnf)
	require.Len(t, lines, 1)
	t.Log(lines[0])
}
