package conf

import (
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"
)

const sum64 = "9f86d081884c7d659a2feaa0c55ad015a3bf4f1b2b0b822cd15d6c15b0f00a08"

const pluginsSrc = `
plugin_dir = "/opt/metaq/plugins"
plugin_log_level = "debug"
offset_store = "zk"

[[plugin]]
kind = "filter"
name = "colour"
sha256 = "` + sum64 + `"
args = ["-v", "x"]
env = ["A=1", "B="]
failure_policy = "closed"
[plugin.config]
mode = "strict"

[[plugin]]
kind = "offsetstore"
name = "zk"
path = "metaq-offsetstore-zk"
[plugin.config]
servers = "127.0.0.1:2181"

[[plugin]]
kind = "selector"
name = "colour"
path = "/usr/local/bin/sel"

[[topic]]
name = "t1"
  [[topic.filter]]
  group = "g1"
  filter = "attribute"
  [topic.filter.config]
  equals = "red"

  [[topic.filter]]
  group = "g2"
  filter = "colour"

  [[topic.filter]]
  group = "g3"
  filter = "colour"
  failure_policy = "open"

[[topic]]
name = "t2"
`

func TestPlugins(t *testing.T) {
	c, err := Parse([]byte(pluginsSrc), "s.toml")
	require.NoError(t, err)
	require.Equal(t, "/opt/metaq/plugins", c.PluginDir)
	require.Equal(t, "debug", c.EffectivePluginLogLevel())
	require.Equal(t, "zk", c.OffsetStore)
	require.Equal(t, filepath.Join("data", "consumer_offsets.json"), c.OffsetStoreFilePath())
	require.Equal(t, []Plugin{
		{Kind: "filter", Name: "colour", SHA256: sum64, Args: []string{"-v", "x"}, Env: []string{"A=1", "B="},
			FailurePolicy: "closed", Config: map[string]string{"mode": "strict"}},
		{Kind: "offsetstore", Name: "zk", Path: "metaq-offsetstore-zk", Config: map[string]string{"servers": "127.0.0.1:2181"}},
		{Kind: "selector", Name: "colour", Path: "/usr/local/bin/sel"},
	}, c.Plugins)

	require.Equal(t, "/opt/metaq/plugins/colour", c.PluginPath(c.Plugins[0]))
	require.Equal(t, "/opt/metaq/plugins/metaq-offsetstore-zk", c.PluginPath(c.Plugins[1]))
	require.Equal(t, "/usr/local/bin/sel", c.PluginPath(c.Plugins[2]))
	c.PluginDir = "bin/plugins"
	wd, err := os.Getwd()
	require.NoError(t, err)
	require.Equal(t, filepath.Join(wd, "bin/plugins/colour"), c.PluginPath(c.Plugins[0]))

	p, ok := c.PluginByName("selector", "colour")
	require.True(t, ok)
	require.Equal(t, "/usr/local/bin/sel", p.Path)
	_, ok = c.PluginByName("offsetstore", "colour")
	require.False(t, ok)

	tc, ok := c.TopicConfig("t1")
	require.True(t, ok)
	require.Equal(t, []TopicFilter{
		{Group: "g1", Filter: "attribute", Config: map[string]string{"equals": "red"}},
		{Group: "g2", Filter: "colour"},
		{Group: "g3", Filter: "colour", FailurePolicy: "open"},
	}, tc.Filters)
	require.Equal(t, FailureOpen, c.FilterFailurePolicy(tc.Filters[0]))
	require.Equal(t, FailureClosed, c.FilterFailurePolicy(tc.Filters[1]), "inherited from the plugin")
	require.Equal(t, FailureOpen, c.FilterFailurePolicy(tc.Filters[2]))
	tc.Filters[0].Group = "changed" // a copy
	require.Equal(t, "g1", c.Topics[0].Filters[0].Group)

	tc2, ok := c.TopicConfig("t2")
	require.True(t, ok)
	require.Nil(t, tc2.Filters)

	lines := keyLines([]byte(pluginsSrc))
	for k, want := range map[string]int{
		"plugin_dir": 2, "plugin[0]": 6, "plugin[0].kind": 7, "plugin[0].config": 13, "plugin[0].config.mode": 14,
		"plugin[1].name": 18, "plugin[2]": 23, "topic[0]": 28, "topic[0].filter[0]": 30,
		"topic[0].filter[0].config.equals": 34, "topic[0].filter[1].group": 37, "topic[0].filter[2].failure_policy": 43,
		"topic[1].name": 46,
	} {
		require.Equal(t, want, lines[k], k)
	}
}

func TestPluginDefaults(t *testing.T) {
	c, err := Parse([]byte(oneTopic), "s.toml")
	require.NoError(t, err)
	require.Equal(t, "bin/plugins", c.PluginDir)
	require.Equal(t, "", c.PluginLogLevel)
	require.Equal(t, "info", c.EffectivePluginLogLevel())
	require.Equal(t, "file", c.OffsetStore)
	require.Equal(t, "", c.OffsetStorePath)
	require.Equal(t, filepath.Join("data", "consumer_offsets.json"), c.OffsetStoreFilePath())
	require.Empty(t, c.Plugins)
	c.OffsetStorePath = "/var/lib/offsets.json"
	require.Equal(t, "/var/lib/offsets.json", c.OffsetStoreFilePath())
	c.LogLevel = "warn"
	require.Equal(t, "warn", c.EffectivePluginLogLevel(), "follows log_level when unset")

	require.Equal(t, filepath.Join(mustWd(t), "bin/plugins/x"), c.PluginPath(Plugin{Name: "x"}))
	require.True(t, IsBuiltinFilter("expr"))
	require.False(t, IsBuiltinFilter("colour"))
}

func mustWd(t *testing.T) string {
	t.Helper()
	wd, err := os.Getwd()
	require.NoError(t, err)
	return wd
}

func TestPluginValidationErrors(t *testing.T) {
	plug := func(body string) string { return oneTopic + "[[plugin]]\n" + body }
	filt := func(body string) string {
		return "[[plugin]]\nkind = \"filter\"\nname = \"fp\"\n[[topic]]\nname = \"t\"\n[[topic.filter]]\n" + body
	}
	cases := []struct {
		name, src string
		key, msg  string
		line      int
	}{
		{"plugin dir", "plugin_dir = \"\"\n" + oneTopic, "plugin_dir", "must not be empty", 1},
		{"plugin log level", "plugin_log_level = \"trace\"\n" + oneTopic, "plugin_log_level", `must be one of debug, info, warn, error, or "" (= log_level), got "trace"`, 1},
		{"offset store unknown", "offset_store = \"zk\"\n" + oneTopic, "offset_store", `must be "file" or the name of an offsetstore [[plugin]], got "zk"`, 1},
		{"offset store wrong kind", "offset_store = \"zk\"\n" + plug("kind = \"filter\"\nname = \"zk\"\n"), "offset_store",
			`the name of an offsetstore [[plugin]], got "zk"`, 1},
		{"kind missing", plug("name = \"a\"\n"), "plugin[0].kind", "is required (one of selector, filter, offsetstore)", 3},
		{"kind bad", plug("kind = \"txn\"\nname = \"a\"\n"), "plugin[0].kind", `must be one of selector, filter, offsetstore, got "txn"`, 4},
		{"name missing", plug("kind = \"filter\"\n"), "plugin[0].name", "is required", 3},
		{"name bad", plug("kind = \"filter\"\nname = \"a/b\"\n"), "plugin[0].name", `must be 1..200 characters from [A-Za-z0-9_.-], got "a/b"`, 5},
		{"name builtin filter", plug("kind = \"filter\"\nname = \"expr\"\n"), "plugin[0].name", `"expr" is a builtin filter`, 5},
		{"name builtin store", plug("kind = \"offsetstore\"\nname = \"file\"\n"), "plugin[0].name", `"file" is the builtin offset store`, 5},
		{"name duplicate", plug("kind = \"filter\"\nname = \"a\"\n[[plugin]]\nkind = \"filter\"\nname = \"a\"\n"), "plugin[1].name",
			`duplicate filter plugin "a" (first declared as plugin[0])`, 8},
		{"sha short", plug("kind = \"filter\"\nname = \"a\"\nsha256 = \"abc\"\n"), "plugin[0].sha256", `must be 64 hex digits (the binary's sha256sum), got "abc"`, 6},
		{"sha not hex", plug("kind = \"filter\"\nname = \"a\"\nsha256 = \"" + strings.Repeat("g", 64) + "\"\n"), "plugin[0].sha256", "must be 64 hex digits", 6},
		{"env", plug("kind = \"filter\"\nname = \"a\"\nenv = [\"A=1\", \"B\"]\n"), "plugin[0].env", `entry 1 must be KEY=VALUE, got "B"`, 6},
		{"policy bad", plug("kind = \"filter\"\nname = \"a\"\nfailure_policy = \"ignore\"\n"), "plugin[0].failure_policy", `must be "open" or "closed", got "ignore"`, 6},
		{"policy on store", plug("kind = \"offsetstore\"\nname = \"a\"\nfailure_policy = \"open\"\n"), "plugin[0].failure_policy", "only filter plugins have a failure policy", 6},
		{"args type", plug("kind = \"filter\"\nname = \"a\"\nargs = \"-v\"\n"), "plugin[0].args", `must be an array of strings, got string "-v"`, 6},
		{"args elem", plug("kind = \"filter\"\nname = \"a\"\nargs = [\"-v\", 1]\n"), "plugin[0].args", "must be an array of strings, got integer 1 at index 1", 6},
		{"config type", plug("kind = \"filter\"\nname = \"a\"\nconfig = 1\n"), "plugin[0].config", "must be a table of strings, got integer 1", 6},
		{"config value", plug("kind = \"filter\"\nname = \"a\"\n[plugin.config]\nn = 1\n"), "plugin[0].config.n", "must be a string, got integer 1", 7},
		{"plugin not array", "plugin = 1\n" + oneTopic, "plugin", "must be an array of tables ([[plugin]]), got integer", 1},
		{"plugin table", oneTopic + "[plugin]\nkind = \"filter\"\n", "plugin", "must be an array of tables ([[plugin]]), got table", 3},
		{"filter group missing", filt("filter = \"expr\"\n"), "topic[0].filter[0].group", "is required", 6},
		{"filter group duplicate", filt("group = \"g\"\nfilter = \"expr\"\n[[topic.filter]]\ngroup = \"g\"\nfilter = \"fp\"\n"),
			"topic[0].filter[1].group", `duplicate filter for group "g" (first declared as topic[0].filter[0])`, 10},
		{"filter missing", filt("group = \"g\"\n"), "topic[0].filter[0].filter", `is required ("attribute", "expr" or the name of a filter [[plugin]])`, 6},
		{"filter unknown", filt("group = \"g\"\nfilter = \"nope\"\n"), "topic[0].filter[0].filter",
			`must be "attribute", "expr" or the name of a filter [[plugin]], got "nope"`, 8},
		{"filter is a selector", "[[plugin]]\nkind = \"selector\"\nname = \"sel\"\n" + oneTopic + "[[topic.filter]]\ngroup = \"g\"\nfilter = \"sel\"\n",
			"topic[0].filter[0].filter", `got "sel"`, 8},
		{"filter policy", filt("group = \"g\"\nfilter = \"fp\"\nfailure_policy = \"x\"\n"), "topic[0].filter[0].failure_policy", `must be "open" or "closed", got "x"`, 9},
		{"filter config value", filt("group = \"g\"\nfilter = \"fp\"\n[topic.filter.config]\nk = true\n"), "topic[0].filter[0].config.k", "must be a string, got boolean true", 10},
		{"filter not array", oneTopic + "filter = \"x\"\n", "topic[0].filter", "must be an array of tables ([[topic.filter]]), got string", 3},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			e := parseErr(t, tc.src)
			require.Len(t, e.Problems, 1, e.Error())
			p := e.Problems[0]
			require.Equal(t, tc.key, p.Key, e.Error())
			require.Contains(t, p.Msg, tc.msg)
			require.Equal(t, tc.line, p.Line, e.Error())
			require.NotContains(t, e.Error(), "\n")
		})
	}
}

func TestPluginUnknownKeys(t *testing.T) {
	cases := []struct{ src, want string }{
		{oneTopic + "[[plugin]]\nkind = \"filter\"\nname = \"a\"\nsha265 = \"x\"\n", `server.toml:6: unknown key "plugin[0].sha265" (did you mean "sha256"?)`},
		{oneTopic + "[[plugin]]\nkind = \"filter\"\nname = \"a\"\nfailurePolicy = \"open\"\n", `server.toml:6: unknown key "plugin[0].failurePolicy" (did you mean "failure_policy"?)`},
		{oneTopic + "[[topic.filter]]\ngroup = \"g\"\nfilter = \"expr\"\ngrop = 1\n", `server.toml:6: unknown key "topic[0].filter[0].grop" (did you mean "group"?)`},
		{oneTopic + "plugin_dir = \"x\"\n", `server.toml:3: unknown key "topic[0].plugin_dir" (cannot be set per topic)`},
	}
	for _, tc := range cases {
		require.Equal(t, tc.want, parseErr(t, tc.src).Error(), tc.src)
	}
}

func TestPluginValidateAfterOverride(t *testing.T) {
	c, err := Parse([]byte(pluginsSrc), "s.toml")
	require.NoError(t, err)
	c.OffsetStore = "mysql"
	c.Plugins[0].SHA256 = "xyz"
	err = c.Validate()
	require.EqualError(t, err, "s.toml:9: plugin[0].sha256: must be 64 hex digits (the binary's sha256sum), got \"xyz\"\n"+
		`s.toml: offset_store: must be "file" or the name of an offsetstore [[plugin]], got "mysql"`)
}

func TestSampleDocumentsPluginKeys(t *testing.T) {
	b, err := os.ReadFile("server.toml")
	require.NoError(t, err)
	for _, keys := range []map[string]int{pluginFields, filterFields, tlsFields, authFields, userFields} {
		for k := range keys {
			require.Regexp(t, `(?m)^#\s*(`+k+` = |\[[a-z.]+\.`+k+`\]$)`, string(b), "sample has no commented example of %s", k)
		}
	}
	require.Contains(t, string(b), "# [[plugin]]\n")
	require.Contains(t, string(b), "#   [[topic.filter]]\n")

	// The commented examples, uncommented, are valid together.
	re := regexp.MustCompile(`^#\s*(\[\[?[a-z.]+\]\]?|[a-z_0-9]+ = ("[^"]*"|\[.*\]|true|false|\d+))$`)
	var ex []string
	for _, l := range strings.Split(string(b), "\n") {
		m := re.FindStringSubmatch(l)
		if m != nil && (len(ex) > 0 || strings.HasPrefix(m[1], "[")) {
			ex = append(ex, m[1])
		}
	}
	require.Greater(t, len(ex), 15)
	src := "tls_port = 8443\n[[topic]]\nname = \"t\"\n" + strings.Join(ex, "\n")
	_, err = Parse([]byte(src), "examples.toml")
	require.NoError(t, err, src)
}
