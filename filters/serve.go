package filters

import (
	"fmt"

	"github.com/metaq-go/metaq/plugins"
)

// Serve runs impl as a filter plugin: the one line a plugin's main calls.
// It returns only when the host stops the plugin. Nothing may be written to
// stdout before it (stdout carries go-plugin's handshake); log to stderr.
func Serve(impl Filter) {
	ServeWith(impl, plugins.ServeOptions{})
}

// ServeWith is Serve with plugin-side options (logger, receive limit,
// parent watch).
func ServeWith(impl Filter, opts plugins.ServeOptions) {
	if opts.Logger == nil {
		// plugins.Serve's default, built here so the batch channel logs to it too.
		opts.Logger = plugins.DefaultLogger(plugins.KindFilter)
	}
	logger := opts.Logger
	plugins.Serve(plugins.KindFilter, &GRPCPlugin{Impl: impl, logf: func(format string, args ...any) {
		logger.Error(fmt.Sprintf(format, args...))
	}}, opts)
}
