package registry

import (
	"context"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/metaq-go/metaq/internal/testsvc"
)

// TestStuckHandshakeReconnects: a ZooKeeper that accepts the connection
// and never answers the connect request (one still starting did that) does
// not hold the registry for go-zookeeper's 10 x recvTimeout (recvTimeout =
// SessionTimeout*2/3: 13.3 s here, 200 s at a 30 s session): the handshake
// gives up after about recvTimeout, the client reconnects (after its 1 s
// pause once every server was tried) and the broker registers.
func TestStuckHandshakeReconnects(t *testing.T) {
	t.Parallel()
	addr, check := testsvc.StuckHandshake(t)
	lb := &logBuf{}
	lb.dumpOnFailure(t)
	opts := testOpts(addr, "/stuckhandshake", 1, lb)
	opts.SessionTimeout = 2 * time.Second
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	start := time.Now()
	r, err := Open(ctx, opts)
	require.NoError(t, err)
	defer r.Close()
	require.NoError(t, r.Wait(ctx)) // registered, not only connected
	check(time.Since(start), opts.SessionTimeout)
}
