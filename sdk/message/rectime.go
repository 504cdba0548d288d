package message

// RecordTime returns the time of a stored record in Unix milliseconds: the
// create timestamp of its properties block when it carries one, else the
// millisecond in its id (when the broker stored it). A record whose block
// cannot be read gives its id's time. Offset-by-time lookups use it.
func (r *Record) RecordTime() int64 {
	if r.Flag&FlagHasProperties != 0 {
		if _, _, props, _, err := splitData(r.Flag, r.Data, false); err == nil && props != nil {
			ts, found := int64(0), false
			v := PropsVisitor{Timestamp: func(ms int64) { ts, found = ms, true }}
			if WalkProperties(props, &v) == nil && found {
				return ts
			}
		}
	}
	ms, _, _ := IDParts(r.ID)
	return ms
}
