package broker

import (
	"errors"
	"fmt"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/metaq-go/metaq/internal/testsvc"
	"github.com/metaq-go/metaq/sdk/message"
	"github.com/metaq-go/metaq/sdk/protocol"
)

// TestSyncDupWaitsForPuller: a sync whose message the slave's puller has
// appended already (its msgId at or below the last one appended) is
// answered only once the puller's appends in flight are durable: 200 with
// offset -1 then, or their failure; with none in flight, at once. After
// a failure the connection refuses the syncs that follow.
func TestSyncDupWaitsForPuller(t *testing.T) {
	t.Parallel()
	zkAddr := testsvc.ZooKeeper(t)
	root := fmt.Sprintf("/repl-dup-%d", time.Now().UnixNano())
	slave := replBroker(t, zkAddr, root, t.TempDir(), "", 1, nil) // no master: its puller is idle
	tp, err := slave.lookup([]byte("t"), true)
	require.NoError(t, err)
	sl := slave.slave.LogState(tp.Partition(0))
	sl.Lock()
	sl.Reset(100, sl.End()) // as if the puller had queued messages up to id 100
	sl.Unlock()

	c := dialRaw(t, slave.Addr())
	replies := make(chan protocol.Request, 4)
	go func() {
		for {
			var r protocol.Request
			if err := c.dec.Decode(&r); err != nil {
				close(replies)
				return
			}
			r.Body = append([]byte(nil), r.Body...)
			replies <- r
		}
	}()
	data := []byte("copied by the puller")
	sync := func(id int64, opaque int32) {
		t.Helper()
		c.bw.Write(protocol.AppendSync(nil, "t", 0, 0, id, int64(message.Checksum(data)), opaque, data))
		require.NoError(t, c.bw.Flush())
	}
	next := func(what string) protocol.Request {
		t.Helper()
		select {
		case r, ok := <-replies:
			require.True(t, ok, "%s: connection closed", what)
			return r
		case <-time.After(10 * time.Second):
			t.Fatalf("%s: no reply", what)
			return protocol.Request{}
		}
	}
	quiet := func(what string) {
		t.Helper()
		select {
		case r := <-replies:
			t.Fatalf("%s: answered %d %q while the puller's append is in flight", what, r.Code, r.Body)
		case <-time.After(200 * time.Millisecond):
		}
	}

	// The puller's append in flight succeeds: 200, offset -1.
	sl.BeginPull()
	sync(50, 7)
	quiet("durable")
	sl.Pulled(nil)
	r := next("durable")
	require.Equal(t, int32(7), r.Opaque)
	require.Equal(t, protocol.StatusOK, r.Code, "%s", r.Body)
	require.Equal(t, "50 0 -1", string(r.Body))

	// It fails: the sync fails with it (the master fails the put).
	sl.BeginPull()
	sync(60, 8)
	quiet("failed")
	sl.Pulled(errors.New("no space left on device"))
	r = next("failed")
	require.Equal(t, int32(8), r.Opaque)
	require.Equal(t, protocol.StatusInternalError, r.Code, "%s", r.Body)
	require.Contains(t, string(r.Body), "no space left on device")

	// The connection refuses the syncs after a failed one (repl.SyncGate):
	// the master drops the link and joins again on a new one.
	sync(70, 9)
	r = next("after the failure")
	require.Equal(t, int32(9), r.Opaque)
	require.NotEqual(t, protocol.StatusOK, r.Code, "%s", r.Body)
	require.Contains(t, string(r.Body), "an earlier sync on this connection failed")

	// Nothing in flight, on a new connection: answered at once, and
	// nothing was appended.
	c2 := dialRaw(t, slave.Addr())
	r = c2.call(t, protocol.AppendSync(nil, "t", 0, 0, 70, int64(message.Checksum(data)), 10, data))
	require.Equal(t, int32(10), r.Opaque)
	require.Equal(t, protocol.StatusOK, r.Code, "%s", r.Body)
	require.Equal(t, "70 0 -1", string(r.Body))
	require.Equal(t, int64(0), tp.Partition(0).MaxOffset())
}
