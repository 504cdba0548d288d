package offsetstore

import (
	"errors"
	"fmt"
)

// The offset-store sentinels. They cross the plugin boundary: grpc_server
// maps them to gRPC status codes with an ErrorInfo reason and grpc_client
// maps them back, so callers use errors.Is on either side.
var (
	// ErrClosed is returned by calls on a closed store.
	ErrClosed = errors.New("offsetstore: store closed")
	// ErrBadConfig means Init was given a configuration the store rejects.
	ErrBadConfig = errors.New("offsetstore: bad config")
	// ErrNotInitialized is returned by Commit or Load before Init.
	ErrNotInitialized = errors.New("offsetstore: store not initialized")
	// ErrInvalidEntry means a key or entry is malformed: an empty group or
	// topic, a negative partition or broker id, or a negative offset.
	ErrInvalidEntry = errors.New("offsetstore: invalid key or entry")
	// ErrUnknownStore means OpenOptions.Name names neither a builtin nor a
	// plugin.
	ErrUnknownStore = errors.New("offsetstore: unknown store")
)

// ValidateKey reports whether k is well formed (ErrInvalidEntry if not).
func ValidateKey(k Key) error {
	switch {
	case k.Group == "":
		return fmt.Errorf("%w: empty group", ErrInvalidEntry)
	case k.Topic == "":
		return fmt.Errorf("%w: empty topic (group %q)", ErrInvalidEntry, k.Group)
	case k.BrokerID < 0:
		return fmt.Errorf("%w: negative broker id %d", ErrInvalidEntry, k.BrokerID)
	case k.Partition < 0:
		return fmt.Errorf("%w: negative partition %d of %s", ErrInvalidEntry, k.Partition, k.Topic)
	}
	return nil
}

// ValidateEntry reports whether e is well formed (ErrInvalidEntry if not).
func ValidateEntry(e Entry) error {
	if err := ValidateKey(e.Key); err != nil {
		return err
	}
	if e.Offset < 0 {
		return fmt.Errorf("%w: negative offset %d for %s-%d", ErrInvalidEntry, e.Offset, e.Topic, e.Partition)
	}
	return nil
}
