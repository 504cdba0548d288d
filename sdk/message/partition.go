package message

import (
	"cmp"
	"fmt"

	"github.com/metaq-go/metaq/internal/zkpath"
)

// Partition is one partition of a topic on one broker: MetaQ's Partition,
// the broker's id and the partition's number on that broker. A topic's
// partitions across a cluster are a list of these, sorted by Compare.
type Partition struct {
	BrokerID  int
	Partition int32
}

// String returns MetaQ's partition string "<brokerId>-<partition>", the
// name of the owner and offset znodes (zkpath.PartitionName).
func (p Partition) String() string { return string(p.AppendString(nil)) }

// AppendString appends p.String() to b without allocating a string.
func (p Partition) AppendString(b []byte) []byte {
	return zkpath.AppendPartitionName(b, p.BrokerID, p.Partition)
}

// Compare orders partitions numerically by (BrokerID, Partition).
func (p Partition) Compare(q Partition) int {
	if c := cmp.Compare(p.BrokerID, q.BrokerID); c != 0 {
		return c
	}
	return cmp.Compare(p.Partition, q.Partition)
}

// ParsePartition parses a partition string as [Partition.String] writes
// it: two non-negative decimal numbers in canonical form (no sign, no
// leading zeros, no spaces) joined by "-", so that
// ParsePartition(s).String() == s for every s it accepts.
func ParsePartition(s string) (Partition, error) {
	id, n, err := zkpath.ParsePartitionName(s)
	if err != nil {
		return Partition{}, fmt.Errorf("message: %w", err)
	}
	return Partition{BrokerID: id, Partition: n}, nil
}

// Position is a consumer's place in one partition of a topic: the one
// position type of the SDK, the offset stores and the plugin kinds.
//
// Offset is the byte offset of the next message to fetch (not of the last
// one consumed), and MsgID the id of the last message consumed, -1 when
// unknown. Both are full int64 values. Where a Position names a partition
// only (an offset store's Load keys), Offset and MsgID are ignored; where
// it answers one, Offset -1 means nothing is stored.
type Position struct {
	Topic     string
	Partition Partition
	Offset    int64
	MsgID     int64
}

// String returns "<topic>/<brokerId>-<partition>@<offset>".
func (p Position) String() string {
	return fmt.Sprintf("%s/%s@%d", p.Topic, p.Partition, p.Offset)
}
