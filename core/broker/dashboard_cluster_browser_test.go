package broker

import (
	"context"
	"fmt"
	"log/slog"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/chromedp/chromedp"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/metaq-go/metaq/conf"
	"github.com/metaq-go/metaq/core/httpapi"
	"github.com/metaq-go/metaq/core/security"
	"github.com/metaq-go/metaq/internal/faultnet"
	"github.com/metaq-go/metaq/internal/testsvc"
	"github.com/metaq-go/metaq/offsetstore"
	zkstore "github.com/metaq-go/metaq/offsetstore/zk"
	"github.com/metaq-go/metaq/sdk/client"
	"github.com/metaq-go/metaq/sdk/message"
	"github.com/metaq-go/metaq/sdk/protocol"
)

// clusterDashBroker starts master id of a cluster under root, topic
// orders with 3 partitions, with ZooKeeper sessions of session ms.
func clusterDashBroker(t *testing.T, zkAddr, root string, id, session int) *Broker {
	t.Helper()
	cfg := testConfig()
	cfg.Port = 0
	cfg.BrokerID = id
	cfg.DataDir = t.TempDir()
	cfg.Topics = []conf.Topic{{Name: "orders", NumPartitions: ptr(3)}}
	cfg.ZooKeeper.Connect = zkAddr
	cfg.ZooKeeper.Root = root
	cfg.ZooKeeper.SessionTimeout = session
	cfg.ZooKeeper.ConnectionTimeout = 5000
	b, err := New(cfg, Options{Logf: func(string, ...any) {}})
	require.NoError(t, err)
	require.NoError(t, b.Start())
	t.Cleanup(func() { b.Close() })
	require.Eventually(t, b.Registered, 15*time.Second, 20*time.Millisecond, "broker %d registers", id)
	return b
}

// TestDashboardBrowserCluster opens broker 0's dashboard in a real browser
// with two brokers registered in ZooKeeper and a group of two ZooKeeper
// consumers: the cluster page lists both brokers and the partitions each
// holds, and the group with both members and their owners; /ui/groups
// shows the members. Then broker 1's ZooKeeper session ends (its
// connection to ZooKeeper is cut and refused, as when the process is
// killed): the page shows it down with its partitions unreachable.
func TestDashboardBrowserCluster(t *testing.T) {
	t.Parallel()
	chrome := testsvc.Chromium(t)
	zkAddr := testsvc.ZooKeeper(t)
	root := fmt.Sprintf("/dashc-%d", time.Now().UnixNano())
	proxy, err := faultnet.Start(zkAddr) // broker 1's way to ZooKeeper
	require.NoError(t, err)
	t.Cleanup(func() { proxy.Close() })
	// Broker 0, whose page is read, never loses its session: a long one
	// (a 2 s one could expire, or its connection be dropped, on a loaded
	// machine, and the page then shows it down or ZooKeeper unanswered).
	// Broker 1 is cut off below: a short one, so that it expires soon,
	// but not so short that load alone expires it before the cut (the
	// page must show it up until then).
	const session1 = 4000
	b0 := clusterDashBroker(t, zkAddr, root, 0, 30000)
	b1 := clusterDashBroker(t, proxy.Addr(), root, 1, session1)
	b2 := clusterDashBroker(t, zkAddr, root, 2, 30000)
	brokers := []*Broker{b0, b1, b2}
	shots := os.Getenv(screenshotsEnv)

	// Two members of group billing, balanced through ZooKeeper. Drop():
	// the page is checked for the owners of orders' 9 partitions only (the
	// default, RetryTopics, would add billing.retry's).
	quiet := client.Logger(slog.New(slog.DiscardHandler))
	for _, id := range []string{"a", "b"} {
		m, err := client.New(client.ZooKeeper(zkAddr, root), quiet, client.ZooKeeperSessionTimeout(5*time.Second),
			client.ConsumeTopics("orders"), client.ConsumerGroup("billing"), client.ConsumerID(id), client.Reject(client.Drop()),
			client.FetchMaxWait(50*time.Millisecond), client.DialTimeout(time.Second))
		require.NoError(t, err)
		done := make(chan error, 1)
		go func() {
			done <- m.Consume(context.Background(), func(context.Context, *message.Message) error { return nil })
		}()
		t.Cleanup(func() {
			ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
			defer cancel()
			m.Close(ctx)
			<-done
		})
	}
	// Both members own partitions of the brokers (ZooKeeper's owner nodes).
	require.Eventually(t, func() bool {
		zg, errText := httpapi.ReadZKGroup(b0.zkRead(), "billing")
		if errText != "" || zg == nil || len(zg.Members) != 2 || len(zg.Owners) != 9 {
			return false
		}
		owners := map[string]bool{}
		for _, o := range zg.Owners {
			owners[o.Owner] = true
		}
		return len(owners) == 2
	}, 30*time.Second, 100*time.Millisecond, "both members own partitions")

	// Messages on every broker: the members consume them and commit
	// their offsets to ZooKeeper (the cluster's offset store), which
	// broker 0 reads: the group's lag here becomes known, 0 once consumed.
	// Group audit commits to ZooKeeper too (offsetstore/zk, as MetaQ's
	// ZkOffsetStorage writes) after the first message of each partition,
	// then partition p of each broker gets p+1 more: a known backlog on
	// every broker.
	put := func(b *Broker, p int32) {
		t.Helper()
		c := dialAuth(t, b.Addr(), nil)
		code, msg := c.call(func(d []byte, op int32) []byte {
			return protocol.AppendPut(d, "orders", p, 0, -1, op, []byte("order"))
		})
		require.Equal(t, 200, code, msg)
	}
	for _, b := range brokers {
		for p := range int32(3) {
			put(b, p)
		}
	}
	first := b0.topics.Get("orders").Parts[0].MaxOffset() // one record
	audit := zkstore.New()
	ctx := context.Background()
	require.NoError(t, audit.Init(ctx, &offsetstore.InitRequest{Config: map[string]string{"connect": zkAddr, "root": root}}))
	t.Cleanup(func() { audit.Close() })
	var ps []message.Position
	for id := range brokers {
		for p := range int32(3) {
			ps = append(ps, message.Position{Topic: "orders", Partition: message.Partition{BrokerID: id, Partition: p}, Offset: first, MsgID: -1})
		}
	}
	require.NoError(t, audit.Commit(ctx, "audit", ps))
	for _, b := range brokers {
		for p := range int32(3) {
			for range p + 1 {
				put(b, p)
			}
		}
	}
	// auditLag is group audit's lag on broker id's partitions.
	auditLag := func(id int) (lag int64) {
		for p := range 3 {
			lag += brokers[id].topics.Get("orders").Parts[p].MaxOffset() - first
		}
		return lag
	}
	// auditRows are the rows of the audit group's page on broker self:
	// its own partitions (.gparts) and the others' (#zk-elsewhere).
	auditRows := func(self int) (own, others []string) {
		for id, b := range brokers {
			for p := range 3 {
				hi := b.topics.Get("orders").Parts[p].MaxOffset()
				if id == self {
					own = append(own, fmt.Sprintf("%d\t%d (ZooKeeper)\t0\t%d\t%d\t–\tSkip", p, first, hi, hi-first))
				} else {
					others = append(others, fmt.Sprintf("orders\t%d\t%d\t%d (ZooKeeper)\t%d\t%d\t–", id, p, first, hi, hi-first))
				}
			}
		}
		return own, others
	}
	var console httpapi.ConsoleMemory
	require.Eventually(t, func() bool {
		for _, g := range console.Build(security.Viewer{}, 0, httpapi.ReadCluster(b0.zkRead(), b0.lagsNow), time.Now()).Groups {
			if g.Group == "billing" && len(g.Lags) == 1 && g.Lags[0] == (httpapi.ConsoleLag{Topic: "orders", Bytes: 0}) {
				return true
			}
		}
		return false
	}, 30*time.Second, 200*time.Millisecond, "the group's lag on broker 0's partitions is read from ZooKeeper's offsets")

	opts := append(chromedp.DefaultExecAllocatorOptions[:],
		chromedp.ExecPath(chrome), chromedp.NoSandbox, chromedp.Headless, chromedp.DisableGPU,
		chromedp.UserDataDir(t.TempDir()), chromedp.WindowSize(1280, 1000))
	actx, cancelA := chromedp.NewExecAllocator(context.Background(), opts...)
	defer cancelA()
	bctx, cancelB := chromedp.NewContext(actx)
	defer cancelB()
	require.NoError(t, chromedp.Do(bctx)) // starts the browser
	tab := newBrowserTab(t, bctx, "", "")
	base := "http://" + b0.HTTPAddr()
	shot := func(name string) {
		t.Helper()
		if shots == "" {
			return
		}
		buf, err := chromedp.Run(tab.ctx, chromedp.FullScreenshot(100))
		require.NoError(t, err)
		require.NoError(t, os.MkdirAll(shots, 0o755))
		require.NoError(t, os.WriteFile(filepath.Join(shots, name+".png"), buf, 0o644))
	}
	row := func(table, key string) string { // the row of table whose first cell starts with key
		t.Helper()
		for _, l := range strings.Split(tab.text(t, table), "\n") {
			if strings.HasPrefix(l, key) {
				return l
			}
		}
		return ""
	}

	// Both brokers up, each holding its 3 partitions of orders; the group
	// with both members, every partition owned.
	// Broker 1's short session can expire under load alone before the cut
	// (it then registers again with a new one): reload until the page
	// shows both up, for at most 30 s.
	for deadline := time.Now().Add(30 * time.Second); ; time.Sleep(500 * time.Millisecond) {
		tab.open(t, base+"/ui/", "#cluster-topics")
		up0, up1 := row("#brokers", "0"), row("#brokers", "1")
		if strings.Contains(up0, "up") && strings.Contains(up1, "up") {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("the page does not show both brokers up: broker 0 %q, broker 1 %q", up0, up1)
		}
	}
	orders := row("#cluster-topics", "orders")
	require.Contains(t, orders, "0-m: 3")
	require.Contains(t, orders, "1-m: 3")
	require.Contains(t, orders, "2-m: 3")
	require.Contains(t, orders, "\t9\t", "9 partitions in all")
	g := tab.text(t, `#cluster-groups tr[data-group="billing"]`)
	require.Contains(t, g, "billing_a")
	require.Contains(t, g, "billing_b")
	require.Contains(t, g, "orders 1-2: ")
	require.NotContains(t, g, "unreachable")
	require.Contains(t, g, "orders: 0 B", "lag here")
	shot("cluster-console")

	// /ui/groups: the group with its two members and nine owned partitions.
	tab.open(t, base+"/ui/groups", "#groups")
	cells := strings.Split(row("#groups", "billing\torders"), "\t")
	require.Len(t, cells, 8, cells)
	require.Equal(t, "2", cells[6], "members")
	require.Equal(t, "9", cells[7], "owned partitions")
	// The group's page: the owners of this broker's partitions, the
	// members, and brokers 1's and 2's partitions with their owners.
	tab.open(t, base+"/ui/groups/billing", "#zk-members")
	zm := tab.text(t, "#zk-members")
	require.Contains(t, zm, "billing_a")
	require.Contains(t, zm, "billing_b")
	parts := tab.text(t, ".gparts")
	require.NotContains(t, parts, "–", "every partition here shows its owner")
	require.Contains(t, parts, "billing_")
	require.Len(t, strings.Split(strings.TrimSpace(tab.text(t, "#zk-elsewhere")), "\n"), 7, "3 partitions of brokers 1 and 2")
	shot("cluster-group")

	// Group audit on each broker's page: the exact lag of every
	// partition, this broker's (from ZooKeeper's offsets, read every
	// groups.ZKOffsetsEvery) and the other brokers' (asked of them).
	for self, b := range brokers {
		own, others := auditRows(self)
		var got string
		ok := assert.Eventually(t, func() bool {
			if chromedp.Do(tab.ctx, chromedp.Navigate("http://"+b.HTTPAddr()+"/ui/groups/audit"), chromedp.WaitVisible(chromedp.CSS("#zk-elsewhere"))) != nil {
				return false
			}
			parts, err1 := chromedp.Run(tab.ctx, chromedp.Text(chromedp.CSS(".gparts")))
			elsewhere, err2 := chromedp.Run(tab.ctx, chromedp.Text(chromedp.CSS("#zk-elsewhere")))
			if err1 != nil || err2 != nil {
				return false
			}
			got = parts + "\n" + elsewhere
			for _, r := range append(own, others...) {
				if !strings.Contains(got, r) {
					return false
				}
			}
			return true
		}, 30*time.Second, 250*time.Millisecond, "broker %d's page of group audit", self)
		require.True(t, ok, "broker %d's page of group audit:\n%s\nwant rows:\n%s", self, got, strings.Join(append(own, others...), "\n"))
		if self == 0 {
			shot("cluster-group-lag")
		}
	}
	// The groups list: audit's lag here and on all the brokers.
	tab.open(t, base+"/ui/groups", "#groups")
	cells = strings.Split(row("#groups", "audit\torders"), "\t")
	require.Len(t, cells, 8, cells)
	require.Equal(t, httpapi.HumanBytes(auditLag(0)), cells[2], "lag here")
	require.Equal(t, httpapi.HumanBytes(auditLag(0)+auditLag(1)+auditLag(2)), cells[3], "lag, all brokers")

	// Broker 1 is cut off from ZooKeeper: its session expires (4 s, seen
	// by ZooKeeper within a tick of 500 ms) and its nodes go. The page
	// shows it down at its next load, its partitions unreachable: the
	// console remembers them from a read that saw broker 1 up
	// (cluster.ReadLayout reads the topics before the brokers, so such a
	// read holds its registrations; TestReadLayoutSessionEndsMidRead). The
	// 30 s are the session, a tick and page loads of seconds under load.
	proxy.Cut(true)
	cut := time.Now()
	var mu sync.Mutex
	var last string // what the last load showed, for a failure
	ok := assert.Eventually(t, func() bool {
		if err := chromedp.Do(tab.ctx, chromedp.Navigate(base+"/ui/"), chromedp.WaitVisible(chromedp.CSS("#brokers"))); err != nil {
			mu.Lock()
			last = fmt.Sprintf("%v: %v", time.Since(cut).Round(time.Millisecond), err)
			mu.Unlock()
			return false
		}
		s, err1 := chromedp.Run(tab.ctx, chromedp.Text(chromedp.CSS(`#brokers tr[data-broker="1"]`)))
		topics, err2 := chromedp.Run(tab.ctx, chromedp.Text(chromedp.CSS(`#cluster-topics`)))
		mu.Lock()
		last = fmt.Sprintf("%v: broker 1 %q (%v), topics %q (%v)", time.Since(cut).Round(time.Millisecond), s, err1, topics, err2)
		mu.Unlock()
		return err1 == nil && err2 == nil && strings.Contains(s, "down") && strings.Contains(topics, "1-m: 3 unreachable")
	}, 30*time.Second, 250*time.Millisecond, "broker 1 is shown down, its partitions unreachable, once its session ends")
	mu.Lock()
	shown := last
	mu.Unlock()
	require.True(t, ok, "the last load after the cut, at %s", shown)
	t.Logf("broker 1 shown down %v after its ZooKeeper connection was cut (session timeout %d ms)", time.Since(cut).Round(time.Millisecond), session1)
	require.Contains(t, row("#brokers", "1"), "session ended")
	require.Contains(t, row("#brokers", "1"), "was meta://127.0.0.1:", "the address it had")
	require.Contains(t, row("#brokers", "0"), "up")
	orders = row("#cluster-topics", "orders")
	require.Contains(t, orders, "0-m: 3")
	require.Contains(t, orders, "1-m: 3 unreachable")
	require.Contains(t, orders, "+3 unreachable")
	// The owners of broker 1's partitions (the members still hold them)
	// are marked.
	g = tab.text(t, `#cluster-groups tr[data-group="billing"]`)
	if strings.Contains(g, "orders 1-") {
		require.Contains(t, g, "unreachable")
	}
	shot("cluster-down")

	// The audit group's page on brokers 0 and 2: broker 1's partitions
	// are unreachable, their lag unknown; the others' exact; the page
	// quick.
	for _, self := range []int{0, 2} {
		own, others := auditRows(self)
		start := time.Now()
		tab.open(t, "http://"+brokers[self].HTTPAddr()+"/ui/groups/audit", "#zk-elsewhere")
		took := time.Since(start)
		t.Logf("broker %d's page of group audit with broker 1 down: %v", self, took.Round(time.Millisecond))
		require.Less(t, took, 3*time.Second)
		got := tab.text(t, ".gparts") + "\n" + tab.text(t, "#zk-elsewhere")
		for _, r := range append(own, others...) {
			if strings.Contains(r, "orders\t1\t") {
				continue
			}
			require.Contains(t, got, r)
		}
		for p := range 3 {
			require.Contains(t, row("#zk-elsewhere", fmt.Sprintf("orders\t1 unreachable\t%d\t", p)),
				fmt.Sprintf("\t%d (ZooKeeper)\tunknown\tunknown (broker 1 unreachable)\t", first))
		}
	}
	shot("cluster-group-down")
	// The groups list: the lag of brokers 0 and 2, broker 1's unknown.
	tab.open(t, base+"/ui/groups", "#groups")
	cells = strings.Split(row("#groups", "audit\torders"), "\t")
	require.Len(t, cells, 8, cells)
	require.Equal(t, httpapi.HumanBytes(auditLag(0)+auditLag(2))+" (3 of 6 partitions on other brokers unknown)", cells[3], "lag, all brokers")
}
