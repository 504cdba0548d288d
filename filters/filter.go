// Package filters is metaq-go's server-side message filter: MetaQ's
// ConsumerMessageFilter, configured per topic and consumer group in
// server.toml, judged a whole get batch at a time.
//
// A Filter is either a builtin that runs inside the broker (filters/attr,
// filters/expr) or a plugin binary that runs out of process over gRPC
// (hashicorp/go-plugin). Both sit behind the same interface; the broker
// reaches either through Open, which wraps it in the same middleware
// (call counting, a per-call timeout and the failure policy).
//
// A plugin's main is one line:
//
//	func main() { filters.Serve(myFilter{}) }
//
// One Filter (one plugin process) serves many logical instances, one per
// topic and group, addressed by the Instance field of every request. Each
// instance is initialised once with Init before its first Accept, and again
// whenever its plugin process has been restarted.
package filters

import (
	"context"
	"time"

	"github.com/metaq-go/metaq/sdk/message"
)

// InitRequest sets up one logical instance of a filter.
type InitRequest struct {
	// Instance names the instance; later AcceptRequests carry it. Init with
	// an Instance that already exists replaces its configuration.
	Instance string
	// Topic and Group are the topic and consumer group the instance judges.
	Topic, Group string
	// Config is the instance's configuration: for a filter plugin, its own
	// [plugin.config] overlaid with this topic and group's
	// [topic.filter.config]; for a builtin, the latter. A filter never sees
	// another plugin's config, another group's, or the rest of server.toml.
	Config map[string]string
}

// InitResponse is what an instance needs from the host.
type InitResponse struct {
	// NeedBodies asks for message payloads in Record.Body. The default
	// (false) sends metadata only, which is much cheaper across a process
	// boundary.
	NeedBodies bool
	// NeedProperties asks a filter plugin's process for each record's
	// properties, decoded into Record.Key, CreateTime, Tags and Headers.
	// The default (false) sends none, which costs nothing per record. A
	// broker built before properties reached plugins ignores it: the fields
	// stay empty. In-process builtins read Record.Properties instead.
	NeedProperties bool
}

// Record is the metadata (and, if asked for, the payload) of one message.
type Record struct {
	// Offset is the record's start offset in its partition; MsgID its id.
	Offset, MsgID int64
	// Flag is the message flag; bit 0 means the message has an attribute.
	Flag int32
	// Attribute is the message's attribute; HasAttribute tells an empty
	// attribute from none.
	Attribute    string
	HasAttribute bool
	// Size is the record's data length in bytes: the payload plus, when the
	// message has an attribute, its 4-byte length prefix and the attribute.
	Size int
	// Body is the payload (without the attribute), present only if the
	// instance's InitResponse asked for bodies; nil otherwise.
	Body []byte
	// Properties is the message's properties block (key, timestamp, tags,
	// headers; sdk/message, flag bit 1) after its length prefix, nil when
	// it has none. Builtins in the broker's process see it (filters/expr);
	// a filter plugin gets it only if the instance's InitResponse asked
	// for properties, and only in a packed batch (every plugin built with
	// this package; a request in gRPC columns carries the decoded fields).
	Properties []byte

	// Key, CreateTime, Tags and Headers are the properties decoded, filled
	// in a filter plugin's process for an instance whose InitResponse said
	// NeedProperties (zero otherwise, and in the broker's process). Key is
	// nil when the message has no key; CreateTime is zero when it carries
	// no create time. Key and header values alias the batch, which a plugin
	// process does not reuse: a filter may keep them.
	Key        []byte
	CreateTime time.Time
	Tags       []string
	Headers    message.Headers
}

// AcceptRequest is one get batch to judge: the whole records of one get
// reply, in offset order.
type AcceptRequest struct {
	Instance, Topic, Group string
	Partition              int32
	Records                []Record
}

// AcceptResponse says which records to deliver.
type AcceptResponse struct {
	// Keep has exactly one entry per request record, in the same order:
	// true delivers the record to the group, false skips it.
	Keep []bool
}

// Filter judges get batches for the instances it was initialised with.
//
// Thread-safety: the broker calls Accept concurrently (one call per get,
// from many connections), for one or many instances, and may call Init for
// a new or restarted instance while other calls run. Implementations must
// be safe for that.
//
// Batches: every Accept carries the whole records of one get reply (up to
// the consumer's fetch size, at most the broker's max_transfer_size), never
// one message; it may be empty. In process, Record.Attribute and Record.Body
// alias the broker's read buffer and are valid only until Accept returns:
// copy them to keep them (in a plugin process they are copies already). The
// Records slice itself may be reused after Accept returns. The broker may
// judge a batch ahead of the get that serves it, so a remote filter may
// judge batches that are never served (and, as after any retry, a batch more
// than once).
//
// Errors: Init returns ErrBadConfig (wrapped, with the reason) for a
// configuration it cannot use; Accept returns ErrUnknownInstance for an
// instance it was never given. Any Accept error makes the broker apply the
// instance's failure policy: serve the batch unfiltered ("open") or refuse
// the get with 503 ("closed"). Returning an error never drops a message.
type Filter interface {
	Init(ctx context.Context, req *InitRequest) (*InitResponse, error)
	Accept(ctx context.Context, req *AcceptRequest) (*AcceptResponse, error)
	// Close releases the filter. It is idempotent. The host does not call a
	// plugin's Close: a plugin process simply exits when its host stops it.
	Close() error
}
