package broker

import (
	"github.com/metaq-go/metaq/core/msgsout"
	"github.com/metaq-go/metaq/core/partition"
	"github.com/metaq-go/metaq/core/store"
)

// Messages out (metaq_topic_messages_out_total, docs/http.md): the get
// path notes the byte range it sent per connection and partition; the
// ranges are coalesced and their records counted off the hot path by
// core/msgsout, at each scrape, every msgsout.CountEvery and before
// retention.

type (
	outStream = msgsout.Stream
	outLedger = msgsout.Ledger
)

// noteSent records a get's sent range [off, off+n) of partition l (the
// read loop only: c.outs is its own).
func (c *conn) noteSent(l *store.Log, pc *partition.Counters, off int64, n int) {
	if n <= 0 {
		return
	}
	s := c.outs[l]
	if s == nil {
		s = c.b.outs.Open(l)
		if c.outs == nil {
			c.outs = make(map[*store.Log]*outStream)
		}
		c.outs[l] = s
	}
	s.Note(&pc.MsgsOut, off, n)
}

// closeOuts marks the connection's streams dead (conn.close); the next
// counting pass counts what they hold and drops them.
func (c *conn) closeOuts() {
	for _, s := range c.outs {
		s.Close()
	}
}

// countOut counts every noted range.
func (b *Broker) countOut() { b.outs.Count(b.warnf) }

// outCountLoop counts the noted ranges every msgsout.CountEvery until the
// broker closes.
func (b *Broker) outCountLoop() {
	defer b.wg.Done()
	b.outs.Run(b.done, b.warnf)
}
