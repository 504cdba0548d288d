package e2e

import (
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/metaq-go/metaq/internal/brokertest"
	"github.com/metaq-go/metaq/sdk/message"
	"github.com/metaq-go/metaq/sdk/protocol"
)

// foundMsg is a message of GET /api/v1/messages.
type foundMsg struct {
	Partition int    `json:"partition"`
	Offset    int64  `json:"offset"`
	MsgID     string `json:"msgId"`
	Body      string `json:"body"`
	Key       string `json:"key"`
}

type findReply struct {
	Messages     []foundMsg `json:"messages"`
	ScannedBytes int64      `json:"scannedBytes"`
	Notes        []string   `json:"notes"`
	More         bool       `json:"more"`
}

// TestIndexLookupAfterKillAndDamage runs the real metaq-server: keyed
// messages are looked up by key and msgId through GET /api/v1/messages
// after a kill -9 (the open index chunk lost) and after its index files
// were damaged (bit flips, truncation, removal, a stray file). Every
// answer is the right records or fewer (a clear miss), never a record
// with another key; once the indexer has rebuilt, every record is found
// again without scanning the log.
func TestIndexLookupAfterKillAndDamage(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	data := filepath.Join(dir, "data")
	config := filepath.Join(dir, "server.toml")
	require.NoError(t, os.WriteFile(config, []byte(brokerConfig(data, "max_segment_size = 65536\n",
		"[[topic]]\nname = \"ix\"\nnum_partitions = 2\n")), 0o644))
	bin := brokertest.ServerBinary(t)
	launch := func() (*brokertest.Server, string) {
		t.Helper()
		p, err := brokertest.Launch(bin, nil, "--config", config, "--port", "0", "--host", "127.0.0.1")
		require.NoError(t, err)
		t.Cleanup(p.Kill)
		m := httpLine.FindStringSubmatch(p.Logs.String())
		require.NotNil(t, m, "no HTTP line in:\n%s", p.Logs.String())
		return p, m[1]
	}
	hc := &http.Client{Timeout: 20 * time.Second}
	find := func(api string, q url.Values) findReply {
		t.Helper()
		resp, err := hc.Get("http://" + api + "/api/v1/messages?" + q.Encode())
		require.NoError(t, err)
		defer resp.Body.Close()
		b, _ := io.ReadAll(resp.Body)
		require.Equal(t, 200, resp.StatusCode, "%s", b)
		var r findReply
		require.NoError(t, json.Unmarshal(b, &r), "%s", b)
		return r
	}

	// want[key] are the offsets (partition<<48 | offset) put with key.
	const keys = 50
	want := map[string]map[int64]string{}
	ids := map[string]int64{} // msgId -> partition<<48 | offset
	p, api := launch()
	c := dial(t, p.Addr)
	put := func(n int) {
		t.Helper()
		for i := 0; i < n; i++ {
			k := "key-" + strconv.Itoa(i%keys)
			body := fmt.Sprintf("%s body %d %s", k, len(ids), strings.Repeat("x", 200))
			m := message.Message{Key: []byte(k), Body: []byte(body)}
			d := m.AppendData(nil)
			part := int32(i % 2)
			op := c.nextOpaque()
			r, err := c.call(protocol.AppendPut(nil, "ix", part, m.Flag(), int64(message.Checksum(d)), op, d), op)
			require.NoError(t, err)
			require.Equal(t, 200, r.Code, "%s", r.Body)
			id, _, off, _, err := protocol.ParsePutResult(r.Body)
			require.NoError(t, err)
			if want[k] == nil {
				want[k] = map[int64]string{}
			}
			want[k][int64(part)<<48|off] = body
			ids[strconv.FormatInt(id, 10)] = int64(part)<<48 | off
		}
	}
	// check looks every key up: each answer is a subset of what was put
	// with it (never another key's record); with all, exactly that.
	check := func(api string, all bool) {
		t.Helper()
		for k, offs := range want {
			r := find(api, url.Values{"topic": {"ix"}, "key": {k}, "limit": {"1000"}})
			if all {
				require.Len(t, r.Messages, len(offs), "key %s: %v", k, r.Notes)
			}
			for _, m := range r.Messages {
				body, ok := offs[int64(m.Partition)<<48|m.Offset]
				require.True(t, ok, "key %s: a record that is not one of its own: %+v", k, m)
				require.Equal(t, body, m.Body)
				require.Equal(t, k, m.Key)
			}
		}
		n := 0
		for id, at := range ids {
			if n++; n > 20 {
				break
			}
			r := find(api, url.Values{"id": {id}})
			if all {
				require.Len(t, r.Messages, 1, "msgId %s", id)
			}
			for _, m := range r.Messages {
				require.Equal(t, at, int64(m.Partition)<<48|m.Offset, "msgId %s", id)
				require.Equal(t, id, m.MsgID)
			}
		}
	}
	indexed := func(api string) {
		t.Helper()
		require.Eventually(t, func() bool {
			return find(api, url.Values{"topic": {"ix"}, "key": {"key-1"}}).ScannedBytes == 0
		}, 30*time.Second, 20*time.Millisecond, "the indexer catches up")
	}

	put(1500) // about 400 KiB: several segments, sealed chunks
	indexed(api)
	put(300) // in the open chunks
	check(api, true)
	p.Kill() // kill -9: the open chunks are lost
	c.close()

	p, api = launch()
	check(api, true) // at once: the tail past the sealed chunks is scanned
	indexed(api)
	check(api, true)
	p.Stop(t) // seals the open chunks

	// Damage the index files every way, then look up at once (whatever the
	// indexer has checked or rebuilt by then) and after it rebuilt.
	var files []string
	for _, part := range []string{"ix-0", "ix-1"} {
		m, err := filepath.Glob(filepath.Join(data, part, "*.kidx"))
		require.NoError(t, err)
		require.GreaterOrEqual(t, len(m), 3, "chunk files of %s", part)
		files = append(files, m...)
	}
	for i, f := range files {
		b, err := os.ReadFile(f)
		require.NoError(t, err)
		switch i % 4 {
		case 0: // bit flips across the file
			for at := 0; at < len(b); at += 97 {
				b[at] ^= 1 << (at % 8)
			}
			require.NoError(t, os.WriteFile(f, b, 0o644))
		case 1:
			require.NoError(t, os.WriteFile(f, b[:len(b)/2], 0o644))
		case 2:
			require.NoError(t, os.Remove(f))
		}
	}
	require.NoError(t, os.WriteFile(filepath.Join(data, "ix-0", "00000000000000000007.kidx"), []byte("not an index"), 0o644))
	p, api = launch()
	check(api, false)
	indexed(api)
	check(api, true)
	// The damaged files were replaced by rebuilt ones.
	left, err := filepath.Glob(filepath.Join(data, "ix-0", "*.kidx"))
	require.NoError(t, err)
	require.NotContains(t, left, filepath.Join(data, "ix-0", "00000000000000000007.kidx"))
	p.Stop(t)
}
