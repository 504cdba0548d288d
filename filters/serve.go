package filters

import "github.com/metaq-go/metaq/plugins"

// Serve runs impl as a filter plugin: the one line a plugin's main calls.
// It returns only when the host stops the plugin. Nothing may be written to
// stdout before it (stdout carries go-plugin's handshake); log to stderr.
func Serve(impl Filter) {
	ServeWith(impl, plugins.ServeOptions{})
}

// ServeWith is Serve with plugin-side options (logger, receive limit,
// parent watch).
func ServeWith(impl Filter, opts plugins.ServeOptions) {
	plugins.Serve(plugins.KindFilter, &GRPCPlugin{Impl: impl}, opts)
}
