package client

import (
	"context"
	"fmt"
	"log/slog"
	"math"
	"strings"
	"time"

	"github.com/metaq-go/metaq/internal/brokerstats"
	"github.com/metaq-go/metaq/sdk/protocol"
)

// topicInfo describes one topic as `stats topics` and `stats offsets` report it.
type topicInfo struct {
	Name            string
	Partitions      int
	MessageCount    int64
	MessageBytes    int64
	AcceptPublish   bool
	AcceptSubscribe bool
	// Offsets has one entry per partition that `stats offsets` listed,
	// sorted by partition.
	Offsets []partitionOffsets
}

// partitionOffsets is the readable range of one partition: [Min, Max).
type partitionOffsets struct {
	Partition int32
	Min       int64
	Max       int64
}

type adminConfig struct {
	conn   connOptions
	logger *slog.Logger
}

// brokerAdmin runs administrative queries against one broker.
type brokerAdmin struct {
	cn *conn
}

// newBrokerAdmin returns an brokerAdmin for the broker at addr. It connects lazily.
func newBrokerAdmin(addr string, opts ...adminOption) (*brokerAdmin, error) {
	if err := checkAddr(addr); err != nil {
		return nil, err
	}
	cfg := adminConfig{conn: defaultConnOptions(), logger: slog.Default()}
	for _, o := range opts {
		o.applyAdmin(&cfg)
	}
	return &brokerAdmin{cn: newConn(addr, cfg.conn)}, nil
}

// Close closes the connection. It is idempotent.
func (a *brokerAdmin) Close() error {
	a.cn.close()
	return nil
}

// brokerStats returns the body of `stats <item>` (item may be empty).
func (a *brokerAdmin) Stats(ctx context.Context, item string) (string, error) {
	return stats(ctx, a.cn, item)
}

// Topics returns every topic the broker lists, sorted by name, with the
// offsets of each partition.
func (a *brokerAdmin) Topics(ctx context.Context) ([]topicInfo, error) {
	infos, err := statsTopics(ctx, a.cn)
	if err != nil {
		return nil, err
	}
	body, err := stats(ctx, a.cn, "offsets")
	if err != nil {
		return nil, err
	}
	offs, err := parseStatsOffsets(body)
	if err != nil {
		return nil, err
	}
	for i := range infos {
		infos[i].Offsets = offs[infos[i].Name]
	}
	return infos, nil
}

// Offset asks the broker for the valid offset nearest to offset in a
// partition (the `offset` command). math.MaxInt64 yields the end of the
// partition.
func (a *brokerAdmin) Offset(ctx context.Context, topic, group string, partition int32, offset int64) (int64, error) {
	return nearestOffset(ctx, a.cn, topic, group, partition, offset)
}

// brokerStats connects to addr, runs `stats <item>` and returns the reply body.
func brokerStats(ctx context.Context, addr, item string) (string, error) {
	a, err := newBrokerAdmin(addr)
	if err != nil {
		return "", err
	}
	defer a.Close()
	return a.Stats(ctx, item)
}

func stats(ctx context.Context, cn *conn, item string) (string, error) {
	if strings.ContainsAny(item, " \r\n") {
		return "", fmt.Errorf("metaq: bad stats item %q", item)
	}
	ctx, cancel := withDefaultTimeout(ctx, cn.opts.requestTimeout)
	defer cancel()
	c, err := cn.roundTrip(ctx, func(dst []byte, op int32) []byte {
		return protocol.AppendStats(dst, item, op)
	})
	if err != nil {
		return "", err
	}
	defer putCall(c)
	if c.code != protocol.StatusOK {
		return "", resultError(c.code, c.body)
	}
	return string(c.body), nil
}

func statsTopics(ctx context.Context, cn *conn) ([]topicInfo, error) {
	body, err := stats(ctx, cn, "topics")
	if err != nil {
		return nil, err
	}
	return parseStatsTopics(body)
}

// statsLines returns the lines between STATS and END.
func statsLines(body string) []string { return brokerstats.Lines(body) }

// parseStatsTopics parses `stats topics` (internal/brokerstats).
func parseStatsTopics(body string) ([]topicInfo, error) {
	ts, err := brokerstats.ParseTopics(body)
	if err != nil {
		return nil, err
	}
	var out []topicInfo
	for _, t := range ts {
		out = append(out, topicInfo{Name: t.Name, Partitions: t.Partitions, MessageCount: t.MessageCount,
			MessageBytes: t.MessageBytes, AcceptPublish: t.AcceptPublish, AcceptSubscribe: t.AcceptSubscribe})
	}
	return out, nil
}

// parseStatsOffsets parses `stats offsets` (internal/brokerstats).
func parseStatsOffsets(body string) (map[string][]partitionOffsets, error) {
	ps, err := brokerstats.ParsePartitions(body)
	if err != nil {
		return nil, err
	}
	out := make(map[string][]partitionOffsets, len(ps))
	for t, v := range ps {
		for _, p := range v {
			out[t] = append(out[t], partitionOffsets{Partition: p.Partition, Min: p.Min, Max: p.Max})
		}
	}
	return out, nil
}

// nearestOffset runs `offset`: the valid offset nearest to offset.
func nearestOffset(ctx context.Context, cn *conn, topic, group string, partition int32, offset int64) (int64, error) {
	ctx, cancel := withDefaultTimeout(ctx, cn.opts.requestTimeout)
	defer cancel()
	c, err := cn.roundTrip(ctx, func(dst []byte, op int32) []byte {
		return protocol.AppendOffset(dst, topic, group, partition, offset, op)
	})
	if err != nil {
		return 0, err
	}
	defer putCall(c)
	if c.code != protocol.StatusOK {
		return 0, resultError(c.code, c.body)
	}
	v, ok := protocol.ParseInt64(c.body)
	if !ok {
		return 0, fmt.Errorf("metaq: bad offset reply %q", c.body)
	}
	return v, nil
}

// withDefaultTimeout bounds ctx by d unless it already has a deadline.
func withDefaultTimeout(ctx context.Context, d time.Duration) (context.Context, context.CancelFunc) {
	if _, ok := ctx.Deadline(); ok || d <= 0 {
		return ctx, func() {}
	}
	return context.WithTimeout(ctx, d)
}

// latestOffset is the offset a consumer starting from the newest message uses.
const latestOffset = math.MaxInt64
