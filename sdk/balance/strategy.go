package balance

import (
	"fmt"
	"slices"
	"strings"
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
	Assign(consumerID string, consumers []string, partitions []Partition) []Partition
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
func Default() Strategy { return defaultStrategy{less: Partition.Compare} }

// DefaultMetaQStringOrder returns MetaQ's DEFAULT strategy exactly as
// MetaQ's DefaultLoadBalanceStrategy computes it: like [Default], but with
// the partitions sorted as "<brokerId>-<partition>" strings, so "0-10"
// comes before "0-2". Use it only in groups shared with Java MetaQ
// consumers. The result is still returned in numeric order.
func DefaultMetaQStringOrder() Strategy {
	return defaultStrategy{less: func(p, q Partition) int {
		return strings.Compare(p.String(), q.String())
	}}
}

type defaultStrategy struct {
	less func(p, q Partition) int
}

func (s defaultStrategy) Assign(consumerID string, consumers []string, partitions []Partition) []Partition {
	cs := sortedUnique(consumers, strings.Compare)
	i, found := slices.BinarySearch(cs, consumerID)
	if !found {
		return nil
	}
	ps := sortedUnique(partitions, s.less)
	n, e := len(ps)/len(cs), len(ps)%len(cs)
	start, count := i*n+min(i, e), n
	if i < e {
		count++
	}
	if count == 0 {
		return nil
	}
	out := slices.Clone(ps[start : start+count])
	slices.SortFunc(out, Partition.Compare)
	return out
}

// sortedUnique returns a sorted copy of xs without duplicates.
func sortedUnique[T comparable](xs []T, cmp func(a, b T) int) []T {
	out := slices.Clone(xs)
	slices.SortFunc(out, cmp)
	return slices.Compact(out)
}
