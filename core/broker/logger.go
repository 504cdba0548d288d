package broker

import (
	"log/slog"

	"github.com/hashicorp/go-hclog"

	"github.com/metaq-go/metaq/conf"
	"github.com/metaq-go/metaq/internal/logx"
	"github.com/metaq-go/metaq/plugins/host"
)

// Logging: one slog handler (Options.LogHandler, the program's) carries
// the broker's lines at log_level and plugin output (through the hclog
// bridge, host.HCLog) at plugin_log_level. Both levels are LevelVars, so
// Reload changes them live.

// initLogging sets b.log, b.logf and the plugin logger's level from cfg.
func (b *Broker) initLogging(cfg *conf.Config) {
	root := b.opts.LogHandler
	switch {
	case root != nil:
	case b.opts.Logf != nil:
		root = logx.PrintfHandler(b.opts.Logf)
	default:
		root = slog.Default().Handler()
	}
	b.setLogLevels(cfg)
	b.log = slog.New(logx.Filter(root, &b.logLevel))
	b.logf = logx.Printf(b.log, slog.LevelInfo)
	b.warnf = logx.Printf(b.log, slog.LevelWarn)
	b.errorf = logx.Printf(b.log, slog.LevelError)
	b.pluginLog = slog.New(logx.Filter(root, &b.pluginLevel))
}

// setLogLevels applies cfg's log_level and plugin_log_level.
func (b *Broker) setLogLevels(cfg *conf.Config) {
	l, _ := logx.ParseLevel(cfg.LogLevel)
	b.logLevel.Set(l)
	pl, _ := logx.ParseLevel(cfg.EffectivePluginLogLevel())
	b.pluginLevel.Set(pl)
}

// pluginHCLogger is the plugin supervisor's logger: every level goes to
// the bridge, which the plugin LevelVar filters.
func (b *Broker) pluginHCLogger() hclog.Logger {
	return host.HCLog(b.pluginLog, hclog.Trace).Named("plugins")
}

// Logger returns the broker's logger (its lines at log_level), for the
// program that runs it.
func (b *Broker) Logger() *slog.Logger { return b.log }
