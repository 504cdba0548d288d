// Package plugins holds what every metaq-go plugin kind shares: the
// go-plugin handshake, the kinds and their protocol versions, the plugin-side
// Serve helper, and the ErrUnavailable sentinel. The host side (launching,
// checking, restarting and killing plugin processes) is plugins/host.
//
// A plugin is a separate program that speaks gRPC over hashicorp/go-plugin.
// Each kind package (selectors, filters, offsetstore, txn) gives plugin authors a
// one-line Serve(impl) for their main and gives hosts an Open(spec) that
// returns either a builtin (in-process) or a remote implementation behind
// the same Go interface.
package plugins

import (
	"errors"
	"fmt"

	"github.com/hashicorp/go-plugin"
)

// Kind is a plugin kind.
type Kind string

// The plugin kinds.
const (
	KindSelector    Kind = "selector"
	KindFilter      Kind = "filter"
	KindOffsetStore Kind = "offsetstore"
	// KindCoordinator is the XA transaction coordinators (package txn).
	KindCoordinator Kind = "coordinator"
)

// Kinds lists the kinds a host can load.
var Kinds = []Kind{KindSelector, KindFilter, KindOffsetStore, KindCoordinator}

// Valid reports whether k is a known kind.
func (k Kind) Valid() bool {
	for _, x := range Kinds {
		if x == k {
			return true
		}
	}
	return false
}

// ProtocolVersion returns the current protocol version of a kind: the
// version a host asks for in the handshake. A kind's version changes when
// its gRPC service changes incompatibly.
func ProtocolVersion(k Kind) int {
	switch k {
	case KindSelector, KindFilter, KindOffsetStore, KindCoordinator:
		return 1
	}
	return 0
}

// kindCode numbers the kinds for HandshakeVersion.
func kindCode(k Kind) int {
	switch k {
	case KindSelector:
		return 1
	case KindFilter:
		return 2
	case KindOffsetStore:
		return 3
	case KindCoordinator:
		return 4
	}
	return 0
}

// HandshakeVersion is the go-plugin application protocol version that a
// plugin of kind k announces and a host asks for: 100 × the kind's code
// (selector 1, filter 2, offsetstore 3, coordinator 4) + ProtocolVersion(k).
// Folding the kind in makes a binary of the wrong kind fail at the
// handshake, with an error that names both kinds (see KindOfHandshakeVersion),
// instead of at its first call.
func HandshakeVersion(k Kind) int { return 100*kindCode(k) + ProtocolVersion(k) }

// KindOfHandshakeVersion returns the kind and protocol version a plugin
// announced with handshake version v; ok is false for a version no metaq
// plugin kind uses.
func KindOfHandshakeVersion(v int) (k Kind, version int, ok bool) {
	for _, k := range Kinds {
		if v/100 == kindCode(k) && v%100 > 0 {
			return k, v % 100, true
		}
	}
	return "", 0, false
}

// Handshake is the go-plugin handshake every metaq-go plugin and host share.
// The magic cookie is a guard against running a plugin binary by hand, not
// a security measure: use the sha256 in server.toml for that.
var Handshake = plugin.HandshakeConfig{
	ProtocolVersion:  1,
	MagicCookieKey:   "METAQ_PLUGIN",
	MagicCookieValue: "5d1c2e6a-metaq-go-plugin",
}

// ErrUnavailable is returned by remote implementations while their plugin
// process is down (crashed, restarting or stopped). Callers apply their
// kind's failure policy.
var ErrUnavailable = errors.New("plugins: plugin unavailable")

// ErrWrongKind means a binary does not serve the kind it was loaded as.
var ErrWrongKind = errors.New("plugins: binary does not serve this plugin kind")

// PluginName is the name under which a kind's gRPC plugin is registered in
// a go-plugin PluginSet.
func PluginName(k Kind) string { return "metaq-" + string(k) }

// Unsupported wraps err with the kind for error messages.
func Unsupported(k Kind, err error) error {
	return fmt.Errorf("%s plugin: %w", k, err)
}
