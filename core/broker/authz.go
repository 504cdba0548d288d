package broker

import (
	"net/http"
	"strconv"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/promhttp"
	dto "github.com/prometheus/client_model/go"

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

// httpViewer is the viewer of an HTTP request (its user is set by
// needUser).
func (b *Broker) httpViewer(r *http.Request) viewer {
	return viewer{on: b.config().Auth.Enabled, u: requestUser(r)}
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

// metricsScrapes bounds the filtered scrapes served at once, as
// HandlerOpts.MaxRequestsInFlight bounds the unfiltered ones.
const metricsScrapes = 4

// handleMetrics serves /metrics: everything to an admin (and with auth
// off); to another user, the series labelled with a topic only for topics
// they may see (publish or subscribe), and those labelled with a group
// only for the groups and topics whose positions they may see (the group
// and subscribe). Series without a topic or group (requests, connections,
// journals, disks, plugins) are the broker's health and are shown to
// every user, so that a monitoring user need not be an admin.
func (b *Broker) handleMetrics(w http.ResponseWriter, r *http.Request) {
	v := b.httpViewer(r)
	if v.all() {
		b.metrics.handler().ServeHTTP(w, r)
		return
	}
	select {
	case b.metrics.scrapes <- struct{}{}:
		defer func() { <-b.metrics.scrapes }()
	default:
		writeError(w, http.StatusServiceUnavailable, "too many scrapes at once (at most "+strconv.Itoa(metricsScrapes)+")")
		return
	}
	g := prometheus.GathererFunc(func() ([]*dto.MetricFamily, error) {
		mfs, err := b.metrics.reg.Gather()
		return filterMetrics(mfs, v), err
	})
	promhttp.HandlerFor(g, promhttp.HandlerOpts{ErrorHandling: promhttp.ContinueOnError, Timeout: 10 * time.Second}).ServeHTTP(w, r)
}

// filterMetrics keeps the series of mfs v may see (handleMetrics).
func filterMetrics(mfs []*dto.MetricFamily, v viewer) []*dto.MetricFamily {
	out := mfs[:0]
	for _, mf := range mfs {
		ms := mf.Metric[:0]
		for _, m := range mf.Metric {
			var topic, group string
			var hasTopic, hasGroup bool
			for _, l := range m.Label {
				switch l.GetName() {
				case "topic":
					topic, hasTopic = l.GetValue(), true
				case "group":
					group, hasGroup = l.GetValue(), true
				}
			}
			switch {
			case hasGroup && !v.groupTopic(group, topic):
			case hasTopic && !v.topic(topic):
			default:
				ms = append(ms, m)
			}
		}
		if len(ms) > 0 {
			mf.Metric = ms
			out = append(out, mf)
		}
	}
	return out
}
