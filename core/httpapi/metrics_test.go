package httpapi

import (
	"testing"

	dto "github.com/prometheus/client_model/go"
	"github.com/stretchr/testify/require"
	"google.golang.org/protobuf/proto"

	"github.com/metaq-go/metaq/conf"
	"github.com/metaq-go/metaq/core/security"
)

// TestFilterMetrics: /metrics for a user keeps the series of their topics
// and groups and the broker's own; a family left empty is dropped.
func TestFilterMetrics(t *testing.T) {
	g := func(v float64) *dto.Gauge { return &dto.Gauge{Value: proto.Float64(v)} }
	mfs := func() []*dto.MetricFamily {
		return []*dto.MetricFamily{
			{Name: proto.String("metaq_connections"), Type: dto.MetricType_GAUGE.Enum(), Metric: []*dto.Metric{{Gauge: g(3)}}},
			{Name: proto.String("metaq_topic_messages"), Type: dto.MetricType_GAUGE.Enum(), Metric: []*dto.Metric{
				{Label: []*dto.LabelPair{label("topic", "orders")}, Gauge: g(1)},
				{Label: []*dto.LabelPair{label("topic", "secret")}, Gauge: g(2)},
			}},
			{Name: proto.String("metaq_consumer_group_lag_bytes"), Type: dto.MetricType_GAUGE.Enum(), Metric: []*dto.Metric{
				{Label: []*dto.LabelPair{label("group", "billing-1"), label("topic", "orders")}, Gauge: g(1)},
				{Label: []*dto.LabelPair{label("group", "billing-1"), label("topic", "secret")}, Gauge: g(1)},
				{Label: []*dto.LabelPair{label("group", "other"), label("topic", "orders")}, Gauge: g(1)},
			}},
			{Name: proto.String("metaq_only_secret"), Type: dto.MetricType_GAUGE.Enum(), Metric: []*dto.Metric{
				{Label: []*dto.LabelPair{label("topic", "secret")}, Gauge: g(1)},
			}},
		}
	}
	show := func(mfs []*dto.MetricFamily) []string {
		var out []string
		for _, mf := range mfs {
			for _, m := range mf.Metric {
				s := mf.GetName()
				for _, l := range m.Label {
					s += " " + l.GetName() + "=" + l.GetValue()
				}
				out = append(out, s)
			}
		}
		return out
	}
	alice := &conf.User{Name: "alice", Publish: []string{"orders*"}, Subscribe: []string{"orders*"}, Groups: []string{"billing-*"}}
	require.Equal(t, []string{
		"metaq_connections",
		"metaq_topic_messages topic=orders",
		"metaq_consumer_group_lag_bytes group=billing-1 topic=orders",
	}, show(filterMetrics(mfs(), security.Viewer{On: true, User: alice})))
	nosub := &conf.User{Name: "nosub", Publish: []string{"orders*"}, Groups: []string{"billing-*"}}
	require.Equal(t, []string{"metaq_connections", "metaq_topic_messages topic=orders"},
		show(filterMetrics(mfs(), security.Viewer{On: true, User: nosub})))
	require.Len(t, show(filterMetrics(mfs(), security.Viewer{})), 7, "auth off: everything")
	require.Len(t, show(filterMetrics(mfs(), security.Viewer{On: true, User: &conf.User{Name: "root", Admin: true}})), 7)
}

func label(name, value string) *dto.LabelPair {
	return &dto.LabelPair{Name: proto.String(name), Value: proto.String(value)}
}
