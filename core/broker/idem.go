package broker

import (
	"errors"
	"strconv"

	"github.com/metaq-go/metaq/core/idem"
	"github.com/metaq-go/metaq/core/partition"
	"github.com/metaq-go/metaq/core/store"
	"github.com/metaq-go/metaq/sdk/protocol"
)

// The idempotent producer, the broker's side (core/idem holds the table;
// docs/protocol.md, "Idempotent producer"): a put or mput whose messages
// carry a producer id and sequences (properties field bit 4) is judged by
// its partition's table before it is appended, and the table learns its
// result when the append completes. Transactional puts are not judged:
// a transaction is stored once by its commit.

// producerSeq is the idempotent producer's id and the first sequence of a
// put (ok false: the put carries none).
type producerSeq struct {
	id, seq int64
	ok      bool
	// only: the properties block holds the producer's field alone (no
	// headers, so no delivery or cancel header to look for).
	only bool
}

// idemTable returns partition p's (l's) table (b.idem's, made on first
// use) and keeps it in t.PC[p] too, so that the put path finds it without
// the map; with failover it is reset first when it was built under
// another epoch (partition.IdemTables).
func (b *Broker) idemTable(t *partition.Topic, p int32, l *store.Log) *idem.Table {
	pc := &t.PC[p]
	ip := pc.Idem.Load()
	if ip == nil || ip.Log() != l {
		ip = b.idem.Part(l, l)
		pc.Idem.Store(ip)
	}
	return b.idem.Table(ip)
}

// newIdemTables makes b.idem: its tables' bounds from the configuration
// when each is made, failover's epoch.
func (b *Broker) newIdemTables() *partition.IdemTables {
	return partition.NewIdemTables(func() idem.Config { return partition.IdemConfig(b.config()) },
		func() int64 { return b.config().IdempotentMemory }, func() (int64, bool) {
			if b.fo == nil {
				return 0, false
			}
			return b.fo.Status().Epoch, true
		})
}

// forgetIdem drops the tables of logs that closed (a deleted topic).
func (b *Broker) forgetIdem(logs []*store.Log) {
	for _, l := range logs {
		b.idem.Forget(l, delayIdemKey{l}) // delay.go
	}
}

// idemBegin judges an idempotent put of count messages with sequences
// ps.seq.. in partition p (l) (partition.BeginIdem). It returns the
// waiter to append with, or nil when it has answered the put: with the
// original result (a retry of a stored put), or with a cause
// (docs/protocol.md's cause table).
func (c *conn) idemBegin(tp *partition.Topic, l *store.Log, p int32, opaque int32, ps producerSeq, count int, mput bool) *idem.Waiter {
	t := c.b.idemTable(tp, p, l)
	tk, res, err := partition.BeginIdem(t, l, ps.id, ps.seq, ps.seq+int64(count)-1, c.b.logf)
	switch {
	case err != nil:
		c.idemRefused(opaque, err, count)
	case res.Count > 0:
		c.b.stats.idemDuplicates.Add(int64(count))
		c.replyStored(opaque, p, res, mput)
	default:
		return c.idemWaiters.New(c, t, tk, count)
	}
	return nil
}

// idemRefused answers an idempotent put of count messages (a partition's,
// or a delayed put's: delay.go) that its table refused (an
// *idem.RefusedError) or could not judge (an *idem.RebuildError), and
// counts it; idemStatus (errors.go) gives the reply's status and cause.
func (c *conn) idemRefused(opaque int32, err error, count int) {
	b := c.b
	var re *idem.RebuildError
	var ie *idem.RefusedError
	switch {
	case errors.As(err, &re):
		b.errorf("idempotent producer: rebuild of %s: %v", re.Of, re.Err)
		b.stats.putFailed.Add(1)
	case !errors.As(err, &ie):
		b.stats.putFailed.Add(1)
	case ie.Verdict == idem.Stored:
		b.stats.idemDuplicates.Add(int64(count))
	case ie.Verdict == idem.InFlight:
	case ie.Verdict == idem.UnknownProducer:
		b.stats.idemUnknown.Add(1)
		b.stats.putFailed.Add(1)
	default:
		b.stats.idemOutOfOrder.Add(1)
		b.stats.putFailed.Add(1)
	}
	c.replyErr(err, opaque)
}

// replyStored answers a retried put with the result its first copy had.
func (c *conn) replyStored(opaque int32, p int32, r idem.Result, mput bool) {
	if f := c.b.fo; f != nil && !f.MayAck() { // as AppendDone
		c.b.stats.putFailed.Add(1)
		c.replyErr(f.Refusal(), opaque)
		return
	}
	var body [64]byte
	bb := protocol.AppendPutResultBody(body[:0], r.FirstID, p, r.FirstOffset)
	if mput {
		bb = append(bb, ' ')
		bb = strconv.AppendInt(bb, int64(r.Count), 10)
	}
	c.replyBytes(protocol.StatusOK, bb, opaque)
}
