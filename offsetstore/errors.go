package offsetstore

import "errors"

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
