package main

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/metaq-go/metaq/conf"
	"github.com/metaq-go/metaq/internal/brokertest"
	"github.com/metaq-go/metaq/internal/testsvc"
	"github.com/metaq-go/metaq/sdk/admin"
	"github.com/metaq-go/metaq/sdk/client"
	"github.com/metaq-go/metaq/sdk/protocol"
)

// TestCLIDLQReplay: metaq dlq replay is a dry run without --yes; with it
// it sends each dead letter to its origin topic (fresh id, key, tags and
// user headers kept, bookkeeping headers gone) or to the retry topic
// (origin headers kept, delivery count reset), resumes where the last
// replay stopped (--limit) and never sends one twice; purge hides the
// rest; dlq list counts what is pending; errors name the group.
func TestCLIDLQReplay(t *testing.T) {
	t.Parallel()
	b := brokertest.Start(t, smallJournal(), brokertest.Quiet(), brokertest.Partitions(1), brokertest.Edit(func(c *conf.Config) {
		c.Topics = append(c.Topics, conf.Topic{Name: "orders"}, conf.Topic{Name: "billing.dlq"}, conf.Topic{Name: "billing.retry"},
			conf.Topic{Name: "stray.dlq"})
	}))
	a := "--addr=" + b.Addr()
	dead := func(body string) {
		t.Helper()
		mustOK(t, cli(body+"\n", a, "produce", "--topic", "billing.dlq", "--key", "k-"+body, "--tag", "TagA",
			"--header", "trace=t-"+body, "--header", "metaq-origin-topic=orders", "--header", "metaq-origin-partition=0",
			"--header", "metaq-origin-offset=42", "--header", "metaq-origin-id=7", "--header", "metaq-delivery-count=16",
			"--header", "metaq-last-error=boom "+body), "produce a dead letter")
	}
	dead("one")
	dead("two")
	dead("three")
	consumed := func(topic string) []map[string]any {
		t.Helper()
		r := cli("", a, "consume", "--topic", topic, "--json")
		mustOK(t, r, "consume "+topic)
		var out []map[string]any
		for _, l := range strings.Split(strings.TrimSpace(r.stdout), "\n") {
			if l == "" {
				continue
			}
			var m map[string]any
			if err := json.Unmarshal([]byte(l), &m); err != nil {
				t.Fatalf("%q: %v", l, err)
			}
			out = append(out, m)
		}
		return out
	}
	want := func(r result, what string, subs ...string) {
		t.Helper()
		mustOK(t, r, what)
		for _, s := range subs {
			if !strings.Contains(r.stdout, s) {
				t.Fatalf("%s printed %q, want %q in it", what, r.stdout, s)
			}
		}
	}

	want(cli("", a, "dlq", "replay", "--group", "billing"), "dry run (to the retry topic by default)",
		"would replay 3 of 3 dead letters of billing.dlq to billing.retry (delivery count reset)\n", `origin orders error "boom one"`,
		"dry run: nothing sent")
	want(cli("", a, "dlq", "replay", "--group", "billing", "--to", "origin"), "dry run to origin",
		"would replay 3 of 3 dead letters of billing.dlq to their origin topics\n", `origin orders error "boom one"`,
		"dry run: nothing sent")
	if n := len(consumed("orders")) + len(consumed("billing.retry")); n != 0 {
		t.Fatalf("a dry run sent %d messages", n)
	}
	want(cli("", a, "dlq", "replay", "--group", "billing", "--to", "origin", "--limit", "1", "--yes"), "replay --limit 1",
		"replayed 1 of 3 dead letters")
	want(cli("", a, "dlq", "list", "--group", "billing"), "dlq list", "billing.dlq messages 3\n",
		"billing.dlq pending 2 (past the replay and purge position, group billing.dlq-replay)\n")
	// Another group consumes orders: a replay to the origin topic names it.
	mustOK(t, cli("", a, "consume", "--topic", "orders", "--group", "shipping", "--count", "1"), "consume as shipping")
	want(cli("", a, "dlq", "replay", "--group", "billing", "--to", "origin"), "dry run to origin names the other groups",
		"note: the groups shipping consume the origin topics too and handle these messages again (--to retry: billing only)\n")
	want(cli("", a, "dlq", "replay", "--group", "billing", "--to", "origin", "--yes"), "replay the rest", "replayed 2 of 2 dead letters")
	want(cli("", a, "dlq", "replay", "--group", "billing", "--to", "origin", "--yes"), "replay again", "replayed 0 of 0 dead letters")
	got := consumed("orders")
	if len(got) != 3 {
		t.Fatalf("orders holds %d messages, want 3: %v", len(got), got)
	}
	for i, m := range got {
		body := []string{"one", "two", "three"}[i]
		hs := headersOf(m)
		if m["body"] != body+"\n" && m["body"] != body || m["key"] != "k-"+body || hs["trace"] != "t-"+body || len(hs) != 1 {
			t.Fatalf("replayed message %d: %v", i, m)
		}
		if tags, _ := m["tags"].([]any); len(tags) != 1 || tags[0] != "TagA" {
			t.Fatalf("replayed message %d lost its tags: %v", i, m)
		}
	}

	dead("four")
	want(cli("", a, "dlq", "replay", "--group", "billing", "--yes"), "replay to retry (the default)",
		"replayed 1 of 1 dead letters of billing.dlq to billing.retry (delivery count reset)")
	r := consumed("billing.retry")
	if len(r) != 1 {
		t.Fatalf("billing.retry holds %v", r)
	}
	hs := headersOf(r[0])
	if hs["metaq-origin-topic"] != "orders" || hs["metaq-origin-offset"] != "42" || hs["metaq-delivery-count"] != nil ||
		hs["metaq-last-error"] != nil || hs["trace"] != "t-four" {
		t.Fatalf("replayed to retry: %v", r[0])
	}

	dead("five")
	dead("six")
	want(cli("", a, "dlq", "purge", "--group", "billing"), "purge dry run", "would hide 2 dead letters", "dry run: nothing changed")
	want(cli("", a, "dlq", "purge", "--group", "billing", "--yes"), "purge", "hid 2 dead letters of billing.dlq")
	want(cli("", a, "dlq", "list", "--group", "billing"), "dlq list after purge", "billing.dlq pending 0 ")
	want(cli("", a, "dlq", "replay", "--group", "billing", "--yes"), "replay after purge", "replayed 0 of 0")
	if n := len(consumed("orders")); n != 3 {
		t.Fatalf("orders holds %d messages after the purge, want 3", n)
	}

	for _, c := range []struct {
		args []string
		code int
		err  string
	}{
		{[]string{"dlq", "replay", "--group", "nobody"}, 1, `unknown group "nobody"`},
		{[]string{"dlq", "purge", "--group", "nobody", "--yes"}, 1, `unknown group "nobody"`},
		{[]string{"dlq", "replay"}, 2, "--group is required"},
		{[]string{"dlq", "replay", "--group", "billing", "--to", "elsewhere"}, 2, "--to must be origin or retry"},
	} {
		if r := cli("", append([]string{a}, c.args...)...); r.code != c.code || !strings.Contains(r.stderr, c.err) {
			t.Fatalf("%v: exit %d, stderr %q; want exit %d and %q", c.args, r.code, r.stderr, c.code, c.err)
		}
	}
	// A group known by its offsets, without a dead-letter topic.
	mustOK(t, cli("", a, "consume", "--topic", "orders", "--group", "known", "--count", "1"), "consume as known")
	if r := cli("", a, "dlq", "replay", "--group", "known"); r.code != 1 || !strings.Contains(r.stderr, "no dead-letter topic known.dlq") {
		t.Fatalf("known group without a dlq: exit %d, stderr %q", r.code, r.stderr)
	}
	// A message that is not a dead letter of RetryTopics is not sent anywhere.
	mustOK(t, cli("x\n", a, "produce", "--topic", "stray.dlq"), "produce a stray message")
	if r := cli("", a, "dlq", "replay", "--group", "stray", "--yes"); r.code != 1 || !strings.Contains(r.stderr, "has no metaq-origin-topic header") {
		t.Fatalf("stray message: exit %d, stderr %q", r.code, r.stderr)
	}
	// Unreachable broker.
	if r := cli("", "--addr=127.0.0.1:1", "--timeout=2s", "dlq", "replay", "--group", "billing"); r.code == 0 {
		t.Fatalf("unreachable broker: exit 0, stdout %q", r.stdout)
	} else {
		t.Logf("unreachable broker: exit %d: %s", r.code, strings.TrimSpace(r.stderr))
	}
}

// headersOf is the headers of a consume --json object, by key.
func headersOf(m map[string]any) map[string]any {
	hs := map[string]any{}
	l, _ := m["headers"].([]any)
	for _, h := range l {
		if kv, ok := h.(map[string]any); ok {
			hs[kv["key"].(string)] = kv["value"]
		}
	}
	return hs
}

// TestCLIDLQReplayCluster: with --zk, dlq list, replay and purge find the
// dead-letter topic's partitions on every registered broker, replay sends
// to the origin topic wherever the cluster holds it, and the position is
// committed on each broker.
func TestCLIDLQReplayCluster(t *testing.T) {
	t.Parallel()
	if testing.Short() {
		t.Skip("starts ZooKeeper")
	}
	zkAddr := testsvc.ZooKeeper(t)
	root := fmt.Sprintf("/dlq-test-%d", time.Now().UnixNano())
	var addrs []string
	for id := 1; id <= 2; id++ {
		b := brokertest.Start(t, smallJournal(), brokertest.Quiet(), brokertest.Topics("orders", "billing.dlq"), brokertest.Partitions(1),
			brokertest.ZooKeeper(zkAddr, root, id), brokertest.Edit(func(c *conf.Config) {
				c.BrokerID = id
				c.ZooKeeper.SessionTimeout, c.ZooKeeper.ConnectionTimeout = 4000, 5000
			}))
		deadline := time.Now().Add(10 * time.Second)
		for !b.Registered() {
			if time.Now().After(deadline) {
				t.Fatal("broker not registered")
			}
			time.Sleep(20 * time.Millisecond)
		}
		addrs = append(addrs, b.Addr())
		for i := range 2 {
			mustOK(t, cli(fmt.Sprintf("b%d-%d\n", id, i), "--addr", b.Addr(), "produce", "--topic", "billing.dlq",
				"--header", "metaq-origin-topic=orders", "--header", "metaq-last-error=boom"), "produce a dead letter")
		}
	}
	z := []string{"--zk", zkAddr, "--root", root}
	r := cli("", append([]string{"dlq", "list", "--group", "billing"}, z...)...)
	mustOK(t, r, "dlq list --zk")
	if !strings.Contains(r.stdout, "billing.dlq messages 4\n") || !strings.Contains(r.stdout, "billing.dlq pending 4 ") {
		t.Fatalf("dlq list --zk printed %q", r.stdout)
	}
	r = cli("", append([]string{"dlq", "replay", "--group", "billing", "--to", "origin", "--limit", "3", "--yes"}, z...)...)
	mustOK(t, r, "dlq replay --zk")
	if !strings.Contains(r.stdout, "replayed 3 of 4 dead letters") {
		t.Fatalf("dlq replay --zk printed %q", r.stdout)
	}
	r = cli("", append([]string{"dlq", "purge", "--group", "billing", "--yes"}, z...)...)
	if r.code != 0 || !strings.Contains(r.stdout, "hid 1 dead letters") {
		t.Fatalf("dlq purge --zk: exit %d, %q %q", r.code, r.stdout, r.stderr)
	}
	n := 0
	for _, a := range addrs {
		r := cli("", "--addr", a, "consume", "--topic", "orders", "-f", "%s\n")
		mustOK(t, r, "consume orders")
		n += strings.Count(r.stdout, "\n")
	}
	if n != 3 {
		t.Fatalf("orders holds %d messages over the two brokers, want 3", n)
	}
	r = cli("", append([]string{"dlq", "list", "--group", "billing"}, z...)...)
	if r.code != 0 || !strings.Contains(r.stdout, "billing.dlq pending 0 ") {
		t.Fatalf("dlq list --zk after replay and purge: %q %q", r.stdout, r.stderr)
	}
}

// TestCLIDLQReplayConcurrent: replays of one group's dead letters run one
// at a time. Four `metaq dlq replay --yes` and one POST
// /api/v1/groups/{group}/dlq/replay at once over 3000 dead letters: each
// is sent once (the replays that ran add up to 3000, and orders holds
// 3000 distinct messages), the others refused with "another replay of the
// dead letters is running". While another holds the lease (a join of the
// position group as metaq-dlq-replay), both the CLI's replay and purge and
// the API's replay are refused, and nothing is sent; once it leaves they
// run.
func TestCLIDLQReplayConcurrent(t *testing.T) {
	t.Parallel()
	b := brokertest.Start(t, smallJournal(), brokertest.Quiet(), brokertest.Partitions(1), brokertest.HTTP(),
		brokertest.Edit(func(c *conf.Config) {
			c.Topics = append(c.Topics, conf.Topic{Name: "orders"}, conf.Topic{Name: "billing.dlq"}, conf.Topic{Name: "billing.retry"})
		}))
	a := "--addr=" + b.Addr()
	const n = 3000
	var in strings.Builder
	pad := strings.Repeat("x", 200) // several gets' worth
	for i := range n {
		fmt.Fprintf(&in, "refund-%d-%s\n", i, pad)
	}
	mustOK(t, cli(in.String(), a, "produce", "--topic", "billing.dlq", "--header", "metaq-origin-topic=orders",
		"--header", "metaq-last-error=boom"), "produce the dead letters")
	const running = "another replay of the dead letters is running"
	apiReplay := func() (int, string) {
		resp, err := http.Post("http://"+b.HTTPAddr()+"/api/v1/groups/billing/dlq/replay", "application/json",
			strings.NewReader(`{"to": "origin"}`))
		if err != nil {
			return 0, err.Error()
		}
		defer resp.Body.Close()
		body, _ := io.ReadAll(resp.Body)
		return resp.StatusCode, string(body)
	}

	var wg sync.WaitGroup
	var mu sync.Mutex
	sent, refused := 0, 0
	for range 4 {
		wg.Go(func() {
			r := cli("", a, "dlq", "replay", "--group", "billing", "--to", "origin", "--yes")
			mu.Lock()
			defer mu.Unlock()
			var got, pending int
			switch {
			case r.code == 0:
				if _, err := fmt.Sscanf(r.stdout, "replayed %d of %d", &got, &pending); err != nil {
					t.Errorf("replay printed %q", r.stdout)
				}
				sent += got
			case r.code == 1 && strings.Contains(r.stderr, running):
				refused++
			default:
				t.Errorf("replay: exit %d, stdout %q, stderr %q", r.code, r.stdout, r.stderr)
			}
		})
	}
	wg.Go(func() {
		code, body := apiReplay()
		mu.Lock()
		defer mu.Unlock()
		switch {
		case code == http.StatusOK:
			var rep struct{ Count int }
			if err := json.Unmarshal([]byte(body), &rep); err != nil {
				t.Errorf("API replay: %v: %s", err, body)
			}
			sent += rep.Count
		case code == http.StatusConflict && strings.Contains(body, running):
			refused++
		default:
			t.Errorf("API replay: %d %s", code, body)
		}
	})
	wg.Wait()
	t.Logf("%d replays refused", refused)
	if sent != n {
		t.Fatalf("the replays sent %d in all, want %d", sent, n)
	}
	countOrders := func() int {
		t.Helper()
		r := cli("", a, "consume", "--topic", "orders", "-f", "%s\n")
		mustOK(t, r, "consume orders")
		lines := strings.Split(strings.TrimSpace(r.stdout), "\n")
		seen := map[string]bool{}
		for _, l := range lines {
			if seen[l] {
				t.Fatalf("%.20s... sent twice", l)
			}
			seen[l] = true
		}
		return len(lines)
	}
	if got := countOrders(); got != n {
		t.Fatalf("orders holds %d messages, want %d", got, n)
	}

	// Another holds the lease: everything that would move the position is refused.
	mustOK(t, cli("late-1\nlate-2\n", a, "produce", "--topic", "billing.dlq", "--header", "metaq-origin-topic=orders"), "produce more")
	cl, err := client.New(client.Brokers(b.Addr()))
	if err != nil {
		t.Fatal(err)
	}
	defer cl.Close(context.Background())
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	holder := func(req func(dst []byte, op int32) []byte) {
		t.Helper()
		if _, err := cl.Request(ctx, b.Addr(), req); err != nil {
			t.Fatal(err)
		}
	}
	holder(func(dst []byte, op int32) []byte {
		return protocol.AppendJoin(dst, "billing.dlq-replay", "billing.dlq", admin.DLQReplayMember, "default", op)
	})
	for _, args := range [][]string{{"replay", "--to", "origin"}, {"purge"}} {
		r := cli("", append([]string{a, "dlq", args[0], "--group", "billing", "--yes"}, args[1:]...)...)
		if r.code != 1 || !strings.Contains(r.stderr, running) {
			t.Fatalf("dlq %s while held: exit %d, stdout %q, stderr %q", args[0], r.code, r.stdout, r.stderr)
		}
	}
	if code, body := apiReplay(); code != http.StatusConflict || !strings.Contains(body, running) {
		t.Fatalf("API replay while held: %d %s", code, body)
	}
	if got := countOrders(); got != n {
		t.Fatalf("orders holds %d messages while the lease was held, want %d", got, n)
	}
	holder(func(dst []byte, op int32) []byte {
		return protocol.AppendLeave(dst, "billing.dlq-replay", "billing.dlq", admin.DLQReplayMember, op)
	})
	r := cli("", a, "dlq", "replay", "--group", "billing", "--to", "origin", "--yes")
	if r.code != 0 || !strings.Contains(r.stdout, "replayed 2 of 2 dead letters") {
		t.Fatalf("replay after the lease was left: exit %d, %q %q", r.code, r.stdout, r.stderr)
	}
}
