package selectors

import (
	"errors"

	"github.com/metaq-go/metaq/sdk/selector"
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
