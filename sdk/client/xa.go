package client

import (
	"context"
	"fmt"
	"math/rand/v2"
	"os"
	"slices"
	"strconv"
	"strings"

	"github.com/metaq-go/metaq/sdk/message"
	"github.com/metaq-go/metaq/sdk/protocol"
)

// XAError is an XA failure a broker reported: `500
// XAException:code=<n>,msg=<m>` (reference §10; protocol.XAErNotA and
// the other codes).
type XAError struct {
	Code int
	Msg  string
}

// Error is MetaQ's form.
func (e *XAError) Error() string {
	return "XAException:code=" + strconv.Itoa(e.Code) + ",msg=" + e.Msg
}

// XABroker is one broker's XA transactions, the low level a transaction
// manager drives (package txn/metaqxa makes it a txn.Resource). XA
// transactions are the broker's, not a connection's: any connection may
// prepare, commit, roll back or recover them, so XABroker uses the
// Client's connection to the broker and redials it when it is lost.
type XABroker struct {
	cp   *clusterProducer
	id   int
	addr string
}

// XABrokers returns an XABroker for each broker that serves topic (that
// lists partitions of it), sorted by broker id, waiting at most ctx and
// ProduceTimeout for the partitions to be read.
func (c *Client) XABrokers(ctx context.Context, topic string) ([]*XABroker, error) {
	cp, _, err := c.producer()
	if err != nil {
		return nil, err
	}
	ctx, cancel := context.WithTimeout(ctx, cp.cfg.sendTimeout)
	defer cancel()
	v := cp.view(topic)
	if err := v.Wait(ctx); err != nil {
		return nil, fmt.Errorf("metaq: read partitions of %s %s: %w", topic, cp.src.where(), err)
	}
	snap := v.Snapshot()
	var ids []int
	for _, p := range snap.Partitions {
		if !slices.Contains(ids, p.BrokerID) && snap.Addrs[p.BrokerID] != "" {
			ids = append(ids, p.BrokerID)
		}
	}
	if len(ids) == 0 {
		return nil, fmt.Errorf("%w: %s has no partitions %s", ErrNoPartitions, topic, cp.src.where())
	}
	slices.Sort(ids)
	out := make([]*XABroker, len(ids))
	for i, id := range ids {
		out[i] = &XABroker{cp: cp, id: id, addr: snap.Addrs[id]}
	}
	return out, nil
}

// XABroker returns one broker that serves topic, chosen at random as
// MetaQ's XA producer does (see XABrokers).
func (c *Client) XABroker(ctx context.Context, topic string) (*XABroker, error) {
	bs, err := c.XABrokers(ctx, topic)
	if err != nil {
		return nil, err
	}
	return bs[rand.IntN(len(bs))], nil
}

// ID returns the broker's id. The XABroker keeps the broker's address
// as it was read when it was made: after the broker moves (a ZooKeeper
// broker restarted on another address), make a new one.
func (b *XABroker) ID() int { return b.id }

// Addr returns the broker's address.
func (b *XABroker) Addr() string { return b.addr }

// User returns the user the Client authenticates as with SASLPlain, ""
// without it. With auth on, RECOVER lists only that user's branches (all
// for an admin).
func (b *XABroker) User() string { return b.cp.cfg.conn.saslUser }

// DefaultXAQualifier is MetaQ's default unique qualifier of XA keys,
// "XAMessageProducer-<hostname>" (characters a qualifier cannot hold
// become '_').
func DefaultXAQualifier() string {
	h, _ := os.Hostname()
	h = strings.Map(func(r rune) rune {
		if r <= ' ' || r == ':' || r >= 0x7f {
			return '_'
		}
		return r
	}, h)
	if h == "" {
		h = "localhost"
	}
	return "XAMessageProducer-" + h
}

func (b *XABroker) conn() (*conn, error) {
	bp, err := b.cp.broker(b.addr)
	if err != nil {
		return nil, err
	}
	return bp.cn, nil
}

// Command sends the transaction command typ for key (protocol.NullTxKey
// for RECOVER) with timeout seconds (BEGIN; 0: the broker's default)
// and waits for the reply, bounded by ctx and the request timeout. It
// returns the reply body: PREPARE's "0" or "3", RECOVER's keys joined by
// "\r\n". A refusal with an XA code is an *XAError; END, which the broker
// does not answer, returns as soon as it is written.
func (b *XABroker) Command(ctx context.Context, typ protocol.TxType, key string, timeout int) (string, error) {
	cn, err := b.conn()
	if err != nil {
		return "", err
	}
	ctx, cancel := context.WithTimeout(ctx, cn.opts.requestTimeout)
	defer cancel()
	encode := func(dst []byte, op int32) []byte {
		return protocol.AppendTransaction(dst, key, xaSession, typ, timeout, "", op)
	}
	if typ == protocol.TxEnd {
		w, err := cn.get(ctx)
		if err != nil {
			return "", err
		}
		c := getCall()
		if err := w.send(c, encode); err != nil {
			putCall(c)
			return "", err
		}
		if w.forget(c) {
			putCall(c)
		}
		return "", nil
	}
	c, err := cn.roundTrip(ctx, encode)
	if err != nil {
		return "", err
	}
	defer putCall(c)
	body := string(c.body)
	if c.code != protocol.StatusOK {
		if code, msg, ok := protocol.ParseXAError(c.body); ok {
			return "", &XAError{Code: code, Msg: msg}
		}
		return "", resultError(c.code, c.body)
	}
	return body, nil
}

// xaSession is the session id XA commands carry: the broker keys XA
// transactions by their XID alone.
const xaSession = "xa"

// Produce sends msgs in the XA transaction key (begun with BEGIN) to
// partitions of this broker, the Selector choosing among them, and waits
// for each to be accepted. Results are as Transaction.Produce's (Offset
// -1). A topic with no partition on this broker fails with
// ErrTransactionBroker before anything is sent.
func (b *XABroker) Produce(ctx context.Context, key string, msgs ...*message.Message) ([]SendResult, error) {
	for i, m := range msgs {
		unbind(m) // a transaction is stored once by its commit: no producer sequence
		if err := checkMessage(ctx, m, b.cp.cfg.maxMessageSize); err != nil {
			return nil, fmt.Errorf("message %d: %w", i, err)
		}
	}
	ctx, cancel := context.WithTimeout(ctx, b.cp.cfg.sendTimeout)
	defer cancel()
	tx := &Transaction{cp: b.cp, key: key, brokerID: b.id, addr: b.addr}
	parts := make([]int32, len(msgs))
	for i, m := range msgs {
		p, _, err := tx.choose(ctx, m, b.id)
		if err != nil {
			return nil, fmt.Errorf("metaq: XA %s: message %d: %w", key, i, err)
		}
		parts[i] = p.Partition
	}
	cn, err := b.conn()
	if err != nil {
		return nil, err
	}
	w, err := cn.get(ctx)
	if err != nil {
		return nil, err
	}
	calls := make([]*call, len(msgs))
	errs := make([]error, len(msgs))
	for i, m := range msgs {
		crc := int64(dataChecksum(m))
		part := parts[i]
		c := getCall()
		if err := w.send(c, func(dst []byte, op int32) []byte {
			dst = protocol.AppendTxPutHeader(dst, m.Topic, part, m.DataLen(), m.Flag(), crc, key, op)
			return m.AppendData(dst)
		}); err != nil {
			putCall(c)
			errs[i] = err
			continue
		}
		calls[i] = c
	}
	tx.w = w
	results := make([]SendResult, len(msgs))
	var first error
	for i, c := range calls {
		err := errs[i]
		if c != nil {
			if err = tx.wait(ctx, c); err == nil {
				if c.code != protocol.StatusOK {
					if code, msg, ok := protocol.ParseXAError(c.body); ok {
						err = &XAError{Code: code, Msg: msg}
					}
				}
				if err == nil {
					var res SendResult
					if res, err = putResult(msgs[i], parts[i], c); err == nil {
						msgs[i].Offset = -1
						res.BrokerID, res.Offset = b.id, -1
						results[i] = res
					}
				}
			}
			putCall(c)
		}
		if err != nil && first == nil {
			first = fmt.Errorf("metaq: XA %s: message %d: %w", key, i, err)
		}
	}
	return results, first
}
