package broker

import (
	"testing"

	"github.com/metaq-go/metaq/conf"
	"github.com/stretchr/testify/require"
)

// TestDLQMetrics: /metrics shows a group's dead-letter depth (messages
// stored in <group>.dlq) and its retries (messages put to <group>.retry).
func TestDLQMetrics(t *testing.T) {
	t.Parallel()
	b := startBroker(t, 0, func(c *conf.Config) {
		c.Topics = append(c.Topics, conf.Topic{Name: "billing.retry"}, conf.Topic{Name: "billing.dlq"})
	})
	c := dialAuth(t, b.Addr(), nil)
	for _, topic := range []string{"billing.dlq", "billing.dlq", "billing.retry"} {
		code, body := c.put(topic)
		require.Equal(t, 200, code, body)
	}
	scrape := scrapeOf(t, b)
	require.Equal(t, 2.0, metricValue(t, scrape, `metaq_dlq_messages{group="billing"}`))
	require.Equal(t, 1.0, metricValue(t, scrape, `metaq_retry_messages_in_total{group="billing"}`))
	require.NotContains(t, string(scrape), `metaq_dlq_messages{group="t"}`)
}
