package balance

import (
	"fmt"
	"slices"
	"strings"

	"github.com/metaq-go/metaq/sdk/message"
)

// Strategy decides which partitions one member of a consumer group owns.
//
// Assign returns the partitions consumerID should own when the group's
// members are consumers and the topic's partitions are partitions. It is
// pure and deterministic: the result depends only on the sets of consumers
// and partitions, not on their order or on duplicates, and the inputs are
// never modified. The result is a new slice sorted numerically by
// (BrokerID, Partition), or nil when consumerID owns nothing, including
// when it is not among consumers. For any set of consumers, the results
// of all of them partition the set of partitions: every partition is owned
// by exactly one consumer while there is at least one.
type Strategy interface {
	Assign(consumerID string, consumers []string, partitions []message.Partition) []message.Partition
}

// BatchStrategy is a [Strategy] that also computes the share of every
// consumer in one call, for a coordinator that needs them all (a local
// broker recomputes its whole group on each join and leave). Calling
// Assign once per consumer costs C times one Assign, and one Assign
// already sorts the C consumers (and, for [Consistent], builds a ring of
// 160·C points), so O(C² log C) for the group; AssignAll does that work
// once, O((C + P) log(C + P)) for C consumers and P partitions. Both
// strategies of this package implement it.
type BatchStrategy interface {
	Strategy
	// AssignAll returns, at index i, what Assign(consumers[i], consumers,
	// partitions) returns (so a duplicated consumer gets the same share
	// twice). Each share is a new slice; the inputs are not modified.
	AssignAll(consumers []string, partitions []message.Partition) [][]message.Partition
}

// AssignAll returns every consumer's share under s: at index i, what
// s.Assign(consumers[i], consumers, partitions) returns. It makes one
// AssignAll call when s is a [BatchStrategy] and calls Assign once per
// consumer otherwise.
func AssignAll(s Strategy, consumers []string, partitions []message.Partition) [][]message.Partition {
	if bs, ok := s.(BatchStrategy); ok {
		return bs.AssignAll(consumers, partitions)
	}
	out := make([][]message.Partition, len(consumers))
	for i, c := range consumers {
		out[i] = s.Assign(c, consumers, partitions)
	}
	return out
}

// Names accepted by [ByName].
const (
	NameDefault = "default"
	NameConsist = "consist"
)

// ByName returns the strategy called name: "default" for [Default] and
// "consist" for [Consistent], as MetaQ's ConsumerConfig.loadBalanceStrategyType
// names them (DEFAULT, CONSIST; case is ignored).
func ByName(name string) (Strategy, error) {
	switch strings.ToLower(name) {
	case NameDefault:
		return Default(), nil
	case NameConsist:
		return Consistent(), nil
	}
	return nil, fmt.Errorf("balance: unknown strategy %q (want %q or %q)", name, NameDefault, NameConsist)
}

// Default returns MetaQ's DEFAULT strategy with numeric partition order.
//
// Consumers are sorted as strings and partitions numerically by
// (BrokerID, Partition). With C consumers, P partitions, n = P/C and
// e = P%C, the consumer at index i takes the n+1 (if i < e) or n
// consecutive partitions starting at index i·n+min(i, e). Consumers
// beyond the P-th get nothing.
//
// MetaQ itself sorts partition strings as text ("0-10" < "0-2"); see the
// package documentation for why the orders must not be mixed in one group,
// and [DefaultMetaQStringOrder] for MetaQ's exact order.
func Default() Strategy { return defaultStrategy{less: message.Partition.Compare} }

// DefaultMetaQStringOrder returns MetaQ's DEFAULT strategy exactly as
// MetaQ's DefaultLoadBalanceStrategy computes it: like [Default], but with
// the partitions sorted as "<brokerId>-<partition>" strings, so "0-10"
// comes before "0-2". Use it only in groups shared with Java MetaQ
// consumers. The result is still returned in numeric order.
func DefaultMetaQStringOrder() Strategy {
	return defaultStrategy{less: func(p, q message.Partition) int {
		return strings.Compare(p.String(), q.String())
	}}
}

type defaultStrategy struct {
	less func(p, q message.Partition) int
}

func (s defaultStrategy) Assign(consumerID string, consumers []string, partitions []message.Partition) []message.Partition {
	cs := sortedUnique(consumers, strings.Compare)
	i, found := slices.BinarySearch(cs, consumerID)
	if !found {
		return nil
	}
	return share(sortedUnique(partitions, s.less), len(cs), i)
}

// AssignAll implements [BatchStrategy].
func (s defaultStrategy) AssignAll(consumers []string, partitions []message.Partition) [][]message.Partition {
	cs := sortedUnique(consumers, strings.Compare)
	ps := sortedUnique(partitions, s.less)
	out := make([][]message.Partition, len(consumers))
	for i, c := range consumers {
		j, _ := slices.BinarySearch(cs, c)
		out[i] = share(ps, len(cs), j)
	}
	return out
}

// share returns, in numeric order, the run of the sorted partitions ps
// that the consumer at index i of nc sorted consumers takes.
func share(ps []message.Partition, nc, i int) []message.Partition {
	n, e := len(ps)/nc, len(ps)%nc
	start, count := i*n+min(i, e), n
	if i < e {
		count++
	}
	if count == 0 {
		return nil
	}
	out := slices.Clone(ps[start : start+count])
	slices.SortFunc(out, message.Partition.Compare)
	return out
}

// sortedUnique returns a sorted copy of xs without duplicates.
func sortedUnique[T comparable](xs []T, cmp func(a, b T) int) []T {
	out := slices.Clone(xs)
	slices.SortFunc(out, cmp)
	return slices.Compact(out)
}
