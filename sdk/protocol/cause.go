package protocol

import "strings"

// Causes are machine-readable reasons a broker puts at the start of an
// error reply's body, as "<cause>: <explanation>", so that clients decide
// (to retry, to relearn a topic's partitions) by a token and never by
// searching the free text, which can contain topic names. A body without a
// known cause is free text, as in MetaQ; Java clients show the whole body.
const (
	// CausePartitionOutOfRange: the request named a partition the topic
	// does not have (the client's partition count is stale).
	CausePartitionOutOfRange = "partition out of range"
	// CauseCorruptData: the data at the requested offset failed its
	// checksum and was not served (the body starts with CorruptDataPrefix).
	CauseCorruptData = "corrupt data"
	// CauseReadOnly: the broker is a slave (a read-only replica): puts and
	// transactions go to its master.
	CauseReadOnly = "read-only slave"
	// CauseBadProperties: a put's properties block (key, timestamp, tags,
	// headers) is malformed or breaks a limit (docs/protocol.md,
	// "Properties"); nothing was stored and a retry would fail the same.
	CauseBadProperties = "bad properties"
	// CauseOutOfOrderSequence: a known idempotent producer's put skips
	// sequences (or overlaps stored ones without matching a put); the put
	// was certainly not stored (docs/protocol.md, "Idempotent producer").
	CauseOutOfOrderSequence = "out of order sequence"
	// CauseUnknownProducer: an idempotent put of a producer the broker
	// does not know (past sequence 0) or forgot lately: nothing was
	// stored now, but if the put is a retry its first copy may have been
	// stored before the broker forgot the producer.
	CauseUnknownProducer = "unknown producer"
	// CauseSequenceInFlight: a retry of an idempotent put whose first copy
	// is still being stored; nothing was stored, retry after a pause.
	CauseSequenceInFlight = "sequence in flight"
	// CauseDuplicateSequence: every message of an idempotent put is
	// stored already, by a put too old for its offsets to be known; the
	// put is a success whose offsets are unknown (Kafka's
	// DUPLICATE_SEQUENCE_NUMBER).
	CauseDuplicateSequence = "duplicate sequence"
)

var knownCauses = []string{CausePartitionOutOfRange, CauseCorruptData, CauseReadOnly, CauseBadProperties,
	CauseOutOfOrderSequence, CauseSequenceInFlight, CauseDuplicateSequence, CauseUnknownProducer}

// WithCause returns the error body for cause and msg: "<cause>: <msg>".
func WithCause(cause, msg string) string { return cause + ": " + msg }

// ParseCause splits an error reply's body into its cause and the rest. A
// body that does not start with a known cause followed by ": " has no
// cause (""), and msg is the whole body.
func ParseCause(body string) (cause, msg string) {
	for _, c := range knownCauses {
		if rest, ok := strings.CutPrefix(body, c+": "); ok {
			return c, rest
		}
	}
	return "", body
}
