package client

import (
	"context"
	"fmt"
	"strconv"
	"sync"
	"sync/atomic"

	"github.com/metaq-go/metaq/sdk/message"
	"github.com/metaq-go/metaq/sdk/offsets"
	"github.com/metaq-go/metaq/sdk/protocol"
)

// brokerOffsetStore is the offsets.Store that keeps consumer positions on
// one broker, which stores them through the offset store its server.toml
// names (offset_store: the builtin file, or a plugin such as zk or
// mysql). It speaks the `commit` and `fetch` commands: one request per
// Commit or Load, for many partitions of many topics.
//
// It keeps the positions of its broker's partitions only: a position
// whose Partition.BrokerID is not the broker's id (learned from `stats`
// on first use) fails the call with an error wrapping offsets.ErrInvalid;
// one of a topic or partition the broker does not have fails it with the
// broker's 400 (a *BrokerError). A group member of a Client uses one per broker, on the
// broker's connection, unless StoreOffsetsIn names another store. It is
// safe for concurrent use.
type brokerOffsetStore struct {
	cn     *conn
	id     *brokerID
	own    bool // Close closes cn
	closed atomic.Bool
}

var _ offsets.Store = (*brokerOffsetStore)(nil)

// brokerID is the id of a connection's broker, learned once.
type brokerID struct {
	mu    sync.Mutex
	id    int
	known bool
}

// get returns the broker's id, asking it (`stats`) the first time.
func (b *brokerID) get(ctx context.Context, cn *conn) (int, error) {
	b.mu.Lock()
	defer b.mu.Unlock()
	if b.known {
		return b.id, nil
	}
	id, err := askBrokerID(ctx, cn)
	if err != nil {
		return 0, fmt.Errorf("metaq: learn the broker id of %s: %w", cn.addr, err)
	}
	b.id, b.known = id, true
	return id, nil
}

// set records the broker's id, known from elsewhere (ZooKeeper).
func (b *brokerID) set(id int) {
	b.mu.Lock()
	b.id, b.known = id, true
	b.mu.Unlock()
}

// BrokerID returns the id of the store's broker, asking the broker the
// first time.
func (s *brokerOffsetStore) BrokerID(ctx context.Context) (int, error) {
	if s.closed.Load() {
		return 0, s.closedErr()
	}
	ctx, cancel := withDefaultTimeout(ctx, s.cn.opts.requestTimeout)
	defer cancel()
	return s.id.get(ctx, s.cn)
}

// Close closes the store's connection (not a consumer's); later calls
// fail with offsets.ErrClosed. Idempotent.
func (s *brokerOffsetStore) Close() error {
	if !s.closed.Swap(true) && s.own {
		s.cn.close()
	}
	return nil
}

func (s *brokerOffsetStore) closedErr() error {
	return fmt.Errorf("metaq: offset store of %s: %w", s.cn.addr, offsets.ErrClosed)
}

// check validates a call's positions and that they are of this broker.
func (s *brokerOffsetStore) check(ctx context.Context, group string, ps []message.Position, commit bool) error {
	if s.closed.Load() {
		return s.closedErr()
	}
	var err error
	if commit {
		err = offsets.ValidateCommit(group, ps)
	} else {
		err = offsets.ValidateLoad(group, ps)
	}
	if err != nil {
		return err
	}
	for _, p := range ps {
		if !validToken(p.Topic) {
			return fmt.Errorf("%w: topic %s cannot be sent to a broker", offsets.ErrInvalid, strconv.QuoteToASCII(p.Topic))
		}
	}
	if len(ps) == 0 {
		return nil
	}
	id, err := s.id.get(ctx, s.cn)
	if err != nil {
		return err
	}
	for _, p := range ps {
		if p.Partition.BrokerID != id {
			return fmt.Errorf("%w: %s/%s is not a partition of broker %d at %s", offsets.ErrInvalid,
				strconv.QuoteToASCII(p.Topic), p.Partition, id, s.cn.addr)
		}
	}
	return nil
}

// Commit implements offsets.Store: it stores ps in one request and
// returns nil once the broker's store has them, else the broker's error
// (a *BrokerError with code 500 when the store failed, 400 for an unknown
// topic or partition).
func (s *brokerOffsetStore) Commit(ctx context.Context, group string, ps []message.Position) error {
	ctx, cancel := withDefaultTimeout(ctx, s.cn.opts.requestTimeout)
	defer cancel()
	if err := s.check(ctx, group, ps, true); err != nil || len(ps) == 0 {
		return err
	}
	entries := make([]protocol.OffsetEntry, len(ps))
	for i, p := range ps {
		entries[i] = protocol.OffsetEntry{Topic: p.Topic, Partition: p.Partition.Partition, Offset: p.Offset, MsgID: p.MsgID}
	}
	c, err := s.cn.roundTrip(ctx, func(dst []byte, op int32) []byte {
		return protocol.AppendCommit(dst, group, entries, op)
	})
	if err != nil {
		return fmt.Errorf("metaq: commit offsets of group %s: %w", group, err)
	}
	defer putCall(c)
	if c.code != protocol.StatusOK {
		return fmt.Errorf("metaq: commit offsets of group %s: %w", group, resultError(c.code, c.body))
	}
	return nil
}

// Load implements offsets.Store: the stored position of each of ps, in
// order, in one request; Offset and MsgID are -1 where nothing is stored.
func (s *brokerOffsetStore) Load(ctx context.Context, group string, ps []message.Position) ([]message.Position, error) {
	ctx, cancel := withDefaultTimeout(ctx, s.cn.opts.requestTimeout)
	defer cancel()
	if err := s.check(ctx, group, ps, false); err != nil {
		return nil, err
	}
	if len(ps) == 0 {
		return []message.Position{}, nil
	}
	req := make([]protocol.OffsetEntry, len(ps))
	for i, p := range ps {
		req[i] = protocol.OffsetEntry{Topic: p.Topic, Partition: p.Partition.Partition}
	}
	c, err := s.cn.roundTrip(ctx, func(dst []byte, op int32) []byte {
		return protocol.AppendFetch(dst, group, req, op)
	})
	if err != nil {
		return nil, fmt.Errorf("metaq: fetch offsets of group %s: %w", group, err)
	}
	defer putCall(c)
	if c.code != protocol.StatusOK {
		return nil, fmt.Errorf("metaq: fetch offsets of group %s: %w", group, resultError(c.code, c.body))
	}
	lines, err := protocol.ParseOffsetLines(c.body, true)
	if err != nil {
		return nil, fmt.Errorf("metaq: fetch offsets of group %s: bad reply: %w", group, err)
	}
	if len(lines) != len(ps) {
		return nil, fmt.Errorf("metaq: fetch offsets of group %s: %d lines for %d partitions", group, len(lines), len(ps))
	}
	out := make([]message.Position, len(lines))
	for i, l := range lines {
		if l.Topic != ps[i].Topic || l.Partition != ps[i].Partition.Partition {
			return nil, fmt.Errorf("metaq: fetch offsets of group %s: reply line %d is for %s-%d", group, i, l.Topic, l.Partition)
		}
		out[i] = offsets.NotStored(ps[i])
		if l.Offset >= 0 {
			out[i].Offset, out[i].MsgID = l.Offset, l.MsgID
		}
	}
	return out, nil
}
