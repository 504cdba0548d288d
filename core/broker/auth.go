package broker

import (
	"errors"
	"time"

	"github.com/metaq-go/metaq/core/groups"
	"github.com/metaq-go/metaq/core/security"
	"github.com/metaq-go/metaq/sdk/protocol"
)

// Authentication and authorization on the protocol ports (server.toml
// [auth], docs/security.md): the verdicts are core/security's (Users,
// CheckPlain, CheckRequest); this file applies them to a connection and
// writes the replies.

func init() { registerErrors(securityStatus) }

// securityStatus maps core/security's refusals: 401 before authentication
// and for a failed login, 403 for a missing right.
func securityStatus(err error) (int, string, bool) {
	var d *security.Denied
	var le *security.LoginError
	var se *security.SASLError
	switch {
	case errors.Is(err, security.ErrUnauthenticated):
		return protocol.StatusUnauthorized, "authentication required: send auth PLAIN first", true
	case errors.As(err, &d):
		return protocol.StatusForbidden, err.Error(), true
	case errors.As(err, &le), errors.As(err, &se):
		return protocol.StatusUnauthorized, err.Error(), true
	}
	return 0, "", false
}

// initAuth sets up b.users when auth is on.
func (b *Broker) initAuth() error {
	if !b.config().Auth.Enabled {
		return nil
	}
	us, err := security.NewUsers(&b.config().Auth)
	if err != nil {
		return err
	}
	b.users = us
	return nil
}

// statsItems are the stats items whose rights are not a topic's
// (security.CheckRequest).
var statsItems = security.StatsItems{
	Admin:         []string{"config", "reset", "transactions", "plugins", switchoverItem},
	AdminPrefixes: []string{syncEpochItem, epochStartItem},
	Lists:         []string{"", "topics", "offsets", "partitions", "realtime", "groups", "members", "disks", "help"},
	Count:         groups.CountItem,
	CountTopic: func(arg string) (string, bool) {
		name, _, _, err := groups.ParseCountItem(arg)
		return name, err == nil
	},
}

// authorize is called before every request is dispatched. It reports
// whether the request may run; if not, it has replied 401 or 403.
func (c *conn) authorize(r *protocol.Request) bool {
	cfg := c.b.config()
	if !cfg.Auth.Enabled {
		return true
	}
	if !c.auth.CertChecked {
		c.auth.CertChecked = true
		c.authFromCert()
	}
	switch r.Op {
	case protocol.OpVersion, protocol.OpAuth, protocol.OpQuit:
		return true
	}
	if err := security.CheckRequest(c.auth.Current(cfg), r, &statsItems); err != nil {
		c.replyErr(err, r.Opaque)
		return false
	}
	return true
}

// authFromCert authenticates the connection from its verified TLS client
// certificate, if the certificate's CN names a configured user. The first
// request has been read, so the handshake is complete.
func (c *conn) authFromCert() {
	cfg := c.b.config()
	u, cn, cert, ok := security.CertUser(c.nc, &cfg.Auth)
	if !cert {
		return
	}
	if ok {
		c.auth.Login(u, cfg)
		if !c.markAuthenticated() { // connlimits.go
			c.auth.User = nil // too late: auth_timeout passed, the connection closes
			return
		}
		c.b.logf("conn %s: authenticated user %s by client certificate", c.nc.RemoteAddr(), protocol.Printable([]byte(cn)))
		return
	}
	c.b.warnf("conn %s: client certificate CN %s names no [[auth.user]]", c.nc.RemoteAddr(), protocol.Printable([]byte(cn)))
}

// handleAuth answers `auth <mechanism>`. Success replies 200 at once; a
// failure replies 401 once auth.failure_delay has passed since the request
// (the bcrypt check included, so the time does not tell whether the user
// exists). The read loop waits for that delay, so one connection cannot
// try passwords faster; closing the connection ends the wait. A failed
// auth leaves the connection unauthenticated, even if it was before. A
// login the limiter refused is answered after the same delay.
func (c *conn) handleAuth(r *protocol.Request) {
	b := c.b
	cfg := b.config()
	if !cfg.Auth.Enabled {
		c.reply(protocol.StatusOK, "", r.Opaque) // auth is off: every connection has every right
		return
	}
	start := time.Now()
	u, err := b.users.CheckPlain(&cfg.Auth, string(r.Item), r.Body, c.nc.RemoteAddr().String())
	if err == nil {
		c.auth.Login(u, cfg)
		if !c.markAuthenticated() { // connlimits.go
			// auth_timeout passed while the password was checked: the
			// sweep is closing the connection, so the login is too late.
			c.auth.User = nil
			c.reply(protocol.StatusUnauthorized, b.authTimeoutMsg(), r.Opaque)
			return
		}
		c.reply(protocol.StatusOK, "", r.Opaque)
		return
	}
	c.auth.User = nil
	if name, why, throttled := security.FailedLogin(err, r.Body); throttled {
		b.stats.authThrottled.Add(1)
	} else {
		b.stats.authFailures.Add(1)
		b.warnf("conn %s: auth failed for user %s: %s", c.nc.RemoteAddr(), name, why)
	}
	security.WaitFailureDelay(&cfg.Auth, start, c.closed, b.done)
	c.replyErr(err, r.Opaque)
}
