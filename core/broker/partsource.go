package broker

import (
	"github.com/metaq-go/metaq/core/partition"
	"github.com/metaq-go/metaq/core/store"
)

// partSource is the broker's side of the writer seam (core/partition): the
// components reach the partition logs through it, never through *Broker.
// It never creates a topic.
type partSource struct{ b *Broker }

var _ partition.Source = partSource{}

func (s partSource) topic(name string) (*partition.Topic, error) {
	t := s.b.topics.Get(name)
	if t == nil {
		return nil, partition.ErrNoTopic
	}
	return t, nil
}

// Log returns partition p of topic name.
func (s partSource) Log(name string, p int) (*store.Log, error) {
	t, err := s.topic(name)
	if err != nil {
		return nil, err
	}
	if p < 0 || p >= len(t.Parts) {
		return nil, partition.ErrNoPartition
	}
	return t.Parts[p], nil
}

// Partitions returns topic name's partition count.
func (s partSource) Partitions(name string) (int, error) {
	t, err := s.topic(name)
	if err != nil {
		return 0, err
	}
	return len(t.Parts), nil
}

// Topics returns the topic names, sorted.
func (s partSource) Topics() []string {
	return s.b.topics.Names()
}
