// Package admin inspects and administers metaq brokers, as franz-go's kadm
// does for Kafka: topics with their offsets and message counts, consumer
// groups (listed, described with their lag in messages and bytes, their
// offsets reset with a dry run first), topics created, deleted and given
// more partitions (through the brokers' HTTP admin API), transactions
// (listed, XA branches completed heuristically and forgotten), the
// brokers' stats and plugins, and the cluster layout registered in
// ZooKeeper.
//
// An Admin wraps a client.Client, as kadm wraps a kgo.Client: the
// Client's discovery (client.Brokers or client.ZooKeeper) and connection
// options (client.DialTLS, client.SASLPlain, client.DialTimeout,
// client.RequestTimeout, client.Logger, the ZooKeeper ones) are the
// Admin's. It speaks to the brokers with the Client's exported raw
// request (client.Client.Request) and to their HTTP admin API with
// client.Client.AdminHTTP.
//
//	cl, err := client.New(client.Brokers("127.0.0.1:8123"))
//	if err != nil { ... }
//	adm := admin.New(cl)
//	defer adm.Close()
//	topics, err := adm.Topics(ctx)
//	desc, err := adm.DescribeGroup(ctx, "billing")
//	plan, err := adm.ResetOffsets(ctx, "billing", admin.ToTime(t), admin.ResetOptions{})
//	// plan.Partitions is the dry run; ResetOptions{Execute: true} commits it.
//
// With client.Brokers the groups are the brokers' local groups (`stats
// groups`, `stats members`); with client.ZooKeeper they are MetaQ's
// cluster groups, read from the consumers/ znodes. Either way committed
// offsets are read and written through the broker that holds the
// partition (its offset store), and log bounds come from its stats.
package admin

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"sort"
	"strconv"
	"strings"
	"sync"

	"github.com/go-zookeeper/zk"

	"github.com/metaq-go/metaq/internal/brokerstats"
	"github.com/metaq-go/metaq/sdk/client"
	"github.com/metaq-go/metaq/sdk/cluster"
	"github.com/metaq-go/metaq/sdk/protocol"
)

// Admin runs administrative requests against the brokers (and ZooKeeper)
// of the Client it was made from. Each request is bounded by ctx and by
// the Client's client.RequestTimeout (10 s by default). It is safe for
// concurrent use; Close it when done.
type Admin struct {
	cl     *client.Client
	direct []string         // client.Brokers addresses; nil in ZooKeeper mode
	zk     *cluster.Cluster // nil in direct mode
	useTLS bool

	mu       sync.Mutex
	httpAddr string // SetHTTPAddr
	closed   bool
	leases   map[string]bool // the dead-letter replay leases held (dlqlease.go)
}

// ErrClosed is returned by the calls of a closed Admin.
var ErrClosed = errors.New("admin: closed")

// New returns an Admin over cl, as kadm.NewClient wraps a kgo.Client: its
// requests go through cl.Request and cl.AdminHTTP, so TLS, SASL, timeouts
// and the discovery (client.Brokers or client.ZooKeeper) are cl's. The
// Admin owns cl from then on: Close closes it.
func New(cl *client.Client) *Admin {
	return &Admin{cl: cl, direct: cl.SeedBrokers(), zk: cl.Cluster(), useTLS: cl.DialsTLS()}
}

// Close closes the Client, its connections and its ZooKeeper session. It
// is idempotent.
func (a *Admin) Close() error {
	a.mu.Lock()
	a.closed = true
	a.mu.Unlock()
	return a.cl.Close(context.Background())
}

// ZooKeeperMode reports whether the Admin finds the brokers through
// ZooKeeper.
func (a *Admin) ZooKeeperMode() bool { return a.zk != nil }

// roundTrip sends one request to addr. An error that is neither the
// broker's reply nor an authentication refusal says the broker could not
// be reached.
func (a *Admin) roundTrip(ctx context.Context, addr string, encode func(dst []byte, op int32) []byte) ([]byte, error) {
	a.mu.Lock()
	closed := a.closed
	a.mu.Unlock()
	if closed {
		return nil, ErrClosed
	}
	body, err := a.cl.Request(ctx, addr, encode)
	if err != nil {
		var be *client.BrokerError
		var ae *client.AuthError
		if !errors.As(err, &be) && !errors.As(err, &ae) && !errors.Is(err, context.Canceled) {
			return nil, fmt.Errorf("cannot reach the broker at %s: %w", addr, err)
		}
	}
	return body, err
}

// Broker is one broker as the Admin found it.
type Broker struct {
	// ID is the broker id (its `stats` broker_id, or its ZooKeeper node).
	ID int `json:"id"`
	// Addr is the "host:port" the Admin dials; "" when ZooKeeper lists
	// the broker without a live master.
	Addr string `json:"addr"`
}

// Brokers returns the brokers, sorted by id: in direct mode each given
// address with the id its `stats` reports, in ZooKeeper mode the
// registered brokers. It fails if a direct broker cannot be read.
func (a *Admin) Brokers(ctx context.Context) ([]Broker, error) {
	if a.zk != nil {
		l, err := a.Layout(ctx)
		if err != nil {
			return nil, err
		}
		return a.layoutBrokers(l), nil
	}
	var out []Broker
	for _, addr := range a.direct {
		id, err := a.brokerID(ctx, addr)
		if err != nil {
			return nil, err
		}
		out = append(out, Broker{ID: int(id), Addr: addr})
	}
	sort.SliceStable(out, func(i, j int) bool { return out[i].ID < out[j].ID })
	return out, nil
}

func (a *Admin) layoutBrokers(l *cluster.Layout) []Broker {
	var out []Broker
	for _, b := range l.Brokers {
		addr, _ := b.Broker().DialAddr(a.useTLS)
		out = append(out, Broker{ID: b.ID, Addr: addr})
	}
	return out
}

// Layout reads what the brokers registered in ZooKeeper under the root
// (`metaq cluster`): brokers with their addresses, topics with their
// brokers and partition counts. It needs ZooKeeper discovery.
func (a *Admin) Layout(ctx context.Context) (*cluster.Layout, error) {
	var l *cluster.Layout
	err := a.withZK(ctx, func(c *zk.Conn) (err error) {
		l, err = cluster.ReadLayout(c, a.zk.Root())
		return err
	})
	return l, err
}

// withZK runs fn on the ZooKeeper connection, giving up when ctx or the
// request timeout ends: the ZooKeeper client's calls take no context.
func (a *Admin) withZK(ctx context.Context, fn func(c *zk.Conn) error) error {
	if a.zk == nil {
		return errors.New("admin: this needs ZooKeeper discovery (client.ZooKeeper)")
	}
	ctx, cancel := a.cl.WithRequestTimeout(ctx)
	defer cancel()
	ch := make(chan error, 1)
	go func() { ch <- fn(a.zk.Conn()) }()
	select {
	case err := <-ch:
		return err
	case <-ctx.Done():
		return fmt.Errorf("admin: reading ZooKeeper: %w", ctx.Err())
	}
}

// ---- stats ----

// StatsLine is one line of a stats reply: its first word and the rest.
type StatsLine struct {
	Name  string `json:"name"`
	Value string `json:"value"`
}

// Stats is one broker's reply to `stats <item>`.
type Stats struct {
	// Raw is the reply as sent (STATS, the lines, END).
	Raw string `json:"-"`
	// Lines are the lines between STATS and END, in the broker's order
	// (names repeat in some items, such as offsets).
	Lines []StatsLine `json:"lines"`
}

// Value returns the value of the first line named name.
func (s *Stats) Value(name string) (string, bool) {
	for _, l := range s.Lines {
		if l.Name == name {
			return l.Value, true
		}
	}
	return "", false
}

// Int returns the value of the first line named name as an integer.
func (s *Stats) Int(name string) (int64, error) {
	v, ok := s.Value(name)
	if !ok {
		return 0, fmt.Errorf("the broker's stats have no %s", name)
	}
	n, err := strconv.ParseInt(strings.TrimSpace(v), 10, 64)
	if err != nil {
		return 0, fmt.Errorf("the broker's stats: bad %s %q", name, v)
	}
	return n, nil
}

// ParseStats splits a stats reply into its lines.
func ParseStats(body string) *Stats {
	s := &Stats{Raw: body, Lines: []StatsLine{}}
	for _, l := range statsBodyLines(body) {
		k, v, _ := strings.Cut(l, " ")
		s.Lines = append(s.Lines, StatsLine{k, v})
	}
	return s
}

// Stats runs `stats <item>` (item "" is the broker summary; topics,
// offsets, partitions, realtime, config, plugins, groups, members, disks,
// reset, help or a topic name) on the broker at addr, which may be any
// broker, not only those of the discovery.
func (a *Admin) Stats(ctx context.Context, addr, item string) (*Stats, error) {
	if strings.ContainsAny(item, " \t\r\n") {
		return nil, fmt.Errorf("admin: bad stats item %q", item)
	}
	if addr == "" {
		return nil, errors.New("admin: no broker address")
	}
	body, err := a.roundTrip(ctx, addr, func(dst []byte, op int32) []byte { return protocol.AppendStats(dst, item, op) })
	if err != nil {
		return nil, err
	}
	return ParseStats(string(body)), nil
}

func statsBodyLines(body string) []string { return brokerstats.Lines(body) }

// ---- plugins ----

// Plugin is one plugin process a broker supervises (`stats plugins`).
type Plugin struct {
	Kind     string `json:"kind"`
	Name     string `json:"name"`
	Version  int    `json:"version"`
	PID      int    `json:"pid"`
	State    string `json:"state"`
	Restarts int64  `json:"restarts"`
	Calls    int64  `json:"calls"`
	Errors   int64  `json:"errors"`
}

// Plugins lists the plugin processes of the broker at addr (server.toml
// [[plugin]] tables); builtins run in process and are not listed.
func (a *Admin) Plugins(ctx context.Context, addr string) ([]Plugin, error) {
	st, err := a.Stats(ctx, addr, "plugins")
	if err != nil {
		return nil, err
	}
	return ParsePlugins(st.Raw)
}

// ParsePlugins parses the reply of `stats plugins`: "<kind> <name>
// version <v> pid <pid> state <s> restarts <n> calls <n> errors <n>" per
// plugin. Unknown keys are ignored.
func ParsePlugins(body string) ([]Plugin, error) {
	rows := []Plugin{}
	for _, line := range statsBodyLines(body) {
		f := strings.Fields(line)
		switch {
		case len(f) == 0:
			continue
		case f[0] == "topic" || f[0] == "result_code":
			return nil, fmt.Errorf("the broker does not support `stats plugins` (it answered with topic stats)")
		case len(f) < 2 || len(f)%2 != 0:
			return nil, fmt.Errorf("unexpected stats plugins line %q", line)
		}
		r := Plugin{Kind: f[0], Name: f[1]}
		for i := 2; i+1 < len(f); i += 2 {
			k, v := f[i], f[i+1]
			var err error
			switch k {
			case "version":
				r.Version, err = strconv.Atoi(v)
			case "pid":
				r.PID, err = strconv.Atoi(v)
			case "state":
				r.State = v
			case "restarts":
				r.Restarts, err = strconv.ParseInt(v, 10, 64)
			case "calls":
				r.Calls, err = strconv.ParseInt(v, 10, 64)
			case "errors":
				r.Errors, err = strconv.ParseInt(v, 10, 64)
			}
			if err != nil {
				return nil, fmt.Errorf("stats plugins line %q: bad %s: %v", line, k, err)
			}
		}
		rows = append(rows, r)
	}
	return rows, nil
}

// ---- topics ----

// Topic is one topic over the brokers that hold it.
type Topic struct {
	Name string `json:"name"`
	// Partitions is the number of partitions over all brokers.
	Partitions   int   `json:"partitions"`
	MessageCount int64 `json:"message_count"`
	MessageBytes int64 `json:"message_bytes"`
	// AcceptPublish and AcceptSubscribe hold when every broker accepts.
	AcceptPublish   bool `json:"accept_publish"`
	AcceptSubscribe bool `json:"accept_subscribe"`
	// Offsets has one entry per partition, sorted by broker id and
	// partition.
	Offsets []PartitionOffsets `json:"partitions_detail"`
}

// PartitionOffsets is one partition's readable range [Min, Max) and its
// message count.
type PartitionOffsets struct {
	BrokerID  int   `json:"broker_id"`
	Partition int32 `json:"partition"`
	Min       int64 `json:"min_offset"`
	Max       int64 `json:"max_offset"`
	// Messages is how many messages the range holds; -1 when the broker
	// does not report it (no `stats partitions`).
	Messages int64 `json:"messages"`
}

// Bytes is Max - Min.
func (p PartitionOffsets) Bytes() int64 { return p.Max - p.Min }

// Topics returns every topic of the brokers, sorted by name, with each
// partition's offsets and message count. Brokers that could not be read
// are left out and named in the error, which comes with the topics of the
// others.
func (a *Admin) Topics(ctx context.Context) ([]Topic, error) {
	brokers, err := a.Brokers(ctx)
	if err != nil {
		return nil, err
	}
	byName := map[string]*Topic{}
	var errs []error
	for _, b := range brokers {
		ts, err := a.brokerTopics(ctx, b)
		if err != nil {
			errs = append(errs, fmt.Errorf("broker %d (%s): %w", b.ID, orDash(b.Addr), err))
			continue
		}
		for _, t := range ts {
			m := byName[t.Name]
			if m == nil {
				m = &Topic{Name: t.Name, AcceptPublish: true, AcceptSubscribe: true}
				byName[t.Name] = m
			}
			m.Partitions += t.Partitions
			m.MessageCount += t.MessageCount
			m.MessageBytes += t.MessageBytes
			m.AcceptPublish = m.AcceptPublish && t.AcceptPublish
			m.AcceptSubscribe = m.AcceptSubscribe && t.AcceptSubscribe
			m.Offsets = append(m.Offsets, t.Offsets...)
		}
	}
	out := make([]Topic, 0, len(byName))
	for _, n := range sortedKeys(byName) {
		t := byName[n]
		if t.Offsets == nil {
			t.Offsets = []PartitionOffsets{}
		}
		out = append(out, *t)
	}
	return out, errors.Join(errs...)
}

// Offsets returns one partition's readable range and message count, from
// the broker with that id.
func (a *Admin) Offsets(ctx context.Context, topic string, brokerID int, partition int32) (PartitionOffsets, error) {
	b, err := a.broker(ctx, brokerID)
	if err != nil {
		return PartitionOffsets{}, err
	}
	ts, err := a.brokerTopics(ctx, b)
	if err != nil {
		return PartitionOffsets{}, err
	}
	for _, t := range ts {
		if t.Name == topic {
			for _, o := range t.Offsets {
				if o.Partition == partition {
					return o, nil
				}
			}
			return PartitionOffsets{}, fmt.Errorf("topic %s has no partition %d on broker %d", topic, partition, brokerID)
		}
	}
	return PartitionOffsets{}, fmt.Errorf("unknown topic %q on broker %d", topic, brokerID)
}

// broker returns the broker with id.
func (a *Admin) broker(ctx context.Context, id int) (Broker, error) {
	bs, err := a.Brokers(ctx)
	if err != nil {
		return Broker{}, err
	}
	for _, b := range bs {
		if b.ID == id {
			if b.Addr == "" {
				return b, fmt.Errorf("broker %d has no master registered in ZooKeeper", id)
			}
			return b, nil
		}
	}
	return Broker{}, fmt.Errorf("no broker %d", id)
}

// brokerTopics reads one broker's `stats topics` and `stats partitions`
// (`stats offsets` from a broker without it).
func (a *Admin) brokerTopics(ctx context.Context, b Broker) ([]Topic, error) {
	if b.Addr == "" {
		return nil, errors.New("no master registered in ZooKeeper")
	}
	st, err := a.Stats(ctx, b.Addr, "topics")
	if err != nil {
		return nil, err
	}
	ts, err := parseStatsTopics(st.Raw)
	if err != nil {
		return nil, err
	}
	po, err := a.Stats(ctx, b.Addr, "partitions")
	if err != nil {
		return nil, err
	}
	offs, err := parseStatsOffsets(po.Raw, b.ID)
	if err != nil {
		// A broker without `stats partitions` answers it as a topic.
		if po, err = a.Stats(ctx, b.Addr, "offsets"); err != nil {
			return nil, err
		}
		if offs, err = parseStatsOffsets(po.Raw, b.ID); err != nil {
			return nil, err
		}
	}
	for i := range ts {
		ts[i].Offsets = offs[ts[i].Name]
		if ts[i].Offsets == nil {
			ts[i].Offsets = []PartitionOffsets{}
		}
		ts[i].Partitions = max(ts[i].Partitions, len(ts[i].Offsets))
	}
	return ts, nil
}

// parseStatsTopics parses `stats topics` (internal/brokerstats).
func parseStatsTopics(body string) ([]Topic, error) {
	ts, err := brokerstats.ParseTopics(body)
	if err != nil {
		return nil, err
	}
	var out []Topic
	for _, t := range ts {
		out = append(out, Topic{Name: t.Name, Partitions: t.Partitions, MessageCount: t.MessageCount,
			MessageBytes: t.MessageBytes, AcceptPublish: t.AcceptPublish, AcceptSubscribe: t.AcceptSubscribe})
	}
	return out, nil
}

// parseStatsOffsets parses `stats partitions` or `stats offsets` of the
// broker with brokerID (internal/brokerstats).
func parseStatsOffsets(body string, brokerID int) (map[string][]PartitionOffsets, error) {
	ps, err := brokerstats.ParsePartitions(body)
	if err != nil {
		return nil, err
	}
	out := make(map[string][]PartitionOffsets, len(ps))
	for t, v := range ps {
		for _, p := range v {
			out[t] = append(out[t], PartitionOffsets{BrokerID: brokerID, Partition: p.Partition, Min: p.Min, Max: p.Max, Messages: p.Messages})
		}
	}
	return out, nil
}

// NearestOffset asks the broker with that id for the valid offset
// nearest to offset in a partition (the `offset` command: the start of
// the segment holding it; math.MaxInt64 gives the end).
func (a *Admin) NearestOffset(ctx context.Context, topic string, brokerID int, partition int32, offset int64) (int64, error) {
	b, err := a.broker(ctx, brokerID)
	if err != nil {
		return 0, err
	}
	return a.nearestOffset(ctx, b.Addr, topic, partition, offset)
}

func (a *Admin) nearestOffset(ctx context.Context, addr, topic string, partition int32, offset int64) (int64, error) {
	body, err := a.roundTrip(ctx, addr, func(dst []byte, op int32) []byte {
		return protocol.AppendOffset(dst, topic, scanGroup, partition, offset, op)
	})
	if err != nil {
		return 0, err
	}
	v, ok := protocol.ParseInt64(body)
	if !ok {
		return 0, fmt.Errorf("admin: bad offset reply %q", body)
	}
	return v, nil
}

// ---- helpers ----

func orDash(s string) string {
	if s == "" {
		return "-"
	}
	return s
}

func sortedKeys[K int | string, V any](m map[K]V) []K {
	out := make([]K, 0, len(m))
	for k := range m {
		out = append(out, k)
	}
	slices.Sort(out)
	return out
}

// brokerID asks the broker at addr its id (`stats` broker_id).
func (a *Admin) brokerID(ctx context.Context, addr string) (int64, error) {
	st, err := a.Stats(ctx, addr, "")
	if err != nil {
		return 0, err
	}
	id, err := st.Int("broker_id")
	if err != nil {
		return 0, fmt.Errorf("broker at %s: %w", addr, err)
	}
	return id, nil
}
