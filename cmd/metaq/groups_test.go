package main

import (
	"context"
	"encoding/json"
	"fmt"
	"regexp"
	"strconv"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/go-zookeeper/zk"

	"github.com/metaq-go/metaq/conf"
	"github.com/metaq-go/metaq/core/broker"
	"github.com/metaq-go/metaq/internal/brokertest"
	"github.com/metaq-go/metaq/internal/testsvc"
	"github.com/metaq-go/metaq/internal/zkpath"
	"github.com/metaq-go/metaq/sdk/admin"
	"github.com/metaq-go/metaq/sdk/client"
	"github.com/metaq-go/metaq/sdk/message"
	"github.com/metaq-go/metaq/sdk/selector"
)

// groupBroker runs an in-process broker on 127.0.0.1 with topic gt (2
// partitions) and small segments, so that a time search crosses several.
func groupBroker(t *testing.T, id int, zkAddr, root string) *broker.Broker {
	return groupBrokerSeg(t, id, zkAddr, root, 4096)
}

func groupBrokerSeg(t *testing.T, id int, zkAddr, root string, segSize int64) *broker.Broker {
	t.Helper()
	opts := []brokertest.Option{brokertest.Quiet(), brokertest.Topics("gt", "other"), brokertest.Partitions(2),
		brokertest.Edit(func(c *conf.Config) { c.BrokerID, c.MaxSegmentSize = id, segSize })}
	if zkAddr != "" {
		opts = append(opts, brokertest.ZooKeeper(zkAddr, root, id), brokertest.Edit(func(c *conf.Config) {
			c.ZooKeeper.SessionTimeout, c.ZooKeeper.ConnectionTimeout = 4000, 5000
		}))
	}
	return brokertest.Start(t, append(opts, smallJournal())...).Broker
}

func groupCtx(t *testing.T, d time.Duration) context.Context {
	ctx, cancel := context.WithTimeout(context.Background(), d)
	t.Cleanup(cancel)
	return ctx
}

// produceN sends n messages of about 120 bytes round robin to gt and
// returns, per partition, the offset of the first one.
func produceN(t *testing.T, addr string, n int, tag string) map[int32]int64 {
	t.Helper()
	p, err := client.New(client.Logger(silentLogger), client.Brokers(addr))
	if err != nil {
		t.Fatal(err)
	}
	defer p.Close(context.Background())
	first := map[int32]int64{}
	body := strings.Repeat("x", 100)
	for i := range n {
		res, err := p.ProduceSync(groupCtx(t, 5*time.Second), &message.Message{Topic: "gt", Body: []byte(tag + strconv.Itoa(i) + body)})
		if err != nil {
			t.Fatal(err)
		}
		if _, ok := first[res[0].Partition]; !ok {
			first[res[0].Partition] = res[0].Offset
		}
	}
	return first
}

// testAdmin is an Admin of the broker at addr.
func testAdmin(t *testing.T, addr string) *admin.Admin {
	t.Helper()
	cl, err := client.New(client.Logger(silentLogger), client.Brokers(addr))
	if err != nil {
		t.Fatal(err)
	}
	adm := admin.New(cl)
	t.Cleanup(func() { adm.Close() })
	return adm
}

// fetchOffsets returns the group's committed offsets of parts on the
// broker at addr (-1: none).
func fetchOffsets(t *testing.T, addr, group, topic string, parts ...int32) []int64 {
	t.Helper()
	d, err := testAdmin(t, addr).DescribeGroup(groupCtx(t, 5*time.Second), group, topic)
	if err != nil {
		t.Fatal(err)
	}
	out := make([]int64, len(parts))
	for i, p := range parts {
		out[i] = -1
		for _, r := range d.Partitions {
			if r.Partition == p && r.Committed != nil {
				out[i] = *r.Committed
			}
		}
	}
	return out
}

// commitOffsets commits the group's offsets of topic on the broker at
// addr (record starts).
func commitOffsets(t *testing.T, addr, group, topic string, offs map[int32]int64) {
	t.Helper()
	adm := testAdmin(t, addr)
	for p, off := range offs {
		_, err := adm.ResetOffsets(groupCtx(t, 5*time.Second), group, admin.ToOffset(off), admin.ResetOptions{Topics: []string{topic},
			Execute: true, Match: func(r admin.GroupPartition) bool { return r.Partition == p }})
		if err != nil {
			t.Fatal(err)
		}
	}
}

func partitionEnds(t *testing.T, addr, topic string) map[int32][2]int64 {
	t.Helper()
	infos, err := testAdmin(t, addr).Topics(groupCtx(t, 5*time.Second))
	if err != nil {
		t.Fatal(err)
	}
	out := map[int32][2]int64{}
	for _, ti := range infos {
		if ti.Name == topic {
			for _, o := range ti.Offsets {
				out[o.Partition] = [2]int64{o.Min, o.Max}
			}
		}
	}
	return out
}

func mustMatchGroup(t *testing.T, re, s string) {
	t.Helper()
	if !regexp.MustCompile(re).MatchString(s) {
		t.Fatalf("output does not match %q:\n%s", re, s)
	}
}

func mustFailGroup(t *testing.T, r result, code int, stderr string) {
	t.Helper()
	if r.code != code || !strings.Contains(r.stderr, stderr) {
		t.Fatalf("want exit %d and %q on stderr, got exit %d\nstdout: %s\nstderr: %s", code, stderr, r.code, r.stdout, r.stderr)
	}
}

func describeJSON(t *testing.T, args ...string) admin.GroupDescription {
	t.Helper()
	r := cli("", append(args, "--json")...)
	mustOK(t, r, "describe --json")
	var d admin.GroupDescription
	if err := json.Unmarshal([]byte(r.stdout), &d); err != nil {
		t.Fatalf("%v\n%s", err, r.stdout)
	}
	return d
}

// TestGroupsLocal: a group coordinated by one broker (local mode), with two
// live SDK members, then stopped and its offsets reset.
func TestGroupsLocal(t *testing.T) {
	t.Parallel()
	b := groupBroker(t, 0, "", "")
	addr := b.Addr()
	a := "--addr=" + addr
	const g = "lg"

	firstA := produceN(t, addr, 100, "a")
	time.Sleep(5 * time.Millisecond)
	at := time.Now()
	time.Sleep(5 * time.Millisecond)
	firstB := produceN(t, addr, 100, "b")
	ends := partitionEnds(t, addr, "gt")
	if firstA[0] != 0 || firstA[1] != 0 || firstB[0] <= 4096 || firstB[1] <= 4096 {
		t.Fatalf("first offsets a %v b %v: want b beyond the first segment", firstA, firstB)
	}

	// Two members consume everything and commit.
	var got atomic.Int64
	var members []*client.Client
	for _, id := range []string{"m-a", "m-b"} {
		c, err := client.New(client.Logger(silentLogger), client.Brokers(addr), client.ConsumeTopics("gt"), client.ConsumerGroup(g),
			client.ConsumerID(id), client.HeartbeatInterval(100*time.Millisecond), client.CommitInterval(50*time.Millisecond),
			client.FetchMaxWait(20*time.Millisecond))
		if err != nil {
			t.Fatal(err)
		}
		done := make(chan struct{})
		go func() {
			defer close(done)
			c.Consume(context.Background(), func(context.Context, *message.Message) error { got.Add(1); return nil })
		}()
		t.Cleanup(func() { c.Close(context.Background()); <-done })
		members = append(members, c)
	}
	deadline := time.Now().Add(20 * time.Second)
	for {
		if r := cli("", a, "group", "describe", g); r.code != 0 && time.Now().Before(deadline) {
			// The members have not joined yet: "group not found".
			time.Sleep(50 * time.Millisecond)
			continue
		}
		d := describeJSON(t, a, "group", "describe", g)
		settled := len(d.Members) == 2 && len(d.Partitions) == 2
		for _, p := range d.Partitions {
			settled = settled && p.Owner != "" && p.Committed != nil && *p.Committed == ends[p.Partition][1] && *p.Lag == 0
		}
		if settled && d.Members[0].Partitions == 1 && d.Members[1].Partitions == 1 {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("group did not settle (consumed %d): %+v", got.Load(), d)
		}
		time.Sleep(50 * time.Millisecond)
	}

	r := cli("", a, "groups")
	mustOK(t, r, "groups")
	mustMatchGroup(t, `^GROUP +TOPICS +MEMBERS\nlg +gt +2\n$`, r.stdout)
	r = cli("", a, "groups", "--json")
	mustOK(t, r, "groups --json")
	var list []admin.GroupSummary
	if err := json.Unmarshal([]byte(r.stdout), &list); err != nil || len(list) != 1 || list[0].Members != 2 || list[0].Topics[0] != "gt" {
		t.Fatalf("groups --json: %v %s", err, r.stdout)
	}

	r = cli("", "group", "describe", g, a)
	mustOK(t, r, "describe")
	t.Logf("group describe:\n%s", r.stdout)
	mustMatchGroup(t, `group lg \(local mode, broker `+regexp.QuoteMeta(addr)+`\)\n`, r.stdout)
	mustMatchGroup(t, `\nTOPIC +BROKER +PARTITION +COMMITTED +LOG_END +LAG +LAG_MSGS +OWNER\n`, r.stdout)
	mustMatchGroup(t, fmt.Sprintf(`\ngt +0 +0 +%d +%d +0 +0 +m-[ab]\ngt +0 +1 +%d +%d +0 +0 +m-[ab]\n`, ends[0][1], ends[0][1], ends[1][1], ends[1][1]), r.stdout)
	mustMatchGroup(t, `\nmembers: 2\nID +TOPICS +PARTITIONS\nm-a +gt +1\nm-b +gt +1\n$`, r.stdout)

	// Live members: a dry run warns, --execute is refused.
	r = cli("", a, "group", "reset-offsets", g, "--to", "earliest")
	mustOK(t, r, "dry run with members")
	if !strings.Contains(r.stderr, "live member") || !strings.Contains(r.stderr, "dry run") {
		t.Fatalf("stderr: %s", r.stderr)
	}
	mustFailGroup(t, cli("", a, "group", "reset-offsets", g, "--to", "earliest", "--execute"), 1, "group lg has 2 live member(s) (m-a, m-b): refusing")
	if o := fetchOffsets(t, addr, g, "gt", 0, 1); o[0] != ends[0][1] || o[1] != ends[1][1] {
		t.Fatalf("refused reset changed offsets: %v", o)
	}

	for _, c := range members {
		if err := c.Close(groupCtx(t, 10*time.Second)); err != nil {
			t.Fatal(err)
		}
	}
	// The group has no live member left but committed offsets: it stays
	// listed, marked as such (issue 23: it used to vanish from the list).
	for deadline := time.Now().Add(10 * time.Second); ; time.Sleep(20 * time.Millisecond) {
		r = cli("", a, "groups")
		mustOK(t, r, "groups after stop")
		if regexp.MustCompile(`^GROUP +TOPICS +MEMBERS\nlg +gt +0 \(committed offsets, no live member\)\n$`).MatchString(r.stdout) {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("groups after the members left:\n%s", r.stdout)
		}
	}

	// Dry run: the plan, nothing changes.
	r = cli("", a, "group", "reset-offsets", g, "--to", "earliest")
	mustOK(t, r, "dry run")
	mustMatchGroup(t, fmt.Sprintf(`^TOPIC +BROKER +PARTITION +CURRENT +NEW\ngt +0 +0 +%d +0\ngt +0 +1 +%d +0\n$`, ends[0][1], ends[1][1]), r.stdout)
	if !strings.Contains(r.stderr, "dry run: nothing changed") {
		t.Fatalf("stderr: %s", r.stderr)
	}
	if o := fetchOffsets(t, addr, g, "gt", 0, 1); o[0] != ends[0][1] || o[1] != ends[1][1] {
		t.Fatalf("dry run changed offsets: %v", o)
	}

	reset := func(want0, want1 int64, args ...string) {
		t.Helper()
		r := cli("", append([]string{a, "group", "reset-offsets", g, "--execute"}, args...)...)
		mustOK(t, r, "reset "+strings.Join(args, " "))
		if !strings.Contains(r.stderr, "committed") {
			t.Fatalf("stderr: %s", r.stderr)
		}
		if o := fetchOffsets(t, addr, g, "gt", 0, 1); o[0] != want0 || o[1] != want1 {
			t.Fatalf("reset %v: offsets %v, want [%d %d]", args, o, want0, want1)
		}
	}
	reset(0, 0, "--to", "earliest")
	reset(ends[0][1], ends[1][1], "--to", "latest")
	reset(firstB[0], firstB[1], "--to", "@"+strconv.FormatInt(at.UnixMilli(), 10))
	reset(ends[0][1], ends[1][1], "--to", "latest", "--topic", "gt")
	reset(firstB[0], firstB[1], "--to", at.Format(time.RFC3339Nano))
	reset(0, 0, "--to", "@0")
	reset(ends[0][1], ends[1][1], "--to", time.Now().Add(time.Hour).Format(time.RFC3339))
	// One partition, to a byte offset.
	reset(ends[0][1], firstB[1], "--to", strconv.FormatInt(firstB[1], 10), "--partition", "1")
	reset(firstB[0], firstB[1], "--to", strconv.FormatInt(firstB[0], 10), "--partition", "0-0", "--json")

	// The committed offsets stay visible with no members.
	d := describeJSON(t, a, "group", "describe", g)
	if len(d.Members) != 0 || len(d.Partitions) != 2 || *d.Partitions[0].Committed != firstB[0] ||
		*d.Partitions[0].Lag != ends[0][1]-firstB[0] || d.Partitions[0].Owner != "" || *d.Partitions[1].LogStart != 0 {
		t.Fatalf("describe after reset: %+v", d)
	}
	r = cli("", a, "group", "describe", g)
	mustOK(t, r, "describe, no members")
	mustMatchGroup(t, fmt.Sprintf(`\ngt +0 +0 +%d +%d +%d +%d +-\n`, firstB[0], ends[0][1], ends[0][1]-firstB[0], *d.Partitions[0].LagMessages), r.stdout)
	if n := *d.Partitions[0].LagMessages + *d.Partitions[1].LagMessages; n != 100 || d.Partitions[0].LagMessagesEstimated {
		t.Fatalf("lag %d messages (estimated: %t), want the 100 b messages", n, d.Partitions[0].LagMessagesEstimated)
	}
	mustMatchGroup(t, `\nmembers: 0\n$`, r.stdout)

	// --json plan; bad offsets are refused and change nothing.
	r = cli("", a, "group", "reset-offsets", g, "--to", "latest", "--json")
	mustOK(t, r, "reset --json")
	var plan admin.ResetPlan
	if err := json.Unmarshal([]byte(r.stdout), &plan); err != nil || plan.Executed || len(plan.Partitions) != 2 ||
		*plan.Partitions[1].Current != firstB[1] || plan.Partitions[1].New != ends[1][1] {
		t.Fatalf("reset --json: %v %s", err, r.stdout)
	}
	mustFailGroup(t, cli("", a, "group", "reset-offsets", g, "--to", strconv.FormatInt(firstB[0]+1, 10), "--partition", "0", "--execute"),
		1, "is not the start of a record")
	mustFailGroup(t, cli("", a, "group", "reset-offsets", g, "--to", strconv.FormatInt(ends[0][1]+20, 10), "--execute"),
		1, "is outside")
	mustFailGroup(t, cli("", a, "group", "reset-offsets", g, "--to", "earliest", "--topic", "nope"), 1, `unknown topic "nope"`)
	mustFailGroup(t, cli("", a, "group", "reset-offsets", g, "--to", "earliest", "--partition", "7"), 1, "no partition of group lg matches")
	if o := fetchOffsets(t, addr, g, "gt", 0, 1); o[0] != firstB[0] || o[1] != firstB[1] {
		t.Fatalf("refused resets changed offsets: %v", o)
	}

	// A group nobody knows; --topic shows the partitions anyway.
	mustFailGroup(t, cli("", a, "group", "describe", "nobody"), 1, `group "nobody" not found`)
	mustFailGroup(t, cli("", a, "group", "reset-offsets", "nobody", "--to", "latest"), 1, "name the topics with --topic")
	r = cli("", a, "group", "describe", "nobody", "--topic", "other")
	mustOK(t, r, "describe --topic")
	mustMatchGroup(t, `\nother +0 +0 +- +0 +- +- +-\nother +0 +1 +- +0 +- +- +-\n`, r.stdout)

	// Usage errors.
	for _, args := range [][]string{
		{"group"}, {"group", "frob", g}, {"group", "describe"}, {"group", "describe", "a", "b"},
		{"group", "reset-offsets", g}, {"group", "reset-offsets", g, "--to", "soon"}, {"group", "reset-offsets", g, "--to", "-3"},
		{"group", "reset-offsets", g, "--to", "@x"}, {"group", "reset-offsets", g, "--to", "latest", "--partition", "x"},
		{"groups", "extra"}, {"groups", "--zk", "127.0.0.1:1", "--root", "meta"},
	} {
		if r := cli("", append([]string{a}, args...)...); r.code != 2 {
			t.Errorf("%v: exit %d, want 2\n%s", args, r.code, r.stderr)
		}
	}
	if r := cli("", "help", "group"); r.code != 0 || !strings.Contains(r.stdout, "reset-offsets") {
		t.Errorf("help group: %d %s", r.code, r.stdout)
	}
	// No broker.
	port, _ := freePort()
	mustFailGroup(t, cli("", "--addr", "127.0.0.1:"+strconv.Itoa(port), "groups"), 1, "cannot reach the broker")
}

// TestGroupsResetLargeRecords: a time search and an offset check that meet
// records larger than one read.
func TestGroupsResetLargeRecords(t *testing.T) {
	t.Parallel()
	b := groupBrokerSeg(t, 0, "", "", 8<<20)
	addr := b.Addr()
	p, err := client.New(client.Logger(silentLogger), client.Brokers(addr), client.Selector(selector.Fixed(0)), client.ProduceRetries(false))
	if err != nil {
		t.Fatal(err)
	}
	defer p.Close(context.Background())
	send := func(size int) int64 {
		t.Helper()
		res, err := p.ProduceSync(groupCtx(t, 5*time.Second), &message.Message{Topic: "gt", Body: []byte(strings.Repeat("y", size))})
		if err != nil {
			t.Fatal(err)
		}
		return res[0].Offset
	}
	for range 10 {
		send(1000)
	}
	big := send(600 << 10)
	send(700 << 10)
	time.Sleep(5 * time.Millisecond)
	at := time.Now().UnixMilli()
	time.Sleep(5 * time.Millisecond)
	want := send(500 << 10)
	send(10)
	a := "--addr=" + addr
	r := cli("", a, "group", "reset-offsets", "big", "--topic", "gt", "--partition", "0", "--to", "@"+strconv.FormatInt(at, 10), "--execute")
	mustOK(t, r, "reset to a time")
	if o := fetchOffsets(t, addr, "big", "gt", 0); o[0] != want {
		t.Fatalf("offset %d, want %d\n%s", o[0], want, r.stdout)
	}
	r = cli("", a, "group", "reset-offsets", "big", "--topic", "gt", "--partition", "0", "--to", strconv.FormatInt(big, 10), "--execute")
	mustOK(t, r, "reset to a large record")
	mustFailGroup(t, cli("", a, "group", "reset-offsets", "big", "--topic", "gt", "--partition", "0", "--to", strconv.FormatInt(big+20, 10)),
		1, "not the start of a record")
	if o := fetchOffsets(t, addr, "big", "gt", 0); o[0] != big {
		t.Fatalf("offset %d, want %d", o[0], big)
	}
}

func TestParseResetTo(t *testing.T) {
	t.Parallel()
	for in, want := range map[string]resetTo{
		"earliest":                       {kind: "earliest"},
		"latest":                         {kind: "latest"},
		"0":                              {kind: "offset"},
		"1044":                           {kind: "offset", offset: 1044},
		"@1714557600000":                 {kind: "time", ms: 1714557600000},
		"2024-05-01T10:00:00Z":           {kind: "time", ms: 1714557600000},
		"2024-05-01T12:00:00.25+02:00":   {kind: "time", ms: 1714557600250},
		"2024-05-01T10:00:00.0001Z":      {kind: "time", ms: 1714557600001}, // rounded up
		"2024-05-01T10:00:00.999999Z":    {kind: "time", ms: 1714557601000},
		"2024-05-01T10:00:00.001000000Z": {kind: "time", ms: 1714557600001},
	} {
		got, err := parseResetTo("--to", in)
		if err != nil || got != want {
			t.Errorf("%q: %+v %v, want %+v", in, got, err, want)
		}
	}
	for _, in := range []string{"", "soon", "-1", "@", "@-5", "2024-05-01", "1e3"} {
		if _, err := parseResetTo("--to", in); err == nil {
			t.Errorf("%q: no error", in)
		}
	}
}

// TestGroupsCluster: two brokers registered in a real ZooKeeper, and a
// group's members and owners as MetaQ's consumers register them.
func TestGroupsCluster(t *testing.T) {
	t.Parallel()
	zkAddr := testsvc.ZooKeeper(t)
	root := fmt.Sprintf("/groups-test-%d", time.Now().UnixNano())
	b1 := groupBroker(t, 1, zkAddr, root)
	b2 := groupBroker(t, 2, zkAddr, root)
	for _, b := range []*broker.Broker{b1, b2} {
		deadline := time.Now().Add(10 * time.Second)
		for !b.Registered() {
			if time.Now().After(deadline) {
				t.Fatal("broker not registered")
			}
			time.Sleep(20 * time.Millisecond)
		}
	}
	produceN(t, b1.Addr(), 10, "a")
	produceN(t, b2.Addr(), 6, "a")
	time.Sleep(5 * time.Millisecond)
	at := time.Now()
	time.Sleep(5 * time.Millisecond)
	first2 := produceN(t, b2.Addr(), 4, "b")
	ends1, ends2 := partitionEnds(t, b1.Addr(), "gt"), partitionEnds(t, b2.Addr(), "gt")
	const g = "cg"
	commitOffsets(t, b1.Addr(), g, "gt", map[int32]int64{0: 0})

	// The members, as the SDK's and MetaQ's ZooKeeper consumers register them.
	zc, _, err := zk.Connect([]string{zkAddr}, 10*time.Second, zk.WithLogInfo(false))
	if err != nil {
		t.Fatal(err)
	}
	defer zc.Close()
	for _, p := range []string{zkpath.Consumers(root), zkpath.Group(root, g), zkpath.Members(root, g), zkpath.Owners(root, g),
		zkpath.OwnersTopic(root, g, "gt"), zkpath.Group(root, "idle"), zkpath.Offsets(root, "idle"), zkpath.OffsetsTopic(root, "idle", "other")} {
		if _, err := zc.Create(p, nil, 0, zk.WorldACL(zk.PermAll)); err != nil && err != zk.ErrNodeExists {
			t.Fatalf("create %s: %v", p, err)
		}
	}
	eph := func(p, data string) {
		t.Helper()
		if _, err := zc.Create(p, []byte(data), zk.FlagEphemeral, zk.WorldACL(zk.PermAll)); err != nil {
			t.Fatalf("create %s: %v", p, err)
		}
	}
	eph(zkpath.Member(root, g, "cg_a"), "gt")
	eph(zkpath.Member(root, g, "cg_b"), "gt,other")
	eph(zkpath.Owner(root, g, "gt", 1, 0), "cg_a")
	eph(zkpath.Owner(root, g, "gt", 2, 1), "cg_a")
	eph(zkpath.Owner(root, g, "gt", 1, 1), "cg_b")
	z := []string{"--zk", zkAddr, "--root", root}

	r := cli("", append([]string{"groups"}, z...)...)
	mustOK(t, r, "groups --zk")
	mustMatchGroup(t, `^GROUP +TOPICS +MEMBERS\ncg +gt,other +2\nidle +other +0\n$`, r.stdout)

	r = cli("", append([]string{"group", "describe", g}, z...)...)
	mustOK(t, r, "describe --zk")
	t.Logf("group describe --zk:\n%s", r.stdout)
	mustMatchGroup(t, fmt.Sprintf(`\ngt +1 +0 +0 +%d +%d +\d+ +cg_a\ngt +1 +1 +- +%d +- +- +cg_b\ngt +2 +0 +- +%d +- +- +-\ngt +2 +1 +- +%d +- +- +cg_a\n`,
		ends1[0][1], ends1[0][1], ends1[1][1], ends2[0][1], ends2[1][1]), r.stdout)
	mustMatchGroup(t, `\nother +1 +0 +- +0 +- +- +-\n`, r.stdout)
	mustMatchGroup(t, `\nmembers: 2\nID +TOPICS +PARTITIONS\ncg_a +gt +2\ncg_b +gt,other +1\n$`, r.stdout)

	// --zk-root is --root; an owner of a partition no broker registers.
	eph(zkpath.Owner(root, g, "gt", 3, 0), "cg_b")
	d := describeJSON(t, "group", "describe", g, "--topic", "gt", "--zk", zkAddr, "--zk-root", root)
	if d.Mode != "cluster" || len(d.Partitions) != 5 || d.Partitions[4].BrokerID != 3 || d.Partitions[4].LogEnd != nil || d.Partitions[4].Owner != "cg_b" {
		t.Fatalf("describe --json: %+v", d)
	}
	if err := zc.Delete(zkpath.Owner(root, "cg", "gt", 3, 0), -1); err != nil {
		t.Fatal(err)
	}

	mustFailGroup(t, cli("", append([]string{"group", "reset-offsets", g, "--to", "latest", "--execute"}, z...)...), 1, "live member")
	for _, id := range []string{"cg_a", "cg_b"} {
		if err := zc.Delete(zkpath.Member(root, g, id), -1); err != nil {
			t.Fatal(err)
		}
	}
	r = cli("", append([]string{"group", "reset-offsets", g, "--to", "latest", "--topic", "gt"}, z...)...)
	mustOK(t, r, "dry run --zk")
	mustMatchGroup(t, fmt.Sprintf(`\ngt +1 +0 +0 +%d\ngt +1 +1 +- +%d\ngt +2 +0 +- +%d\ngt +2 +1 +- +%d\n$`,
		ends1[0][1], ends1[1][1], ends2[0][1], ends2[1][1]), r.stdout)
	if o := fetchOffsets(t, b1.Addr(), g, "gt", 0, 1); o[0] != 0 || o[1] != -1 {
		t.Fatalf("dry run changed offsets: %v", o)
	}
	r = cli("", append([]string{"group", "reset-offsets", g, "--to", "@" + strconv.FormatInt(at.UnixMilli(), 10), "--topic", "gt", "--execute"}, z...)...)
	mustOK(t, r, "reset --zk")
	if o := fetchOffsets(t, b1.Addr(), g, "gt", 0, 1); o[0] != ends1[0][1] || o[1] != ends1[1][1] {
		t.Fatalf("broker 1 offsets %v, want the ends %v", o, ends1)
	}
	if o := fetchOffsets(t, b2.Addr(), g, "gt", 0, 1); o[0] != first2[0] || o[1] != first2[1] {
		t.Fatalf("broker 2 offsets %v, want %v", o, first2)
	}
	r = cli("", append([]string{"group", "reset-offsets", g, "--to", "earliest", "--topic", "gt", "--partition", "2-1", "--execute"}, z...)...)
	mustOK(t, r, "reset --partition 2-1")
	if o := fetchOffsets(t, b2.Addr(), g, "gt", 0, 1); o[0] != first2[0] || o[1] != 0 {
		t.Fatalf("broker 2 offsets %v", o)
	}

	mustFailGroup(t, cli("", append([]string{"group", "describe", "nobody"}, z...)...), 1, `group "nobody" not found`)
	port, _ := freePort()
	mustFailGroup(t, cli("", "--timeout", "1s", "groups", "--zk", "127.0.0.1:"+strconv.Itoa(port)), 1, "cannot reach ZooKeeper")
	// A registered broker that does not answer: its partitions show "-"
	// and the command fails (exit 1) after printing the rest.
	dead := "127.0.0.1:" + strconv.Itoa(port)
	if _, err := zc.Create(zkpath.Broker(root, 9), []byte("meta://"+dead), 0, zk.WorldACL(zk.PermAll)); err != nil {
		t.Fatal(err)
	}
	eph(zkpath.Master(root, 9), "meta://"+dead)
	eph(zkpath.TopicsSub.Node(root, "gt", zkpath.MasterName(9)), `{"numParts":1,"broker":"9-m"}`)
	// --timeout 2s: each command waits that long for broker 9 (5 s by
	// default), the other brokers answer at once.
	r = cli("", append([]string{"--timeout", "2s", "group", "describe", g, "--topic", "gt"}, z...)...)
	if r.code != 1 || !strings.Contains(r.stderr, "broker 9 ("+dead+"): cannot reach the broker") ||
		!regexp.MustCompile(`\ngt +9 +0 +- +- +- +- +-\n`).MatchString(r.stdout) || !regexp.MustCompile(`\ngt +2 +1 +0 +`).MatchString(r.stdout) {
		t.Fatalf("unreachable broker: exit %d\n%s\n%s", r.code, r.stdout, r.stderr)
	}
	mustFailGroup(t, cli("", append([]string{"--timeout", "2s", "group", "reset-offsets", g, "--to", "earliest", "--topic", "gt"}, z...)...), 1, "broker 9")
}
