package message

import "math"

// StoredTime returns when the record was appended to its partition, in
// Unix milliseconds, as far as the record tells: the millisecond in its id
// (assigned at the append), or, for a delayed message that the broker's
// timer delivered (it keeps the id of its acceptance, docs/delayed.md),
// its due time when that is later.
func (r *Record) StoredTime() int64 {
	ms, _, _ := IDParts(r.ID)
	if d, _, ok, err := TimerHeaders(r.Flag, r.Data); ok && err == nil {
		if due := d.Due(ms); due > ms {
			return due
		}
	}
	return ms
}

// Delivered reports whether the record is a delayed message delivered by
// the broker's timer (it carries a delivery header): its id is older than
// its append.
func (r *Record) Delivered() bool {
	_, _, ok, _ := TimerHeaders(r.Flag, r.Data)
	return ok
}

// RecordTime returns the time of a stored record in Unix milliseconds: the
// create timestamp of its properties block when it carries one, else
// StoredTime. A record whose block cannot be read gives StoredTime.
// Offset-by-time lookups use it (sdk/admin, OffsetForTime).
func (r *Record) RecordTime() int64 {
	if r.Flag&FlagHasProperties != 0 {
		if _, _, props, _, err := splitData(r.Flag, r.Data, false); err == nil && props != nil && props[1]&propTimestamp != 0 {
			ts, found := int64(math.MinInt64), false
			v := PropsVisitor{Timestamp: func(ms int64) { ts, found = ms, true }}
			if WalkProperties(props, &v) == nil && found {
				return ts
			}
		}
	}
	return r.StoredTime()
}
