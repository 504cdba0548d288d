package filters

import (
	"context"
	"errors"

	"github.com/metaq-go/metaq/internal/pluginrpc"
	"github.com/metaq-go/metaq/plugins"
	"google.golang.org/grpc/codes"
)

var (
	// ErrBadConfig means Init was given a configuration the filter cannot
	// use (unknown key, bad value, bad expression). It crosses the plugin
	// boundary as InvalidArgument.
	ErrBadConfig = errors.New("filters: bad filter config")
	// ErrUnknownInstance means Accept named an instance that Init never set
	// up (or that a restarted plugin no longer knows). It crosses the plugin
	// boundary as NotFound; the remote adapter re-sends Init and retries.
	ErrUnknownInstance = errors.New("filters: unknown filter instance")
	// ErrClosed means the filter was closed. It crosses the plugin boundary
	// as FailedPrecondition.
	ErrClosed = errors.New("filters: filter closed")
	// ErrUnknownFilter means Open was asked for a name that is neither a
	// builtin nor a configured plugin.
	ErrUnknownFilter = errors.New("filters: unknown filter")
	// ErrBadResponse means a filter answered with a Keep list whose length
	// differs from the batch's.
	ErrBadResponse = errors.New("filters: filter answered the wrong number of keep flags")
	// ErrPlugin is an error a filter plugin returned that is none of the
	// sentinels above (gRPC Internal or Unknown); the message carries the
	// plugin's text.
	ErrPlugin = errors.New("filters: filter plugin failed")
)

// statusCodes is how the sentinels cross the plugin boundary
// (internal/pluginrpc), as gRPC codes; the host maps a code no sentinel
// has to ErrPlugin.
var statusCodes = pluginrpc.Codes{Table: []pluginrpc.Code{
	{Err: ErrBadConfig, Code: codes.InvalidArgument},
	{Err: ErrUnknownInstance, Code: codes.NotFound},
	{Err: ErrClosed, Code: codes.FailedPrecondition},
	{Err: plugins.ErrUnavailable, Code: codes.Unavailable},
	{Err: context.DeadlineExceeded, Code: codes.DeadlineExceeded},
	{Err: context.Canceled, Code: codes.Canceled},
}}
