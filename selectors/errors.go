package selectors

import (
	"errors"

	"github.com/metaq-go/metaq/sdk/client"
)

var (
	// ErrNoPartitions means a selector was asked to choose among zero
	// partitions. It is client.ErrNoPartitions, so errors.Is matches it on
	// either side of ForProducer.
	ErrNoPartitions = client.ErrNoPartitions
	// ErrBadChoice means a selector returned the wrong number of choices or
	// a choice outside [0, len(Partitions)), or (fixed) was configured with
	// a partition the topic does not have.
	ErrBadChoice = errors.New("selectors: choice out of range")
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
