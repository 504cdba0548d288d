package broker

import (
	"crypto/tls"
	"fmt"
	"net"
	"net/http"
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
	// dash is the dashboard's state (dashsample.go).
	dash dashState
}

// httpBackend is the broker as core/httpapi sees it.
type httpBackend struct{ b *Broker }

var _ httpapi.Backend = httpBackend{}

// newHTTPServer builds the HTTP listener (not serving yet) under cfg.
func (b *Broker) newHTTPServer(cfg *conf.Config) *httpapi.Server {
	return httpapi.New(httpapi.FromConf(cfg), httpBackend{b}, httpapi.Options{
		Log:      b.log,
		ErrorLog: b.httpErrorLog(), // tlsfail.go: TLS handshake errors counted and throttled
		Routes: func(mux *http.ServeMux, user, admin func(pattern string, h http.HandlerFunc)) {
			b.adminRoutes(user, admin)     // admin_http.go
			b.dashRoutes(mux, user, admin) // dashboard.go
		},
		UIError: b.uiError,
	})
}

// listenHTTP binds http_port for Start (nil when it is 0).
func (b *Broker) listenHTTP() (net.Listener, error) {
	addr, on := b.config().HTTPAddr()
	if !on {
		return nil, nil
	}
	ln, err := net.Listen("tcp", addr)
	if err != nil {
		return nil, fmt.Errorf("listen http (http_port): %w", err)
	}
	return ln, nil
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
		tc = b.tls.listenerConfig()
	}
	if err := b.web.srv.Serve(ln, tc); err != nil {
		return err
	}
	b.wg.Add(1)
	go b.sampleLoop() // dashsample.go
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
func (h httpBackend) Logins() *security.LoginLimiter { return h.b.auth.logins }

// CheckPassword checks a basic-auth login (auth.go).
func (h httpBackend) CheckPassword(name, password, remote string) (*conf.User, time.Duration, string) {
	return h.b.checkPassword(h.b.config(), "", name, password, remote)
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
func (h httpBackend) MetricsHandler() http.Handler { return h.b.metrics.handler() }

// Metrics is the broker's registry.
func (h httpBackend) Metrics() prometheus.Gatherer { return h.b.metrics.reg }

// Readiness evaluates /readyz.
func (h httpBackend) Readiness() []httpapi.ReadyCheck { return h.b.readiness() }

// readyCheck is one condition of /readyz.
type readyCheck = httpapi.ReadyCheck

// ReplicaInSync, if set, is asked by /readyz whether this broker, as a
// slave in sync mode, is in sync with its master; it replaces the
// built-in check of a slave (replobs.go). nil: the built-in check.
type ReplicaInSync func() (ok bool, detail string)

// readiness evaluates /readyz: storage recovered, no journal failed, the
// listeners open, registered in ZooKeeper in cluster mode, and for a
// slave in sync mode, in sync with its master.
func (b *Broker) readiness() []readyCheck {
	var s []readyCheck
	s = append(s, readyCheck{Name: "storage", OK: b.recovered.Load(), Detail: "partitions opened and recovered"})
	jok, jdetail := true, ""
	for dir, j := range b.journals {
		if err := j.Err(); err != nil {
			jok, jdetail = false, "journal of "+dir+" failed: "+err.Error()
			break
		}
	}
	s = append(s, readyCheck{Name: "journal", OK: jok, Detail: jdetail})
	s = append(s, readyCheck{Name: "serving", OK: b.serving.Load() && !b.closed.Load(), Detail: "client listeners open"})
	if b.config().ZooKeeper.Enabled() {
		reg := b.Registered()
		// zookeeper.connect is secret (it may carry credentials, and
		// /readyz needs no user): the root names the cluster.
		d := "registered in ZooKeeper (root " + b.config().ZooKeeper.Root + ")"
		if !reg {
			d = "not registered in ZooKeeper (root " + b.config().ZooKeeper.Root + "; unreachable, or the session is being re-established)"
		}
		s = append(s, readyCheck{Name: "zookeeper", OK: reg, Detail: d})
	}
	if c, ok := b.replicaCheck(); ok { // replobs.go
		s = append(s, c)
	}
	return s
}

// Helpers of the HTTP handlers still in this package (admin_http.go,
// dashboard.go) until they move to core/httpapi.
var (
	writeJSON   = httpapi.WriteJSON
	writeError  = httpapi.WriteError
	decodeBody  = httpapi.DecodeBody
	capMsg      = httpapi.CapMsg
	crossSite   = httpapi.CrossSite
	shownName   = httpapi.ShownName
	requestUser = httpapi.User
)

// quoteName quotes a client's name for an error reply or a log line: at
// most 64 bytes of it, escaped (protocol.Printable).
func quoteName(s string) string { return protocol.Printable([]byte(s)) }
