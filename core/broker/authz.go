package broker

import (
	"github.com/metaq-go/metaq/conf"
	"github.com/metaq-go/metaq/core/security"
)

// The read side of authorization: what one reader may see. Requests are
// checked by security.Authorize on every door (auth.go for the protocol
// port, admin_http.go and dashboard.go for HTTP); the lists every door
// shows (topics, offsets, groups, members, lag, the summary's totals) are
// filtered here with the same function, so that a list never names what
// its reader could not ask for.

// viewer is the reader of a list: whether auth is on and who reads.
type viewer struct {
	on bool
	u  *conf.User
}

// connViewer is the viewer of a protocol connection's requests.
func (c *conn) viewer() viewer {
	cfg := c.b.config()
	if !cfg.Auth.Enabled {
		return viewer{}
	}
	return viewer{on: true, u: c.auth.current(cfg)}
}

// all says whether the viewer sees everything (auth off, or an admin):
// lists are then written as they always were.
func (v viewer) all() bool { return !v.on || (v.u != nil && v.u.Admin) }

// authorize is security.Authorize for this viewer.
func (v viewer) authorize(act security.Action, name string) error {
	return security.Authorize(v.on, v.u, act, name)
}

// topic says whether the viewer may see topic (publish or subscribe).
func (v viewer) topic(name string) bool { return v.authorize(security.Describe, name) == nil }

// groupTopic says whether the viewer may see group's positions on topic:
// the group and subscribe on the topic.
func (v viewer) groupTopic(group, topic string) bool {
	return security.GroupTopic(v.on, v.u, group, topic) == nil
}

// visibleTopics is the open topics the viewer may see, in topicList's order.
func (b *Broker) visibleTopics(v viewer) []*topic {
	ts := b.topicList()
	if v.all() {
		return ts
	}
	out := ts[:0]
	for _, t := range ts {
		if v.topic(t.name) {
			out = append(out, t)
		}
	}
	return out
}
