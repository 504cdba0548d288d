package httpapi

import "net/http"

// dataRoutes adds the data plane's routes (docs/http.md, "Data plane"):
// MetaQ's jettyBroker endpoints (metaqhttp.go) and the JSON records API
// (records.go, events.go). Any user may call them; the broker checks the
// rights of each request as on the wire.
func (s *Server) dataRoutes(mux *http.ServeMux) {
	data := func(pattern string, h http.HandlerFunc) { mux.Handle(pattern, s.needDataUser(h)) }
	data("/put", s.handleMetaQPut)
	data("/get", s.handleMetaQGet)
	data("/offset", s.handleMetaQOffset)
	data("POST /api/v1/data/topics/{topic}/records", s.handleProduce)
	data("POST /api/v1/data/topics/{topic}/partitions/{partition}/records", s.handleProduce)
	data("GET /api/v1/data/topics/{topic}/partitions/{partition}/records", s.handleRead)
	data("GET /api/v1/data/topics/{topic}/partitions/{partition}/events", s.handleEvents)
}
