package broker

import (
	"encoding/json"
	"fmt"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/metaq-go/metaq/conf"
	"github.com/metaq-go/metaq/internal/testsvc"
)

// muxGet GETs path through h (no network).
func muxGet(h http.Handler, path string) (int, []byte) {
	w := httptest.NewRecorder()
	h.ServeHTTP(w, localReq(http.MethodGet, path, nil))
	return w.Code, w.Body.Bytes()
}

// replicaDetail returns /readyz's code and its "replica" check.
func replicaDetail(t *testing.T, h http.Handler) (int, readyCheck) {
	t.Helper()
	code, body := muxGet(h, "/readyz")
	var r struct{ Checks []readyCheck }
	require.NoError(t, json.Unmarshal(body, &r), "%s", body)
	for _, c := range r.Checks {
		if c.Name == "replica" {
			return code, c
		}
	}
	t.Fatalf("no replica check: %s", body)
	return 0, readyCheck{}
}

// TestReplicationReadyAndMetrics: a sync master and its slave (both with
// replication = "sync", as with one server.toml). The slave is ready once
// in sync and not ready while its master is gone; /metrics shows the role,
// the slave's lag and the master's sync state, and promtool is clean.
func TestReplicationReadyAndMetrics(t *testing.T) {
	t.Parallel()
	zkAddr := testsvc.ZooKeeper(t)
	root := fmt.Sprintf("/repl-obs-%d", time.Now().UnixNano())
	syncMode := func(c *conf.Config) { c.Replication = conf.ReplicationSync; c.SlaveMaxDelay = 40 }
	m := replBroker(t, zkAddr, root, t.TempDir(), "", -1, syncMode)
	s := replBroker(t, zkAddr, root, t.TempDir(), "", 1, syncMode)
	mh, sh := m.newMux(), s.newMux()
	waitFor(t, 15*time.Second, func() error {
		if code, c := replicaDetail(t, sh); code != 200 || !c.OK {
			return fmt.Errorf("slave not ready: %d %+v", code, c)
		}
		return nil
	})
	_, c := replicaDetail(t, sh)
	require.Contains(t, c.Detail, "in sync (sync mode)")
	waitFor(t, 15*time.Second, func() error {
		if v := dialRaw(t, m.Addr()).stats(t, "")["sync_partitions_in_sync"]; v != "2/2" {
			return fmt.Errorf("sync_partitions_in_sync %s", v)
		}
		return nil
	})
	ok, fail := pipelinedPuts(t, m.Addr(), 20)
	require.Equal(t, 20, ok, fail)

	code, scrape := muxGet(mh, "/metrics")
	require.Equal(t, 200, code)
	require.Equal(t, 1.0, metricValue(t, scrape, `metaq_replication_role{role="master"}`))
	require.Equal(t, 2.0, metricValue(t, scrape, `metaq_replication_sync_partitions_in_sync`))
	require.GreaterOrEqual(t, metricValue(t, scrape, `metaq_replication_sync_shipped_total`), 20.0)
	require.NotContains(t, string(scrape), "metaq_replication_lag_bytes")
	require.Empty(t, testsvc.PromtoolCheckMetrics(t, scrape), "promtool check metrics (master)")
	code, scrape = muxGet(sh, "/metrics")
	require.Equal(t, 200, code)
	require.Equal(t, 1.0, metricValue(t, scrape, `metaq_replication_role{role="slave"}`))
	require.Equal(t, 1.0, metricValue(t, scrape, `metaq_replication_connected`))
	require.Contains(t, string(scrape), "metaq_replication_lag_bytes ")
	require.Contains(t, string(scrape), "metaq_replication_lag_seconds ")
	require.Equal(t, 1.0, metricValue(t, scrape, `metaq_ready`))
	require.Empty(t, testsvc.PromtoolCheckMetrics(t, scrape), "promtool check metrics (slave)")

	// The master goes: the slave in sync mode is not ready, and says why.
	require.NoError(t, m.Close())
	waitFor(t, 15*time.Second, func() error {
		if code, c := replicaDetail(t, sh); code != 503 || c.OK {
			return fmt.Errorf("slave still ready: %d %+v", code, c)
		}
		return nil
	})
	_, c = replicaDetail(t, sh)
	require.True(t, strings.Contains(c.Detail, "not connected") || strings.Contains(c.Detail, "not in sync"), c.Detail)
	_, scrape = muxGet(sh, "/metrics")
	require.Equal(t, 0.0, metricValue(t, scrape, `metaq_ready`))
}

// TestReplicaReadyAsync: an async slave's check is there and passes even
// without a master; a master has no replica check.
func TestReplicaReadyAsync(t *testing.T) {
	t.Parallel()
	zkAddr := testsvc.ZooKeeper(t)
	root := fmt.Sprintf("/repl-obs-async-%d", time.Now().UnixNano())
	s := replBroker(t, zkAddr, root, t.TempDir(), "", 1, nil)
	code, c := replicaDetail(t, s.newMux())
	require.Equal(t, 200, code)
	require.True(t, c.OK)
	require.Contains(t, c.Detail, "async: readiness does not wait for it")
	b := startBroker(t, 0)
	_, body := muxGet(b.newMux(), "/readyz")
	require.NotContains(t, string(body), `"replica"`)
}
