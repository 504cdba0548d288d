package selectors

import "github.com/metaq-go/metaq/plugins"

// Serve runs impl as a selector plugin until the host stops it; it is the
// one line a plugin's main calls:
//
//	func main() { selectors.Serve(mySelector{}) }
//
// Nothing may be written to stdout before Serve (the host reads the
// handshake there); log to stderr. impl must be safe for concurrent use.
func Serve(impl Selector) {
	plugins.Serve(plugins.KindSelector, &GRPCPlugin{Impl: impl}, plugins.ServeOptions{})
}
