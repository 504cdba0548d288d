package tx

import (
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/metaq-go/metaq/sdk/protocol"
)

// TestDoAnswersEveryCommand: Do answers each command through TxDone with
// its opaque, refuses what does not apply to a local transaction with
// typed errors, and commits a local transaction whichever commit type
// the client sends.
func TestDoAnswersEveryCommand(t *testing.T) {
	m, h, closeAll := openTestManager(t, t.TempDir())
	defer closeAll()
	peer := newTestPeer()
	s := m.NewSession(peer)
	answer := func(cmd Command, opaque int32) testAnswer {
		t.Helper()
		m.Do(s, cmd, opaque)
		a := <-peer.done
		require.Equal(t, opaque, a.opaque)
		return a
	}
	local := Command{Key: "L1", Timeout: 30}
	local.Type = protocol.TxBegin
	require.NoError(t, answer(local, 1).err)
	putTest(t, m, h, s, "L1", false, 0, "m")

	local.Type = protocol.TxPrepare
	a := answer(local, 2)
	require.Equal(t, &Error{Kind: XA, Code: protocol.XAErRMErr, Msg: "transaction L1 is local: it cannot be prepared"}, a.err)
	local.Type = protocol.TxForget
	a = answer(local, 3)
	require.Equal(t, &Error{Kind: Plain, Msg: "transaction L1 is local: " + protocol.TxForget.String() + " applies to XA transactions"}, a.err)
	local.Type = protocol.TxType(99)
	a = answer(local, 4)
	require.Equal(t, Malformed, a.err.(*Error).Kind)

	local.Type = protocol.TxCommitTwoPhase
	require.NoError(t, answer(local, 5).err)
	require.Len(t, h.records(t, 0), 1)

	xa := Command{Type: protocol.TxBegin, Key: "X1", XA: true, Timeout: 30}
	require.NoError(t, answer(xa, 6).err)
	xa.Type = protocol.TxRollback
	require.NoError(t, answer(xa, 7).err)
}
