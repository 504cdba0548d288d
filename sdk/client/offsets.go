package client

import (
	"context"
	"fmt"
	"log/slog"

	"github.com/metaq-go/metaq/sdk/protocol"
)

// StoredOffset is one partition's committed position: the next offset to
// fetch and the id of the last message handled (-1 when unknown). In a
// FetchOffsets result Offset is -1 when nothing is stored.
type StoredOffset struct {
	Partition int32
	Offset    int64
	MsgID     int64
}

// batchOffsetStore is implemented by stores that commit and load many
// partitions in one call, with message ids (BrokerOffsetStore does). The
// consumer prefers it over OffsetStore's per-partition Load.
type batchOffsetStore interface {
	CommitOffsets(ctx context.Context, group, topic string, offs []StoredOffset) error
	FetchOffsets(ctx context.Context, group, topic string, partitions []int32) ([]StoredOffset, error)
}

// BrokerOffsetStore keeps consumer offsets on the broker, which stores them
// through the offset store server.toml names (offset_store: the builtin
// file, or a plugin such as zk or mysql). It speaks the `commit` and
// `fetch` commands, many partitions per request. A consumer with a group
// set by WithGroup uses one on its own connection unless WithOffsetStore
// says otherwise. It is safe for concurrent use.
type BrokerOffsetStore struct {
	cn  *conn
	own bool // Close closes cn
}

var (
	_ OffsetStore      = (*BrokerOffsetStore)(nil)
	_ batchOffsetStore = (*BrokerOffsetStore)(nil)
)

// NewBrokerOffsetStore returns a store that keeps offsets on the broker at
// addr. It connects lazily.
func NewBrokerOffsetStore(addr string, opts ...AdminOption) (*BrokerOffsetStore, error) {
	if err := checkAddr(addr); err != nil {
		return nil, err
	}
	cfg := adminConfig{conn: defaultConnOptions(), logger: slog.Default()}
	for _, o := range opts {
		o.applyAdmin(&cfg)
	}
	return &BrokerOffsetStore{cn: newConn(addr, cfg.conn), own: true}, nil
}

// Close closes the store's connection (not a consumer's). Idempotent.
func (s *BrokerOffsetStore) Close() error {
	if s.own {
		s.cn.close()
	}
	return nil
}

// Load implements OffsetStore.
func (s *BrokerOffsetStore) Load(ctx context.Context, group, topic string, partition int32) (int64, bool, error) {
	res, err := s.FetchOffsets(ctx, group, topic, []int32{partition})
	if err != nil {
		return 0, false, err
	}
	return res[0].Offset, res[0].Offset >= 0, nil
}

// Commit implements OffsetStore (message ids unknown: -1).
func (s *BrokerOffsetStore) Commit(ctx context.Context, group, topic string, offsets map[int32]int64) error {
	offs := make([]StoredOffset, 0, len(offsets))
	for p, o := range offsets {
		offs = append(offs, StoredOffset{Partition: p, Offset: o, MsgID: -1})
	}
	return s.CommitOffsets(ctx, group, topic, offs)
}

// CommitOffsets stores offs in one request. It returns nil once the
// broker's store has them, else the broker's error (a *BrokerError with
// code 500 when the store failed, 400 for an unknown topic or partition).
func (s *BrokerOffsetStore) CommitOffsets(ctx context.Context, group, topic string, offs []StoredOffset) error {
	if len(offs) == 0 {
		return nil
	}
	if !validToken(group) || !validToken(topic) {
		return fmt.Errorf("metaq: bad group %q or topic %q", group, topic)
	}
	entries := make([]protocol.OffsetEntry, len(offs))
	for i, o := range offs {
		entries[i] = protocol.OffsetEntry{Topic: topic, Partition: o.Partition, Offset: o.Offset, MsgID: o.MsgID}
	}
	ctx, cancel := withDefaultTimeout(ctx, s.cn.opts.requestTimeout)
	defer cancel()
	c, err := s.cn.roundTrip(ctx, func(dst []byte, op int32) []byte {
		return protocol.AppendCommit(dst, group, entries, op)
	})
	if err != nil {
		return fmt.Errorf("metaq: commit offsets of %s/%s: %w", group, topic, err)
	}
	defer putCall(c)
	if c.code != protocol.StatusOK {
		return fmt.Errorf("metaq: commit offsets of %s/%s: %w", group, topic, resultError(c.code, c.body))
	}
	return nil
}

// FetchOffsets returns the stored position of each partition, in order;
// Offset and MsgID are -1 where nothing is stored.
func (s *BrokerOffsetStore) FetchOffsets(ctx context.Context, group, topic string, partitions []int32) ([]StoredOffset, error) {
	if len(partitions) == 0 {
		return nil, nil
	}
	if !validToken(group) || !validToken(topic) {
		return nil, fmt.Errorf("metaq: bad group %q or topic %q", group, topic)
	}
	req := make([]protocol.OffsetEntry, len(partitions))
	for i, p := range partitions {
		req[i] = protocol.OffsetEntry{Topic: topic, Partition: p}
	}
	ctx, cancel := withDefaultTimeout(ctx, s.cn.opts.requestTimeout)
	defer cancel()
	c, err := s.cn.roundTrip(ctx, func(dst []byte, op int32) []byte {
		return protocol.AppendFetch(dst, group, req, op)
	})
	if err != nil {
		return nil, fmt.Errorf("metaq: fetch offsets of %s/%s: %w", group, topic, err)
	}
	defer putCall(c)
	if c.code != protocol.StatusOK {
		return nil, fmt.Errorf("metaq: fetch offsets of %s/%s: %w", group, topic, resultError(c.code, c.body))
	}
	lines, err := protocol.ParseOffsetLines(c.body, true)
	if err != nil {
		return nil, fmt.Errorf("metaq: fetch offsets of %s/%s: bad reply: %w", group, topic, err)
	}
	if len(lines) != len(partitions) {
		return nil, fmt.Errorf("metaq: fetch offsets of %s/%s: %d lines for %d partitions", group, topic, len(lines), len(partitions))
	}
	out := make([]StoredOffset, len(lines))
	for i, l := range lines {
		if l.Topic != topic || l.Partition != partitions[i] {
			return nil, fmt.Errorf("metaq: fetch offsets of %s/%s: reply line %d is for %s-%d", group, topic, i, l.Topic, l.Partition)
		}
		out[i] = StoredOffset{Partition: l.Partition, Offset: l.Offset, MsgID: l.MsgID}
	}
	return out, nil
}
