package broker

import (
	"context"

	"github.com/metaq-go/metaq/core/groups"
	"github.com/metaq-go/metaq/core/httpapi"
	"github.com/metaq-go/metaq/core/partition"
	"github.com/metaq-go/metaq/core/security"
	"github.com/metaq-go/metaq/sdk/message"
)

// The JSON admin API (docs/http.md), under /api/v1/.

func (b *Broker) topicSource(name string) string {
	b.adminMu.Lock()
	defer b.adminMu.Unlock()
	return b.topicBook.Source(name)
}

func (b *Broker) topicJSON(t *partition.Topic, parts bool) httpapi.TopicInfo {
	ts, _ := httpapi.TopicStatusOf(t)
	j, c := ts.Info(parts), t.Conf()
	j.AcceptPublish, j.AcceptSubscribe, j.UnflushThreshold, j.DeletePolicy = c.AcceptPublish, c.AcceptSubscribe, c.UnflushThreshold, c.DeletePolicy
	j.Source = b.topicSource(t.Name())
	return j
}

// groupAdmin is the groups' admin side over this broker's partitions and
// offsets (core/groups admin.go).
func (b *Broker) groupAdmin() groups.Admin {
	return groups.Admin{Parts: partSource{b}, Coord: b.groups, Offsets: b.offsets, Committed: b.committed}
}

// topicOpen says whether topic is open here.
func (b *Broker) topicOpen(topic string) bool {
	return b.topics.Get(topic) != nil
}

// applyReset writes plan through the offset store, for a (audited as a
// reset, or a skip when to is httpapi.SkipTo).
func (b *Broker) applyReset(ctx context.Context, a httpapi.Actor, group, to string, plan *httpapi.ResetPlan) error {
	ps := make([]message.Position, len(plan.Changes))
	for i, c := range plan.Changes {
		ps[i] = message.Position{Topic: plan.Topic, Partition: message.Partition{BrokerID: b.config().BrokerID, Partition: int32(c.Partition)}, Offset: c.To, MsgID: -1}
	}
	if err := b.offsets.Commit(ctx, group, ps); err != nil {
		return httpapi.OffsetStoreError(err, b.offsets.Name())
	}
	action := security.AuditOffsetReset
	if to == httpapi.SkipTo {
		action = security.AuditOffsetSkip
	}
	b.auditAs(a, action, "group", group, "topic", plan.Topic, "to", to, "partitions", len(ps), "offsets", auditChanges(plan.Changes))
	return nil
}

// auditCreate audits a topic created for a.
func (b *Broker) auditCreate(a httpapi.Actor, name string) {
	tc, _ := b.topicConfig(name)
	b.auditAs(a, security.AuditTopicCreate, "topic", name, "partitions", tc.NumPartitions)
}

// auditAlter audits a topic's partitions changed for a (nothing when the
// count stayed).
func (b *Broker) auditAlter(a httpapi.Actor, name string, old, n int) {
	if n != old {
		b.auditAs(a, security.AuditTopicAlter, "topic", name, "partitions_before", old, "partitions", n)
	}
}
