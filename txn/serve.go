package txn

import "github.com/metaq-go/metaq/plugins"

// Serve runs impl as a coordinator plugin: the one line a plugin's main
// calls. It returns (after closing impl) when the host stops the plugin.
// Nothing may be written to stdout before it: stdout carries go-plugin's
// handshake. Log to stderr (hclog JSON is turned into host log lines).
func Serve(impl Coordinator) {
	ServeWith(impl, plugins.ServeOptions{})
}

// ServeWith is Serve with plugin-side options (logger, receive limit,
// parent watch).
func ServeWith(impl Coordinator, opts plugins.ServeOptions) {
	plugins.Serve(plugins.KindCoordinator, &GRPCPlugin{Impl: impl}, opts)
	_ = impl.Close()
}
