package broker

import (
	"github.com/metaq-go/metaq/core/partition"
	"github.com/metaq-go/metaq/core/security"
)

// The read side of authorization: what one reader may see. Requests are
// checked by security.Authorize on every door (auth.go for the protocol
// port, admin_http.go and dashboard.go for HTTP); the lists every door
// shows (topics, offsets, groups, members, lag, the summary's totals) are
// filtered with security.Viewer, so that a list never names what
// its reader could not ask for.

// viewer is the reader of a list: whether auth is on and who reads.
type viewer = security.Viewer

// viewer is the reader of a protocol connection's requests.
func (c *conn) viewer() viewer {
	cfg := c.b.config()
	if !cfg.Auth.Enabled {
		return viewer{}
	}
	return viewer{On: true, User: c.auth.Current(cfg)}
}

// visibleTopics is the open topics the viewer may see, in topicList's order.
func (b *Broker) visibleTopics(v viewer) []*partition.Topic {
	ts := b.topicList()
	if v.All() {
		return ts
	}
	out := ts[:0]
	for _, t := range ts {
		if v.Topic(t.Name()) {
			out = append(out, t)
		}
	}
	return out
}
