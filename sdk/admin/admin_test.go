package admin_test

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"os"
	"slices"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/metaq-go/metaq/conf"
	"github.com/metaq-go/metaq/internal/brokertest"
	"github.com/metaq-go/metaq/internal/testsvc"
	"github.com/metaq-go/metaq/sdk/admin"
	"github.com/metaq-go/metaq/sdk/client"
	"github.com/metaq-go/metaq/sdk/message"
	"github.com/metaq-go/metaq/sdk/protocol"
)

var quiet = slog.New(slog.NewTextHandler(io.Discard, nil))

// TestMain starts the broker of the testable example, runs the tests and
// stops the shared ZooKeeper.
func TestMain(m *testing.M) {
	stop := startExampleBroker()
	code := m.Run()
	stop()
	testsvc.StopShared()
	os.Exit(code)
}

// startExampleBroker runs the broker of the example (topic ex-admin, one
// partition) and points brokerAddr at it.
func startExampleBroker() (stop func()) {
	brokerAddr, _, stop = brokertest.StartMain("ex-admin")
	return stop
}

func ctxT(t *testing.T, d time.Duration) context.Context {
	ctx, cancel := context.WithTimeout(context.Background(), d)
	t.Cleanup(cancel)
	return ctx
}

func newAdmin(t *testing.T, opts ...client.Opt) *admin.Admin {
	t.Helper()
	cl, err := client.New(append([]client.Opt{client.Logger(quiet)}, opts...)...)
	if err != nil {
		t.Fatal(err)
	}
	a := admin.New(cl)
	t.Cleanup(func() { a.Close() })
	return a
}

// produce sends n messages of topic through cl and returns per
// partition how many went there, and the results.
func produce(t *testing.T, cl *client.Client, topic string, n int, tag string) (map[int32]int64, []client.SendResult) {
	t.Helper()
	counts := map[int32]int64{}
	var all []client.SendResult
	for i := range n {
		res, err := cl.ProduceSync(ctxT(t, 10*time.Second), &message.Message{Topic: topic, Body: fmt.Appendf(nil, "%s-%d-%s", tag, i, strings.Repeat("x", 40))})
		if err != nil {
			t.Fatal(err)
		}
		counts[res[0].Partition]++
		all = append(all, res...)
	}
	return counts, all
}

func producer(t *testing.T, opts ...client.Opt) *client.Client {
	t.Helper()
	cl, err := client.New(append([]client.Opt{client.Logger(quiet)}, opts...)...)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { cl.Close(context.Background()) })
	return cl
}

// member runs cl.Consume until the test ends and returns once it has
// handled n messages.
func member(t *testing.T, ctx context.Context, cl *client.Client, n int) {
	t.Helper()
	got := make(chan struct{}, 1)
	var seen atomic.Int64
	cctx, cancel := context.WithCancel(ctx)
	done := make(chan struct{})
	go func() {
		defer close(done)
		_ = cl.Consume(cctx, func(context.Context, *message.Message) error {
			if seen.Add(1) == int64(n) {
				got <- struct{}{}
			}
			return nil
		})
	}()
	t.Cleanup(func() { cancel(); <-done })
	select {
	case <-got:
	case <-ctx.Done():
		t.Fatalf("the member handled %d messages, want %d", seen.Load(), n)
	}
}

// TestDeadBroker: the calls of an Admin of a broker that is down say it
// cannot be reached, and those of a closed Admin fail with ErrClosed.
func TestDeadBroker(t *testing.T) {
	// A broker that is down: New succeeds (connections are lazy), the
	// calls say it cannot be reached.
	a := newAdmin(t, client.Brokers("127.0.0.1:1"), client.DialTimeout(time.Second), client.RequestTimeout(2*time.Second))
	if _, err := a.Topics(ctxT(t, 5*time.Second)); err == nil || !strings.Contains(err.Error(), "cannot reach the broker at 127.0.0.1:1") {
		t.Fatalf("Topics of a dead broker: %v", err)
	}
	if _, err := a.Layout(ctxT(t, time.Second)); err == nil {
		t.Fatal("Layout without ZooKeeper: no error")
	}
	if err := a.Close(); err != nil {
		t.Fatal(err)
	}
	if _, err := a.Stats(ctxT(t, time.Second), "127.0.0.1:1", ""); !errors.Is(err, admin.ErrClosed) {
		t.Fatalf("after Close: %v", err)
	}
	if _, err := a.CreateTopic(ctxT(t, time.Second), "t", 1); !errors.Is(err, admin.ErrClosed) {
		t.Fatalf("CreateTopic after Close: %v", err)
	}
}

// TestTopicsAndStats: offsets and message counts per partition, raw and
// parsed stats, plugins, the broker id.
func TestTopicsAndStats(t *testing.T) {
	b := brokertest.Start(t, brokertest.Quiet(), brokertest.Topics("at", "empty"), brokertest.Partitions(2),
		brokertest.Edit(func(c *conf.Config) { c.BrokerID = 7 }))
	counts, _ := produce(t, producer(t, client.Brokers(b.Addr())), "at", 9, "m")
	a := newAdmin(t, client.Brokers(b.Addr()))
	ctx := ctxT(t, 10*time.Second)

	bs, err := a.Brokers(ctx)
	if err != nil || len(bs) != 1 || bs[0].ID != 7 || bs[0].Addr != b.Addr() {
		t.Fatalf("Brokers: %+v %v", bs, err)
	}
	ts, err := a.Topics(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if len(ts) != 2 || ts[0].Name != "at" || ts[1].Name != "empty" {
		t.Fatalf("topics: %+v", ts)
	}
	at := ts[0]
	if at.Partitions != 2 || at.MessageCount != 9 || len(at.Offsets) != 2 {
		t.Fatalf("at: %+v", at)
	}
	var bytes int64
	for _, o := range at.Offsets {
		if o.BrokerID != 7 || o.Min != 0 || o.Messages != counts[o.Partition] {
			t.Fatalf("partition %+v, want %d messages", o, counts[o.Partition])
		}
		bytes += o.Bytes()
	}
	if bytes != at.MessageBytes {
		t.Fatalf("partition bytes %d, topic bytes %d", bytes, at.MessageBytes)
	}
	po, err := a.Offsets(ctx, "at", 7, 1)
	if err != nil || po != at.Offsets[1] {
		t.Fatalf("Offsets: %+v %v", po, err)
	}
	if _, err := a.Offsets(ctx, "nope", 7, 0); err == nil {
		t.Fatal("Offsets of an unknown topic: no error")
	}
	if end, err := a.NearestOffset(ctx, "at", 7, 0, 1<<62); err != nil || end != at.Offsets[0].Max {
		t.Fatalf("NearestOffset: %d %v, want %d", end, err, at.Offsets[0].Max)
	}

	st, err := a.Stats(ctx, b.Addr(), "")
	if err != nil {
		t.Fatal(err)
	}
	if !strings.HasPrefix(st.Raw, "STATS\r\n") || !strings.HasSuffix(st.Raw, "END\r\n") {
		t.Fatalf("raw stats: %q", st.Raw)
	}
	if id, err := st.Int("broker_id"); err != nil || id != 7 {
		t.Fatalf("broker_id %d %v", id, err)
	}
	if _, err := a.Stats(ctx, b.Addr(), "bad item"); err == nil {
		t.Fatal("bad stats item: no error")
	}
	ps, err := a.Plugins(ctx, b.Addr())
	if err != nil || len(ps) != 0 {
		t.Fatalf("plugins: %+v %v", ps, err)
	}
}

// TestGroupsLocal: a real member of a broker's local group, its lag in
// bytes and messages, and resets (dry run, refused, executed).
func TestGroupsLocal(t *testing.T) {
	b := brokertest.Start(t, brokertest.Quiet(), brokertest.Topics("gt"), brokertest.Partitions(2),
		brokertest.Edit(func(c *conf.Config) { c.MaxSegmentSize = 4096 }))
	addr := b.Addr()
	p := producer(t, client.Brokers(addr))
	_, first := produce(t, p, "gt", 20, "a")
	time.Sleep(5 * time.Millisecond)
	at := time.Now()
	time.Sleep(5 * time.Millisecond)
	_, second := produce(t, p, "gt", 10, "b")
	a := newAdmin(t, client.Brokers(addr))
	ctx := ctxT(t, 30*time.Second)

	// A member that reads 10 messages and commits.
	m, err := client.New(client.Logger(quiet), client.Brokers(addr), client.ConsumeTopics("gt"), client.ConsumerGroup("g1"),
		client.CommitInterval(0))
	if err != nil {
		t.Fatal(err)
	}
	defer m.Close(context.Background())
	member(t, ctx, m, 30)
	if err := m.Commit(ctx); err != nil {
		t.Fatal(err)
	}

	gs, err := a.ListGroups(ctx)
	if err != nil || len(gs) != 1 || gs[0].Group != "g1" || gs[0].Members != 1 || strings.Join(gs[0].Topics, ",") != "gt" {
		t.Fatalf("ListGroups: %+v %v", gs, err)
	}
	d, err := a.DescribeGroup(ctx, "g1")
	if err != nil {
		t.Fatal(err)
	}
	if d.Mode != "local" || len(d.Members) != 1 || d.Members[0].Partitions != 2 || len(d.Partitions) != 2 || !d.Found() {
		t.Fatalf("describe: %+v", d)
	}
	var lagMsgs int64
	for _, r := range d.Partitions {
		if r.Committed == nil || r.LogEnd == nil || r.Lag == nil || r.LagMessages == nil || r.LagMessagesEstimated {
			t.Fatalf("row %+v", r)
		}
		if *r.Lag != *r.LogEnd-*r.Committed || r.Owner != d.Members[0].ID {
			t.Fatalf("row %+v", r)
		}
		lagMsgs += *r.LagMessages
	}
	if lagMsgs != 0 {
		t.Fatalf("lag %d messages, want 0", lagMsgs)
	}

	// Resets: refused while the member lives; a dry run changes nothing.
	if _, err := a.ResetOffsets(ctx, "g1", admin.Earliest(), admin.ResetOptions{Execute: true}); !errors.As(err, new(*admin.LiveMembersError)) {
		t.Fatalf("reset with a live member: %v", err)
	}
	plan, err := a.ResetOffsets(ctx, "g1", admin.Earliest(), admin.ResetOptions{})
	if err != nil || plan.Executed || len(plan.Members) != 1 || len(plan.Partitions) != 2 || plan.Partitions[0].New != 0 {
		t.Fatalf("dry run: %+v %v", plan, err)
	}
	if err := m.Close(ctx); err != nil {
		t.Fatal(err)
	}
	if d2, err := a.DescribeGroup(ctx, "g1"); err != nil || len(d2.Members) != 0 || *d2.Partitions[0].Committed != *d.Partitions[0].Committed {
		t.Fatalf("the dry run changed offsets: %+v %v", d2, err)
	}

	// To a time: the first message of the second batch in each partition.
	want := map[int32]int64{}
	for _, r := range second {
		if _, ok := want[r.Partition]; !ok {
			want[r.Partition] = r.Offset
		}
	}
	var stages []string
	plan, err = a.ResetOffsets(ctx, "g1", admin.ToTime(at), admin.ResetOptions{Topics: []string{"gt"}, Execute: true,
		Progress: func(stage string, done, total int) {
			stages = append(stages, fmt.Sprintf("%s %d/%d", stage, done, total))
		}})
	if err != nil || !plan.Executed {
		t.Fatalf("reset to a time: %+v %v", plan, err)
	}
	if strings.Join(stages, ",") != "plan 1/2,plan 2/2,commit 2/2" {
		t.Fatalf("progress: %q", stages)
	}
	d, err = a.DescribeGroup(ctx, "g1", "gt")
	if err != nil {
		t.Fatal(err)
	}
	for _, r := range d.Partitions {
		if *r.Committed != want[r.Partition] {
			t.Fatalf("partition %d at %d, want %d", r.Partition, *r.Committed, want[r.Partition])
		}
	}
	lagMsgs = 0
	for _, r := range d.Partitions {
		lagMsgs += *r.LagMessages
	}
	if lagMsgs != 10 {
		t.Fatalf("lag %d messages after the time reset, want 10", lagMsgs)
	}

	// To an offset: a record start only.
	off := first[3].Offset
	match := func(r admin.GroupPartition) bool { return r.Partition == first[3].Partition }
	if _, err := a.ResetOffsets(ctx, "g1", admin.ToOffset(off+1), admin.ResetOptions{Match: match}); err == nil ||
		!strings.Contains(err.Error(), "not the start of a record") {
		t.Fatalf("reset to a non-record offset: %v", err)
	}
	plan, err = a.ResetOffsets(ctx, "g1", admin.ToOffset(off), admin.ResetOptions{Match: match, Execute: true})
	if err != nil || len(plan.Partitions) != 1 || plan.Partitions[0].New != off {
		t.Fatalf("reset to an offset: %+v %v", plan, err)
	}
	if _, err := a.ResetOffsets(ctx, "g1", admin.Latest(), admin.ResetOptions{Match: func(admin.GroupPartition) bool { return false }}); !errors.Is(err, admin.ErrNoPartitions) {
		t.Fatalf("reset matching nothing: %v", err)
	}
	if _, err := a.DescribeGroup(ctx, "g1", "nope"); err == nil || !strings.Contains(err.Error(), `unknown topic "nope"`) {
		t.Fatalf("unknown topic: %v", err)
	}
	if d, err := a.DescribeGroup(ctx, "nobody"); err != nil || d.Found() {
		t.Fatalf("unknown group: %+v %v", d, err)
	}
}

// TestGroupsZooKeeper: two brokers in a real ZooKeeper and a real
// cluster-mode group member.
func TestGroupsZooKeeper(t *testing.T) {
	zkAddr := testsvc.ZooKeeper(t)
	root := fmt.Sprintf("/admin-test-%d", time.Now().UnixNano())
	var brokers []*brokertest.Broker
	for id := 1; id <= 2; id++ {
		brokers = append(brokers, brokertest.Start(t, brokertest.Quiet(), brokertest.Topics("zt"), brokertest.Partitions(2),
			brokertest.ZooKeeper(zkAddr, root, id), brokertest.Edit(func(c *conf.Config) {
				c.ZooKeeper.SessionTimeout, c.ZooKeeper.ConnectionTimeout = 4000, 5000
			})))
	}
	zkOpts := []client.Opt{client.ZooKeeper(zkAddr, root), client.ZooKeeperSessionTimeout(5 * time.Second)}
	a := newAdmin(t, zkOpts...)
	ctx := ctxT(t, 60*time.Second)
	if !a.ZooKeeperMode() {
		t.Fatal("not in ZooKeeper mode")
	}
	l, err := a.Layout(ctx)
	if err != nil || len(l.Brokers) != 2 {
		t.Fatalf("layout: %+v %v", l, err)
	}
	bs, err := a.Brokers(ctx)
	if err != nil || len(bs) != 2 || bs[0].Addr != brokers[0].Addr() || bs[1].Addr != brokers[1].Addr() {
		t.Fatalf("brokers: %+v %v", bs, err)
	}
	produce(t, producer(t, client.Brokers(brokers[0].Addr(), brokers[1].Addr())), "zt", 16, "z")
	ts, err := a.Topics(ctx)
	if err != nil || len(ts) != 1 || ts[0].Partitions != 4 || ts[0].MessageCount != 16 || len(ts[0].Offsets) != 4 {
		t.Fatalf("topics: %+v %v", ts, err)
	}

	m, err := client.New(append([]client.Opt{client.Logger(quiet), client.ConsumeTopics("zt"), client.ConsumerGroup("zg"),
		client.ConsumerID("m1"), client.CommitInterval(0)}, zkOpts...)...)
	if err != nil {
		t.Fatal(err)
	}
	defer m.Close(context.Background())
	member(t, ctx, m, 16)
	if err := m.Commit(ctx); err != nil {
		t.Fatal(err)
	}
	gs, err := a.ListGroups(ctx)
	if err != nil || len(gs) != 1 || gs[0].Group != "zg" || gs[0].Members != 1 {
		t.Fatalf("groups: %+v %v", gs, err)
	}
	d, err := a.DescribeGroup(ctx, "zg")
	if err != nil {
		t.Fatal(err)
	}
	if d.Mode != "cluster" || len(d.Members) != 1 || d.Members[0].Partitions != 4 || len(d.Partitions) != 4 {
		t.Fatalf("describe: %+v", d)
	}
	for _, r := range d.Partitions {
		if r.Owner == "" || r.Committed == nil || *r.Lag != 0 || *r.LagMessages != 0 {
			t.Fatalf("row %+v", r)
		}
	}
	if _, err := a.ResetOffsets(ctx, "zg", admin.Earliest(), admin.ResetOptions{Execute: true}); !errors.As(err, new(*admin.LiveMembersError)) {
		t.Fatalf("reset with a live member: %v", err)
	}
	if err := m.Close(ctx); err != nil {
		t.Fatal(err)
	}
	plan, err := a.ResetOffsets(ctx, "zg", admin.Earliest(), admin.ResetOptions{Execute: true,
		Match: func(r admin.GroupPartition) bool { return r.BrokerID == 2 }})
	if err != nil || len(plan.Partitions) != 2 {
		t.Fatalf("reset: %+v %v", plan, err)
	}
	d, err = a.DescribeGroup(ctx, "zg")
	if err != nil {
		t.Fatal(err)
	}
	var lag int64
	for _, r := range d.Partitions {
		if r.BrokerID == 2 && *r.Committed != 0 || r.Owner != "" {
			t.Fatalf("after reset: %+v", r)
		}
		lag += *r.LagMessages
	}
	var want int64
	for _, o := range ts[0].Offsets {
		if o.BrokerID == 2 {
			want += o.Messages
		}
	}
	if lag != want {
		t.Fatalf("lag %d messages, want broker 2's %d", lag, want)
	}
}

// TestLagMessages: the broker counts the lag in messages exactly
// (`stats count:`, its record-count index), small or large (beyond the 4
// MiB that DescribeGroup would count itself from an older broker).
func TestLagMessages(t *testing.T) {
	b := brokertest.Start(t, brokertest.Quiet(), brokertest.Topics("big"))
	p := producer(t, client.Brokers(b.Addr()), client.Batching(500, 1<<20, time.Millisecond))
	ctx := ctxT(t, 60*time.Second)
	const n = 5000
	var res []client.SendResult
	var last *message.Message
	for i := 0; i < n; i += 500 {
		msgs := make([]*message.Message, 500)
		for j := range msgs {
			msgs[j] = &message.Message{Topic: "big", Body: []byte(strings.Repeat("b", 1000))}
		}
		r, err := p.ProduceSync(ctx, msgs...)
		if err != nil {
			t.Fatal(err)
		}
		res = append(res, r...)
		last = msgs[len(msgs)-1]
	}
	a := newAdmin(t, client.Brokers(b.Addr()))
	for _, c := range []struct {
		from      int
		estimated bool
	}{{1, false}, {n - 1000, false}, {0, false}, {n, false}} {
		off := int64(0)
		if c.from < n {
			off = res[c.from].Offset
		} else {
			off = res[n-1].Offset + int64(message.HeaderSize+last.DataLen()) // the producer's field included
		}
		if _, err := a.ResetOffsets(ctx, "lag", admin.ToOffset(off), admin.ResetOptions{Topics: []string{"big"}, Execute: true}); err != nil {
			t.Fatal(err)
		}
		d, err := a.DescribeGroup(ctx, "lag")
		if err != nil {
			t.Fatal(err)
		}
		r := d.Partitions[0]
		if *r.Committed != off || *r.LagMessages != int64(n-c.from) || r.LagMessagesEstimated != c.estimated {
			t.Fatalf("from message %d: %+v (lag %d messages), want %d, estimated %t", c.from, r, *r.LagMessages, n-c.from, c.estimated)
		}
	}
}

// TestTransactions: two XA branches begun and prepared with raw requests
// (client.Client.Request, all on the Client's one connection) are listed
// open and prepared; one is committed and one rolled back heuristically,
// after which they are heuristic and the coordinator's commit is refused;
// Forget removes an outcome; a local key is refused before sending.
func TestTransactions(t *testing.T) {
	b := brokertest.Start(t, brokertest.Quiet())
	addr := b.Addr()
	cl, err := client.New(client.Logger(quiet), client.Brokers(addr))
	if err != nil {
		t.Fatal(err)
	}
	a := admin.New(cl)
	t.Cleanup(func() { a.Close() })
	ctx := ctxT(t, 30*time.Second)
	tx := func(key string, typ protocol.TxType) (string, error) {
		body, err := cl.Request(ctx, addr, func(dst []byte, op int32) []byte {
			return protocol.AppendTransaction(dst, key, "s", typ, 0, "q", op)
		})
		return string(body), err
	}
	keys := []string{"XID:1:0a:01:q", "XID:2:0a:01:q"}
	for _, key := range keys {
		if _, err := tx(key, protocol.TxBegin); err != nil {
			t.Fatalf("begin: %v", err)
		}
		if _, err := cl.Request(ctx, addr, func(dst []byte, op int32) []byte {
			return append(protocol.AppendTxPutHeader(dst, "t", 0, 3, 0, protocol.NoChecksum, key, op), "msg"...)
		}); err != nil {
			t.Fatalf("put: %v", err)
		}
		if body, err := tx(key, protocol.TxPrepare); err != nil || body != "0" {
			t.Fatalf("prepare: %q %v", body, err)
		}
	}
	txs, err := a.Transactions(ctx, addr)
	if err != nil {
		t.Fatal(err)
	}
	if len(txs.Open) != 2 || txs.BufferedBytes != 6 || len(txs.Heuristic) != 0 ||
		txs.Open[0].Key != keys[0] || txs.Open[0].Type != "xa" || txs.Open[0].State != "prepared" ||
		txs.Open[0].Session != "s" || txs.Open[0].Messages != 1 || txs.Open[0].Bytes != 3 {
		t.Fatalf("transactions: %+v", txs)
	}
	prep, err := a.PreparedTransactions(ctx, addr)
	if err != nil || !slices.Equal(prep, keys) {
		t.Fatalf("prepared: %q %v", prep, err)
	}
	if err := a.CommitHeuristically(ctx, addr, "XID:1:0A:01:q"); err != nil {
		t.Fatal(err)
	}
	if err := a.RollbackHeuristically(ctx, addr, keys[1]); err != nil {
		t.Fatal(err)
	}
	for i, want := range []int{protocol.XAHeurCom, protocol.XAHeurRB} {
		_, err := tx(keys[i], protocol.TxCommitTwoPhase)
		var be *client.BrokerError
		if !errors.As(err, &be) {
			t.Fatalf("late commit of %s: %v", keys[i], err)
		}
		if got, _, ok := protocol.ParseXAError([]byte(be.Msg)); be.Code != 500 || !ok || got != want {
			t.Fatalf("late commit of %s: %v, want XA code %d", keys[i], err, want)
		}
	}
	txs, err = a.Transactions(ctx, addr)
	if err != nil {
		t.Fatal(err)
	}
	if len(txs.Open) != 0 || len(txs.Heuristic) != 2 || txs.Heuristic[0].Key != keys[0] ||
		txs.Heuristic[0].State != "heuristic_committed" || txs.Heuristic[1].State != "heuristic_rolled_back" {
		t.Fatalf("transactions after: %+v", txs)
	}
	if err := a.Forget(ctx, addr, keys[0]); err != nil {
		t.Fatal(err)
	}
	var be *client.BrokerError
	if err := a.Forget(ctx, addr, keys[0]); !errors.As(err, &be) || !strings.Contains(be.Msg, "XAException:code=-4") {
		t.Fatalf("second forget: %v", err)
	}
	if err := a.CommitHeuristically(ctx, addr, "TX:s:1"); err == nil || !strings.Contains(err.Error(), "applies to XA branches") {
		t.Fatalf("local key: %v", err)
	}
}

// TestTopicAdmin: the topic calls through an explicit admin API address,
// the typed refusal, and an Admin that cannot tell which broker's API to
// use.
func TestTopicAdmin(t *testing.T) {
	b := brokertest.Start(t, brokertest.Quiet(), brokertest.HTTP())
	a := newAdmin(t, client.Brokers(b.Addr()))
	ctx := ctxT(t, 30*time.Second)
	h, err := a.HTTPAddr(ctx, b.Addr())
	if err != nil || h != b.HTTPAddr() {
		t.Fatalf("HTTPAddr: %q %v, want %q", h, err, b.HTTPAddr())
	}
	a.SetHTTPAddr(b.HTTPAddr())
	if ct, err := a.CreateTopic(ctx, "orders", 0); err != nil || ct.Name != "orders" || ct.Partitions != 1 {
		t.Fatalf("CreateTopic: %+v %v", ct, err)
	}
	_, err = a.CreateTopic(ctx, "orders", 0)
	var ae *admin.APIError
	if !errors.As(err, &ae) || ae.StatusCode != 409 || ae.Method != "POST" || ae.Path != "/api/v1/topics" || ae.Message == "" {
		t.Fatalf("second CreateTopic: %#v", err)
	}
	if alt, err := a.AddPartitions(ctx, "orders", 1); err != nil || alt.Old != 1 || alt.New != 1 {
		t.Fatalf("AddPartitions to as many: %+v %v", alt, err)
	}
	if err := a.DeleteTopic(ctx, "orders", true); err != nil {
		t.Fatal(err)
	}
	two := newAdmin(t, client.Brokers(b.Addr(), "127.0.0.1:1"))
	if _, err := two.CreateTopic(ctx, "x", 1); err == nil || !strings.Contains(err.Error(), "need one broker") {
		t.Fatalf("two brokers: %v", err)
	}
}

// TestOffsetForCreateTime: records that carry a create timestamp (a replay
// of old data, stamped 2020) are found by that timestamp, and records
// without one by the time they were stored; a time after every record is
// the log end.
func TestOffsetForCreateTime(t *testing.T) {
	b := brokertest.Start(t, brokertest.Quiet(), brokertest.Topics("ts"))
	p := producer(t, client.Brokers(b.Addr()))
	ctx := ctxT(t, 30*time.Second)
	base := time.Date(2020, 1, 1, 0, 0, 0, 0, time.UTC)
	var res []client.SendResult
	for i := range 20 {
		r, err := p.ProduceSync(ctx, &message.Message{Topic: "ts", Partition: 0, Body: []byte("replayed"),
			Timestamp: base.Add(time.Duration(i) * time.Minute)})
		if err != nil {
			t.Fatal(err)
		}
		res = append(res, r...)
	}
	stamped := time.Now()
	time.Sleep(5 * time.Millisecond)
	live := &message.Message{Topic: "ts", Partition: 0, Body: []byte("live")}
	r, err := p.ProduceSync(ctx, live)
	if err != nil {
		t.Fatal(err)
	}
	res = append(res, r...)
	a := newAdmin(t, client.Brokers(b.Addr()))
	for _, c := range []struct {
		at   time.Time
		want int64
	}{
		{base.Add(-time.Hour), res[0].Offset},
		{base, res[0].Offset},
		{base.Add(7*time.Minute - time.Second), res[7].Offset},
		{base.Add(19 * time.Minute), res[19].Offset},
		{base.Add(20 * time.Minute), res[20].Offset}, // the live message, stored now
		{stamped, res[20].Offset},
		{time.Now().Add(time.Hour), res[20].Offset + int64(message.HeaderSize+live.DataLen())},
	} {
		got, err := a.OffsetForTime(ctx, "ts", 0, 0, c.at)
		if err != nil || got != c.want {
			t.Fatalf("OffsetForTime(%s) = %d, %v; want %d", c.at, got, err, c.want)
		}
	}
}

// TestOffsetForTimeSkipsNothing: with small segments, runs of live
// records, of records stamped 2020 (a replay) and of live records again,
// and a delayed message delivered at a segment's start (it keeps the older
// id of its acceptance), a time between two live records finds the first
// live record stored at or after it: the bisection runs on stored times,
// so no record newer than the time is skipped.
func TestOffsetForTimeSkipsNothing(t *testing.T) {
	b := brokertest.Start(t, brokertest.Quiet(), brokertest.Topics("tsk"),
		brokertest.Edit(func(c *conf.Config) { c.MaxSegmentSize = 4 << 10 }))
	p := producer(t, client.Brokers(b.Addr()))
	ctx := ctxT(t, 30*time.Second)
	send := func(m *message.Message) client.SendResult {
		t.Helper()
		m.Topic, m.Partition = "tsk", 0
		r, err := p.ProduceSync(ctx, m)
		if err != nil {
			t.Fatal(err)
		}
		return r[0]
	}
	body := []byte(strings.Repeat("v", 300))
	// A delayed message, accepted first, delivered after the first live run.
	send(&message.Message{Body: body, Delay: 1500 * time.Millisecond})
	type rec struct {
		off int64
		at  time.Time
	}
	var live []rec
	for range 12 {
		live = append(live, rec{send(&message.Message{Body: body}).Offset, time.Now()})
		time.Sleep(3 * time.Millisecond)
	}
	old := time.Date(2020, 1, 1, 0, 0, 0, 0, time.UTC)
	for i := range 12 {
		send(&message.Message{Body: body, Timestamp: old.Add(time.Duration(i) * time.Second)})
	}
	time.Sleep(1600 * time.Millisecond) // the delayed message is delivered
	for range 12 {
		live = append(live, rec{send(&message.Message{Body: body}).Offset, time.Now()})
		time.Sleep(3 * time.Millisecond)
	}
	a := newAdmin(t, client.Brokers(b.Addr()))
	for i := 1; i < len(live); i++ {
		// Just after live[i-1] was acknowledged: live[i] was stored at or
		// after it; the answer may be earlier (a replayed or delivered
		// record) but never past live[i].
		at := live[i-1].at.Add(time.Millisecond)
		got, err := a.OffsetForTime(ctx, "tsk", 0, 0, at)
		if err != nil {
			t.Fatal(err)
		}
		if got > live[i].off {
			t.Fatalf("OffsetForTime(just after live[%d]) = %d, past live[%d] at %d", i-1, got, i, live[i].off)
		}
		if got <= live[i-1].off && i-1 < 12 {
			t.Fatalf("OffsetForTime(just after live[%d]) = %d, at or before it (%d)", i-1, got, live[i-1].off)
		}
	}
}
