package broker

// The dashboard's pages (core/httpapi) whose data the broker assembles:
// the cluster page, the groups list, a group's page and the messages
// page; the httpBackend methods here give them as typed values.

import (
	"context"

	"github.com/metaq-go/metaq/core/httpapi"
	"github.com/metaq-go/metaq/core/repl"
	"github.com/metaq-go/metaq/core/security"
)

// Role is the broker's role for the dashboard's header.
func (h httpBackend) Role() string { return h.b.replRole().Title(h.b.slave, h.b.sync != nil) }

// Traffic is each open topic's traffic counters.
func (h httpBackend) Traffic() []httpapi.TopicTraffic {
	topics := h.b.topicList()
	ts := make([]httpapi.TopicStatus, len(topics))
	for i, t := range topics {
		ts[i], _ = httpapi.TopicStatusOf(t)
	}
	return httpapi.Traffic(ts)
}

// Lags is each group's lag in bytes on the open topics, from the offsets
// committed through this broker (committed.go).
func (h httpBackend) Lags() []httpapi.GroupLag { return httpapi.GroupLags(h.b.lagsNow()) }

// Config is the configuration page's text (redacted).
func (h httpBackend) Config() httpapi.ConfigText {
	cfg := h.b.config()
	return httpapi.ConfigText{Text: string(cfg.Redacted()), Path: cfg.Path(), Checksum: h.b.configChecksum()}
}

// Messages reads the messages page of partition p of topic
// (core/httpapi messages.go).
func (h httpBackend) Messages(topic string, p int, offset int64, n int, asHex bool) (httpapi.MessagePage, error) {
	l, err := partSource(h).Log(topic, p)
	if err != nil {
		return httpapi.MessagePage{}, noTopic(topic)
	}
	return httpapi.ReadMessages(httpapi.LogReader{Log: l}, topic, p, offset, n, asHex, h.b.config().MaxMessageSize)
}

// ---- cluster ----

// ClusterPage is the cluster page's data (httpapi.BuildClusterPage).
func (h httpBackend) ClusterPage(security.Viewer) httpapi.ClusterPage {
	b := h.b
	src := httpapi.ClusterPageSource{Cluster: h.Cluster(), Replication: b.config().Replication, ZK: b.zkRead, Lags: b.lagsNow}
	if b.replRole() == repl.RoleSlave {
		src.Slave = b.slave.Status().StatsLines // core/repl
	}
	if b.sync != nil {
		src.Sync = b.sync.Status().StatsLines
	}
	return httpapi.BuildClusterPage(src)
}

// ---- groups ----

// GroupsPage is the groups page's data (httpapi.BuildGroupsPage).
func (h httpBackend) GroupsPage(v security.Viewer) httpapi.GroupsPage {
	b := h.b
	return httpapi.BuildGroupsPage(v, httpapi.GroupsPageSource{
		Groups: h.Groups(v), Lags: b.lagsNow(), ZooKeeper: b.config().ZooKeeper.Enabled(), ZK: b.zkRead(),
		Self: b.config().BrokerID, PeerOffsets: b.peers.Offsets, ZKTruncated: b.committed.ZKTruncated,
	})
}

// lagsNow is each group's lag in bytes on a topic now (by group and
// topic), from the committed offsets known (committed.go), for the open
// topics.
func (b *Broker) lagsNow() map[[2]string]int64 {
	return httpapi.LagsNow(b.committed.Snapshot(), b.openParts)
}

// GroupPage is a group's page's data (httpapi.BuildGroupPage).
func (h httpBackend) GroupPage(ctx context.Context, v security.Viewer, group string, topics []string, explicit bool) (httpapi.GroupPage, error) {
	b := h.b
	return httpapi.BuildGroupPage(ctx, v, group, topics, explicit, httpapi.GroupPageSource{
		ZooKeeper: b.config().ZooKeeper.Enabled(), ZK: b.zkRead(), Self: b.config().BrokerID, TopicOpen: b.topicOpen,
		Describe: h.DescribeGroup, Load: b.offsets.Load, PeerOffsets: b.peers.Offsets,
	})
}

// zkRead is the registry connection's read for the dashboard's reads of
// ZooKeeper (docs/dashboard.md; core/httpapi zkread.go); nil while not
// connected.
func (b *Broker) zkRead() httpapi.ZKRead {
	reg := b.registry()
	if reg == nil {
		return nil
	}
	return reg.Read
}
