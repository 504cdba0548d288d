package broker

import (
	"strconv"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/metaq-go/metaq/sdk/message"
	"github.com/metaq-go/metaq/sdk/protocol"
)

// idemData is the put body of producer pid's message seq.
func idemData(pid, seq int64) []byte {
	m := message.Message{Body: []byte("v" + strconv.FormatInt(seq, 10)), ProducerID: pid, ProducerSeq: seq}
	return m.AppendData(nil)
}

func idemPut(t *testing.T, c *rawClient, p int32, pid, seq int64) protocol.Request {
	t.Helper()
	return c.roundTrip(t, protocol.AppendPut(nil, "t", p, message.FlagHasProperties, -1, 1, idemData(pid, seq)))
}

func idemMPut(t *testing.T, c *rawClient, p int32, pid int64, seqs ...int64) protocol.Request {
	t.Helper()
	var body []byte
	for _, s := range seqs {
		body = protocol.AppendMPutEntry(body, message.FlagHasProperties, -1, idemData(pid, s))
	}
	return c.roundTrip(t, append(protocol.AppendMPutHeader(nil, "t", p, len(body), len(seqs), 2), body...))
}

func requireCause(t *testing.T, r protocol.Request, cause string) {
	t.Helper()
	got, _ := protocol.ParseCause(string(r.Body))
	require.Equal(t, cause, got, "%d %s", r.Code, r.Body)
}

// TestIdempotentPut: a retried put or mput of an idempotent producer is
// answered with the original result and stored once; a gap is refused
// with its cause; an mput mixing producers is refused; after a restart
// the table is rebuilt from the log, so a retry of the last put is still
// answered with its offset and the next sequence is expected.
func TestIdempotentPut(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	b := fixture{dir: dir}.start(t)
	c := dialRaw(t, b.Addr())
	const pid = 0x1234_5678_9abc

	first := idemPut(t, c, 0, pid, 0)
	require.Equal(t, protocol.StatusOK, first.Code, string(first.Body))
	again := idemPut(t, c, 0, pid, 0)
	require.Equal(t, string(first.Body), string(again.Body))

	m1 := idemMPut(t, c, 0, pid, 1, 2, 3)
	require.Equal(t, protocol.StatusOK, m1.Code, string(m1.Body))
	require.Equal(t, string(m1.Body), string(idemMPut(t, c, 0, pid, 1, 2, 3).Body))

	requireCause(t, idemPut(t, c, 0, pid, 5), protocol.CauseOutOfOrderSequence)
	requireCause(t, idemPut(t, c, 0, pid, 2), protocol.CauseDuplicateSequence) // inside the mput
	mixed := idemMPut(t, c, 0, pid, 4, 6)
	require.Equal(t, protocol.StatusBadRequest, mixed.Code, string(mixed.Body))
	// Another producer and another partition have their own sequences.
	require.Equal(t, protocol.StatusOK, idemPut(t, c, 0, pid+1, 9).Code)
	require.Equal(t, protocol.StatusOK, idemPut(t, c, 1, pid, 0).Code)
	last := idemPut(t, c, 0, pid, 4)
	require.Equal(t, protocol.StatusOK, last.Code, string(last.Body))

	st := c.stats(t, "")
	require.Equal(t, "5", st["idempotent_duplicates"]) // 1 + 3 + 1 (the retry from inside the mput)
	require.Equal(t, "1", st["idempotent_out_of_order"])
	end := b.topics["t"].parts[0].MaxOffset()
	require.NoError(t, b.Close())

	// Restart: the table is rebuilt lazily from the log.
	b = fixture{dir: dir}.start(t)
	c = dialRaw(t, b.Addr())
	require.Equal(t, string(last.Body), string(idemPut(t, c, 0, pid, 4).Body))
	requireCause(t, idemPut(t, c, 0, pid, 6), protocol.CauseOutOfOrderSequence)
	require.Equal(t, end, b.topics["t"].parts[0].MaxOffset(), "a retry was stored")
	next := idemPut(t, c, 0, pid, 5)
	require.Equal(t, protocol.StatusOK, next.Code, string(next.Body))
	_, _, off, _, err := protocol.ParsePutResult(next.Body)
	require.NoError(t, err)
	require.Equal(t, end, off)

	// Records without a producer are untouched: byte for byte as before.
	plain := c.roundTrip(t, protocol.AppendPut(nil, "t", 0, 0, -1, 3, []byte("plain")))
	require.Equal(t, protocol.StatusOK, plain.Code)
	require.Equal(t, protocol.StatusOK, c.roundTrip(t, protocol.AppendPut(nil, "t", 0, 0, -1, 3, []byte("plain"))).Code)
}
