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
// leave (consumer groups coordinated by the broker in local mode), and the fvalue reply
// (a filtered get reply whose records carry their offsets).
// transaction and sync are framed so that a broker can refuse them without
// losing the connection. Replies: result and value. docs/protocol.md has the
// full description.
package protocol

import "strconv"

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
)

var opNames = [...]string{"unknown", "put", "mput", "get", "offset", "version", "stats", "quit", "transaction", "sync", "result", "value",
	"commit", "fetch", "fvalue", "join", "heartbeat", "leave"}

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
	StatusForbidden     = 403 // partition closed
	StatusNotFound      = 404 // no data at that offset yet, or no such store
	StatusConflict      = 409 // group member id still registered on another connection
	StatusInternalError = 500 // refused or failed; body says why
	StatusBusy          = 503 // broker overloaded
	StatusTimeout       = 504 // timed out
)

// StatusText returns a short name for a status code.
func StatusText(code int) string {
	switch code {
	case StatusOK:
		return "OK"
	case StatusMoved:
		return "Moved"
	case StatusBadRequest:
		return "Bad request"
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
}

// DefaultMaxLine is the default header line limit in bytes.
const DefaultMaxLine = 1024

// DefaultMaxBody is the default body limit in bytes.
const DefaultMaxBody = 2 << 20

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
	// transactional put. sync: MsgID.
	Flag     int32
	Checksum int64
	TxKey    []byte
	MsgID    int64

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

	// stats: the item, empty for none. transaction: the raw tokens after the command.
	Item []byte
	Args [][]byte

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

func (e *Error) Error() string { return "protocol: " + e.Msg }
