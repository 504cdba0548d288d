package broker

import (
	"os"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/metaq-go/metaq/conf"
	"github.com/metaq-go/metaq/internal/doctest"
)

// TestHTTPDataDocs runs the http-data walkthrough of docs/http.md (curl
// and jq against a broker's HTTP listener, $METAQ_HTTP) as written and
// checks the output it shows.
func TestHTTPDataDocs(t *testing.T) {
	t.Parallel()
	b := startBroker(t, 0, func(c *conf.Config) {
		c.Topics = []conf.Topic{{Name: "meta-test"}}
	})
	src, err := os.ReadFile("../../docs/http.md")
	require.NoError(t, err)
	blocks, err := doctest.Parse("docs/http.md", src)
	require.NoError(t, err)
	cmds := doctest.Walkthrough(blocks, "http-data")
	require.GreaterOrEqual(t, len(cmds), 10, "commands of the http-data walkthrough")
	env := []string{"PATH=" + os.Getenv("PATH"), "HOME=" + t.TempDir(), "LC_ALL=C", "METAQ_HTTP=http://" + b.HTTPAddr()}
	sh, err := doctest.StartShell(t.TempDir(), t.TempDir(), env)
	require.NoError(t, err)
	defer sh.Close(5 * time.Second)
	for _, c := range cmds {
		res, err := sh.Run(c.Text, 30*time.Second)
		require.NoError(t, err, "%s: %s", c.Where(), c.Key)
		// curl --max-time ends an event stream: exit 28 is its way out.
		if !(res.Exit == 28 && strings.Contains(c.Text, "--max-time")) {
			require.Equal(t, 0, res.Exit, "%s: %s\n%s", c.Where(), c.Key, res.Output)
		}
		if c.Output != nil {
			require.NoError(t, doctest.Match(c.Output, res.Output), "%s: %s", c.Where(), c.Key)
		}
	}
}
