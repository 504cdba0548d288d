package httpapi

import (
	"net/http"
	"time"

	"github.com/prometheus/client_golang/prometheus"
)

// dataRoutes adds the data plane's routes (docs/http.md, "Data plane"):
// MetaQ's jettyBroker endpoints (metaqhttp.go) and the JSON records API
// (records.go, events.go). Any user may call them; the broker checks the
// rights of each request as on the wire. Each is counted under its
// endpoint label (dataMetrics).
func (s *Server) dataRoutes(mux *http.ServeMux) {
	for _, rt := range dataRouteTable {
		mux.Handle(rt.pattern, s.data.wrap(rt.endpoint, s.needDataUser(rt.handler(s)).ServeHTTP))
	}
}

// dataRoute is one route of the data plane.
type dataRoute struct {
	pattern, endpoint string
	handler           func(*Server) http.HandlerFunc
}

// dataRouteTable is the data plane's routes (docs/openapi.json lists
// them: TestOpenAPIRoutes).
var dataRouteTable = []dataRoute{
	// MetaQ's jettyBroker endpoints (metaqhttp.go): any method.
	{"/put", "put", func(s *Server) http.HandlerFunc { return s.handleMetaQPut }},
	{"/get", "get", func(s *Server) http.HandlerFunc { return s.handleMetaQGet }},
	{"/offset", "offset", func(s *Server) http.HandlerFunc { return s.handleMetaQOffset }},
	// Records (records.go, events.go).
	{"POST /api/v1/data/topics/{topic}/records", "produce", func(s *Server) http.HandlerFunc { return s.handleProduce }},
	{"POST /api/v1/data/topics/{topic}/partitions/{partition}/records", "produce", func(s *Server) http.HandlerFunc { return s.handleProduce }},
	{"GET /api/v1/data/topics/{topic}/partitions/{partition}/records", "read", func(s *Server) http.HandlerFunc { return s.handleRead }},
	{"GET /api/v1/data/topics/{topic}/partitions/{partition}/events", "events", func(s *Server) http.HandlerFunc { return s.handleEvents }},
	// Consumer instances (consumers.go).
	{"POST /api/v1/data/consumers/{group}", "consumer", func(s *Server) http.HandlerFunc { return s.handleCreateConsumer }},
	{"DELETE /api/v1/data/consumers/{group}/instances/{instance}", "consumer", func(s *Server) http.HandlerFunc { return s.handleDeleteConsumer }},
	{"POST /api/v1/data/consumers/{group}/instances/{instance}/subscription", "consumer", func(s *Server) http.HandlerFunc { return s.handleSubscribe }},
	{"GET /api/v1/data/consumers/{group}/instances/{instance}/assignments", "consumer", func(s *Server) http.HandlerFunc { return s.handleAssignments }},
	{"GET /api/v1/data/consumers/{group}/instances/{instance}/records", "consumer_records", func(s *Server) http.HandlerFunc { return s.handleConsumerRecords }},
	{"POST /api/v1/data/consumers/{group}/instances/{instance}/offsets", "commit", func(s *Server) http.HandlerFunc { return s.handleCommit }},
}

// dataEndpoints are the endpoint labels of the data plane's series.
var dataEndpoints = []string{"put", "get", "offset", "produce", "read", "events", "consumer", "consumer_records", "commit"}

// dataMetrics are the data plane's series, by endpoint: requests, those
// answered with an error status (4xx, 5xx; 401 included, counted before
// authentication), and their durations (an event stream's is its whole
// life).
type dataMetrics struct {
	requests, errors *prometheus.CounterVec
	duration         *prometheus.HistogramVec
}

func newDataMetrics() *dataMetrics {
	m := &dataMetrics{
		requests: prometheus.NewCounterVec(prometheus.CounterOpts{Name: "metaq_http_data_requests_total",
			Help: "HTTP data plane requests answered, by endpoint (docs/http.md, Data plane)."}, []string{"endpoint"}),
		errors: prometheus.NewCounterVec(prometheus.CounterOpts{Name: "metaq_http_data_errors_total",
			Help: "HTTP data plane requests answered with a 4xx or 5xx status, by endpoint."}, []string{"endpoint"}),
		duration: prometheus.NewHistogramVec(prometheus.HistogramOpts{Name: "metaq_http_data_request_duration_seconds",
			Help:    "Time to answer an HTTP data plane request, by endpoint (an event stream: its whole life).",
			Buckets: []float64{.0005, .001, .0025, .005, .01, .025, .05, .1, .25, .5, 1, 2.5, 5, 10, 30, 60}}, []string{"endpoint"}),
	}
	for _, e := range dataEndpoints { // every series from the start
		m.requests.WithLabelValues(e)
		m.errors.WithLabelValues(e)
		m.duration.WithLabelValues(e)
	}
	return m
}

// collect adds the series to a scrape.
func (m *dataMetrics) collect(ch chan<- prometheus.Metric) {
	m.requests.Collect(ch)
	m.errors.Collect(ch)
	m.duration.Collect(ch)
}

// wrap counts h's requests under endpoint.
func (m *dataMetrics) wrap(endpoint string, h http.HandlerFunc) http.HandlerFunc {
	reqs, errs, dur := m.requests.WithLabelValues(endpoint), m.errors.WithLabelValues(endpoint), m.duration.WithLabelValues(endpoint)
	return func(w http.ResponseWriter, r *http.Request) {
		start := time.Now()
		sw := &statusWriter{ResponseWriter: w, code: http.StatusOK}
		defer func() {
			reqs.Inc()
			if sw.code >= 400 {
				errs.Inc()
			}
			dur.Observe(time.Since(start).Seconds())
		}()
		h(sw, r)
	}
}

// statusWriter keeps the status a handler wrote.
type statusWriter struct {
	http.ResponseWriter
	code  int
	wrote bool
}

func (w *statusWriter) WriteHeader(code int) {
	if !w.wrote {
		w.wrote, w.code = true, code
	}
	w.ResponseWriter.WriteHeader(code)
}

func (w *statusWriter) Write(p []byte) (int, error) {
	w.wrote = true
	return w.ResponseWriter.Write(p)
}

// Unwrap gives http.ResponseController the server's writer.
func (w *statusWriter) Unwrap() http.ResponseWriter { return w.ResponseWriter }
