package filters_test

import (
	"bufio"
	"context"
	"encoding/json"
	"fmt"
	"maps"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/metaq-go/metaq/conf"
	"github.com/metaq-go/metaq/core/broker"
	"github.com/metaq-go/metaq/filters"
	"github.com/metaq-go/metaq/offsetstore"
	"github.com/metaq-go/metaq/offsetstore/file"
)

// recordEnv names the file where the "record" and "recstore" helper
// plugins write what they receive, one JSON object a line.
const recordEnv = "METAQ_FILTERS_TEST_RECORD"

// received is one line of a helper plugin's record: its start (environment
// and arguments) or one Init.
type received struct {
	What     string            `json:"what"` // "start" or "init"
	Env      []string          `json:"env,omitempty"`
	Args     []string          `json:"args,omitempty"`
	Instance string            `json:"instance,omitempty"`
	Topic    string            `json:"topic,omitempty"`
	Group    string            `json:"group,omitempty"`
	Config   map[string]string `json:"config,omitempty"`
}

func record(r received) {
	f, err := os.OpenFile(os.Getenv(recordEnv), os.O_APPEND|os.O_CREATE|os.O_WRONLY, 0o600)
	if err != nil {
		fmt.Fprintln(os.Stderr, "record:", err)
		os.Exit(4)
	}
	defer f.Close()
	_ = json.NewEncoder(f).Encode(r)
}

func recordStart() { record(received{What: "start", Env: os.Environ(), Args: os.Args[1:]}) }

// serveRecordFilter serves a filter that keeps everything and records
// every Init.
func serveRecordFilter() {
	recordStart()
	filters.Serve(filters.NewRecordFilter(func(req *filters.InitRequest) (func(*filters.Record) bool, bool, error) {
		record(received{What: "init", Instance: req.Instance, Topic: req.Topic, Group: req.Group, Config: req.Config})
		return keepAll(req)
	}))
}

// recStore is the file store, recording its Init; it passes the file store
// only the "path" key.
type recStore struct{ offsetstore.Store }

func (s recStore) Init(ctx context.Context, req *offsetstore.InitRequest) error {
	record(received{What: "init", Config: req.Config})
	return s.Store.Init(ctx, &offsetstore.InitRequest{Config: map[string]string{"path": req.Config["path"]}})
}

func serveRecordStore() {
	recordStart()
	offsetstore.Serve(recStore{file.New()})
}

func readReceived(t *testing.T, path string) (start received, inits []received) {
	t.Helper()
	f, err := os.Open(path)
	require.NoError(t, err)
	defer f.Close()
	sc := bufio.NewScanner(f)
	sc.Buffer(nil, 1<<20)
	for sc.Scan() {
		var r received
		require.NoError(t, json.Unmarshal(sc.Bytes(), &r), sc.Text())
		if r.What == "start" {
			start = r
		} else {
			inits = append(inits, r)
		}
	}
	require.NoError(t, sc.Err())
	require.Equal(t, "start", start.What, "%s has no start record", path)
	return start, inits
}

// TestPluginSeesOnlyItsOwnConfig runs a broker with two filter plugins, a
// builtin filter and an offset-store plugin, each with its own secrets,
// and shows what every plugin receives: its own [plugin.config] (for a
// filter, overlaid per instance with the [topic.filter.config] of the
// topics and groups that name it), its own args and env, and nothing of
// the other plugins, the other groups or the broker's environment.
func TestPluginSeesOnlyItsOwnConfig(t *testing.T) {
	t.Setenv("METAQ_TEST_SECRET", "hunter2")
	exe, err := os.Executable()
	require.NoError(t, err)
	dir := t.TempDir()
	recA, recB, recS := filepath.Join(dir, "a.jsonl"), filepath.Join(dir, "b.jsonl"), filepath.Join(dir, "store.jsonl")
	args := []string{"-test.run=^$"}
	plugin := func(kind, name, which, rec string, config map[string]string, env ...string) conf.Plugin {
		return conf.Plugin{Kind: kind, Name: name, Path: exe, Args: args,
			Env: append([]string{helperEnv + "=" + which, recordEnv + "=" + rec}, env...), Config: config}
	}

	cfg := conf.Default()
	cfg.Port = 0
	cfg.DataDir = filepath.Join(dir, "data")
	cfg.JournalFileSize = 4 << 20 // see smallJournal
	cfg.NumPartitions = 1
	cfg.Plugins = []conf.Plugin{
		plugin(conf.PluginKindFilter, "rec-a", "record", recA, map[string]string{"dsn": "a-secret"}, "A_ONLY=a-env"),
		plugin(conf.PluginKindFilter, "rec-b", "record", recB, map[string]string{"dsn": "b-secret"}),
		plugin(conf.PluginKindOffsetStore, "rec-store", "recstore", recS,
			map[string]string{"path": filepath.Join(dir, "offsets.json"), "password": "store-secret"}),
	}
	cfg.OffsetStore = "rec-store"
	cfg.Topics = []conf.Topic{
		{Name: "t", Filters: []conf.TopicFilter{
			{Group: "g1", Filter: "rec-a", Config: map[string]string{"x": "t-g1"}},
			{Group: "g2", Filter: "rec-b", Config: map[string]string{"x": "t-g2", "dsn": "g2-override"}},
			{Group: "g3", Filter: "attribute", Config: map[string]string{"equals": "g3-only"}},
		}},
		{Name: "t2", Filters: []conf.TopicFilter{
			{Group: "g1", Filter: "rec-b", Config: map[string]string{"x": "t2-g1"}},
		}},
	}
	lb := &logBuf{}
	b, err := broker.New(cfg, broker.Options{Logf: lb.logf})
	require.NoError(t, err)
	require.NoError(t, b.Start(), "%v", lb.lines)
	b.Close()

	startA, initsA := readReceived(t, recA)
	startB, initsB := readReceived(t, recB)
	startS, initsS := readReceived(t, recS)
	require.Equal(t, []received{
		{What: "init", Instance: "t/g1", Topic: "t", Group: "g1", Config: map[string]string{"dsn": "a-secret", "x": "t-g1"}},
	}, initsA)
	byInstance := map[string]received{}
	for _, r := range initsB {
		byInstance[r.Instance] = r
	}
	require.Len(t, initsB, 2, "%+v", initsB)
	require.Equal(t, map[string]received{
		"t/g2":  {What: "init", Instance: "t/g2", Topic: "t", Group: "g2", Config: map[string]string{"dsn": "g2-override", "x": "t-g2"}},
		"t2/g1": {What: "init", Instance: "t2/g1", Topic: "t2", Group: "g1", Config: map[string]string{"dsn": "b-secret", "x": "t2-g1"}},
	}, byInstance)
	require.Equal(t, []received{{What: "init", Config: maps.Clone(cfg.Plugins[2].Config)}}, initsS)

	for _, tc := range []struct {
		name        string
		start       received
		env         string   // its own configured variable, if any
		notAnyWhere []string // secrets that belong to others
	}{
		{"rec-a", startA, "A_ONLY=a-env", []string{"b-secret", "g2-override", "t-g2", "t2-g1", "g3-only", "store-secret"}},
		{"rec-b", startB, "", []string{"a-secret", "A_ONLY", "t-g1", "g3-only", "store-secret"}},
		{"rec-store", startS, "", []string{"a-secret", "b-secret", "A_ONLY", "t-g1", "t-g2", "t2-g1", "g3-only"}},
	} {
		require.Equal(t, args, tc.start.Args, "%s: its configured args only", tc.name)
		if tc.env != "" {
			require.Contains(t, tc.start.Env, tc.env, tc.name)
		}
		raw, err := os.ReadFile(map[string]string{"rec-a": recA, "rec-b": recB, "rec-store": recS}[tc.name])
		require.NoError(t, err)
		for _, s := range append(tc.notAnyWhere, "METAQ_TEST_SECRET", "hunter2") {
			require.NotContains(t, string(raw), s, "%s received %q", tc.name, s)
		}
		for _, kv := range tc.start.Env {
			k, _, _ := strings.Cut(kv, "=")
			require.True(t, k == "PATH" || k == "HOME" || k == "TMPDIR" || k == "LANG" || k == helperEnv || k == recordEnv ||
				kv == tc.env || strings.HasPrefix(k, "PLUGIN_") || k == "METAQ_PLUGIN", "%s: unexpected variable %s", tc.name, k)
		}
	}
}
