// Package partition is the seam between the broker's partition logs and
// the components that write to them: transactions (core/tx), replication
// (core/repl) and consumer groups (core/groups) reach a partition only
// through Source, never through the broker itself. It plays the part of
// Kafka's PartitionWriter: the broker (core/broker) implements it, and a
// second wire protocol sees the same partitions through it.
package partition

import (
	"errors"

	"github.com/metaq-go/metaq/core/store"
)

// ErrNoTopic is returned for a topic this broker does not have. It is the
// one "no such topic" error of the core: the protocol layer maps it to its
// status line (core/broker/errors.go).
var ErrNoTopic = errors.New("no such topic")

// ErrNoPartition is returned for a partition number out of a topic's range.
var ErrNoPartition = errors.New("no such partition")

// Source gives the partition logs of the broker's topics.
type Source interface {
	// Log returns partition p of topic: ErrNoTopic when the broker has
	// no such topic, ErrNoPartition when p is out of its range.
	Log(topic string, p int) (*store.Log, error)
	// Partitions returns the number of partitions of topic, or ErrNoTopic.
	Partitions(topic string) (int, error)
	// Topics returns the names of the topics, sorted.
	Topics() []string
}
