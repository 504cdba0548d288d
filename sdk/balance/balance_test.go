package balance

import (
	"fmt"
	"math/rand/v2"
	"os"
	"slices"
	"strconv"
	"strings"
	"testing"

	"github.com/metaq-go/metaq/sdk/message"
)

// parts returns brokers×perBroker partitions in numeric order.
func parts(brokers, perBroker int) []message.Partition {
	var ps []message.Partition
	for b := range brokers {
		for p := range perBroker {
			ps = append(ps, message.Partition{BrokerID: b, Partition: int32(p)})
		}
	}
	return ps
}

func names(ps []message.Partition) string {
	s := make([]string, len(ps))
	for i, p := range ps {
		s[i] = p.String()
	}
	return strings.Join(s, ",")
}

func consumerIDs(n int) []string {
	cs := make([]string, n)
	for i := range cs {
		cs[i] = fmt.Sprintf("g_c%d", i)
	}
	return cs
}

func TestByName(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		name string
		want Strategy
	}{
		{"default", Default()},
		{"DEFAULT", Default()},
		{"consist", Consistent()},
		{"CONSIST", Consistent()},
	} {
		s, err := ByName(tc.name)
		if err != nil {
			t.Fatalf("ByName(%q): %v", tc.name, err)
		}
		if fmt.Sprintf("%T", s) != fmt.Sprintf("%T", tc.want) {
			t.Errorf("ByName(%q) = %T, want %T", tc.name, s, tc.want)
		}
	}
	if _, err := ByName("round-robin"); err == nil {
		t.Error("ByName(round-robin): want error")
	}
}

func TestDefault(t *testing.T) {
	t.Parallel()
	three := []string{"g_b", "g_c", "g_a"} // unsorted on purpose
	for _, tc := range []struct {
		name       string
		consumers  []string
		partitions []message.Partition
		want       map[string]string
	}{
		{
			name:       "3 consumers x 10 partitions",
			consumers:  three,
			partitions: parts(1, 10),
			want: map[string]string{
				"g_a": "0-0,0-1,0-2,0-3",
				"g_b": "0-4,0-5,0-6",
				"g_c": "0-7,0-8,0-9",
			},
		},
		{
			name:       "3 consumers x 2 brokers x 5 partitions",
			consumers:  three,
			partitions: parts(2, 5),
			want: map[string]string{
				"g_a": "0-0,0-1,0-2,0-3",
				"g_b": "0-4,1-0,1-1",
				"g_c": "1-2,1-3,1-4",
			},
		},
		{
			name:       "extra consumers idle",
			consumers:  []string{"g_e", "g_d", "g_c", "g_b", "g_a"},
			partitions: parts(1, 3),
			want: map[string]string{
				"g_a": "0-0", "g_b": "0-1", "g_c": "0-2", "g_d": "", "g_e": "",
			},
		},
		{
			name:       "one consumer takes all",
			consumers:  []string{"g_a"},
			partitions: parts(2, 3),
			want:       map[string]string{"g_a": "0-0,0-1,0-2,1-0,1-1,1-2"},
		},
		{
			name:       "zero partitions",
			consumers:  three,
			partitions: nil,
			want:       map[string]string{"g_a": "", "g_b": "", "g_c": ""},
		},
		{
			name:       "numeric order past ten",
			consumers:  []string{"g_a", "g_b"},
			partitions: parts(1, 12),
			want: map[string]string{
				"g_a": "0-0,0-1,0-2,0-3,0-4,0-5",
				"g_b": "0-6,0-7,0-8,0-9,0-10,0-11",
			},
		},
		{
			name:       "duplicates ignored",
			consumers:  []string{"g_a", "g_b", "g_a"},
			partitions: append(parts(1, 4), parts(1, 4)...),
			want:       map[string]string{"g_a": "0-0,0-1", "g_b": "0-2,0-3"},
		},
	} {
		t.Run(tc.name, func(t *testing.T) {
			for c, want := range tc.want {
				if got := names(Default().Assign(c, tc.consumers, tc.partitions)); got != want {
					t.Errorf("%s: got %q, want %q", c, got, want)
				}
			}
			if got := Default().Assign("g_stranger", tc.consumers, tc.partitions); got != nil {
				t.Errorf("non-member got %v", got)
			}
		})
	}
	if got := Default().Assign("g_a", nil, parts(1, 3)); got != nil {
		t.Errorf("no consumers: got %v", got)
	}
}

// TestDefaultMetaQStringOrder checks MetaQ's text order, where "0-10" < "0-2"
// and "10-0" < "2-0", against the numeric order of Default.
func TestDefaultMetaQStringOrder(t *testing.T) {
	t.Parallel()
	cs := []string{"g_b", "g_a"}
	for _, tc := range []struct {
		name          string
		partitions    []message.Partition
		wantA, wantB  string // MetaQ's string order
		numA, numB    string // Default
		sameAsDefault bool
	}{
		{
			name:       "one broker, 12 partitions",
			partitions: parts(1, 12),
			// sorted as text: 0-0 0-1 0-10 0-11 0-2 0-3 | 0-4 ... 0-9
			wantA: "0-0,0-1,0-2,0-3,0-10,0-11",
			wantB: "0-4,0-5,0-6,0-7,0-8,0-9",
			numA:  "0-0,0-1,0-2,0-3,0-4,0-5",
			numB:  "0-6,0-7,0-8,0-9,0-10,0-11",
		},
		{
			name: "brokers 1, 2, 10",
			partitions: []message.Partition{
				{BrokerID: 1, Partition: 0}, {BrokerID: 1, Partition: 1}, {BrokerID: 2, Partition: 0}, {BrokerID: 2, Partition: 1}, {BrokerID: 10, Partition: 0}, {BrokerID: 10, Partition: 1},
			},
			// sorted as text: 1-0 1-1 10-0 | 10-1 2-0 2-1
			wantA: "1-0,1-1,10-0",
			wantB: "2-0,2-1,10-1",
			numA:  "1-0,1-1,2-0",
			numB:  "2-1,10-0,10-1",
		},
		{
			name:          "ten or fewer partitions agree",
			partitions:    parts(1, 10),
			wantA:         "0-0,0-1,0-2,0-3,0-4",
			wantB:         "0-5,0-6,0-7,0-8,0-9",
			sameAsDefault: true,
		},
	} {
		t.Run(tc.name, func(t *testing.T) {
			s := DefaultMetaQStringOrder()
			if got := names(s.Assign("g_a", cs, tc.partitions)); got != tc.wantA {
				t.Errorf("string order g_a: got %q, want %q", got, tc.wantA)
			}
			if got := names(s.Assign("g_b", cs, tc.partitions)); got != tc.wantB {
				t.Errorf("string order g_b: got %q, want %q", got, tc.wantB)
			}
			numA, numB := tc.numA, tc.numB
			if tc.sameAsDefault {
				numA, numB = tc.wantA, tc.wantB
			}
			if got := names(Default().Assign("g_a", cs, tc.partitions)); got != numA {
				t.Errorf("numeric g_a: got %q, want %q", got, numA)
			}
			if got := names(Default().Assign("g_b", cs, tc.partitions)); got != numB {
				t.Errorf("numeric g_b: got %q, want %q", got, numB)
			}
		})
	}
}

// TestKetamaHash checks the hash against vectors computed independently
// (Python: struct.unpack('<4I', hashlib.md5(s).digest())).
func TestKetamaHash(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		s    string
		want uint32
	}{
		{"0-0", 53638855},
		{"1-5", 2506899986},
		{"10-99", 2077855426},
	} {
		if got := ketamaHash(tc.s); got != tc.want {
			t.Errorf("ketamaHash(%q) = %d, want %d", tc.s, got, tc.want)
		}
	}
	// All four points of one digest, consumer "c1", i = 0 and 39.
	ring := buildRing([]string{"c1"})
	if len(ring) != pointsPerConsumer {
		t.Fatalf("ring has %d points, want %d", len(ring), pointsPerConsumer)
	}
	for _, h := range []uint32{199993319, 408931573, 795243969, 1587949613, 663590017, 1216831183, 3224234630, 1258799577} {
		if _, ok := slices.BinarySearchFunc(ring, h, func(p ringPoint, h uint32) int {
			return int(int64(p.hash) - int64(h))
		}); !ok {
			t.Errorf("point %d missing from the ring of c1", h)
		}
	}
}

// TestConsistentGolden checks a full assignment against an independent
// Python implementation of MetaQ's ConsisHashStrategy.
func TestConsistentGolden(t *testing.T) {
	t.Parallel()
	cs := []string{"g_c", "g_a", "g_b"}
	ps := parts(2, 6)
	want := map[string]string{
		"g_a": "0-1,0-2,0-3,1-0,1-1,1-2,1-4",
		"g_b": "0-0,0-4",
		"g_c": "0-5,1-3,1-5",
	}
	for c, w := range want {
		if got := names(Consistent().Assign(c, cs, ps)); got != w {
			t.Errorf("%s: got %q, want %q", c, got, w)
		}
	}
	if got := Consistent().Assign("g_d", cs, ps); got != nil {
		t.Errorf("non-member got %v", got)
	}
	if got := Consistent().Assign("g_a", cs, nil); got != nil {
		t.Errorf("zero partitions: got %v", got)
	}
	if got := names(Consistent().Assign("g_a", []string{"g_a"}, ps)); got != names(ps) {
		t.Errorf("single consumer: got %q, want all", got)
	}
}

func TestRingCollision(t *testing.T) {
	t.Parallel()
	// Two consumers sharing a point: the greater id wins, whatever the input order.
	for _, r := range []hashRing{
		{{5, "a"}, {5, "b"}, {9, "a"}},
		{{9, "a"}, {5, "b"}, {5, "a"}},
	} {
		r = r.sorted()
		if len(r) != 2 {
			t.Fatalf("ring %v: want 2 points", r)
		}
		for _, tc := range []struct {
			h    uint32
			want string
		}{{0, "b"}, {5, "b"}, {6, "a"}, {9, "a"}, {10, "b"}, {1<<32 - 1, "b"}} {
			if got := r.owner(tc.h); got != tc.want {
				t.Errorf("owner(%d) = %q, want %q", tc.h, got, tc.want)
			}
		}
	}
}

var strategies = []struct {
	name string
	s    Strategy
}{
	{"default", Default()},
	{"string-order", DefaultMetaQStringOrder()},
	{"consist", Consistent()},
}

// owners computes every member's share and checks that together they own
// each partition exactly once (or nothing when there are no members).
func owners(t *testing.T, s Strategy, members []string, ps []message.Partition) map[message.Partition]string {
	t.Helper()
	own := make(map[message.Partition]string, len(ps))
	for _, c := range members {
		got := s.Assign(c, members, ps)
		if !slices.IsSortedFunc(got, message.Partition.Compare) {
			t.Fatalf("%s: result not sorted: %v", c, got)
		}
		for _, p := range got {
			if prev, ok := own[p]; ok {
				t.Fatalf("members %v: %v owned by %s and %s", members, p, prev, c)
			}
			own[p] = c
		}
	}
	if len(members) > 0 && len(own) != len(ps) {
		t.Fatalf("members %v: %d of %d partitions owned", members, len(own), len(ps))
	}
	if len(members) == 0 && len(own) != 0 {
		t.Fatalf("no members, yet %d partitions owned", len(own))
	}
	return own
}

// joinLeaveSeeds is how many seeded sequences TestJoinsAndLeaves runs: 1
// (seed 0), or METAQ_BALANCE_SEEDS (make soak runs 5).
func joinLeaveSeeds() uint64 {
	if v, err := strconv.ParseUint(os.Getenv("METAQ_BALANCE_SEEDS"), 10, 64); err == nil && v > 0 {
		return v
	}
	return 1
}

// TestJoinsAndLeaves runs 10 consumers × 100 partitions through a seeded
// random sequence of 200 joins and leaves (joinLeaveSeeds sequences);
// after every change the members own every partition exactly once. For
// CONSIST, a change moves only the partitions of the consumer that left
// (or to the one that joined).
func TestJoinsAndLeaves(t *testing.T) {
	t.Parallel()
	pool := consumerIDs(10)
	ps := parts(4, 25)
	for _, st := range strategies {
		t.Run(st.name, func(t *testing.T) {
			for seed := range joinLeaveSeeds() {
				rng := rand.New(rand.NewPCG(seed, 42))
				live := map[string]bool{}
				var prev map[message.Partition]string
				for range 200 {
					c := pool[rng.IntN(len(pool))]
					joined := !live[c]
					live[c] = joined
					var members []string
					for m, ok := range live {
						if ok {
							members = append(members, m)
						}
					}
					rng.Shuffle(len(members), func(i, j int) { members[i], members[j] = members[j], members[i] })
					own := owners(t, st.s, members, ps)
					if st.name == "consist" && prev != nil && len(members) > 0 {
						for p, o := range own {
							was, had := prev[p]
							switch {
							case !had: // no members before: nothing to keep
							case joined && o != was && o != c:
								t.Fatalf("seed %d: %s joined, yet %v moved %s -> %s", seed, c, p, was, o)
							case !joined && was != c && o != was:
								t.Fatalf("seed %d: %s left, yet %v moved %s -> %s", seed, c, p, was, o)
							}
						}
					}
					prev = own
				}
			}
		})
	}
}

// TestConsistentLeaveStability removes each consumer of ten in turn: only
// the partitions it owned move.
func TestConsistentLeaveStability(t *testing.T) {
	t.Parallel()
	cs, ps := consumerIDs(10), parts(4, 25)
	before := owners(t, Consistent(), cs, ps)
	for i, gone := range cs {
		rest := slices.Delete(slices.Clone(cs), i, i+1)
		after := owners(t, Consistent(), rest, ps)
		moved := 0
		for p, o := range before {
			if o == gone {
				moved++
				continue
			}
			if after[p] != o {
				t.Errorf("%s left: %v moved %s -> %s", gone, p, o, after[p])
			}
		}
		t.Logf("%s left: %d partitions moved", gone, moved)
	}
}

// TestPermutationInvariance checks that the result does not depend on the
// order of the inputs, and that the inputs are left alone.
func TestPermutationInvariance(t *testing.T) {
	t.Parallel()
	rng := rand.New(rand.NewPCG(1, 2))
	for _, st := range strategies {
		t.Run(st.name, func(t *testing.T) {
			for range 20 {
				cs := consumerIDs(1 + rng.IntN(12))
				ps := parts(1+rng.IntN(4), 1+rng.IntN(30))
				want := map[string][]message.Partition{}
				for _, c := range cs {
					want[c] = st.s.Assign(c, cs, ps)
				}
				for range 5 {
					pc, pp := slices.Clone(cs), slices.Clone(ps)
					rng.Shuffle(len(pc), func(i, j int) { pc[i], pc[j] = pc[j], pc[i] })
					rng.Shuffle(len(pp), func(i, j int) { pp[i], pp[j] = pp[j], pp[i] })
					sc, sp := slices.Clone(pc), slices.Clone(pp)
					for _, c := range cs {
						if got := st.s.Assign(c, pc, pp); !slices.Equal(got, want[c]) {
							t.Fatalf("%s: permuted inputs gave %v, want %v", c, got, want[c])
						}
					}
					if !slices.Equal(pc, sc) || !slices.Equal(pp, sp) {
						t.Fatal("inputs modified")
					}
				}
			}
		})
	}
}

// onlyAssign hides a strategy's AssignAll, to test the fallback.
type onlyAssign struct{ Strategy }

// TestAssignAll: AssignAll gives every consumer what Assign gives it, for
// shuffled inputs with duplicates, through the batch form and through the
// per-consumer fallback.
func TestAssignAll(t *testing.T) {
	t.Parallel()
	rng := rand.New(rand.NewPCG(3, 4))
	for _, st := range strategies {
		if _, ok := st.s.(BatchStrategy); !ok {
			t.Fatalf("%s is not a BatchStrategy", st.name)
		}
		t.Run(st.name, func(t *testing.T) {
			for range 50 {
				cs := consumerIDs(rng.IntN(15))
				if len(cs) > 0 {
					cs = append(cs, cs[rng.IntN(len(cs))]) // a duplicate
				}
				ps := parts(1+rng.IntN(3), rng.IntN(30))
				rng.Shuffle(len(cs), func(i, j int) { cs[i], cs[j] = cs[j], cs[i] })
				rng.Shuffle(len(ps), func(i, j int) { ps[i], ps[j] = ps[j], ps[i] })
				sc, sp := slices.Clone(cs), slices.Clone(ps)
				for _, s := range []Strategy{st.s, onlyAssign{st.s}} {
					got := AssignAll(s, cs, ps)
					if len(got) != len(cs) {
						t.Fatalf("%d shares for %d consumers", len(got), len(cs))
					}
					for i, c := range cs {
						if want := st.s.Assign(c, cs, ps); !slices.Equal(got[i], want) {
							t.Fatalf("%s among %v: AssignAll %v, Assign %v", c, cs, got[i], want)
						}
					}
				}
				if !slices.Equal(cs, sc) || !slices.Equal(ps, sp) {
					t.Fatal("inputs modified")
				}
			}
		})
	}
}

func BenchmarkAssign(b *testing.B) {
	cs, ps := consumerIDs(10), parts(4, 25)
	for _, st := range []struct {
		name string
		s    Strategy
	}{{"default", Default()}, {"consist", Consistent()}} {
		b.Run(fmt.Sprintf("%s/consumers=%d/partitions=%d", st.name, len(cs), len(ps)), func(b *testing.B) {
			b.ReportAllocs()
			for b.Loop() {
				for _, c := range cs {
					st.s.Assign(c, cs, ps)
				}
			}
		})
		b.Run(fmt.Sprintf("%s/all/consumers=%d/partitions=%d", st.name, len(cs), len(ps)), func(b *testing.B) {
			b.ReportAllocs()
			for b.Loop() {
				AssignAll(st.s, cs, ps)
			}
		})
	}
}

// TestGroup runs a Group through a seeded random sequence of adds and
// removes; after each, its shares are what Assign gives each member, and
// its members are sorted.
func TestGroup(t *testing.T) {
	t.Parallel()
	pool := consumerIDs(16)
	for _, st := range append(strategies, struct {
		name string
		s    Strategy
	}{"no-batch", onlyAssign{Default()}}) {
		t.Run(st.name, func(t *testing.T) {
			rng := rand.New(rand.NewPCG(5, 6))
			g := NewGroup(st.s)
			live := map[string]bool{}
			for range 200 {
				c := pool[rng.IntN(len(pool))]
				if live[c] {
					if !g.Remove(c) || g.Remove(c) {
						t.Fatalf("remove %s: wrong result", c)
					}
				} else if !g.Add(c) || g.Add(c) {
					t.Fatalf("add %s: wrong result", c)
				}
				live[c] = !live[c]
				members := g.Members()
				if !slices.IsSorted(members) || len(members) != countTrue(live) {
					t.Fatalf("members %v, want the sorted %v", members, live)
				}
				ps := parts(1+rng.IntN(3), rng.IntN(40))
				got := g.AssignAll(ps)
				for i, c := range members {
					if want := st.s.Assign(c, members, ps); !slices.Equal(got[i], want) {
						t.Fatalf("%s among %v: Group %v, Assign %v", c, members, got[i], want)
					}
				}
			}
		})
	}
}

func countTrue(m map[string]bool) int {
	n := 0
	for _, v := range m {
		if v {
			n++
		}
	}
	return n
}

// TestRingMerge: merged points keep ties, and the greater consumer owns a
// shared point, as in TestRingCollision.
func TestRingMerge(t *testing.T) {
	t.Parallel()
	r := hashRing{{9, "a"}}.merge(hashRing{{5, "a"}})
	r = r.merge(hashRing{{5, "b"}, {12, "b"}})
	want := hashRing{{5, "b"}, {5, "a"}, {9, "a"}, {12, "b"}}
	if !slices.Equal(r, want) {
		t.Fatalf("merged ring %v, want %v", r, want)
	}
	for _, tc := range []struct {
		h    uint32
		want string
	}{{0, "b"}, {5, "b"}, {6, "a"}, {9, "a"}, {10, "b"}, {13, "b"}} {
		if got := r.owner(tc.h); got != tc.want {
			t.Errorf("owner(%d) = %q, want %q", tc.h, got, tc.want)
		}
	}
}

// ketamaHash is ketamaHashBytes of s.
func ketamaHash(s string) uint32 { return ketamaHashBytes([]byte(s)) }
