package broker

import (
	"html"
	"net/url"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/metaq-go/metaq/conf"
)

// TestTopicNameDots: "." and ".." (and the other names the validator
// refuses) are refused on every door with the validator's message, and
// nothing is created: the TCP port (put with auto_create_topics), the JSON
// API, the dashboard form; topics.toml is not written; a topics.toml or a
// server.toml naming one fails to load and --check-config says why.
func TestTopicNameDots(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	b := liveBroker(t, dir, func(c *conf.Config) { c.AutoCreateTopics = true })
	bad := []string{".", "..", "a/b", "a\x01", "a\ufff5", strings.Repeat("x", 250)}

	// TCP: put with auto_create_topics.
	c := dialAuth(t, b.Addr(), nil)
	for _, name := range bad[:2] {
		code, msg := putTo(t, c, name, 0)
		require.Equal(t, 500, code, "%q: %s", name, msg)
		require.Contains(t, msg, "The server do not accept topic ", name)
		require.Contains(t, msg, conf.ValidateTopicName(name).Error(), name)
	}
	code, msg := putTo(t, c, ".hidden.ok-1_x", 0) // dots elsewhere stay valid
	require.Equal(t, 200, code, msg)

	// JSON API.
	h := newHTTPClient(t, b.HTTPAddr(), nil)
	for _, name := range bad {
		body := `{"name":` + jsonString(name) + `}`
		code, resp := h.do("POST", "/api/v1/topics", strings.NewReader(body))
		require.Equal(t, 400, code, "%q: %s", name, resp)
		requireJSONError(t, resp, 400, conf.ValidateTopicName(name).Error())
	}

	// Dashboard form.
	mux := b.newMux()
	tok := csrfField.FindStringSubmatch(dashDo(t, mux, "GET", "/ui/topics", nil, nil).Body.String())
	require.NotNil(t, tok)
	for _, name := range bad[:2] {
		w := dashDo(t, mux, "POST", "/ui/topics", url.Values{"csrf": {tok[1]}, "name": {name}}, nil)
		require.Equal(t, 400, w.Code, "%q: %s", name, w.Body)
		require.Contains(t, html.UnescapeString(w.Body.String()), conf.ValidateTopicName(name).Error(), name)
	}

	names := topicNames(t, h)
	require.NotContains(t, names, ".")
	require.NotContains(t, names, "..")
	_, err := os.Stat(filepath.Join(dir, conf.TopicsFileName))
	require.ErrorIs(t, err, os.ErrNotExist, "no topic was created: topics.toml is not written")
	ents, err := os.ReadDir(dir)
	require.NoError(t, err)
	for _, e := range ents {
		require.False(t, strings.HasPrefix(e.Name(), ".-") || strings.HasPrefix(e.Name(), "..-"), "partition directory %s", e.Name())
	}
	b.Close()

	// A topics.toml naming ".." (an old broker's, or edited): the broker
	// does not start, and --check-config (CheckConfig) says why.
	require.NoError(t, os.WriteFile(filepath.Join(dir, conf.TopicsFileName), []byte("[[topic]]\nname = \"..\"\n"), 0o644))
	cfg := testConfig()
	cfg.Port = 0
	cfg.DataDir = dir
	cfg.Topics = []conf.Topic{{Name: "t"}}
	_, err = New(cfg, Options{Logf: t.Logf})
	require.ErrorContains(t, err, `invalid topic name "..": reserved`)
	probs := CheckConfig(cfg)
	require.NotEmpty(t, probs)
	require.Contains(t, strings.Join(probs, "\n"), `topic[0].name: invalid topic name "..": reserved`)

	// server.toml: Parse (config load, --check-config) refuses it.
	_, err = conf.Parse([]byte("[[topic]]\nname = \".\"\n"), "server.toml")
	require.ErrorContains(t, err, `invalid topic name ".": reserved`)
}

// jsonString quotes s as a JSON string (control characters escaped).
func jsonString(s string) string {
	var sb strings.Builder
	sb.WriteByte('"')
	for _, r := range s {
		switch {
		case r == '"' || r == '\\':
			sb.WriteByte('\\')
			sb.WriteRune(r)
		case r < 0x20:
			sb.WriteString(`\u00`)
			sb.WriteByte("0123456789abcdef"[r>>4])
			sb.WriteByte("0123456789abcdef"[r&15])
		default:
			sb.WriteRune(r)
		}
	}
	sb.WriteByte('"')
	return sb.String()
}
