package httpapi

import (
	"net/http"
	"strconv"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/promhttp"
	dto "github.com/prometheus/client_model/go"

	"github.com/metaq-go/metaq/core/security"
)

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
func (s *Server) handleMetrics(w http.ResponseWriter, r *http.Request) {
	v := s.viewer(r)
	if v.All() {
		s.be.MetricsHandler().ServeHTTP(w, r)
		return
	}
	select {
	case s.scrapes <- struct{}{}:
		defer func() { <-s.scrapes }()
	default:
		WriteError(w, http.StatusServiceUnavailable, "too many scrapes at once (at most "+strconv.Itoa(metricsScrapes)+")")
		return
	}
	reg := s.be.Metrics()
	g := prometheus.GathererFunc(func() ([]*dto.MetricFamily, error) {
		mfs, err := reg.Gather()
		return filterMetrics(mfs, v), err
	})
	promhttp.HandlerFor(g, promhttp.HandlerOpts{ErrorHandling: promhttp.ContinueOnError, Timeout: 10 * time.Second}).ServeHTTP(w, r)
}

// filterMetrics keeps the series of mfs v may see (handleMetrics).
func filterMetrics(mfs []*dto.MetricFamily, v security.Viewer) []*dto.MetricFamily {
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
			case hasGroup && !v.GroupTopic(group, topic):
			case hasTopic && !v.Topic(topic):
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
