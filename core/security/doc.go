// Package security is the broker's security component: who a user is and
// what the user may do. It starts with authorization (authz.go): one
// function, Authorize, that every door of the broker asks before it
// serves a request or shows a resource — the TCP and TLS protocol ports
// (core/broker/auth.go), the JSON admin API (core/broker/admin_http.go),
// the dashboard (core/broker/dashboard.go) and /metrics — so that a user
// gets the same verdict, with the same words, whichever door they use.
//
// The rights themselves are the [[auth.user]] tables of server.toml
// (conf.User: publish, subscribe, groups, admin). The package owns the
// decisions about users, ACLs and TLS material: it authorizes (authz.go;
// a protocol request's rights: CheckRequest, request.go),
// checks logins (Users, users.go; SASL PLAIN: sasl.go) through the failed-login limiter
// (loginlimit.go), holds the TLS material (TLS, tls.go), admits
// unauthenticated connections (Admission, admission.go) and counts failed
// TLS handshakes (TLSFailures, tlsfail.go); it builds the TLS listener
// (TLS.Listener, HeldConn: heldconn.go), keeps a protocol connection's
// login (ConnAuth, connauth.go) and writes the audit log (Audit, audit.go); it
// enforces a protocol connection's read timeouts (DeadlineReader,
// deadline.go) and backs the accept loop off errors that pass (Acceptor,
// accept.go). The broker
// carries the conversations (SASL PLAIN on the wire, HTTP basic auth, the
// TLS handshake) and applies the verdicts. The actions:
//
//   - Publish, Subscribe and UseGroup are the ACL lists as they are.
//   - Describe is a topic's metadata (existence, partitions, offsets,
//     sizes, message counts): publish or subscribe. A producer needs a
//     topic's partitions, and its put replies tell it the offsets anyway.
//   - Admin is everything that cannot be checked per topic or group:
//     the configuration, plugins, data directories, heuristic
//     transaction outcomes, replication and failover controls.
//
// With auth off every request is allowed.
package security
