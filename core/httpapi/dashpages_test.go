package httpapi

import (
	"context"
	"reflect"
	"testing"

	"github.com/metaq-go/metaq/core/groups"
	"github.com/metaq-go/metaq/core/security"
)

// TestBuildClusterPage: a local broker's page has its header, the
// replication setting and the status lines of the sources set, and reads
// neither ZooKeeper nor the lags.
func TestBuildClusterPage(t *testing.T) {
	addr, tlsAddr := "127.0.0.1:1", "127.0.0.1:2"
	src := ClusterPageSource{
		Cluster:     ClusterInfo{Mode: "local", Addr: &addr, TLSAddr: &tlsAddr, HTTPAddr: "127.0.0.1:3", Serving: true},
		Replication: "sync",
		Sync:        func(kv func(string, any)) { kv("sync_slaves", 1); kv("sync_lag", 0) },
		ZK:          func() ZKRead { t.Fatal("ZooKeeper read in local mode"); return nil },
		Lags:        func() map[[2]string]int64 { t.Fatal("lags read in local mode"); return nil },
	}
	v := BuildClusterPage(src)
	if v.Mode != "local" || v.Addr != addr || v.TLSAddr != tlsAddr || !v.Serving || v.Replication != "sync" || v.Slave != nil || v.ZK != nil {
		t.Fatalf("%+v", v)
	}
	if want := [][2]string{{"sync_slaves", "1"}, {"sync_lag", "0"}}; !reflect.DeepEqual(v.Sync, want) {
		t.Fatalf("sync %v", v.Sync)
	}
}

// TestBuildGroupsPage: without ZooKeeper the groups page is the groups
// with their lag here, the offset store's bounds and its truncation, and
// the peers are not asked.
func TestBuildGroupsPage(t *testing.T) {
	src := GroupsPageSource{
		Groups: []*GroupEntry{{Group: "g", Topic: "t", Committed: true}, {Group: "h", Topic: "t"}},
		Lags:   map[[2]string]int64{{"g", "t"}: 42},
		PeerOffsets: func(context.Context, []PeerBroker) map[int]PeerOffsets {
			t.Fatal("peers asked without ZooKeeper")
			return nil
		},
		ZKTruncated: func() bool { return true },
	}
	pg := BuildGroupsPage(security.Viewer{}, src)
	if len(pg.Groups) != 2 || pg.Groups[0].Group != "g" || !pg.Groups[0].HasLag || pg.Groups[0].Lag != 42 || pg.Groups[1].HasLag {
		t.Fatalf("%+v", pg.Groups)
	}
	if pg.ZooKeeper || !pg.Truncated || pg.ZKEvery != groups.ZKOffsetsEvery || pg.MaxGroups != groups.ZKOffsetsMaxGroups || pg.MaxReads != groups.ZKOffsetsMaxReads {
		t.Fatalf("%+v", pg)
	}
}
