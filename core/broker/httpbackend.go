package broker

import (
	"context"
	"crypto/tls"
	"net"
	"net/http"
	"os"
	"runtime"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/metaq-go/metaq/conf"
	"github.com/metaq-go/metaq/core/httpapi"
	"github.com/metaq-go/metaq/core/security"
	"github.com/metaq-go/metaq/sdk/protocol"
)

// The broker's side of the HTTP listener (core/httpapi): httpBackend
// implements httpapi.Backend over the broker's state. The handlers, the
// guard, the connection limits and basic auth live in core/httpapi.

// webState is the broker's HTTP side.
type webState struct {
	srv *httpapi.Server
}

// httpBackend is the broker as core/httpapi sees it.
type httpBackend struct{ b *Broker }

var _ httpapi.Backend = httpBackend{}

// newHTTPServer builds the HTTP listener (not serving yet) under cfg.
func (b *Broker) newHTTPServer(cfg *conf.Config) *httpapi.Server {
	return httpapi.New(httpapi.FromConf(cfg), httpBackend{b}, httpapi.Options{
		Log:      b.log,
		ErrorLog: b.httpErrorLog(), // tlsfail.go: TLS handshake errors counted and throttled
	})
}

// ServeHTTP serves the HTTP API (docs/http.md) on ln in the background:
// HTTPS with the broker's certificate when [tls] is configured. Start
// calls it with http_port's listener; tests may pass their own. Close
// shuts it down.
func (b *Broker) ServeHTTP(ln net.Listener) error {
	if b.closed.Load() {
		return errBrokerClosed
	}
	var tc *tls.Config
	if b.tls != nil {
		tc = b.tls.ListenerConfig()
	}
	if err := b.web.srv.Serve(ln, tc); err != nil {
		return err
	}
	return nil
}

// HTTPAddr returns the HTTP listening address, or "" when it is off.
func (b *Broker) HTTPAddr() string { return b.web.srv.Addr() }

// closeHTTP stops the HTTP server: no new requests, those in flight get
// a few seconds to finish.
func (b *Broker) closeHTTP() { b.web.srv.Close() }

// Version is the broker's version.
func (h httpBackend) Version() string { return Version }

// Logins is the failed-login limiter.
func (h httpBackend) Logins() *security.LoginLimiter { return h.b.users.Logins() }

// CheckPassword checks a basic-auth login (security.Users.CheckPassword).
func (h httpBackend) CheckPassword(name, password, remote string) (*conf.User, time.Duration, string) {
	return h.b.users.CheckPassword(&h.b.config().Auth, name, password, remote)
}

// AuthFailed counts a failed HTTP login.
func (h httpBackend) AuthFailed(throttled bool) {
	if throttled {
		h.b.stats.authThrottled.Add(1)
	} else {
		h.b.stats.authFailures.Add(1)
	}
}

// MetricsHandler serves every series.
func (h httpBackend) MetricsHandler() http.Handler { return h.b.metrics.Handler() }

// Metrics is the broker's registry.
func (h httpBackend) Metrics() prometheus.Gatherer { return h.b.metrics.Registry }

// Readiness evaluates /readyz.
func (h httpBackend) Readiness() []httpapi.ReadyCheck { return h.b.readiness() }

// readyCheck is one condition of /readyz.
type readyCheck = httpapi.ReadyCheck

// ReplicaInSync, if set, is asked by /readyz whether this broker, as a
// slave in sync mode, is in sync with its master; it replaces the
// built-in check of a slave (replobs.go). nil: the built-in check.
type ReplicaInSync func() (ok bool, detail string)

// readiness evaluates /readyz (core/httpapi repl.go).
func (b *Broker) readiness() []readyCheck {
	st := httpapi.ReadyState{Recovered: b.recovered.Load(), Serving: b.serving.Load() && !b.closed.Load(),
		ZooKeeper: b.config().ZooKeeper.Enabled(), Registered: b.Registered(), ZKRoot: b.config().ZooKeeper.Root,
		Replica: httpapi.ReplicaCheck(b.opts.ReplicaInSync, b.replRole(), b.slave, b.config())}
	st.SetJournals(b.journals)
	return st.Checks()
}

// Topics lists the topics v may see.
func (h httpBackend) Topics(v security.Viewer) []httpapi.TopicInfo {
	var out []httpapi.TopicInfo
	for _, t := range h.b.visibleTopics(v) {
		out = append(out, h.b.topicJSON(t, false))
	}
	return out
}

// noTopic is the HTTP refusal of a topic not open here.
func noTopic(name string) error {
	return &httpapi.RequestError{Status: http.StatusNotFound, Msg: "no such topic: " + quoteName(name)}
}

// Topic describes topic name with its partitions.
func (h httpBackend) Topic(name string) (httpapi.TopicInfo, error) {
	b := h.b
	t := b.topics.Get(name)
	if t == nil {
		return httpapi.TopicInfo{}, noTopic(name)
	}
	b.countOut() // messages_out (msgsout.go)
	return b.topicJSON(t, true), nil
}

// topicRefusal is a topic change's error with its HTTP status.
func topicRefusal(err error) error { return httpapi.TopicRefusal(err, errBrokerClosed) }

// CreateTopic creates t for a.
func (h httpBackend) CreateTopic(a httpapi.Actor, t conf.Topic) error {
	if err := h.b.CreateTopic(t); err != nil {
		return topicRefusal(err)
	}
	h.b.auditCreate(a, t.Name)
	return nil
}

// DeleteTopic deletes topic name for a.
func (h httpBackend) DeleteTopic(a httpapi.Actor, name string, deleteData bool) error {
	if err := h.b.DeleteTopic(name, deleteData); err != nil {
		return topicRefusal(err)
	}
	h.b.auditAs(a, security.AuditTopicDelete, "topic", name, "delete_data", deleteData)
	return nil
}

// AddPartitions gives topic name n partitions for a.
func (h httpBackend) AddPartitions(a httpapi.Actor, name string, n int) (int, error) {
	old, err := h.b.AddPartitions(name, n)
	if err != nil {
		return 0, topicRefusal(err)
	}
	h.b.auditAlter(a, name, old, n)
	return old, nil
}

// Groups lists the groups v may see (core/groups admin.go): the group's
// right and subscribe on the topic (authz.go).
func (h httpBackend) Groups(v security.Viewer) []*httpapi.GroupEntry {
	return httpapi.GroupEntries(h.b.groupAdmin().List(v.GroupTopic))
}

// GroupTopics are the topics known for group.
func (h httpBackend) GroupTopics(group string) []string { return h.b.groupAdmin().Topics(group) }

// DescribeGroup describes group on topics.
func (h httpBackend) DescribeGroup(ctx context.Context, group string, topics []string) ([]httpapi.GroupTopic, error) {
	ts, err := h.b.groupAdmin().Describe(ctx, group, topics)
	if err != nil {
		return nil, httpapi.GroupRefusal(err, h.b.offsets.Name())
	}
	return httpapi.GroupTopics(ts), nil
}

// PlanReset plans a reset of group's offsets.
func (h httpBackend) PlanReset(ctx context.Context, group string, req httpapi.ResetRequest) (*httpapi.ResetPlan, error) {
	cs, err := h.b.groupAdmin().PlanReset(ctx, group, req.Topic, req.Partition, req.To, req.Offset)
	if err != nil {
		return nil, httpapi.GroupRefusal(err, h.b.offsets.Name())
	}
	return httpapi.ResetPlanOf(req.Topic, cs), nil
}

// ApplyReset writes plan for a.
func (h httpBackend) ApplyReset(ctx context.Context, a httpapi.Actor, group, to string, plan *httpapi.ResetPlan) error {
	return h.b.applyReset(ctx, a, group, to, plan)
}

// Summary is the broker's counters as v sees them.
func (h httpBackend) Summary(v security.Viewer) httpapi.Summary {
	b := h.b
	st := b.counters()
	s := st.Summary()
	topics := b.visibleTopics(v)
	for _, t := range topics {
		for _, l := range t.Parts {
			s.TotalMessages += l.MessageCount()
		}
	}
	s.PID, s.UptimeSeconds, s.Goroutines = os.Getpid(), int64(time.Since(b.start)/time.Second), runtime.NumGoroutine()
	s.UnauthEvicted, s.AuthTimeouts = b.unauth.Evictions(), b.unauth.Timeouts()
	s.DiskUsedRatio, s.Topics, s.ConfigChecksum = b.disks.MaxUsed(), len(topics), b.configChecksum()
	return s
}

// Cluster is the broker's place in its cluster.
func (h httpBackend) Cluster() httpapi.ClusterInfo {
	b := h.b
	c := httpapi.ClusterInfoOf(b.config(), b.HTTPAddr(), b.Registered(), b.serving.Load())
	if c.Serving { // ln and tlsLn are set
		addr, tlsAddr := b.Addr(), b.TLSAddr()
		c.Addr, c.TLSAddr = &addr, &tlsAddr
	}
	return c
}

// Plugins lists the plugin processes.
func (h httpBackend) Plugins() []httpapi.PluginInfo {
	if h.b.plugins == nil {
		return nil
	}
	return httpapi.PluginInfos(h.b.plugins.List())
}

// DelayedPage is the dashboard's delayed page (core/httpapi dlq.go): the
// pending delayed messages by due-time bucket, from each timer loop,
// bounded by the request's context.
func (h httpBackend) DelayedPage(ctx context.Context) httpapi.DelayedPage {
	return httpapi.BuildDelayedPage(ctx, h.b.delay, time.Now())
}

// CountMessages counts partition p of topic from offset from to its end.
func (h httpBackend) CountMessages(topic string, p int, from int64) (int64, bool) {
	b := h.b
	t := b.topics.Get(topic)
	if t == nil || p < 0 || p >= len(t.Parts) {
		return 0, false
	}
	l := t.Parts[p]
	n, exact, err := l.CountRecords(from, l.MaxOffset())
	return n, exact && err == nil
}

// shownName is a client's name as an error reply or a log line shows it.
var shownName = httpapi.ShownName

// quoteName quotes a client's name for an error reply or a log line: at
// most 64 bytes of it, escaped (protocol.Printable).
func quoteName(s string) string { return protocol.Printable([]byte(s)) }
