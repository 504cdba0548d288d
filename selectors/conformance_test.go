package selectors_test

import (
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/metaq-go/metaq/sdk/message"
	"github.com/metaq-go/metaq/sdk/selector"
	"github.com/metaq-go/metaq/selectors"
	"github.com/metaq-go/metaq/selectors/selectortest"
)

// byKey is the hash selector's promise: equal keys, equal partitions.
var byKey = selectortest.Affinity(func(m *message.Message) (string, bool) { return string(m.Key), len(m.Key) > 0 })

// all is the fixed selector's: everything together.
var all = selectortest.Affinity(func(*message.Message) (string, bool) { return "", true })

// byPrefix is examples/selector-plugin's: attributes with the same prefix
// (up to the first '.') together.
var byPrefix = selectortest.Affinity(func(m *message.Message) (string, bool) {
	p, _, _ := strings.Cut(m.Attribute, ".")
	return p, m.HasAttribute
})

func TestConformance(t *testing.T) {
	t.Parallel()
	for name, s := range map[string]func() selector.Selector{
		"roundrobin": selector.RoundRobin, "random": selector.Random,
	} {
		t.Run(name, func(t *testing.T) {
			selectortest.Run(t, func(*testing.T) selector.Selector { return s() })
		})
	}
	t.Run("hash", func(t *testing.T) {
		selectortest.Run(t, func(*testing.T) selector.Selector { return selector.HashByKey() }, byKey)
	})
	t.Run("fixed", func(t *testing.T) {
		selectortest.Run(t, func(t *testing.T) selector.Selector { return selector.Fixed(0) }, all)
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
			selectortest.Run(t, func(t *testing.T) selector.Selector {
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
	t.Parallel()
	// The bare adapter: what the plugin itself answers, sentinels mapped
	// across the process boundary.
	t.Run("adapter/hash", func(t *testing.T) {
		selectortest.Run(t, func(t *testing.T) selector.Selector { return rawAdapter(t, helperSpec(t, "hash")) }, byKey)
	})
	t.Run("adapter/roundrobin", func(t *testing.T) {
		selectortest.Run(t, func(t *testing.T) selector.Selector { return rawAdapter(t, helperSpec(t, "roundrobin")) })
	})
	// What Open returns: supervisor, middleware, adapter. The suite must
	// pass without ever falling back.
	t.Run("open/hash", func(t *testing.T) {
		var s selectors.Selector
		selectortest.Run(t, func(t *testing.T) selector.Selector { s = openHelper(t, "hash", nil); return s }, byKey)
		require.Zero(t, selectors.Fallbacks(s))
	})
}

// TestConformanceExamplePlugin runs the suite against
// examples/selector-plugin, built with go build.
func TestConformanceExamplePlugin(t *testing.T) {
	t.Parallel()
	if testing.Short() {
		t.Skip("builds a binary")
	}
	path := buildExamplePlugin(t)
	spec := &selectors.Plugin{Name: "example", Path: path}
	t.Run("adapter", func(t *testing.T) {
		selectortest.Run(t, func(t *testing.T) selector.Selector { return rawAdapter(t, spec) }, byPrefix)
	})
	t.Run("open", func(t *testing.T) {
		var s selectors.Selector
		selectortest.Run(t, func(t *testing.T) selector.Selector {
			log, _ := testLogger(t)
			var err error
			s, err = selectors.Open(ctxT(t, 30*time.Second), selectors.OpenOptions{Plugin: spec, Logger: log})
			require.NoError(t, err)
			return s
		}, byPrefix)
		require.Zero(t, selectors.Fallbacks(s))
	})
}
