package groups

import (
	"fmt"
	"math/rand/v2"
	"slices"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
)

// TestGroupTwoPhaseHandover drives the state machine directly: a partition
// moving from a to b is granted to b only after a acknowledges.
func TestGroupTwoPhaseHandover(t *testing.T) {
	now := time.Unix(1000, 0)
	gs := &Coordinator{timeout: 3 * time.Second, now: func() time.Time { return now }}
	ca, cb := &Session{}, &Session{}
	k := groupKey{"g", "t"}
	gen, va, err := gs.join(ca, k, "a", "default", 4, 0)
	if err != nil || len(va) != 4 {
		t.Fatalf("a join: %v %v", va, err)
	}
	genA := gen
	_, vb, err := gs.join(cb, k, "b", "default", 4, 0)
	if err != nil || len(vb) != 0 {
		t.Fatalf("b must wait for a's acknowledgement, got %v %v", vb, err)
	}
	if _, _, err := gs.join(&Session{}, k, "c", "consist", 4, 0); err == nil || err.Kind != Invalid {
		t.Fatalf("strategy mismatch: %v", err)
	}
	if _, _, err := gs.join(&Session{}, k, "a", "default", 4, 0); err == nil || err.Kind != Conflict {
		t.Fatalf("same id on another connection: %v", err)
	}
	// a heartbeats with its old view's generation: it learns of the revocation.
	gen, va, _ = gs.heartbeat(ca, k, "a", genA)
	if len(va) != 2 {
		t.Fatalf("a's view after rebalance: %v", va)
	}
	// b still gets nothing: a has not acknowledged.
	_, vb, _ = gs.heartbeat(cb, k, "b", 0)
	if len(vb) != 0 {
		t.Fatalf("b granted before a acknowledged: %v", vb)
	}
	gs.heartbeat(ca, k, "a", gen) // the acknowledgement
	_, vb, _ = gs.heartbeat(cb, k, "b", 0)
	if len(vb) != 2 {
		t.Fatalf("b after a acknowledged: %v", vb)
	}
	// a goes silent: after the session timeout b takes everything (once b
	// has acknowledged its view, nothing else holds).
	now = now.Add(2 * time.Second)
	gs.heartbeat(cb, k, "b", 0)
	now = now.Add(2 * time.Second)
	g2, vb, _ := gs.heartbeat(cb, k, "b", 0)
	if len(vb) != 4 {
		t.Fatalf("b after a timed out: %v", vb)
	}
	if _, _, err := gs.heartbeat(ca, k, "a", g2); err == nil || err.Kind != NotMember {
		t.Fatalf("expired member: %v", err)
	}
	gs.Close(cb)
	if len(gs.groups) != 0 {
		t.Fatal("group not removed with its last member")
	}
}

// TestGroupRevocationTimeout: a member that keeps heartbeating but never
// acknowledges a revocation is removed once the revocation has waited for
// the session timeout, and its partitions go to the others.
func TestGroupRevocationTimeout(t *testing.T) {
	now := time.Unix(1000, 0)
	gs := &Coordinator{timeout: 3 * time.Second, now: func() time.Time { return now }}
	ca, cb := &Session{}, &Session{}
	k := groupKey{"g", "t"}
	genA, va, _ := gs.join(ca, k, "a", "default", 4, 0)
	require.Len(t, va, 4)
	gs.join(cb, k, "b", "default", 4, 0) // revokes two of a's partitions
	for range 3 {
		now = now.Add(time.Second)
		_, va, err := gs.heartbeat(ca, k, "a", genA-1) // alive, never acknowledging
		require.Nil(t, err)
		require.Len(t, va, 2)
		_, vb, err := gs.heartbeat(cb, k, "b", 0)
		require.Nil(t, err)
		require.Empty(t, vb)
	}
	now = now.Add(500 * time.Millisecond)
	_, vb, err := gs.heartbeat(cb, k, "b", 0)
	require.Nil(t, err)
	require.Len(t, vb, 4, "a still holds partitions after its revocation timed out")
	_, _, err = gs.heartbeat(ca, k, "a", genA)
	require.NotNil(t, err)
	require.Equal(t, NotMember, err.Kind)
}

// BenchmarkGroupJoinFlood measures the coordinator alone: one op is
// members joins into one group (of a topic with 16 partitions); joins/s
// is the rate. The clock stands still so that no member expires.
func BenchmarkGroupJoinFlood(b *testing.B) {
	for _, bc := range []struct {
		strategy string
		members  int
	}{{"default", 1000}, {"consist", 200}, {"consist", 1000}} {
		b.Run(fmt.Sprintf("%s/members=%d", bc.strategy, bc.members), func(b *testing.B) {
			ids := make([]string, bc.members)
			for i := range ids {
				ids[i] = fmt.Sprintf("consumer-%05d", i)
			}
			c := &Session{}
			k := groupKey{"g", "t"}
			now := time.Unix(1000, 0)
			start := time.Now()
			for range b.N {
				gs := &Coordinator{now: func() time.Time { return now }}
				for _, id := range ids {
					if _, _, err := gs.join(c, k, id, bc.strategy, 16, 0); err != nil {
						b.Fatal(err.Msg)
					}
				}
			}
			b.ReportMetric(float64(b.N*bc.members)/time.Since(start).Seconds(), "joins/s")
		})
	}
}

// checkGroup checks g's internal consistency: the invariant, the owner
// index, the sorted ids and the sessions' membership lists.
func checkGroup(t *testing.T, g *cgroup) {
	t.Helper()
	ids := g.mem.Members()
	require.True(t, slices.IsSorted(ids), "ids not sorted")
	require.Len(t, ids, len(g.members))
	holder := make(map[int32]*member)
	for _, id := range ids {
		m := g.members[id]
		require.NotNil(t, m, id)
		for p := range m.held {
			require.Nil(t, holder[p], "partition %d held twice", p)
			holder[p] = m
		}
		m.s.mu.Lock()
		_, listed := m.s.refs[memberRef{g.key, id}]
		m.s.mu.Unlock()
		require.True(t, listed, "%s missing from its session's list", id)
	}
	for p, o := range g.owner {
		require.Equal(t, holder[int32(p)], o, "owner of %d", p)
	}
}

// TestGroupRandomChurn drives one group through a seeded random sequence of
// joins, heartbeats (acknowledging or not), leaves, closed connections and
// timeouts, checking the group's consistency after every step, and then
// that once everyone acknowledges, every partition is held by its target.
func TestGroupRandomChurn(t *testing.T) {
	for _, strategy := range []string{"default", "consist"} {
		t.Run(strategy, func(t *testing.T) {
			rng := rand.New(rand.NewPCG(7, 8))
			now := time.Unix(1000, 0)
			gs := &Coordinator{timeout: 3 * time.Second, now: func() time.Time { return now }}
			k := groupKey{"g", "t"}
			conns := make([]*Session, 4)
			for i := range conns {
				conns[i] = &Session{}
			}
			gens := map[string]int64{}
			owner := map[string]*Session{}
			for step := range 2000 {
				id := fmt.Sprintf("m%d", rng.IntN(12))
				c := owner[id]
				switch op := rng.IntN(10); {
				case op < 3:
					if c == nil {
						c = conns[rng.IntN(len(conns))]
					}
					gen, _, err := gs.join(c, k, id, strategy, 8, 0)
					if err == nil {
						owner[id], gens[id] = c, gen
					}
				case op < 7 && c != nil:
					ack := gens[id]
					if rng.IntN(4) == 0 {
						ack-- // an old generation: not an acknowledgement
					}
					gen, _, err := gs.heartbeat(c, k, id, ack)
					if err != nil {
						delete(owner, id)
						continue
					}
					gens[id] = gen
				case op == 7 && c != nil:
					gs.Leave(c, k.group, k.topic, id)
					delete(owner, id)
				case op == 8 && step%50 == 0:
					i := rng.IntN(len(conns))
					gs.Close(conns[i])
					conns[i] = &Session{}
					for id, c := range owner {
						if c.closed {
							delete(owner, id)
						}
					}
				case op == 9:
					now = now.Add(time.Duration(rng.IntN(800)) * time.Millisecond)
				}
				if g := gs.lockGroup(k, nil); g != nil {
					checkGroup(t, g)
					gs.release(k, g)
				}
			}
			// Everyone left acknowledges until nothing changes.
			for range 5 {
				for id, c := range owner {
					if gen, _, err := gs.heartbeat(c, k, id, gens[id]); err == nil {
						gens[id] = gen
					} else {
						delete(owner, id)
					}
				}
			}
			g := gs.lockGroup(k, nil)
			if g == nil {
				return
			}
			defer gs.release(k, g)
			checkGroup(t, g)
			for _, m := range g.members {
				for _, p := range m.target {
					require.Same(t, m, g.owner[p], "partition %d not granted to its target", p)
				}
			}
		})
	}
}

// TestGroupLockIndependent: while the test holds group a's lock (and a
// join into a waits for it), a member of group b heartbeats, another joins
// b, and closing their session removes them from b; then a's join
// completes.
func TestGroupLockIndependent(t *testing.T) {
	gs := NewCoordinator(Config{})
	sa, sb := &Session{}, &Session{}
	_, _, err := gs.Join(sa, "ga", "t", "a1", "default", 1, 0)
	require.NoError(t, err)
	genB, _, err := gs.Join(sb, "gb", "t", "b1", "default", 1, 0)
	require.NoError(t, err)

	k := groupKey{"ga", "t"}
	g := gs.lockGroup(k, nil)
	require.NotNil(t, g)
	unlocked := false
	unlock := func() {
		if !unlocked {
			unlocked = true
			g.mu.Unlock()
		}
	}
	defer unlock()
	// A join into a waits for the lock.
	joinedA := make(chan error, 1)
	go func() {
		_, _, err := gs.Join(&Session{}, "ga", "t", "a2", "default", 1, 0)
		joinedA <- err
	}()

	done := make(chan error, 1)
	go func() {
		_, _, err := gs.Heartbeat(sb, "gb", "t", "b1", genB)
		if err == nil {
			_, _, err = gs.Join(sb, "gb", "t", "b2", "default", 1, 0)
		}
		done <- err
	}()
	select {
	case err := <-done:
		require.NoError(t, err)
	case <-time.After(30 * time.Second):
		t.Fatal("group b's heartbeat waited for group a's lock")
	}
	// Closing b's session touches only group b.
	gs.Close(sb)
	require.Empty(t, gs.Owners("gb", "t"))
	select {
	case err := <-joinedA:
		t.Fatalf("a's join did not wait for a's lock: %v", err)
	default:
	}
	unlock()
	require.NoError(t, <-joinedA)
}
