package client

import (
	"context"
	"fmt"
	"net"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/metaq-go/metaq/conf"
	"github.com/metaq-go/metaq/core/broker"
	"github.com/metaq-go/metaq/sdk/message"
)

const (
	groupHB      = 50 * time.Millisecond
	groupSession = 600 * time.Millisecond
	groupName    = "g1"
)

// startGroupBroker runs a broker with topic t1 of 6 partitions and a short
// group session timeout.
func startGroupBroker(t *testing.T) *testBroker {
	t.Helper()
	cfg := brokerConfig(t, func(c *conf.Config) { c.NumPartitions = 6 })
	return runBrokerAt(t, cfg, "", broker.Options{GroupSessionTimeout: groupSession})
}

// ownership checks, at the SDK, that no two members fetch one partition at
// once, and, at the broker, that no partition is ever held by two members.
type ownership = ownLog[int32]

// ownLog records, from the members' hooks, who fetches each partition (K:
// a partition number, or a cluster-wide message.Partition), and any
// overlap. A member the broker dropped (its connection broke, or its
// session timed out under load) is a zombie until it notices: the broker
// hands its partitions on at once, and it cannot commit. So an overlap is
// held pending until the earlier owner stops the partition: it is a
// violation unless that owner had learnt by then that it was dropped
// (lost), or was no longer a member at the broker when the overlap began
// (member says so: a member removed while it stops a revoked partition,
// or while it closes, learns it at its next heartbeat, after the stop), or
// if it never stops.
type ownLog[K comparable] struct {
	mu         sync.Mutex
	owner      map[K]string
	violations []string
	pending    []overlap[K]
	lost       map[string]bool
	// member, if set, reports whether id is a member of the group at the
	// broker now.
	member func(id string) bool
	// excused are the overlaps with a dropped member that had not learnt
	// it yet, for the log.
	excused []string
}

type overlap[K comparable] struct {
	p        K
	old, new string
	dropped  bool // old was no longer a member at the broker
}

func (o *overlap[K]) String() string {
	s := fmt.Sprintf("partition %v: %s starts while %s owns it", o.p, o.new, o.old)
	if o.dropped {
		s += " (dropped by the broker)"
	}
	return s
}

func (o *ownLog[K]) hook(id string) func(K, bool) {
	return func(p K, owned bool) {
		o.mu.Lock()
		defer o.mu.Unlock()
		if owned {
			// A member that starts a partition again has joined again:
			// by then it stopped everything it held.
			delete(o.lost, id)
			if cur, ok := o.owner[p]; ok {
				o.pending = append(o.pending, overlap[K]{p, cur, id, o.member != nil && !o.member(cur)})
			}
			o.owner[p] = id
			return
		}
		o.pending = slices.DeleteFunc(o.pending, func(ov overlap[K]) bool {
			if ov.p != p || ov.old != id {
				return false
			}
			switch {
			case ov.dropped && !o.lost[id]:
				o.excused = append(o.excused, ov.String())
			case !o.lost[id]:
				o.violations = append(o.violations, ov.String())
			}
			return true
		})
		if o.owner[p] == id {
			delete(o.owner, p)
		}
	}
}

// lostHook is told when member id learns the broker dropped it.
func (o *ownLog[K]) lostHook(id string) func() {
	return func() {
		o.mu.Lock()
		defer o.mu.Unlock()
		if o.lost == nil {
			o.lost = map[string]bool{}
		}
		o.lost[id] = true
	}
}

// groupOwnership is the ownership log of group g1 of t1 at tb's broker.
func groupOwnership(tb *testBroker) *ownership {
	return &ownership{owner: map[int32]string{}, member: func(id string) bool {
		return slices.Contains(tb.b.GroupMembers(groupName, topic), id)
	}}
}

// sampleBroker also checks, at the broker, that no partition is ever held
// by two members.
func sampleBroker(o *ownership, b *broker.Broker, stop <-chan struct{}) *sync.WaitGroup {
	var wg sync.WaitGroup
	wg.Go(func() {
		for {
			select {
			case <-stop:
				return
			case <-time.After(2 * time.Millisecond):
			}
			for p, id := range b.GroupOwners(groupName, topic) {
				if strings.Contains(id, "+") {
					o.mu.Lock()
					o.violations = append(o.violations, fmt.Sprintf("broker: partition %d held by %s", p, id))
					o.mu.Unlock()
				}
			}
		}
	})
	return &wg
}

type member struct {
	c    *brokerConsumer
	nc   atomic.Pointer[net.Conn]
	done chan error
}

func startMember(t *testing.T, addr, id string, own *ownership, h Handler, opts ...consOption) *member {
	t.Helper()
	m := &member{done: make(chan error, 1)}
	dial := func(ctx context.Context, network, a string) (net.Conn, error) {
		var d net.Dialer
		nc, err := d.DialContext(ctx, network, a)
		if err == nil {
			m.nc.Store(&nc)
		}
		return nc, err
	}
	c, err := newBrokerConsumer(addr, topic, append([]consOption{quiet, withGroup(groupName), withGroupMembership(),
		withConsumerID(id), withHeartbeatInterval(groupHB), withDialer(dial),
		withMaxFetchDelay(20 * time.Millisecond), withCommitInterval(100 * time.Millisecond)}, opts...)...)
	require.NoError(t, err)
	SetOwnHook(c, own.hook(id))
	SetLostHook(c, own.lostHook(id))
	m.c = c
	if h == nil {
		h = func(context.Context, *message.Message) error { return nil }
	}
	go func() { m.done <- c.Consume(context.Background(), h) }()
	t.Cleanup(func() { _ = c.Close(context.Background()) })
	return m
}

// waitAssignment waits until the members' Assigned lists have the wanted
// sizes and together cover every partition exactly once.
func waitAssignment(t *testing.T, nparts int, sizes map[*member]int) {
	t.Helper()
	deadline := time.Now().Add(10 * time.Second)
	var last string
	for time.Now().Before(deadline) {
		seen := map[int32]int{}
		ok := true
		var desc []string
		for m, want := range sizes {
			a := m.c.Assigned()
			desc = append(desc, m.c.ConsumerID()+"="+fmt.Sprint(a))
			if want >= 0 && len(a) != want {
				ok = false
			}
			for _, p := range a {
				seen[p]++
			}
		}
		for p := 0; p < nparts; p++ {
			if seen[int32(p)] != 1 {
				ok = false
			}
		}
		if ok && len(seen) == nparts {
			return
		}
		last = strings.Join(desc, " ")
		time.Sleep(10 * time.Millisecond)
	}
	t.Fatalf("assignment did not settle: %s", last)
}

func (o *ownLog[K]) check(t *testing.T) {
	t.Helper()
	// An earlier owner the broker dropped stops at its next heartbeat, when
	// it learns it: the test may end first.
	for end := time.Now().Add(10 * time.Second); time.Now().Before(end); time.Sleep(10 * time.Millisecond) {
		o.mu.Lock()
		open := slices.ContainsFunc(o.pending, func(ov overlap[K]) bool { return !o.lost[ov.old] })
		o.mu.Unlock()
		if !open {
			break
		}
	}
	o.mu.Lock()
	defer o.mu.Unlock()
	if len(o.excused) > 0 {
		t.Logf("overlaps with a member the broker had dropped before it learnt it: %v", o.excused)
	}
	v := slices.Clone(o.violations)
	for _, ov := range o.pending {
		if !o.lost[ov.old] {
			v = append(v, ov.String()+" (and never stopped)")
		}
	}
	require.Empty(t, v)
}

func TestGroupLocalBalanceLeaveAndKill(t *testing.T) {
	t.Parallel()
	tb := startGroupBroker(t)
	own := groupOwnership(tb)
	stop := make(chan struct{})
	wg := sampleBroker(own, tb.b, stop)
	defer func() { close(stop); wg.Wait(); own.check(t) }()

	a := startMember(t, tb.addr, "c-a", own, nil)
	b := startMember(t, tb.addr, "c-b", own, nil)
	c := startMember(t, tb.addr, "c-c", own, nil)
	waitAssignment(t, 6, map[*member]int{a: 2, b: 2, c: 2})
	stats, err := brokerStats(ctxT(t, 5*time.Second), tb.addr, "groups")
	require.NoError(t, err)
	require.Contains(t, stats, groupName+" "+topic+" members 3 generation ")

	// A member leaves: its partitions move to the others.
	require.NoError(t, c.c.Close(ctxT(t, 5*time.Second)))
	waitAssignment(t, 6, map[*member]int{a: 3, b: 3})

	// A member's connection is killed: it is dropped at once and the
	// others take everything; it then joins again and gets its share back.
	start := time.Now()
	(*b.nc.Load()).Close()
	require.Eventually(t, func() bool { return len(a.c.Assigned()) == 6 || len(b.c.Assigned()) > 0 && len(a.c.Assigned()) == 3 },
		10*time.Second, 5*time.Millisecond)
	waitAssignment(t, 6, map[*member]int{a: -1, b: -1})
	require.Less(t, time.Since(start), 20*groupHB+groupSession)
	waitAssignment(t, 6, map[*member]int{a: 3, b: 3})
}

func TestGroupLocalStrategyMismatch(t *testing.T) {
	t.Parallel()
	tb := startGroupBroker(t)
	own := groupOwnership(tb)
	a := startMember(t, tb.addr, "c-a", own, nil)
	waitAssignment(t, 6, map[*member]int{a: 6})
	x := startMember(t, tb.addr, "c-x", own, nil, withBalanceStrategy("consist"))
	select {
	case err := <-x.done:
		require.ErrorContains(t, err, "strategy")
	case <-time.After(5 * time.Second):
		t.Fatal("a member with another strategy was not refused")
	}
}

func TestGroupLocalEndToEndJoinsAndLeaves(t *testing.T) {
	t.Parallel()
	tb := startGroupBroker(t)
	own := groupOwnership(tb)
	stop := make(chan struct{})
	swg := sampleBroker(own, tb.b, stop)
	defer func() { close(stop); swg.Wait(); own.check(t) }()

	var mu sync.Mutex
	got := map[string]int{}
	h := func(_ context.Context, m *message.Message) error {
		mu.Lock()
		got[string(m.Body)]++
		mu.Unlock()
		return nil
	}
	const n = 3000
	p := newProducer(t, tb.addr)
	prodDone := make(chan struct{})
	go func() {
		defer close(prodDone)
		for i := 0; i < n; i++ {
			_, err := p.Send(context.Background(), &message.Message{Topic: topic, Body: []byte("m" + strconv.Itoa(i))})
			if err != nil {
				t.Errorf("send %d: %v", i, err)
				return
			}
			if i%100 == 0 {
				time.Sleep(5 * time.Millisecond)
			}
		}
	}()
	var members []*member
	for i := 0; i < 4; i++ {
		members = append(members, startMember(t, tb.addr, "c-"+strconv.Itoa(i), own, h))
		time.Sleep(150 * time.Millisecond)
	}
	require.NoError(t, members[1].c.Close(ctxT(t, 5*time.Second)))
	time.Sleep(150 * time.Millisecond)
	(*members[2].nc.Load()).Close()
	time.Sleep(150 * time.Millisecond)
	require.NoError(t, members[0].c.Close(ctxT(t, 5*time.Second)))
	startMember(t, tb.addr, "c-9", own, h)
	<-prodDone

	require.Eventually(t, func() bool {
		mu.Lock()
		defer mu.Unlock()
		return len(got) == n
	}, 20*time.Second, 10*time.Millisecond, "every message delivered at least once")
	mu.Lock()
	dups := 0
	for _, c := range got {
		dups += c - 1
	}
	mu.Unlock()
	t.Logf("%d messages, %d duplicates", n, dups)
	require.Less(t, dups, n/2, "duplicates bounded")
}

// lingerProxy forwards one client's connections to the broker. kill closes
// the client side at once but keeps the broker side open for a while, so
// the broker still sees the old membership when the client joins again.
type lingerProxy struct {
	ln    net.Listener
	mu    sync.Mutex
	pairs [][2]net.Conn
	wg    sync.WaitGroup
}

func newLingerProxy(t *testing.T, target string) *lingerProxy {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	require.NoError(t, err)
	p := &lingerProxy{ln: ln}
	p.wg.Go(func() {
		for {
			cc, err := ln.Accept()
			if err != nil {
				return
			}
			bc, err := net.DialTimeout("tcp", target, 5*time.Second)
			if err != nil {
				cc.Close()
				continue
			}
			p.mu.Lock()
			p.pairs = append(p.pairs, [2]net.Conn{cc, bc})
			p.mu.Unlock()
			cp := func(dst, src net.Conn) {
				buf := make([]byte, 32<<10)
				for {
					n, err := src.Read(buf)
					if n > 0 {
						if _, werr := dst.Write(buf[:n]); werr != nil {
							return
						}
					}
					if err != nil {
						return
					}
				}
			}
			p.wg.Go(func() { cp(bc, cc) })
			p.wg.Go(func() { cp(cc, bc) })
		}
	})
	t.Cleanup(func() {
		ln.Close()
		p.mu.Lock()
		for _, pr := range p.pairs {
			pr[0].Close()
			pr[1].Close()
		}
		p.mu.Unlock()
		p.wg.Wait()
	})
	return p
}

// kill closes the client side of every connection now and the broker side
// after linger.
func (p *lingerProxy) kill(linger time.Duration) {
	p.mu.Lock()
	pairs := p.pairs
	p.pairs = nil
	p.mu.Unlock()
	for _, pr := range pairs {
		pr[0].Close()
	}
	time.AfterFunc(linger, func() {
		for _, pr := range pairs {
			pr[1].Close()
		}
	})
}

// A member whose connection breaks joins again on a new one while the
// broker still holds its old membership (409): it retries until the old
// connection is gone instead of giving up.
func TestGroupLocalRejoinBeforeBrokerSeesClose(t *testing.T) {
	t.Parallel()
	tb := startGroupBroker(t)
	own := groupOwnership(tb)
	px := newLingerProxy(t, tb.addr)
	a := startMember(t, tb.addr, "c-a", own, nil)
	b := startMember(t, px.ln.Addr().String(), "c-b", own, nil)
	waitAssignment(t, 6, map[*member]int{a: 3, b: 3})
	px.kill(400 * time.Millisecond)
	select {
	case err := <-b.done:
		t.Fatalf("member gave up: %v", err)
	case <-time.After(600 * time.Millisecond):
	}
	waitAssignment(t, 6, map[*member]int{a: 3, b: 3})
	select {
	case err := <-b.done:
		t.Fatalf("member gave up: %v", err)
	default:
	}
	own.check(t)
}
