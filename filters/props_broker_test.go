package filters_test

import (
	"context"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/metaq-go/metaq/conf"
	"github.com/metaq-go/metaq/internal/testsvc"
	"github.com/metaq-go/metaq/sdk/client"
	"github.com/metaq-go/metaq/sdk/message"
)

var builtHeader struct {
	once sync.Once
	dir  string
	path string
	err  error
}

// headerPlugin builds examples/header-filter-plugin once per test binary.
func headerPlugin(tb testing.TB) string {
	tb.Helper()
	builtHeader.once.Do(func() {
		if p := testsvc.Prebuilt("github.com/metaq-go/metaq/examples/header-filter-plugin"); p != "" {
			builtHeader.path = p
			return
		}
		if builtHeader.dir, builtHeader.err = os.MkdirTemp("", "metaq-header-filter-plugin-"); builtHeader.err != nil {
			return
		}
		builtHeader.path = filepath.Join(builtHeader.dir, "header-filter-plugin")
		out, err := exec.Command("go", "build", "-o", builtHeader.path, "../examples/header-filter-plugin").CombinedOutput()
		if err != nil {
			builtHeader.err = fmt.Errorf("go build: %v\n%s", err, out)
		}
	})
	if builtHeader.err != nil {
		tb.Fatal(builtHeader.err)
	}
	return builtHeader.path
}

// TestBrokerFilterPluginProperties runs a broker with the example header
// filter plugin (a real binary that asks for properties), the attribute
// example plugin (built before plugins could ask: it must work unchanged
// on messages with properties) and a plugin that fails a batch carrying
// properties it did not ask for, all on one topic whose messages carry
// keys, tags and headers.
func TestBrokerFilterPluginProperties(t *testing.T) {
	t.Parallel()
	b := startBroker(t, []conf.TopicFilter{
		{Group: "eu", Filter: "hdr", Config: map[string]string{"header": "region", "equals": "eu"}},
		{Group: "reds", Filter: "regexp", Config: map[string]string{"match": "^red$"}},
		{Group: "all", Filter: "noprops", FailurePolicy: "closed"},
	},
		conf.Plugin{Kind: conf.PluginKindFilter, Name: "hdr", Path: headerPlugin(t)},
		conf.Plugin{Kind: conf.PluginKindFilter, Name: "regexp", Path: examplePlugin(t)},
		helperPlugin(t, "noprops", "noprops"),
	)
	p, err := client.New(client.Brokers(b.Addr()))
	require.NoError(t, err)
	defer p.Close(context.Background())
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	const n = 90
	regions := []string{"eu", "us", "", "eu", "apac"}
	var wantEU, wantRed []string
	for i := range n {
		m := &message.Message{Topic: "t", Body: fmt.Appendf(nil, "m%d", i), Key: fmt.Appendf(nil, "key-%d", i%7),
			Tags: []string{"TagA"}, Timestamp: time.UnixMilli(1700000000000 + int64(i))}
		if r := regions[i%len(regions)]; r != "" {
			m.Headers.Add("region", r)
		}
		m.Headers.Add("n", fmt.Sprint(i))
		if i%2 == 0 {
			m.Attribute, m.HasAttribute = "red", true
			wantRed = append(wantRed, string(m.Body))
		}
		if regions[i%len(regions)] == "eu" {
			wantEU = append(wantEU, string(m.Body))
		}
		_, err := p.ProduceSync(ctx, m)
		require.NoError(t, err)
	}
	for _, c := range []struct {
		group string
		want  int
		check func(t *testing.T, got []*message.Message)
	}{
		{"eu", len(wantEU), func(t *testing.T, got []*message.Message) {
			for i, m := range got {
				require.Equal(t, wantEU[i], string(m.Body))
				v, _ := m.Headers.String("region")
				require.Equal(t, "eu", v)
				require.NotNil(t, m.Key)
			}
		}},
		{"reds", len(wantRed), func(t *testing.T, got []*message.Message) {
			for i, m := range got {
				require.Equal(t, wantRed[i], string(m.Body))
			}
		}},
		{"all", n, nil},
	} {
		got := consumeAll(t, b.Addr(), c.group, c.want)
		require.Len(t, got, c.want, "group %s", c.group)
		if c.check != nil {
			c.check(t, got)
		}
	}
}
