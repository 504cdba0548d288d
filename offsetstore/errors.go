package offsetstore

import (
	"context"
	"errors"

	"github.com/metaq-go/metaq/internal/pluginrpc"
	"github.com/metaq-go/metaq/plugins"
	"github.com/metaq-go/metaq/sdk/offsets"
	"google.golang.org/grpc/codes"
)

// The sentinels of the plugin kind. With offsets.ErrClosed and
// offsets.ErrInvalid they cross the plugin boundary: grpc_server maps them
// to gRPC status codes with an ErrorInfo reason and grpc_client maps them
// back, so callers use errors.Is on either side.
var (
	// ErrBadConfig means Init was given a configuration the store rejects.
	ErrBadConfig = errors.New("offsetstore: bad config")
	// ErrNotInitialized is returned by Commit or Load before Init.
	ErrNotInitialized = errors.New("offsetstore: store not initialized")
	// ErrUnknownStore means OpenOptions.Name names neither a builtin nor a
	// plugin.
	ErrUnknownStore = errors.New("offsetstore: unknown store")
)

// statusCodes is how the sentinels cross the plugin boundary
// (internal/pluginrpc): each with a gRPC code and an ErrorInfo reason,
// which the host maps back, so no error text is ever matched; context
// errors as Canceled or DeadlineExceeded; anything else as Internal. The
// last entry only reads an Unavailable without a reason back.
var statusCodes = pluginrpc.Codes{
	Domain: "metaq.offsetstore",
	Table: []pluginrpc.Code{
		{Err: offsets.ErrClosed, Code: codes.FailedPrecondition, Reason: "CLOSED"},
		{Err: ErrNotInitialized, Code: codes.FailedPrecondition, Reason: "NOT_INITIALIZED"},
		{Err: ErrBadConfig, Code: codes.InvalidArgument, Reason: "BAD_CONFIG"},
		{Err: offsets.ErrInvalid, Code: codes.InvalidArgument, Reason: "INVALID_ENTRY"},
		{Err: plugins.ErrUnavailable, Code: codes.Unavailable, Reason: "UNAVAILABLE"},
		{Err: context.DeadlineExceeded, Code: codes.DeadlineExceeded},
		{Err: context.Canceled, Code: codes.Canceled},
		{Err: plugins.ErrUnavailable, Code: codes.Unavailable},
	},
}
