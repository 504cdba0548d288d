package client

import (
	"errors"
	"fmt"
	"strconv"

	"github.com/metaq-go/metaq/sdk/protocol"
)

var (
	// ErrClosed is returned by calls on a closed Client, and by calls
	// still in flight when Close gave up waiting for them.
	ErrClosed = errors.New("metaq: client closed")
	// ErrConnectionLost is returned (wrapped with the cause) by every call
	// that was in flight on a connection when it failed. The request may or
	// may not have reached the broker: a put that fails this way may have
	// been stored.
	ErrConnectionLost = errors.New("metaq: connection lost")
	// ErrTimeout is returned (wrapped) by a call whose send timeout expired
	// before the broker replied. As with ErrConnectionLost the request may
	// still have been applied.
	ErrTimeout = errors.New("metaq: request timed out")
	// ErrOutcomeUnknown is returned (wrapping the broker's refusal, cause
	// protocol.CauseUnknownProducer) by a send whose earlier attempt's
	// reply was lost and whose retry found that the broker had forgotten
	// the idempotent producer (docs/sdk.md, "The idempotent producer"):
	// the message may be stored (once), or not at all; the SDK does not
	// resend it, which could store it twice.
	ErrOutcomeUnknown = errors.New("metaq: send outcome unknown: the message may be stored")
	// ErrUnknownTopic means the broker does not list the topic in
	// `stats topics` (for Produce in direct mode: none of the brokers
	// given to Brokers does, and they all answered).
	ErrUnknownTopic = errors.New("metaq: unknown topic")
	// ErrRecordTooLarge means a record does not fit in the consumer's fetch
	// size limit (FetchMaxBytesLimit), so it can never be fetched.
	ErrRecordTooLarge = errors.New("metaq: record larger than the fetch size limit")
	// ErrAlreadyConsuming is returned by Consume or Messages while another
	// Consume or Messages call on the same Client is running.
	ErrAlreadyConsuming = errors.New("metaq: consumer is already running")
	// ErrFilterUnsupported means a consumer with a Filter reached a broker
	// that predates consumer-chosen filters (it answered the filter
	// request as an unknown command). The consumer stops rather than
	// filter on the client, which would fetch every record.
	ErrFilterUnsupported = errors.New("metaq: the broker does not support consumer filters (the filter command); upgrade it, or consume without Filter")
	// ErrBadFilter means the broker refused a consumer's Filter expression
	// (a syntax error, with its column).
	ErrBadFilter = errors.New("metaq: bad filter expression")
	// ErrInvalidMessage means a message cannot be sent: no topic, or a body
	// over the maximum message size.
	ErrInvalidMessage = errors.New("metaq: invalid message")

	// The sentinels below match a *BrokerError by its code with errors.Is.

	// ErrNoData matches a 404 reply: no data at that offset yet, or no store.
	ErrNoData = &BrokerError{Code: protocol.StatusNotFound}
	// ErrMoved matches a 301 reply: the offset is out of range.
	ErrMoved = &BrokerError{Code: protocol.StatusMoved}
	// ErrBadRequest matches a 400 reply.
	ErrBadRequest = &BrokerError{Code: protocol.StatusBadRequest}
	// ErrForbidden matches a 403 reply: the partition is closed.
	ErrForbidden = &BrokerError{Code: protocol.StatusForbidden}
	// ErrInternal matches a 500 reply: the broker refused or failed.
	ErrInternal = &BrokerError{Code: protocol.StatusInternalError}
	// ErrBusy matches a 503 reply.
	ErrBusy = &BrokerError{Code: protocol.StatusBusy}
	// ErrUnauthorized matches a 401 reply (the connection is not
	// authenticated: see SASLPlain) and an *AuthError.
	ErrUnauthorized = &BrokerError{Code: protocol.StatusUnauthorized}
)

// AuthError is returned when a broker refuses the SASL PLAIN handshake
// that SASLPlain makes on every new connection (a 401 reply). It
// matches ErrUnauthorized with errors.Is. It never holds the password.
type AuthError struct {
	// Addr is the broker's address and User the user name sent.
	Addr, User string
	// Msg is the broker's reason.
	Msg string
}

// Error names the broker, the user and the reason.
func (e *AuthError) Error() string {
	return fmt.Sprintf("metaq: broker %s refused authentication as user %q: %s", e.Addr, e.User, e.Msg)
}

// Is reports whether target is ErrUnauthorized (any 401).
func (e *AuthError) Is(target error) bool {
	t, ok := target.(*BrokerError)
	return ok && t.Code == protocol.StatusUnauthorized && t.Msg == ""
}

// BrokerError is a non-200 result reply.
type BrokerError struct {
	// Code is the MetaQ status code (protocol.StatusXxx).
	Code int
	// Msg is the reply body, usually the broker's explanation.
	Msg string
	// Cause is the machine-readable reason the broker put at the start
	// of the body (protocol.CausePartitionOutOfRange, ...), or "".
	Cause string
}

// Error gives the code, its name and the broker's explanation.
func (e *BrokerError) Error() string {
	s := "metaq: broker replied " + strconv.Itoa(e.Code) + " " + protocol.StatusText(e.Code)
	if e.Msg != "" {
		s += ": " + e.Msg
	}
	return s
}

// Is reports whether target is a *BrokerError with the same code, so that
// errors.Is(err, ErrNoData) works for any 404.
func (e *BrokerError) Is(target error) bool {
	t, ok := target.(*BrokerError)
	return ok && t.Code == e.Code && (t.Msg == "" || t.Msg == e.Msg)
}

// Temporary reports whether retrying the same request later may succeed.
func (e *BrokerError) Temporary() bool {
	switch e.Code {
	case protocol.StatusNotFound, protocol.StatusForbidden, protocol.StatusBusy, protocol.StatusTimeout:
		return true
	}
	return false
}

// CorruptRecordError is returned by Consume or Messages when a partition holds a
// record that fails its checksum (or has an impossible length) and asking
// the broker for the nearest valid offset does not move past it.
type CorruptRecordError struct {
	Topic     string
	Partition int32
	// Offset is the position of the bad record.
	Offset int64
	// Err is the iterator's error (wrapping message.ErrCorruptRecord).
	Err error
}

// Error names the partition and the offset of the bad record.
func (e *CorruptRecordError) Error() string {
	return fmt.Sprintf("metaq: corrupt record in %s-%d at offset %d: %v", e.Topic, e.Partition, e.Offset, e.Err)
}

// Unwrap returns the iterator's error.
func (e *CorruptRecordError) Unwrap() error { return e.Err }

// resultError turns a non-200 reply into a *BrokerError.
func resultError(code int, body []byte) error {
	cause, _ := protocol.ParseCause(string(body))
	return &BrokerError{Code: code, Msg: string(body), Cause: cause}
}
