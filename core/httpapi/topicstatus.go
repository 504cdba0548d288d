package httpapi

import "github.com/metaq-go/metaq/core/partition"

// TopicStatusOf is t's counters and offsets, with the number of its
// partitions whose start-up scrub is not done.
func TopicStatusOf(t *partition.Topic) (ts TopicStatus, indexing int) {
	ts = TopicStatus{Name: t.Name(), Partitions: make([]PartitionStatus, len(t.Parts))}
	for p, l := range t.Parts {
		pc := &t.PC[p]
		if !l.MessageCountComplete() {
			indexing++
		}
		ts.Partitions[p] = PartitionStatus{MsgsIn: pc.MsgsIn.Load(), BytesIn: pc.BytesIn.Load(), BytesOut: pc.BytesOut.Load(),
			MsgsOut: pc.MsgsOut.Load(), Gets: pc.Gets.Load(), Messages: l.MessageCount(), MinOffset: l.MinOffset(), MaxOffset: l.MaxOffset()}
	}
	return ts, indexing
}
