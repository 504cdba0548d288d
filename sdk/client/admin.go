package client

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"log/slog"
	"math"
	"sort"
	"strconv"
	"strings"
	"time"

	"github.com/metaq-go/metaq/sdk/protocol"
)

// TopicInfo describes one topic as `stats topics` and `stats offsets` report it.
type TopicInfo struct {
	Name            string
	Partitions      int
	MessageCount    int64
	MessageBytes    int64
	AcceptPublish   bool
	AcceptSubscribe bool
	// Offsets has one entry per partition that `stats offsets` listed,
	// sorted by partition.
	Offsets []PartitionOffsets
}

// PartitionOffsets is the readable range of one partition: [Min, Max).
type PartitionOffsets struct {
	Partition int32
	Min       int64
	Max       int64
}

type adminConfig struct {
	conn   connOptions
	logger *slog.Logger
}

// Admin runs administrative queries against one broker.
type Admin struct {
	cn *conn
}

// NewAdmin returns an Admin for the broker at addr. It connects lazily.
func NewAdmin(addr string, opts ...AdminOption) (*Admin, error) {
	if err := checkAddr(addr); err != nil {
		return nil, err
	}
	cfg := adminConfig{conn: defaultConnOptions(), logger: slog.Default()}
	for _, o := range opts {
		o.applyAdmin(&cfg)
	}
	return &Admin{cn: newConn(addr, cfg.conn)}, nil
}

// Close closes the connection. It is idempotent.
func (a *Admin) Close() error {
	a.cn.close()
	return nil
}

// Stats returns the body of `stats <item>` (item may be empty).
func (a *Admin) Stats(ctx context.Context, item string) (string, error) {
	return stats(ctx, a.cn, item)
}

// Topics returns every topic the broker lists, sorted by name, with the
// offsets of each partition.
func (a *Admin) Topics(ctx context.Context) ([]TopicInfo, error) {
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
func (a *Admin) Offset(ctx context.Context, topic, group string, partition int32, offset int64) (int64, error) {
	return nearestOffset(ctx, a.cn, topic, group, partition, offset)
}

// Stats connects to addr, runs `stats <item>` and returns the reply body.
func Stats(ctx context.Context, addr, item string) (string, error) {
	a, err := NewAdmin(addr)
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

func statsTopics(ctx context.Context, cn *conn) ([]TopicInfo, error) {
	body, err := stats(ctx, cn, "topics")
	if err != nil {
		return nil, err
	}
	return parseStatsTopics(body)
}

// statsLines returns the lines between STATS and END.
func statsLines(body string) []string {
	var out []string
	sc := bufio.NewScanner(strings.NewReader(body))
	sc.Buffer(nil, len(body)+1)
	for sc.Scan() {
		l := strings.TrimRight(sc.Text(), "\r")
		if l == "" || l == "STATS" || l == "END" {
			continue
		}
		out = append(out, l)
	}
	return out
}

// parseStatsTopics parses `<t> partitions N message_count N message_bytes N
// accept_publish B accept_subscribe B` lines; `<t> *Empty*` lines give a
// topic with no data and unknown partitions.
func parseStatsTopics(body string) ([]TopicInfo, error) {
	var out []TopicInfo
	for _, l := range statsLines(body) {
		f := strings.Fields(l)
		if len(f) == 2 && f[1] == "*Empty*" {
			out = append(out, TopicInfo{Name: f[0], AcceptPublish: true, AcceptSubscribe: true})
			continue
		}
		if len(f) < 3 || len(f)%2 != 1 {
			return nil, fmt.Errorf("metaq: bad stats topics line %q", l)
		}
		ti := TopicInfo{Name: f[0], AcceptPublish: true, AcceptSubscribe: true}
		for i := 1; i+1 < len(f); i += 2 {
			k, v := f[i], f[i+1]
			var err error
			switch k {
			case "partitions":
				ti.Partitions, err = strconv.Atoi(v)
			case "message_count":
				ti.MessageCount, err = strconv.ParseInt(v, 10, 64)
			case "message_bytes":
				ti.MessageBytes, err = strconv.ParseInt(v, 10, 64)
			case "accept_publish":
				ti.AcceptPublish, err = strconv.ParseBool(v)
			case "accept_subscribe":
				ti.AcceptSubscribe, err = strconv.ParseBool(v)
			}
			if err != nil {
				return nil, fmt.Errorf("metaq: bad %s in stats topics line %q", k, l)
			}
		}
		out = append(out, ti)
	}
	sort.Slice(out, func(i, j int) bool { return out[i].Name < out[j].Name })
	return out, nil
}

// parseStatsOffsets parses `<t> part <p> min_offset X max_offset Y` lines.
func parseStatsOffsets(body string) (map[string][]PartitionOffsets, error) {
	out := make(map[string][]PartitionOffsets)
	for _, l := range statsLines(body) {
		f := strings.Fields(l)
		if len(f) != 7 || f[1] != "part" || f[3] != "min_offset" || f[5] != "max_offset" {
			return nil, fmt.Errorf("metaq: bad stats offsets line %q", l)
		}
		p, err1 := strconv.ParseInt(f[2], 10, 32)
		lo, err2 := strconv.ParseInt(f[4], 10, 64)
		hi, err3 := strconv.ParseInt(f[6], 10, 64)
		if err := errors.Join(err1, err2, err3); err != nil {
			return nil, fmt.Errorf("metaq: bad stats offsets line %q", l)
		}
		out[f[0]] = append(out[f[0]], PartitionOffsets{Partition: int32(p), Min: lo, Max: hi})
	}
	for _, v := range out {
		sort.Slice(v, func(i, j int) bool { return v[i].Partition < v[j].Partition })
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
