package selectors

import (
	"github.com/metaq-go/metaq/plugins"
	"github.com/metaq-go/metaq/sdk/selector"
)

// Serve runs impl as a selector plugin until the host stops it; it is the
// one line a plugin's main calls:
//
//	func main() { selectors.Serve(mySelector{}) }
//
// impl gets each message with its Topic, Key, Attribute and HasAttribute
// set, never its Body. Nothing may be written to stdout before Serve (the
// host reads the handshake there); log to stderr. impl must be safe for
// concurrent use.
func Serve(impl selector.Selector) {
	plugins.Serve(plugins.KindSelector, &GRPCPlugin{Impl: impl}, plugins.ServeOptions{})
}
