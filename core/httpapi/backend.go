package httpapi

import (
	"net/http"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/metaq-go/metaq/conf"
	"github.com/metaq-go/metaq/core/security"
)

// Backend is what the HTTP side needs of the broker. core/broker
// implements it in httpbackend.go; handlers see nothing else of it.
type Backend interface {
	// Version is the broker's version.
	Version() string

	// Logins is the failed-login limiter the wire protocol uses too.
	Logins() *security.LoginLimiter
	// CheckPassword checks a basic-auth login from remote ("ip:port")
	// through the login limiter: the user, or retry > 0 when the limiter
	// refused it unchecked, or why for the log.
	CheckPassword(name, password, remote string) (u *conf.User, retry time.Duration, why string)
	// AuthFailed counts a failed HTTP login (throttled: refused by the
	// limiter without a password check).
	AuthFailed(throttled bool)

	// Readiness evaluates /readyz's checks.
	Readiness() []ReadyCheck

	// MetricsHandler serves every series (an admin's scrape).
	MetricsHandler() http.Handler
	// Metrics gathers every series, for the filtered scrapes.
	Metrics() prometheus.Gatherer
}
