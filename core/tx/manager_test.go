package tx

import (
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/metaq-go/metaq/core/store"
	"github.com/metaq-go/metaq/sdk/message"
	"github.com/metaq-go/metaq/sdk/protocol"
)

// testPeer is a connection: its answers arrive on done.
type testPeer struct {
	user  string
	admin bool
	done  chan testAnswer
}

type testAnswer struct {
	opaque int32
	body   string
	err    error
}

func newTestPeer() *testPeer { return &testPeer{done: make(chan testAnswer, 16)} }

func (p *testPeer) TxUser() (string, bool) { return p.user, p.admin }
func (p *testPeer) TxPending(int)          {}
func (p *testPeer) TxHeuristic(...any)     {}
func (p *testPeer) FailSyncs()             {}
func (p *testPeer) TxDone(opaque int32, body string, err error) {
	p.done <- testAnswer{opaque, body, err}
}

func putTest(t *testing.T, m *Manager, h *testHost, s *Session, key string, xa bool, p int32, data string) int64 {
	t.Helper()
	id, err := m.Put(s, key, xa, testTopic("t"), h.parts[p], p, store.Entry{CRC: message.Checksum([]byte(data)), Data: []byte(data)})
	require.NoError(t, err)
	return id
}

// TestManagerCommit: a local transaction's messages are invisible until
// its commit, which answers through the Peer and stores each
// partition's messages in put order with the ids the puts got; an XA
// branch prepared is listed by Recover and committed in two phases; the
// errors are typed.
func TestManagerCommit(t *testing.T) {
	m, h, closeAll := openTestManager(t, t.TempDir())
	defer closeAll()
	peer := newTestPeer()
	s := m.NewSession(peer)

	closed, err := m.BeginLocal(s, "TX:s:1", "s", 0)
	require.False(t, closed)
	require.NoError(t, err)
	_, err = m.BeginLocal(s, "TX:s:1", "s", 0)
	var te *Error
	require.ErrorAs(t, err, &te)
	require.Equal(t, Plain, te.Kind)
	ids := []int64{putTest(t, m, h, s, "TX:s:1", false, 0, "a"), putTest(t, m, h, s, "TX:s:1", false, 1, "b"), putTest(t, m, h, s, "TX:s:1", false, 0, "c")}
	require.Empty(t, h.records(t, 0), "invisible until the commit")
	m.CommitLocal(s, "TX:s:1", 7)
	a := <-peer.done
	require.Equal(t, testAnswer{opaque: 7}, a)
	recs := h.records(t, 0)
	require.Len(t, recs, 2)
	require.Equal(t, []int64{ids[0], ids[2]}, []int64{recs[0].ID, recs[1].ID})
	require.Equal(t, "b", string(h.records(t, 1)[0].Data))
	require.Equal(t, int64(1), m.Counts().Commits)

	const x = "XID:1:aa:bb:q"
	require.NoError(t, m.BeginXA(s, x, "s", 0))
	putTest(t, m, h, s, x, true, 1, "x")
	body, err := m.Prepare(s, x)
	require.NoError(t, err)
	require.Equal(t, "0", body)
	require.Equal(t, []string{x}, m.Recover(s, nil))
	require.Equal(t, "prepared", m.Status().Open[0].State)
	m.CommitXA(s, x, OnePhase, 8)
	a = <-peer.done
	require.ErrorAs(t, a.err, &te)
	require.Equal(t, XA, te.Kind)
	require.Equal(t, protocol.XAErProto, te.Code)
	m.CommitXA(s, x, TwoPhase, 9)
	require.Equal(t, testAnswer{opaque: 9}, <-peer.done)
	require.Len(t, h.records(t, 1), 2)
	require.Empty(t, m.Recover(s, nil))
	err = m.RollbackXA(s, x, false)
	require.ErrorAs(t, err, &te)
	require.Equal(t, protocol.XAErNotA, te.Code)
}
