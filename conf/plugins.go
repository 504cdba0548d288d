package conf

import (
	"fmt"
	"path/filepath"
	"reflect"
	"strings"
)

// Plugin settings.
const (
	// DefaultPluginDir is the default plugin_dir: where `make` builds the
	// shipped and example plugin binaries.
	DefaultPluginDir = "bin/plugins"
	// OffsetStoreBuiltin is the offset_store value of the builtin file store.
	OffsetStoreBuiltin = "file"
	// DefaultOffsetStoreFile is the builtin file store's file name in
	// data_dir when offset_store_path is not set.
	DefaultOffsetStoreFile = "consumer_offsets.json"
	// FailureOpen and FailureClosed are the failure policies. A filter that
	// fails open serves the get unfiltered; one that fails closed answers it
	// with an error.
	FailureOpen   = "open"
	FailureClosed = "closed"
	// MaxPluginNameLen is the longest plugin name.
	MaxPluginNameLen = 200
)

// The plugin kinds a [[plugin]] table may declare (the values of
// plugins.Kind; conf does not import the plugin runtime).
const (
	PluginKindSelector    = "selector"
	PluginKindFilter      = "filter"
	PluginKindOffsetStore = "offsetstore"
)

// PluginKinds lists the kinds a [[plugin]] table may declare.
var PluginKinds = []string{PluginKindSelector, PluginKindFilter, PluginKindOffsetStore}

// BuiltinFilters are the filter names a [[topic.filter]] may use without a
// plugin. A filter plugin cannot take one of these names.
var BuiltinFilters = []string{"attribute", "expr"}

// Plugin is one [[plugin]] table: a plugin binary the broker runs.
type Plugin struct {
	// Kind is selector, filter or offsetstore.
	Kind string `toml:"kind"`
	// Name is unique per kind; topics and offset_store refer to it.
	Name string `toml:"name"`
	// Path is the binary: absolute, or relative to plugin_dir; default Name.
	// Use Config.PluginPath for the resolved path.
	Path string `toml:"path"`
	// SHA256 is the binary's expected hex sha256; empty skips the check.
	SHA256 string `toml:"sha256"`
	// Args are the binary's command-line arguments.
	Args []string `toml:"args"`
	// Env are extra KEY=VALUE environment variables for the binary. The
	// plugin gets only these and PATH, HOME, TMPDIR and LANG.
	Env []string `toml:"env" secret:"true"`
	// Config is handed to the plugin's Init. It may hold credentials (a
	// DSN), so stats config redacts its values.
	Config map[string]string `toml:"config" secret:"true"`
	// FailurePolicy is "open" or "closed" ("" = open), filter plugins only:
	// the default of the topic filters that use this plugin.
	FailurePolicy string `toml:"failure_policy"`
}

// TopicFilter is one [[topic.filter]] table: the server-side filter of a
// consumer group on a topic (MetaQ's group.<g>=<class>).
type TopicFilter struct {
	// Group is the consumer group; unique per topic.
	Group string `toml:"group"`
	// Filter is a builtin ("attribute", "expr") or a filter plugin's name.
	Filter string `toml:"filter"`
	// FailurePolicy is "open" or "closed"; "" inherits the plugin's, else
	// open. Use Config.FilterFailurePolicy.
	FailurePolicy string `toml:"failure_policy"`
	// Config is handed to the filter's Init for this topic and group.
	Config map[string]string `toml:"config"`
}

// PluginPath returns the absolute path of p's binary: p.Path if absolute,
// else p.Path (default p.Name) joined to PluginDir and made absolute against
// the working directory.
func (c *Config) PluginPath(p Plugin) string {
	path := p.Path
	if path == "" {
		path = p.Name
	}
	if !filepath.IsAbs(path) {
		path = filepath.Join(c.PluginDir, path)
	}
	if abs, err := filepath.Abs(path); err == nil {
		return abs
	}
	return path
}

// PluginByName returns the [[plugin]] of a kind with a name.
func (c *Config) PluginByName(kind, name string) (Plugin, bool) {
	for _, p := range c.Plugins {
		if p.Kind == kind && p.Name == name {
			return p, true
		}
	}
	return Plugin{}, false
}

// EffectivePluginLogLevel returns PluginLogLevel, or LogLevel when unset.
func (c *Config) EffectivePluginLogLevel() string {
	if c.PluginLogLevel != "" {
		return c.PluginLogLevel
	}
	return c.LogLevel
}

// OffsetStoreFilePath returns the builtin file offset store's path:
// OffsetStorePath, or <data_dir>/consumer_offsets.json when unset.
func (c *Config) OffsetStoreFilePath() string {
	if c.OffsetStorePath != "" {
		return c.OffsetStorePath
	}
	return filepath.Join(c.DataDir, DefaultOffsetStoreFile)
}

// IsBuiltinFilter reports whether name is a builtin filter.
func IsBuiltinFilter(name string) bool {
	for _, b := range BuiltinFilters {
		if b == name {
			return true
		}
	}
	return false
}

// FilterFailurePolicy returns the effective failure policy of a topic
// filter, FailureOpen or FailureClosed: its own, else its plugin's, else open.
func (c *Config) FilterFailurePolicy(f TopicFilter) string {
	if f.FailurePolicy != "" {
		return f.FailurePolicy
	}
	if p, ok := c.PluginByName(PluginKindFilter, f.Filter); ok && p.FailurePolicy != "" {
		return p.FailurePolicy
	}
	return FailureOpen
}

func copyFilters(fs []TopicFilter) []TopicFilter {
	if len(fs) == 0 {
		return nil
	}
	return append([]TopicFilter(nil), fs...)
}

// decodeTables decodes v, the array of tables of kind tbl ("plugin",
// "topic.filter") at key, into one T per table.
func decodeTables[T any](d *decoder, key, tbl string, v any, known map[string]int) []T {
	tables, ok := d.tables(key, tbl, v)
	if !ok {
		return nil
	}
	var out []T
	for i, m := range tables {
		var x T
		d.decodeTable(fmt.Sprintf("%s[%d]", key, i), m, reflect.ValueOf(&x).Elem(), known, tbl)
		out = append(out, x)
	}
	return out
}

// checkPlugins validates the plugin settings, the [[plugin]] tables and
// offset_store; topic filters are checked per topic (checkFilters).
func (k *checker) checkPlugins(c *Config) {
	if strings.TrimSpace(c.PluginDir) == "" {
		k.add("plugin_dir", "must not be empty")
	}
	switch c.PluginLogLevel {
	case "", "debug", "info", "warn", "error":
	default:
		k.add("plugin_log_level", `must be one of debug, info, warn, error, or "" (= log_level), got %q`, c.PluginLogLevel)
	}
	first := map[string]int{} // kind/name -> index
	for i := range c.Plugins {
		k.plugin(i, &c.Plugins[i], first)
	}
	if c.OffsetStore != OffsetStoreBuiltin {
		if _, ok := c.PluginByName(PluginKindOffsetStore, c.OffsetStore); !ok {
			k.add("offset_store", `must be %q or the name of an offsetstore [[plugin]], got %q`, OffsetStoreBuiltin, c.OffsetStore)
		}
	}
}

// validPluginName reports whether s is 1..200 characters from [A-Za-z0-9_.-].
func validPluginName(s string) bool {
	return len(s) <= MaxPluginNameLen && ValidTopicName(s)
}

func (k *checker) plugin(i int, p *Plugin, first map[string]int) {
	pre := fmt.Sprintf("plugin[%d].", i)
	kindOK := false
	switch p.Kind {
	case "":
		k.add(pre+"kind", "is required (one of %s)", strings.Join(PluginKinds, ", "))
	case PluginKindSelector, PluginKindFilter, PluginKindOffsetStore:
		kindOK = true
	default:
		k.add(pre+"kind", "must be one of %s, got %q", strings.Join(PluginKinds, ", "), p.Kind)
	}
	switch {
	case p.Name == "":
		k.add(pre+"name", "is required")
	case !validPluginName(p.Name):
		k.add(pre+"name", "must be 1..%d characters from [A-Za-z0-9_.-], got %q", MaxPluginNameLen, p.Name)
	case p.Kind == PluginKindFilter && IsBuiltinFilter(p.Name):
		k.add(pre+"name", "%q is a builtin filter; give the plugin another name", p.Name)
	case p.Kind == PluginKindOffsetStore && p.Name == OffsetStoreBuiltin:
		k.add(pre+"name", "%q is the builtin offset store; give the plugin another name", p.Name)
	case kindOK:
		id := p.Kind + "/" + p.Name
		if j, dup := first[id]; dup {
			k.add(pre+"name", "duplicate %s plugin %q (first declared as plugin[%d])", p.Kind, p.Name, j)
		} else {
			first[id] = i
		}
	}
	if p.SHA256 != "" && !isHex64(p.SHA256) {
		k.add(pre+"sha256", "must be 64 hex digits (the binary's sha256sum), got %q", p.SHA256)
	}
	for j, e := range p.Env {
		if name, _, ok := strings.Cut(e, "="); !ok || name == "" {
			k.add(pre+"env", "entry %d must be KEY=VALUE, got %q", j, e)
		}
	}
	if k.failurePolicy(pre+"failure_policy", p.FailurePolicy) && p.FailurePolicy != "" && kindOK && p.Kind != PluginKindFilter {
		k.add(pre+"failure_policy", "only filter plugins have a failure policy (a selector falls back to round-robin; an offset store always reports errors)")
	}
}

func (k *checker) failurePolicy(key, s string) bool {
	switch s {
	case "", FailureOpen, FailureClosed:
		return true
	}
	k.add(key, "must be %q or %q, got %q", FailureOpen, FailureClosed, s)
	return false
}

func isHex64(s string) bool {
	if len(s) != 64 {
		return false
	}
	for i := 0; i < len(s); i++ {
		c := s[i]
		if !(c >= '0' && c <= '9' || c >= 'a' && c <= 'f' || c >= 'A' && c <= 'F') {
			return false
		}
	}
	return true
}

// checkFilters validates a topic's [[topic.filter]] tables; pre is
// "topic[i].".
func (k *checker) checkFilters(pre string, fs []TopicFilter) {
	first := map[string]int{}
	for j, f := range fs {
		fp := fmt.Sprintf("%sfilter[%d].", pre, j)
		if strings.TrimSpace(f.Group) == "" {
			k.add(fp+"group", "is required")
		} else if i, dup := first[f.Group]; dup {
			k.add(fp+"group", "duplicate filter for group %q (first declared as %sfilter[%d])", f.Group, pre, i)
		} else {
			first[f.Group] = j
		}
		if _, isPlugin := k.c.PluginByName(PluginKindFilter, f.Filter); !IsBuiltinFilter(f.Filter) && !isPlugin {
			if f.Filter == "" {
				k.add(fp+"filter", `is required ("attribute", "expr" or the name of a filter [[plugin]])`)
			} else {
				k.add(fp+"filter", `must be "attribute", "expr" or the name of a filter [[plugin]], got %q`, f.Filter)
			}
		}
		k.failurePolicy(fp+"failure_policy", f.FailurePolicy)
	}
}
