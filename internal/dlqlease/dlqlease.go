// Package dlqlease holds what every replay of a group's dead letters
// agrees on (docs/retry.md, "One replay at a time"): sdk/admin's (the
// CLI's) and core/httpapi's (the dashboard's and the admin API's). A
// replay joins the group <G>.dlq-replay as Member on every broker holding
// a partition of <G>.dlq and heartbeats every Heartbeat; the broker
// refuses the same member on another connection, so one replay runs at a
// time. Both sides must use the same Member for that to hold.
package dlqlease

import "time"

const (
	// Member is the consumer id every replay joins as.
	Member = "metaq-dlq-replay"
	// Heartbeat is how often a lease holder heartbeats: a third of the
	// group session's timeout.
	Heartbeat = time.Second
	// Running is the refusal's words when another replay holds the lease.
	Running = "another replay of the dead letters is running"
)
