package broker

import "net/http"

// adminRoutes adds the JSON admin API (docs/http.md) to the mux: user
// routes need an authenticated user, admin routes an admin (with [auth]).
func (b *Broker) adminRoutes(user, admin func(pattern string, h http.HandlerFunc)) {
}
