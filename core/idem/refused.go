package idem

// RefusedError is an idempotent put the table does not let through:
// Verdict is Stored (a Duplicate whose result is unknown included),
// InFlight, UnknownProducer or OutOfOrder, Msg why (the reply's text; the
// broker maps the verdict to the reply's status and cause, its
// core/broker/errors.go). core/partition judges a partition's puts,
// core/timer the delayed puts to a partition.
type RefusedError struct {
	Verdict Verdict
	Msg     string
}

func (e *RefusedError) Error() string { return e.Msg }

// RebuildError is a table that could not be rebuilt from the log holding
// its puts: Of names the puts (for the broker's log), Err why.
type RebuildError struct {
	Of  string
	Err error
}

func (e *RebuildError) Error() string { return e.Err.Error() }
func (e *RebuildError) Unwrap() error { return e.Err }

// Feed hands recs to Table.Build one at a time, oldest first.
func Feed(recs []Record) func() (Record, bool) {
	return func() (Record, bool) {
		if len(recs) == 0 {
			return Record{}, false
		}
		r := recs[0]
		recs = recs[1:]
		return r, true
	}
}
