package client

import (
	"context"
	"fmt"
	"math"
	"strings"
	"time"

	"github.com/metaq-go/metaq/internal/brokerstats"
	"github.com/metaq-go/metaq/sdk/protocol"
)

// topicInfo describes one topic as `stats topics` reports it.
type topicInfo struct {
	Name            string
	Partitions      int
	MessageCount    int64
	MessageBytes    int64
	AcceptPublish   bool
	AcceptSubscribe bool
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
