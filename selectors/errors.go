package selectors

import (
	"context"
	"errors"

	"github.com/metaq-go/metaq/internal/pluginrpc"
	"github.com/metaq-go/metaq/plugins"
	"github.com/metaq-go/metaq/sdk/selector"
	"google.golang.org/grpc/codes"
)

var (
	// ErrNoPartitions means a selector was asked to choose among zero
	// partitions. It is selector.ErrNoPartitions (and client.ErrNoPartitions).
	ErrNoPartitions = selector.ErrNoPartitions
	// ErrBadChoice means a selector chose outside the partition list, or a
	// plugin returned the wrong number of choices. It is
	// selector.ErrBadChoice.
	ErrBadChoice = selector.ErrBadChoice
	// ErrBadRequest means a request was malformed, for example a partition
	// list a selector cannot use.
	ErrBadRequest = errors.New("selectors: bad request")
	// ErrUnknownSelector means Open was given a builtin name that does not
	// exist.
	ErrUnknownSelector = errors.New("selectors: unknown selector")
	// ErrBadConfig means a selector's configuration is invalid.
	ErrBadConfig = errors.New("selectors: bad configuration")
	// ErrClosed is returned by Select after Close.
	ErrClosed = errors.New("selectors: selector closed")
)

// ErrRemote means a selector plugin failed a call with an error that is not
// one of this package's sentinels; the error keeps the plugin's message.
var ErrRemote = errors.New("selectors: plugin error")

// statusCodes is how the sentinels cross the plugin boundary
// (internal/pluginrpc), as gRPC codes: the host maps each code back to the
// first sentinel listed with it, and anything else to ErrRemote.
var statusCodes = pluginrpc.Codes{Table: []pluginrpc.Code{
	{Err: context.Canceled, Code: codes.Canceled},
	{Err: context.DeadlineExceeded, Code: codes.DeadlineExceeded},
	{Err: ErrNoPartitions, Code: codes.FailedPrecondition},
	{Err: ErrBadChoice, Code: codes.OutOfRange},
	{Err: ErrBadRequest, Code: codes.InvalidArgument},
	{Err: ErrBadConfig, Code: codes.InvalidArgument},
	{Err: plugins.ErrUnavailable, Code: codes.Unavailable},
	{Err: ErrClosed, Code: codes.Unavailable},
}}
