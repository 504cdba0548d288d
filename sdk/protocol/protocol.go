// Package protocol is MetaQ's text wire protocol: the request and reply
// framing that the broker (core) and the client (sdk) share.
//
// A frame is one header line of tokens separated by single spaces and ended
// by "\r\n" (a bare "\n" is accepted too, so `nc` works), optionally followed
// by a binary body whose length is one of the tokens. The last token is the
// opaque, an int32 chosen by the client and echoed in the reply; requests may
// be pipelined and replies may come back in any order.
//
// Requests: put, get, offset, version, stats, quit (MetaQ 1.4) plus the
// metaq-go extensions mput (many messages to one partition in one request),
// commit and fetch (consumer offsets kept by the broker), join, heartbeat and
// leave (consumer groups coordinated by the broker in local mode), auth
// (SASL PLAIN authentication), filter (a consumer's own filter expression
// for its gets), and the fvalue reply
// (a filtered get reply whose records carry their offsets).
// transaction carries MetaQ's local and XA transactions (transaction.go);
// sync is framed so that a broker can refuse it without losing the
// connection; txsync (metaq-go) ships transaction journal records from a
// sync master to its slave. Replies: result and value. docs/protocol.md has the
// full description.
package protocol

import (
	"strconv"
	"unicode/utf8"
)

// Op is a frame's command.
type Op uint8

// The commands.
const (
	OpUnknown Op = iota
	OpPut
	OpMPut
	OpGet
	OpOffset
	OpVersion
	OpStats
	OpQuit
	OpTransaction
	OpSync
	OpResult
	OpValue
	OpCommit
	OpFetch
	OpFValue
	OpJoin
	OpHeartbeat
	OpLeave
	OpAuth
	OpTxSync
	OpFilter
)

var opNames = [...]string{"unknown", "put", "mput", "get", "offset", "version", "stats", "quit", "transaction", "sync", "result", "value",
	"commit", "fetch", "fvalue", "join", "heartbeat", "leave", "auth", "txsync", "filter"}

// String is the command's name on the wire.
func (o Op) String() string {
	if int(o) < len(opNames) {
		return opNames[o]
	}
	return "op(" + strconv.Itoa(int(o)) + ")"
}

// Status codes carried by a result reply (reference §1).
const (
	StatusOK            = 200 // success
	StatusMoved         = 301 // offset out of range; body is the offset to use
	StatusBadRequest    = 400 // malformed request, bad size
	StatusUnauthorized  = 401 // not authenticated, or auth failed (metaq-go)
	StatusForbidden     = 403 // partition closed; not allowed (ACL, accept flags)
	StatusNotFound      = 404 // no data at that offset yet, or no such store
	StatusConflict      = 409 // group member id still registered on another connection
	StatusInternalError = 500 // refused or failed; body says why
	StatusBusy          = 503 // broker overloaded
	StatusTimeout       = 504 // timed out
)

// CorruptDataPrefix starts the body of the 500 reply to a get whose offset
// falls in data the broker found damaged on its disk (a failed checksum):
// the broker never sends such bytes as records. A client should not retry
// the same offset.
const CorruptDataPrefix = "corrupt data: "

// StatusText returns a short name for a status code.
func StatusText(code int) string {
	switch code {
	case StatusOK:
		return "OK"
	case StatusMoved:
		return "Moved"
	case StatusBadRequest:
		return "Bad request"
	case StatusUnauthorized:
		return "Unauthorized"
	case StatusForbidden:
		return "Forbidden"
	case StatusNotFound:
		return "Not found"
	case StatusConflict:
		return "Conflict"
	case StatusInternalError:
		return "Internal error"
	case StatusBusy:
		return "Busy"
	case StatusTimeout:
		return "Timeout"
	}
	return "status " + strconv.Itoa(code)
}

// DefaultOpaque is the opaque of a version or stats request that gives none.
const DefaultOpaque int32 = 2147483647

// NoChecksum as a put's checksum token skips the broker's check.
const NoChecksum int64 = -1

// MPutEntryHeader is the size in bytes of an mput entry header:
// [int32 BE flag][int32 BE len][int32 BE crc or -1].
const MPutEntryHeader = 12

// MaxMPutCount is the largest number of messages in one mput.
const MaxMPutCount = 4096

// Limits bound what a Decoder accepts.
type Limits struct {
	// MaxLine is the longest header line in bytes, "\r\n" included. Default 1024.
	MaxLine int
	// MaxBody is the largest body in bytes (a put's data, an mput's whole
	// body, a reply's body). Default 2 MiB.
	MaxBody int
	// MaxDiscard is the largest oversized body the decoder reads past to keep
	// the connection; a larger one loses framing. Default 4 × MaxBody.
	MaxDiscard int
	// MaxEmptyLines is how many consecutive empty lines the decoder skips
	// (nc users press return); one more is a fatal error. A non-empty line
	// resets the count. Default DefaultMaxEmptyLines.
	MaxEmptyLines int
	// Budget, if not nil, accounts the memory the decoder holds for bodies.
	Budget Budget
}

// Budget accounts for the memory a Decoder holds for bodies across many
// decoders. Grow is called before the decoder's body buffer grows by n bytes;
// it may block (backpressure) and a non-nil error aborts the Decode, which
// returns that error. Shrink is called when the decoder frees n bytes.
type Budget interface {
	Grow(n int) error
	Shrink(n int)
}

// DefaultMaxLine is the default header line limit in bytes.
const DefaultMaxLine = 1024

// DefaultMaxBody is the default body limit in bytes.
const DefaultMaxBody = 2 << 20

// DefaultMaxEmptyLines is the default number of consecutive empty lines a
// decoder skips, the same as the broker's limit on consecutive bad frames.
const DefaultMaxEmptyLines = 32

func (l Limits) withDefaults() Limits {
	if l.MaxLine <= 0 {
		l.MaxLine = DefaultMaxLine
	}
	if l.MaxLine < 64 {
		l.MaxLine = 64
	}
	if l.MaxBody <= 0 {
		l.MaxBody = DefaultMaxBody
	}
	if l.MaxDiscard <= 0 {
		l.MaxDiscard = 4 * l.MaxBody
	}
	if l.MaxEmptyLines <= 0 {
		l.MaxEmptyLines = DefaultMaxEmptyLines
	}
	return l
}

// Request is one decoded frame. Its byte slices alias the Decoder's buffers
// and are valid until the next Decode.
type Request struct {
	Op     Op
	Opaque int32

	// put, mput, get, offset, sync
	Topic     []byte
	Partition int32

	// put, sync: Flag and Checksum (NoChecksum when absent or -1); TxKey for a
	// transactional put and a transaction command. sync: MsgID.
	Flag     int32
	Checksum int64
	TxKey    []byte
	MsgID    int64

	// transaction: the producer session id, the type, the timeout in
	// seconds (0 when absent) and the XA unique qualifier (nil when absent).
	TxSession   []byte
	TxType      TxType
	TxTimeout   int64
	TxQualifier []byte

	// mput: the number of entries in Body.
	Count int

	// get, offset, commit, fetch; fvalue: Offset is the next offset to fetch.
	Group   []byte
	Offset  int64
	MaxSize int32

	// join, heartbeat, leave (Group and Topic too): the member's id; join:
	// the balancing strategy; heartbeat: the generation the member last saw.
	Member     []byte
	Strategy   []byte
	Generation int64

	// stats: the item, empty for none; auth: the SASL mechanism (Body is
	// its message); txsync: the kind (TxSyncPrepare, ...; Body is its
	// transaction journal records).
	Item []byte

	// result: Code; result and value: Body.
	Code int
	Body []byte
}

// HasChecksum reports whether a put carried a checksum to verify.
func (r *Request) HasChecksum() bool { return r.Checksum != NoChecksum }

// Error is a protocol error: a frame the decoder could not accept.
// If Fatal, framing is lost and the connection must be closed after the
// error reply; otherwise the decoder is positioned at the next frame.
type Error struct {
	Code   int
	Msg    string
	Op     Op
	Opaque int32
	Fatal  bool
}

// Error is the message, prefixed "protocol: ".
func (e *Error) Error() string { return "protocol: " + e.Msg }

// printableMax is how many bytes of client input Printable shows.
const printableMax = 64

// Printable renders bytes received from a peer for an error message or a
// log line: as a double-quoted Go string literal, so control bytes (NUL, CR,
// LF, DEL, ...), invalid UTF-8 and other non-printable runes are escaped,
// cut after 64 bytes (at a rune boundary) and then followed by "...".
func Printable(b []byte) string {
	if len(b) <= printableMax {
		return strconv.Quote(string(b))
	}
	b = b[:printableMax]
	// Do not split a multi-byte rune into escaped fragments.
	for i := len(b) - 1; i >= 0 && i >= len(b)-utf8.UTFMax; i-- {
		if utf8.RuneStart(b[i]) {
			if !utf8.FullRune(b[i:]) {
				b = b[:i]
			}
			break
		}
	}
	return strconv.Quote(string(b)) + "..."
}
