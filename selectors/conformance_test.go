package selectors_test

import (
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/metaq-go/metaq/plugins"
	"github.com/metaq-go/metaq/plugins/host"
	"github.com/metaq-go/metaq/selectors"
	"github.com/metaq-go/metaq/selectors/fixed"
	"github.com/metaq-go/metaq/selectors/hash"
	"github.com/metaq-go/metaq/selectors/random"
	"github.com/metaq-go/metaq/selectors/roundrobin"
	"github.com/metaq-go/metaq/selectors/selectortest"
)

// byKey is the hash selector's promise: equal keys, equal partitions.
var byKey = selectortest.Affinity(func(m selectors.Meta) (string, bool) { return string(m.Key), len(m.Key) > 0 })

// all is the fixed selector's: everything together.
var all = selectortest.Affinity(func(selectors.Meta) (string, bool) { return "", true })

// byPrefix is examples/selector-plugin's: attributes with the same prefix
// (up to the first '.') together.
var byPrefix = selectortest.Affinity(func(m selectors.Meta) (string, bool) {
	p, _, _ := strings.Cut(m.Attribute, ".")
	return p, m.HasAttribute
})

func TestConformance(t *testing.T) {
	t.Run("roundrobin", func(t *testing.T) {
		selectortest.Run(t, func(*testing.T) selectors.Selector { return roundrobin.New() })
	})
	t.Run("random", func(t *testing.T) {
		selectortest.Run(t, func(*testing.T) selectors.Selector { return random.New() })
	})
	t.Run("hash", func(t *testing.T) {
		selectortest.Run(t, func(*testing.T) selectors.Selector { return hash.New() }, byKey)
	})
	t.Run("fixed", func(t *testing.T) {
		selectortest.Run(t, func(t *testing.T) selectors.Selector {
			s, err := fixed.New(0)
			require.NoError(t, err)
			return s
		}, all)
	})
	for _, name := range selectors.Builtins {
		t.Run("open/"+name, func(t *testing.T) {
			var opts []selectortest.Option
			var cfg map[string]string
			switch name {
			case selectors.NameHash:
				opts = append(opts, byKey)
			case selectors.NameFixed:
				cfg = map[string]string{"partition": "0"}
				opts = append(opts, all)
			}
			selectortest.Run(t, func(t *testing.T) selectors.Selector {
				s, err := selectors.Open(ctxT(t, 10*time.Second), selectors.OpenOptions{Name: name, Config: cfg})
				require.NoError(t, err)
				return s
			}, opts...)
		})
	}
}

// TestConformanceRemote runs the suite against a plugin: the test binary
// re-run as one.
func TestConformanceRemote(t *testing.T) {
	// The bare adapter: what the plugin itself answers, sentinels mapped
	// across the process boundary.
	t.Run("adapter/hash", func(t *testing.T) {
		selectortest.Run(t, func(t *testing.T) selectors.Selector { return rawAdapter(t, helperSpec(t, "hash")) }, byKey)
	})
	t.Run("adapter/roundrobin", func(t *testing.T) {
		selectortest.Run(t, func(t *testing.T) selectors.Selector { return rawAdapter(t, helperSpec(t, "roundrobin")) })
	})
	// What Open returns: supervisor, middleware, adapter. The suite must
	// pass without ever falling back.
	t.Run("open/hash", func(t *testing.T) {
		var s selectors.Selector
		selectortest.Run(t, func(t *testing.T) selectors.Selector { s = openHelper(t, "hash", nil); return s }, byKey)
		require.Zero(t, selectors.Fallbacks(s))
	})
	t.Run("open/shared-supervisor", func(t *testing.T) {
		log, _ := testLogger(t)
		sup := host.NewSupervisor(host.Options{Logger: log})
		t.Cleanup(func() { _ = sup.Close() })
		var s selectors.Selector
		selectortest.Run(t, func(t *testing.T) selectors.Selector {
			s = openHelper(t, "hash", func(o *selectors.OpenOptions) { o.Supervisor = sup })
			return s
		}, byKey)
		require.Zero(t, selectors.Fallbacks(s))
	})
}

// TestConformanceExamplePlugin runs the suite against
// examples/selector-plugin, built with go build.
func TestConformanceExamplePlugin(t *testing.T) {
	if testing.Short() {
		t.Skip("builds a binary")
	}
	path := buildExamplePlugin(t)
	spec := &host.Spec{Kind: plugins.KindSelector, Name: "example", Path: path}
	t.Run("adapter", func(t *testing.T) {
		selectortest.Run(t, func(t *testing.T) selectors.Selector { return rawAdapter(t, spec) }, byPrefix)
	})
	t.Run("open", func(t *testing.T) {
		var s selectors.Selector
		selectortest.Run(t, func(t *testing.T) selectors.Selector {
			log, _ := testLogger(t)
			var err error
			s, err = selectors.Open(ctxT(t, 30*time.Second), selectors.OpenOptions{Plugin: spec, Logger: log})
			require.NoError(t, err)
			return s
		}, byPrefix)
		require.Zero(t, selectors.Fallbacks(s))
	})
}
