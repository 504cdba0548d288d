package broker

import (
	"crypto/tls"
	"errors"
	"strconv"
	"strings"
	"time"

	"github.com/metaq-go/metaq/conf"
	"github.com/metaq-go/metaq/core/security"
	"github.com/metaq-go/metaq/sdk/protocol"
)

// Authentication and authorization (server.toml [auth], docs/security.md).
//
// With auth on, a connection starts unauthenticated: it may send version,
// auth and quit, everything else is answered 401. `auth PLAIN` (RFC 4616)
// checks the password against the user's bcrypt hash; a TLS client
// certificate verified against [tls] client_ca_file whose Subject CN names
// a configured user authenticates the connection before its first request.
// Once authenticated, each request is checked against the user's rights
// (conf.User: publish, subscribe, groups, admin) and refused with 403.

// mechPlain is the one SASL mechanism the broker supports.
const mechPlain = "PLAIN"

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

// connAuth is a connection's authentication state (conn.auth).
type connAuth struct {
	// user is the authenticated user, nil before authentication.
	user *conf.User
	// certChecked is set once the TLS client certificate was looked at.
	certChecked bool
	// from is the configuration user was taken from: after a Reload the
	// user is looked up again by name, so changed rights apply at once.
	from *conf.Config
}

// current returns the connection's user under cfg: the same user after a
// Reload, with its new rights, or nil if it was removed.
func (a *connAuth) current(cfg *conf.Config) *conf.User {
	if a.user == nil || a.from == cfg {
		return a.user
	}
	u, _ := cfg.Auth.UserByName(a.user.Name)
	a.user, a.from = u, cfg
	return u
}

// authorize is called before every request is dispatched. It reports
// whether the request may run; if not, it has replied 401 or 403. The
// verdict is security.Authorize's, as on every other door (HTTP API,
// dashboard): requestChecks lists what the request needs.
func (c *conn) authorize(r *protocol.Request) bool {
	cfg := c.b.config()
	a := &cfg.Auth
	if !a.Enabled {
		return true
	}
	if !c.auth.certChecked {
		c.auth.certChecked = true
		c.authFromCert()
	}
	switch r.Op {
	case protocol.OpVersion, protocol.OpAuth, protocol.OpQuit:
		return true
	}
	u := c.auth.current(cfg)
	if u == nil {
		c.reply(protocol.StatusUnauthorized, "authentication required: send auth PLAIN first", r.Opaque)
		return false
	}
	for _, ck := range requestChecks(r) {
		if err := security.Authorize(true, u, ck.act, ck.name); err != nil {
			var d *security.Denied
			if errors.As(err, &d) {
				d.Note = ck.note
			}
			c.reply(protocol.StatusForbidden, err.Error(), r.Opaque)
			return false
		}
	}
	return true
}

// check is one right a request needs: act on name (for security.Admin,
// name is the operation and note is added to the denial).
type check struct {
	act  security.Action
	name string
	note string
}

// requestChecks lists the rights r needs, in the order they are checked
// (the first missing one is the denial). Requests not listed need only an
// authenticated user; stats items are statsChecks'.
func requestChecks(r *protocol.Request) []check {
	switch r.Op {
	case protocol.OpPut, protocol.OpMPut:
		return []check{{act: security.Publish, name: string(r.Topic)}}
	case protocol.OpGet, protocol.OpOffset:
		return []check{{act: security.Subscribe, name: string(r.Topic)}}
	case protocol.OpCommit, protocol.OpFetch:
		cks := []check{{act: security.UseGroup, name: string(r.Group)}}
		// A body that does not parse is answered 400 by the handler.
		lines, _ := protocol.ParseOffsetLines(r.Body, r.Op == protocol.OpCommit)
		for _, l := range lines {
			cks = append(cks, check{act: security.Subscribe, name: l.Topic})
		}
		return cks
	case protocol.OpJoin, protocol.OpHeartbeat, protocol.OpLeave:
		return []check{{act: security.UseGroup, name: string(r.Group)}, {act: security.Subscribe, name: string(r.Topic)}}
	case protocol.OpTransaction:
		if r.TxType == protocol.TxHeuristicCommit || r.TxType == protocol.TxHeuristicRollback {
			return []check{{act: security.Admin, name: "complete transactions heuristically"}}
		}
	case protocol.OpSync:
		return []check{{act: security.Admin, name: "ship syncs", note: ": a sync master's replication_user"}}
	case protocol.OpStats:
		return statsChecks(string(r.Item))
	}
	return nil
}

// statsChecks lists the rights a stats item needs. Items that show the
// configuration, change state, list other users' transactions or drive
// replication are admin only; `stats <topic>` needs the topic described
// (publish or subscribe) and `stats count:` subscribe (it counts from a
// consumer's position). The lists (topics, offsets, partitions, groups,
// members, realtime, the summary) are filtered to the user's rights by
// their writers (stats.go); help is open.
func statsChecks(item string) []check {
	if adminStats(item) {
		return []check{{act: security.Admin, name: "run stats " + statsItemText(item)}}
	}
	if arg, ok := strings.CutPrefix(item, countItem); ok {
		if name, _, _, err := parseCountItem(arg); err == nil { // malformed: 400 from the handler
			return []check{{act: security.Subscribe, name: name}}
		}
		return nil
	}
	if !listStats(item) {
		return []check{{act: security.Describe, name: item}}
	}
	return nil
}

// statsItemText is item for a denial: fixed items as they are, others
// (prefixed items carrying client bytes) quoted and cut.
func statsItemText(item string) string {
	if len(item) <= 64 && protocol.Printable([]byte(item)) == strconv.Quote(item) {
		return item
	}
	return protocol.Printable([]byte(item))
}

// adminStats reports whether a stats item needs admin: it reveals the
// configuration (config; plugins: their processes and errors), changes
// state, lists other users' transactions or belongs to replication and
// failover (bound to a sync master's replication_user, which is an
// admin). `stats disks` is the broker's health, as /metrics shows it to
// every user.
func adminStats(item string) bool {
	switch item {
	case "config", "reset", "transactions", "plugins", switchoverItem:
		return true
	}
	// Binding a sync link to an epoch (failover.go) is a sync master's,
	// asking for epoch starts (rejoin.go) a rejoining member's.
	return strings.HasPrefix(item, syncEpochItem) || strings.HasPrefix(item, epochStartItem)
}

// listStats reports whether item is one of the stats items that are not
// a topic name: the summary and the lists, filtered per user.
func listStats(item string) bool {
	switch item {
	case "", "topics", "offsets", "partitions", "realtime", "groups", "members", "disks", "help":
		return true
	}
	return false
}

// authFromCert authenticates the connection from its verified TLS client
// certificate, if the certificate's CN names a configured user. The first
// request has been read, so the handshake is complete.
func (c *conn) authFromCert() {
	tc, ok := c.nc.(*tls.Conn)
	if !ok {
		return
	}
	st := tc.ConnectionState()
	if len(st.VerifiedChains) == 0 || len(st.PeerCertificates) == 0 {
		return
	}
	cn := st.PeerCertificates[0].Subject.CommonName
	cfg := c.b.config()
	if u, ok := cfg.Auth.UserByName(cn); ok {
		c.auth.user, c.auth.from = u, cfg
		c.markAuthenticated() // connlimits.go
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
// auth leaves the connection unauthenticated, even if it was before.
//
// Across connections, the login limiter (b.users.Logins()) counts failures
// per user, per source address and per user from a source; a locked
// attempt is refused without a password check, after the same delay, with
// the failure's text and "too many failed logins, retry after Ns".
func (c *conn) handleAuth(r *protocol.Request) {
	b := c.b
	if !b.config().Auth.Enabled {
		c.reply(protocol.StatusOK, "", r.Opaque) // auth is off: every connection has every right
		return
	}
	start := time.Now()
	user, reason, why, throttled := c.checkPlain(r)
	if reason == "" {
		c.auth.user = user
		c.markAuthenticated() // connlimits.go
		c.reply(protocol.StatusOK, "", r.Opaque)
		return
	}
	c.auth.user = nil
	if throttled {
		// Not logged one by one: the lock was logged when it was set.
		b.stats.authThrottled.Add(1)
	} else {
		b.stats.authFailures.Add(1)
		name := "(none)"
		if _, u, _, ok := protocol.ParseSASLPlain(r.Body); ok {
			name = protocol.Printable([]byte(u))
		}
		b.warnf("conn %s: auth failed for user %s: %s", c.nc.RemoteAddr(), name, why)
	}
	delay := time.Until(start.Add(time.Duration(b.config().Auth.FailureDelay) * time.Millisecond))
	if delay > 0 {
		t := time.NewTimer(delay)
		select {
		case <-t.C:
		case <-c.closed:
		case <-b.done:
		}
		t.Stop()
	}
	c.reply(protocol.StatusUnauthorized, reason, r.Opaque)
}

// checkPlain checks an auth PLAIN request. It returns the user, or the
// reason for the refusal to send the client (never the password) and why
// for the broker's log; throttled says the login limiter refused it
// unchecked.
func (c *conn) checkPlain(r *protocol.Request) (u *conf.User, reason, why string, throttled bool) {
	if string(r.Item) != mechPlain {
		reason = "unsupported SASL mechanism " + strconv.Quote(string(r.Item)) + ": only PLAIN is supported"
		return nil, reason, reason, false
	}
	authzid, name, password, ok := protocol.ParseSASLPlain(r.Body)
	if !ok {
		reason = "malformed PLAIN message: want [authzid] NUL user NUL password"
		return nil, reason, reason, false
	}
	cfg := c.b.config()
	u, err := c.b.users.Check(&cfg.Auth, authzid, name, password, c.nc.RemoteAddr().String())
	var le *security.LoginError
	switch {
	case errors.As(err, &le):
		return nil, le.Error(), le.Why, le.Wait > 0
	case err != nil:
		return nil, err.Error(), err.Error(), false
	}
	c.auth.from = cfg
	return u, "", "", false
}

// checkPassword is security.Users.Check for HTTP basic auth, in the
// shape httpapi.Backend asks for: the user; or wait > 0 when the limiter
// refused the attempt without a check; or nil and why it failed, for the
// broker's log only.
func (b *Broker) checkPassword(cfg *conf.Config, authzid, name, password, remote string) (*conf.User, time.Duration, string) {
	u, err := b.users.Check(&cfg.Auth, authzid, name, password, remote)
	var le *security.LoginError
	if errors.As(err, &le) {
		return nil, le.Wait, le.Why
	}
	return u, 0, ""
}
