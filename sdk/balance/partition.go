package balance

import (
	"cmp"
	"fmt"
	"strconv"
	"strings"
)

// Partition is one partition of a topic on one broker.
type Partition struct {
	BrokerID  int
	Partition int32
}

// String returns MetaQ's partition string "<brokerId>-<partition>", the
// name of the owner and offset znodes.
func (p Partition) String() string { return string(p.appendString(nil)) }

func (p Partition) appendString(b []byte) []byte {
	b = strconv.AppendInt(b, int64(p.BrokerID), 10)
	b = append(b, '-')
	return strconv.AppendInt(b, int64(p.Partition), 10)
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
	b, p, ok := strings.Cut(s, "-")
	if !ok {
		return Partition{}, fmt.Errorf("balance: partition %q: want <brokerId>-<partition>", s)
	}
	if !canonical(b) || !canonical(p) {
		return Partition{}, fmt.Errorf("balance: partition %q: want two non-negative decimal numbers", s)
	}
	id, err := strconv.ParseInt(b, 10, strconv.IntSize)
	if err != nil {
		return Partition{}, fmt.Errorf("balance: partition %q: broker id: %w", s, err)
	}
	n, err := strconv.ParseInt(p, 10, 32)
	if err != nil {
		return Partition{}, fmt.Errorf("balance: partition %q: partition: %w", s, err)
	}
	return Partition{BrokerID: int(id), Partition: int32(n)}, nil
}

// canonical reports whether s is a non-negative decimal number without
// sign or leading zeros.
func canonical(s string) bool {
	if s == "" || (len(s) > 1 && s[0] == '0') {
		return false
	}
	for i := 0; i < len(s); i++ {
		if s[i] < '0' || s[i] > '9' {
			return false
		}
	}
	return true
}
