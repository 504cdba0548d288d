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

// initLogging sets b.log, b.logf and the plugin logger at cfg's levels.
func (b *Broker) initLogging(cfg *conf.Config) {
	b.setLogLevels(cfg)
	b.log, b.pluginLog = b.levels.Loggers(logx.Root(b.opts.LogHandler, b.opts.Logf))
	b.logf = logx.Printf(b.log, slog.LevelInfo)
	b.warnf = logx.Printf(b.log, slog.LevelWarn)
	b.errorf = logx.Printf(b.log, slog.LevelError)
}

// setLogLevels applies cfg's log_level and plugin_log_level.
func (b *Broker) setLogLevels(cfg *conf.Config) {
	b.levels.Set(cfg.LogLevel, cfg.EffectivePluginLogLevel())
}

// pluginHCLogger is the plugin supervisor's logger: every level goes to
// the bridge, which the plugin LevelVar filters.
func (b *Broker) pluginHCLogger() hclog.Logger {
	return host.HCLog(b.pluginLog, hclog.Trace).Named("plugins")
}

// Logger returns the broker's logger (its lines at log_level), for the
// program that runs it.
func (b *Broker) Logger() *slog.Logger { return b.log }
