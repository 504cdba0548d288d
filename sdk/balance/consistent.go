package balance

import (
	"cmp"
	"crypto/md5"
	"encoding/binary"
	"slices"
	"strconv"
	"strings"

	"github.com/metaq-go/metaq/sdk/message"
)

// pointsPerConsumer is MetaQ's ConsisHashStrategy.NUM_REPS: 40 MD5
// digests of four points each.
const pointsPerConsumer = 160

// Consistent returns MetaQ's CONSIST strategy (ConsisHashStrategy with
// HashAlgorithm.KETAMA_HASH).
//
// Each consumer c puts 160 points on a ring of uint32: for i in 0..39,
// the MD5 digest d of "<c>-<i>" gives four points, d[4j..4j+3] read
// little-endian for j in 0..3. A partition goes to the consumer owning the
// first point at or after the Ketama hash of its string "<brokerId>-<partition>"
// (the first four bytes of its MD5 digest, little-endian), wrapping around
// to the lowest point. When one consumer leaves, only its partitions move.
//
// If two consumers share a point, the greater consumer id takes it. MetaQ
// puts the points of its sorted consumer list into a TreeMap, where the
// last put wins, which gives the same result.
func Consistent() Strategy { return consistentStrategy{} }

type consistentStrategy struct{}

type ringPoint struct {
	hash     uint32
	consumer string
}

func (consistentStrategy) Assign(consumerID string, consumers []string, partitions []message.Partition) []message.Partition {
	cs := sortedUnique(consumers, strings.Compare)
	if _, found := slices.BinarySearch(cs, consumerID); !found {
		return nil
	}
	ring := buildRing(cs)
	var out []message.Partition
	var buf []byte
	for _, p := range sortedUnique(partitions, message.Partition.Compare) {
		buf = p.AppendString(buf[:0])
		if ring.owner(ketamaHashBytes(buf)) == consumerID {
			out = append(out, p)
		}
	}
	return out
}

// AssignAll implements [BatchStrategy]: one ring for all the consumers.
func (consistentStrategy) AssignAll(consumers []string, partitions []message.Partition) [][]message.Partition {
	out := make([][]message.Partition, len(consumers))
	if len(consumers) == 0 {
		return out
	}
	ring := buildRing(sortedUnique(consumers, strings.Compare))
	shares := make(map[string][]message.Partition)
	var buf []byte
	for _, p := range sortedUnique(partitions, message.Partition.Compare) {
		buf = p.AppendString(buf[:0])
		o := ring.owner(ketamaHashBytes(buf))
		shares[o] = append(shares[o], p)
	}
	for i, c := range consumers {
		out[i] = slices.Clone(shares[c])
	}
	return out
}

type hashRing []ringPoint

// buildRing places the points of the sorted, deduplicated consumers cs.
func buildRing(cs []string) hashRing {
	ring := make(hashRing, 0, pointsPerConsumer*len(cs))
	var buf []byte
	for _, c := range cs {
		ring, buf = appendPoints(ring, c, buf)
	}
	return ring.sorted()
}

// appendPoints appends consumer c's points to ring, unsorted; buf is
// scratch space, returned for reuse.
func appendPoints(ring hashRing, c string, buf []byte) (hashRing, []byte) {
	for i := range pointsPerConsumer / 4 {
		buf = strconv.AppendInt(append(append(buf[:0], c...), '-'), int64(i), 10)
		d := md5.Sum(buf)
		for j := range 4 {
			ring = append(ring, ringPoint{binary.LittleEndian.Uint32(d[4*j:]), c})
		}
	}
	return ring, buf
}

// sorted sorts the points by hash and keeps, of the points sharing a hash,
// the one of the greatest consumer.
func (ring hashRing) sorted() hashRing {
	// For equal hashes, sort by consumer descending so that CompactFunc,
	// which keeps the first of a run, keeps the greatest consumer.
	slices.SortFunc(ring, comparePoints)
	return slices.CompactFunc(ring, func(a, b ringPoint) bool { return a.hash == b.hash })
}

// owner returns the consumer at the ceiling point of h, wrapping around.
// The ring must not be empty.
func (r hashRing) owner(h uint32) string {
	i, _ := slices.BinarySearchFunc(r, h, func(p ringPoint, h uint32) int { return cmp.Compare(p.hash, h) })
	if i == len(r) {
		i = 0
	}
	return r[i].consumer
}

// ketamaHashBytes is MetaQ's HashAlgorithm.KETAMA_HASH: the first four
// bytes of the MD5 digest of b, little-endian.
func ketamaHashBytes(b []byte) uint32 {
	d := md5.Sum(b)
	return binary.LittleEndian.Uint32(d[:4])
}
