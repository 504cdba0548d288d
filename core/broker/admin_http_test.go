package broker

import (
	"bufio"
	"encoding/json"
	"errors"
	"fmt"
	"github.com/metaq-go/metaq/core/httpapi"
	"io"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/metaq-go/metaq/conf"
	"github.com/metaq-go/metaq/internal/testsvc"
	"github.com/metaq-go/metaq/internal/zkpath"
	"github.com/metaq-go/metaq/sdk/protocol"
)

// liveBroker starts a broker on data directory dir (kept across
// restarts) with topic "t" of 2 partitions.
func liveBroker(t *testing.T, dir string, mods ...func(*conf.Config)) *Broker {
	t.Helper()
	return fixture{dir: dir, mods: mods, opts: Options{Logf: t.Logf}}.start(t)
}

// putTo puts one message to topic partition p and returns the code.
func putTo(t *testing.T, c *authClient, topic string, p int32) (int, string) {
	return c.call(func(d []byte, op int32) []byte { return protocol.AppendPut(d, topic, p, 0, -1, op, []byte("m")) })
}

func jsonBody(t *testing.T, b []byte) map[string]any {
	t.Helper()
	var m map[string]any
	require.NoError(t, json.Unmarshal(b, &m), "%s", b)
	return m
}

func topicNames(t *testing.T, h *httpClient) []string {
	t.Helper()
	code, body := h.get("/api/v1/topics")
	require.Equal(t, 200, code, "%s", body)
	var out struct {
		Topics []httpapi.TopicInfo `json:"topics"`
	}
	require.NoError(t, json.Unmarshal(body, &out))
	var names []string
	for _, x := range out.Topics {
		names = append(names, x.Name)
	}
	return names
}

// TestAdminTopicsLive creates, alters and deletes topics through the API,
// with restarts in between, and sends it bad requests.
func TestAdminTopicsLive(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	b := liveBroker(t, dir)
	h := newHTTPClient(t, b.HTTPAddr(), nil)
	post := func(path, body string) (int, []byte) { return h.do("POST", path, strings.NewReader(body)) }

	code, body := post("/api/v1/topics", `{"name":"live","num_partitions":3}`)
	require.Equal(t, 201, code, "%s", body)
	require.Equal(t, 3.0, jsonBody(t, body)["partitions"])
	c := dialAuth(t, b.Addr(), nil)
	code2, msg := putTo(t, c, "live", 2)
	require.Equal(t, 200, code2, msg)
	require.Equal(t, []string{"live", "t"}, topicNames(t, h))

	// Bad requests: clear 4xx, nothing changes.
	for _, tc := range []struct {
		body string
		code int
		msg  string
	}{
		{`{"name":"live"}`, 409, "topic exists"},
		{`{"name":"t"}`, 409, "topic exists"},
		{`{"name":"bad/name"}`, 400, "name must be"},
		{`{"name":""}`, 400, "name must be"},
		{`{"name":"x","num_partitions":0}`, 400, "num_partitions must be 1..1024"},
		{`{"name":"x","num_partitions":100000}`, 400, "num_partitions must be 1..1024"},
		{`{"name":"x","delete_policy":"archive,1"}`, 400, "delete_policy"},
		{`{"name":"x","bogus":1}`, 400, `unknown field "bogus"`},
		{`{"name":`, 400, "bad JSON body"},
		{`[1,2]`, 400, "bad JSON body"},
		{``, 400, "empty body"},
		{`{"name":"x"} {"name":"y"}`, 400, "trailing data"},
		{`{"name":"x","num_partitions":"3"}`, 400, "bad JSON body"},
		{`{"name":"` + strings.Repeat("a", 2<<20) + `"}`, 413, "request body over"},
	} {
		code, body := post("/api/v1/topics", tc.body)
		require.Equal(t, tc.code, code, "%.100s: %s", tc.body, body)
		requireJSONError(t, body, tc.code, tc.msg)
	}
	require.Equal(t, []string{"live", "t"}, topicNames(t, h))
	code, body = h.get("/api/v1/topics/nope")
	require.Equal(t, 404, code)
	requireJSONError(t, body, 404, `no such topic: "nope"`)
	code, body = h.do("DELETE", "/api/v1/topics/nope", nil)
	require.Equal(t, 404, code, "%s", body)
	code, body = h.do("DELETE", "/api/v1/topics/live?delete_data=maybe", nil)
	require.Equal(t, 400, code, "%s", body)

	// More partitions: a warning about keyed ordering; fewer: refused.
	code, body = post("/api/v1/topics/live/partitions", `{"num_partitions":5}`)
	require.Equal(t, 200, code, "%s", body)
	require.Contains(t, jsonBody(t, body)["warning"], "ordering per key is not kept")
	code2, msg = putTo(t, c, "live", 4)
	require.Equal(t, 200, code2, msg)
	code, body = post("/api/v1/topics/live/partitions", `{"num_partitions":2}`)
	require.Equal(t, 400, code, "%s", body)
	requireJSONError(t, body, 400, "removing partitions is not supported")
	code, body = post("/api/v1/topics/nope/partitions", `{"num_partitions":2}`)
	require.Equal(t, 404, code, "%s", body)
	code, body = post("/api/v1/topics/t/partitions", `{"num_partitions":4}`) // a server.toml topic
	require.Equal(t, 200, code, "%s", body)

	// Restart: topics.toml brings back "live" with 5 partitions and "t"
	// with 4, with their messages.
	require.NoError(t, b.Close())
	b = liveBroker(t, dir)
	h = newHTTPClient(t, b.HTTPAddr(), nil)
	post = func(path, body string) (int, []byte) { return h.do("POST", path, strings.NewReader(body)) }
	code, body = h.get("/api/v1/topics/live")
	require.Equal(t, 200, code, "%s", body)
	var live httpapi.TopicInfo
	require.NoError(t, json.Unmarshal(body, &live))
	require.Equal(t, 5, live.Partitions)
	require.Greater(t, live.PartitionList[4].MaxOffset, int64(0))
	require.Equal(t, conf.TopicsFileName, live.Source)
	code, body = h.get("/api/v1/topics/t")
	require.Equal(t, 200, code, "%s", body)
	require.Equal(t, 4.0, jsonBody(t, body)["partitions"])

	// Delete keeping the data, then delete a server.toml topic with its
	// data: after a restart neither is there, and only the second's
	// directories are gone.
	code, body = post("/api/v1/topics", `{"name":"keep"}`)
	require.Equal(t, 201, code, "%s", body)
	code, body = h.do("DELETE", "/api/v1/topics/live", nil)
	require.Equal(t, 200, code, "%s", body)
	c = dialAuth(t, b.Addr(), nil)
	code2, msg = putTo(t, c, "live", 0)
	require.Equal(t, 500, code2, msg)
	require.Contains(t, msg, "do not accept topic live")
	code2, msg = putTo(t, c, "t", 3)
	require.Equal(t, 200, code2, msg)
	code, body = h.do("DELETE", "/api/v1/topics/t?delete_data=true", nil)
	require.Equal(t, 200, code, "%s", body)
	require.Equal(t, true, jsonBody(t, body)["data_removed"])
	require.DirExists(t, filepath.Join(dir, "live-4"))
	for p := range 4 {
		require.NoDirExists(t, filepath.Join(dir, fmt.Sprintf("t-%d", p)))
	}
	require.Equal(t, []string{"keep"}, topicNames(t, h))
	code, body = h.do("DELETE", "/api/v1/topics/keep", nil)
	require.Equal(t, 400, code, "%s", body)
	requireJSONError(t, body, 400, "at least one [[topic]] is required")

	require.NoError(t, b.Close())
	b = liveBroker(t, dir)
	h = newHTTPClient(t, b.HTTPAddr(), nil)
	require.Equal(t, []string{"keep"}, topicNames(t, h))
	for p := range 4 {
		require.NoDirExists(t, filepath.Join(dir, fmt.Sprintf("t-%d", p)), "deleted data came back")
	}
	data, err := os.ReadFile(filepath.Join(dir, conf.TopicsFileName))
	require.NoError(t, err)
	require.Contains(t, string(data), `deleted = ["t"]`)

	// Creating "live" again reopens its kept data.
	code, body = h.do("POST", "/api/v1/topics", strings.NewReader(`{"name":"live","num_partitions":5}`))
	require.Equal(t, 201, code, "%s", body)
	require.NoError(t, json.Unmarshal(body, &live))
	for _, p := range live.PartitionList {
		require.Equal(t, p.Partition == 2 || p.Partition == 4, p.MaxOffset > 0, "partition %d: %+v", p.Partition, p)
	}
	// The broker is unharmed.
	code, _ = h.get("/readyz")
	require.Equal(t, 200, code)
}

// TestAdminTopicsZooKeeper: topics created, altered and deleted live are
// registered in ZooKeeper, updated and unregistered.
func TestAdminTopicsZooKeeper(t *testing.T) {
	t.Parallel()
	addr := testsvc.ZooKeeper(t)
	root := "/admintopics"
	b := clusterBroker(t, addr, root, 7)
	zc := zkClient(t, addr)
	h := newHTTPClient(t, b.HTTPAddr(), nil)
	m := zkpath.MasterName(7)
	pub := zkpath.TopicsPub.Node(root, "live", m)
	wantData := func(want string) {
		waitFor(t, 10*time.Second, func() error {
			v, err := zkGet(zc, pub)
			if err == nil && v != want {
				err = fmt.Errorf("%s = %q, want %q", pub, v, want)
			}
			return err
		})
	}
	code, body := h.do("POST", "/api/v1/topics", strings.NewReader(`{"name":"live","num_partitions":3}`))
	require.Equal(t, 201, code, "%s", body)
	wantData(`{"numParts":3,"broker":"7-m"}`)
	code, body = h.do("POST", "/api/v1/topics/live/partitions", strings.NewReader(`{"num_partitions":6}`))
	require.Equal(t, 200, code, "%s", body)
	wantData(`{"numParts":6,"broker":"7-m"}`)
	code, body = h.do("DELETE", "/api/v1/topics/live?delete_data=true", nil)
	require.Equal(t, 200, code, "%s", body)
	waitFor(t, 10*time.Second, func() error {
		for _, p := range []string{pub, zkpath.TopicsSub.Node(root, "live", m)} {
			if ok, _, err := zc.Exists(p); err != nil || ok {
				return fmt.Errorf("%s still exists (%v)", p, err)
			}
		}
		return nil
	})
	// The deletion bumps the registry's generation; the nodes may be gone
	// before it has recorded the new generation as registered.
	waitFor(t, 10*time.Second, func() error {
		if !b.Registered() {
			return errors.New("broker not registered")
		}
		return nil
	})
	require.NoError(t, checkBroker(zc, root, b), "the other topics stay registered")
}

// TestAdminGroups describes a group's lag, resets its offsets (dry run
// first) and skips a partition.
func TestAdminGroups(t *testing.T) {
	t.Parallel()
	b := startBroker(t, 0)
	c := dialAuth(t, b.Addr(), nil)
	for p := range int32(2) {
		for range 3 {
			code, msg := putTo(t, c, "t", p)
			require.Equal(t, 200, code, msg)
		}
	}
	code, msg := c.commit("g1", "t") // partition 0 at offset 0
	require.Equal(t, 200, code, msg)
	max0, max1 := b.topics.Get("t").Parts[0].MaxOffset(), b.topics.Get("t").Parts[1].MaxOffset()
	h := newHTTPClient(t, b.HTTPAddr(), nil)

	code2, body := h.get("/api/v1/groups")
	require.Equal(t, 200, code2, "%s", body)
	require.Contains(t, string(body), `"group": "g1"`)

	describe := func() httpapi.GroupTopic {
		code, body := h.get("/api/v1/groups/g1")
		require.Equal(t, 200, code, "%s", body)
		var out struct {
			Topics []httpapi.GroupTopic `json:"topics"`
		}
		require.NoError(t, json.Unmarshal(body, &out))
		require.Len(t, out.Topics, 1, "%s", body)
		return out.Topics[0]
	}
	g := describe()
	require.Equal(t, max0, g.LagBytes)
	require.Equal(t, int64(0), g.Partitions[0].Committed)
	require.Equal(t, max0, *g.Partitions[0].LagBytes)
	require.Equal(t, int64(-1), g.Partitions[1].Committed)
	require.Nil(t, g.Partitions[1].LagBytes)

	post := func(path, body string) (int, []byte) { return h.do("POST", path, strings.NewReader(body)) }
	code2, body = post("/api/v1/groups/g1/offsets", `{"topic":"t","to":"latest","dry_run":true}`)
	require.Equal(t, 200, code2, "%s", body)
	require.Contains(t, string(body), fmt.Sprintf(`"to": %d`, max1))
	require.Equal(t, max0, describe().LagBytes, "a dry run changes nothing")
	code2, body = post("/api/v1/groups/g1/offsets", `{"topic":"t","to":"latest"}`)
	require.Equal(t, 200, code2, "%s", body)
	g = describe()
	require.Equal(t, int64(0), g.LagBytes)
	require.Equal(t, max1, g.Partitions[1].Committed)

	code2, body = post("/api/v1/groups/g1/offsets", `{"topic":"t","partition":0,"to":"earliest"}`)
	require.Equal(t, 200, code2, "%s", body)
	require.Equal(t, max0, describe().LagBytes)
	code2, body = post("/api/v1/groups/g1/skip", `{"topic":"t","partition":0}`)
	require.Equal(t, 200, code2, "%s", body)
	require.Equal(t, int64(0), describe().LagBytes)

	for _, tc := range []struct {
		path, body string
		code       int
		msg        string
	}{
		{"/api/v1/groups/g1/offsets", `{"topic":"t","to":"sideways"}`, 400, "to must be"},
		{"/api/v1/groups/g1/offsets", `{"topic":"t","to":"offset"}`, 400, "needs offset"},
		{"/api/v1/groups/g1/offsets", `{"topic":"t","to":"offset","offset":999999}`, 400, "is outside partition"},
		{"/api/v1/groups/g1/offsets", `{"topic":"t","partition":9,"to":"latest"}`, 400, "out of range"},
		{"/api/v1/groups/g1/offsets", `{"topic":"nope","to":"latest"}`, 404, "no such topic"},
		{"/api/v1/groups/g1/offsets", `{"to":"latest"}`, 400, "topic is required"},
		{"/api/v1/groups/g1/skip", `{"topic":"t"}`, 400, "partition is required"},
		{"/api/v1/groups/g1/skip", `not json`, 400, "bad JSON body"},
	} {
		code, body := post(tc.path, tc.body)
		require.Equal(t, tc.code, code, "%s: %s", tc.body, body)
		requireJSONError(t, body, tc.code, tc.msg)
	}
	code2, body = h.get("/api/v1/groups/g1?topic=nope")
	require.Equal(t, 404, code2, "%s", body)

	for _, p := range []string{"/api/v1/stats", "/api/v1/cluster", "/api/v1/plugins"} {
		code, body := h.get(p)
		require.Equal(t, 200, code, "%s: %s", p, body)
		jsonBody(t, body)
	}
}

// TestAdminAuth: with [auth], an admin may create a topic over HTTPS; a
// user may read a group only with the group's rights.
func TestAdminAuth(t *testing.T) {
	t.Parallel()
	certs := testsvc.NewCerts(t)
	b := secureBroker(t, certs, &syncLog{}, 50)
	hln, err := net.Listen("tcp", "127.0.0.1:0")
	require.NoError(t, err)
	require.NoError(t, b.ServeHTTP(hln))
	h := newHTTPClient(t, b.HTTPAddr(), certs.ClientConfig(t, ""))
	code, body := h.as("root", "root-pw").do("POST", "/api/v1/topics", strings.NewReader(`{"name":"orders-live"}`))
	require.Equal(t, 201, code, "%s", body)
	code, body = h.as("alice", "alice-pw").get("/api/v1/groups/billing-1?topic=orders")
	require.Equal(t, 200, code, "%s", body)
	code, body = h.as("alice", "alice-pw").get("/api/v1/groups/other?topic=orders")
	require.Equal(t, 403, code, "%s", body)
	requireJSONError(t, body, 403, `user "alice" may not use group "other"`)
	code, body = h.as("alice", "alice-pw").do("POST", "/api/v1/groups/billing-1/skip", strings.NewReader(`{"topic":"orders","partition":0}`))
	require.Equal(t, 403, code, "%s", body)
	code, body = h.get("/api/v1/topics")
	require.Equal(t, 401, code, "%s", body)
}

// TestAdminDeleteUnderLoad deletes a topic (with its data) while clients
// put to and get from it: their requests fail cleanly, nothing panics,
// and the broker goes on serving other topics.
func TestAdminDeleteUnderLoad(t *testing.T) {
	t.Parallel()
	b := startBroker(t, 0)
	h := newHTTPClient(t, b.HTTPAddr(), nil)
	code, body := h.do("POST", "/api/v1/topics", strings.NewReader(`{"name":"live","num_partitions":2}`))
	require.Equal(t, 201, code, "%s", body)
	stop := make(chan struct{})
	done := make(chan int, 4)
	for w := range 4 {
		c := dialAuth(t, b.Addr(), nil)
		go func() {
			n := 0
			defer func() { done <- n }()
			for {
				select {
				case <-stop:
					return
				default:
				}
				var code int
				if w%2 == 0 {
					code, _ = putTo(t, c, "live", int32(w/2))
				} else {
					code, _ = c.call(func(d []byte, op int32) []byte { return protocol.AppendGet(d, "live", "g", 0, 0, 1024, op) })
				}
				if code == 200 {
					n++
				}
			}
		}()
	}
	time.Sleep(200 * time.Millisecond)
	code, body = h.do("DELETE", "/api/v1/topics/live?delete_data=true", nil)
	require.Equal(t, 200, code, "%s", body)
	time.Sleep(100 * time.Millisecond)
	close(stop)
	for range 4 {
		<-done
	}
	c := dialAuth(t, b.Addr(), nil)
	code2, msg := putTo(t, c, "t", 0)
	require.Equal(t, 200, code2, msg)
	code2, msg = putTo(t, c, "live", 0)
	require.Equal(t, 500, code2, msg)
}

// TestHTTPBodyOverLimitFirst: a request whose Content-Length is over the
// body limit is answered 413 before a byte of its body is read, so a
// client that sent Expect: 100-continue (curl, for bodies over 1 MiB) is
// told without sending it, and gets no 100 Continue.
func TestHTTPBodyOverLimitFirst(t *testing.T) {
	t.Parallel()
	b := liveBroker(t, t.TempDir())
	nc, err := net.DialTimeout("tcp", b.HTTPAddr(), 5*time.Second)
	require.NoError(t, err)
	defer nc.Close()
	nc.SetDeadline(time.Now().Add(20 * time.Second))
	_, err = io.WriteString(nc, "POST /api/v1/topics HTTP/1.1\r\nHost: "+b.HTTPAddr()+"\r\nContent-Type: application/json\r\n"+
		"Content-Length: 3000000\r\nExpect: 100-continue\r\n\r\n")
	require.NoError(t, err)
	resp, err := http.ReadResponse(bufio.NewReader(nc), nil)
	require.NoError(t, err)
	defer resp.Body.Close()
	require.Equal(t, 413, resp.StatusCode)
	body, err := io.ReadAll(resp.Body)
	require.NoError(t, err)
	require.Contains(t, string(body), "request body over")
}
