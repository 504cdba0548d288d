package broker

import (
	"errors"

	"github.com/metaq-go/metaq/core/idem"
	"github.com/metaq-go/metaq/core/partition"
	"github.com/metaq-go/metaq/sdk/protocol"
)

// Only dispatch speaks the protocol. The components (core/repl, core/tx,
// core/groups, core/security, ...) return values and typed errors; this
// file is the one place that turns an error into a status line and body
// (docs/protocol.md lists the codes).
//
// Each component's glue file in this package registers a mapper for its
// own error types in an init function, so that the table grows without
// every component editing this file:
//
//	func init() { registerErrors(replStatus) }
//
// A mapper returns ok=false for errors it does not know.
type errMapper func(err error) (code int, body string, ok bool)

var errMappers []errMapper

func registerErrors(m ...errMapper) { errMappers = append(errMappers, m...) }

func init() { registerErrors(partitionStatus, idemStatus) }

// partitionStatus maps the partition seam's sentinels.
func partitionStatus(err error) (int, string, bool) {
	switch {
	case errors.Is(err, partition.ErrNoTopic), errors.Is(err, partition.ErrNoPartition):
		return protocol.StatusForbidden, err.Error(), true
	}
	return 0, "", false
}

// idemStatus maps the idempotent producer's refusals (core/partition's
// and core/timer's BeginIdem) to their causes (docs/protocol.md's cause
// table), and a table that could not be rebuilt to its state's error.
func idemStatus(err error) (int, string, bool) {
	var re *idem.RebuildError
	if errors.As(err, &re) {
		return protocol.StatusInternalError, "idempotent producer state: " + oneLine(re.Error()), true
	}
	var ie *idem.RefusedError
	if !errors.As(err, &ie) {
		return 0, "", false
	}
	cause := protocol.CauseOutOfOrderSequence
	switch ie.Verdict {
	case idem.Stored:
		cause = protocol.CauseDuplicateSequence
	case idem.InFlight:
		cause = protocol.CauseSequenceInFlight
	case idem.UnknownProducer:
		cause = protocol.CauseUnknownProducer
	}
	return protocol.StatusInternalError, protocol.WithCause(cause, ie.Msg), true
}

// statusOf maps err to the status code and body a reply carries. An error
// no component claims is an internal error carrying its text.
func statusOf(err error) (int, string) {
	for _, m := range errMappers {
		if code, body, ok := m(err); ok {
			return code, body
		}
	}
	return protocol.StatusInternalError, err.Error()
}

// replyErr writes err's status line as the reply to opaque.
func (c *conn) replyErr(err error, opaque int32) {
	code, body := statusOf(err)
	c.reply(code, body, opaque)
}

// oneLine replaces the line breaks in s with spaces, for a reply's
// one-line body.
func oneLine(s string) string {
	b := []byte(s)
	for i, c := range b {
		if c == '\r' || c == '\n' {
			b[i] = ' '
		}
	}
	return string(b)
}
