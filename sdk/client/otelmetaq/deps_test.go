package otelmetaq_test

import (
	"os/exec"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"
)

// TestCoreSDKHasNoOtel: the core SDK's packages do not depend on
// OpenTelemetry; only this optional package does.
func TestCoreSDKHasNoOtel(t *testing.T) {
	goTool, err := exec.LookPath("go")
	require.NoError(t, err, "the go tool runs go list")
	pkgs := []string{
		"github.com/metaq-go/metaq/sdk/client",
		"github.com/metaq-go/metaq/sdk/message",
		"github.com/metaq-go/metaq/sdk/admin",
		"github.com/metaq-go/metaq/sdk/protocol",
	}
	out, err := exec.Command(goTool, append([]string{"list", "-deps"}, pkgs...)...).CombinedOutput()
	require.NoError(t, err, "%s", out)
	require.Contains(t, string(out), "github.com/metaq-go/metaq/sdk/message", "go list listed the deps")
	for _, dep := range strings.Fields(string(out)) {
		require.NotContains(t, dep, "opentelemetry", "a core SDK package depends on %s", dep)
	}

	out, err = exec.Command(goTool, "list", "-deps", "github.com/metaq-go/metaq/sdk/client/otelmetaq").CombinedOutput()
	require.NoError(t, err, "%s", out)
	require.Contains(t, string(out), "go.opentelemetry.io/otel/trace")
}
