package broker

import (
	"crypto/tls"
	"fmt"
	"runtime"
	"strconv"
	"strings"
	"time"

	"golang.org/x/crypto/bcrypt"

	"github.com/metaq-go/metaq/conf"
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

// authState is the broker-wide part of authentication.
type authState struct {
	// sem bounds the bcrypt comparisons running at once, so that a crowd of
	// connections sending auth cannot take every CPU.
	sem chan struct{}
	// dummy is the bcrypt hash checked for an unknown user (or one without
	// a password), so that a failure costs the same whether the user
	// exists. Its cost is that of the first configured hash.
	dummy []byte
}

// initAuth sets up b.auth when auth is on.
func (b *Broker) initAuth() error {
	if !b.config().Auth.Enabled {
		return nil
	}
	cost := bcrypt.DefaultCost
	for _, u := range b.config().Auth.Users {
		if u.PasswordHash == "" {
			continue
		}
		c, err := bcrypt.Cost([]byte(u.PasswordHash))
		if err != nil {
			return fmt.Errorf("auth.user %q: password_hash: %w", u.Name, err)
		}
		cost = c
		break
	}
	dummy, err := bcrypt.GenerateFromPassword([]byte("metaq-go: no such user"), cost)
	if err != nil {
		return fmt.Errorf("auth: %w", err)
	}
	b.auth = authState{sem: make(chan struct{}, max(1, runtime.GOMAXPROCS(0))), dummy: dummy}
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
// whether the request may run; if not, it has replied 401 or 403.
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
	deny := func(what string) bool {
		c.reply(protocol.StatusForbidden, "user "+strconv.Quote(u.Name)+" may not "+what, r.Opaque)
		return false
	}
	switch r.Op {
	case protocol.OpPut, protocol.OpMPut:
		if !u.CanPublish(string(r.Topic)) {
			return deny("publish to topic " + protocol.Printable(r.Topic))
		}
	case protocol.OpGet, protocol.OpOffset:
		if !u.CanSubscribe(string(r.Topic)) {
			return deny("subscribe to topic " + protocol.Printable(r.Topic))
		}
	case protocol.OpCommit, protocol.OpFetch:
		if !u.CanUseGroup(string(r.Group)) {
			return deny("use group " + protocol.Printable(r.Group))
		}
		// A body that does not parse is answered 400 by the handler.
		lines, _ := protocol.ParseOffsetLines(r.Body, r.Op == protocol.OpCommit)
		for _, l := range lines {
			if !u.CanSubscribe(l.Topic) {
				return deny("subscribe to topic " + protocol.Printable([]byte(l.Topic)))
			}
		}
	case protocol.OpJoin, protocol.OpHeartbeat, protocol.OpLeave:
		if !u.CanUseGroup(string(r.Group)) {
			return deny("use group " + protocol.Printable(r.Group))
		}
		if !u.CanSubscribe(string(r.Topic)) {
			return deny("subscribe to topic " + protocol.Printable(r.Topic))
		}
	case protocol.OpTransaction:
		if (r.TxType == protocol.TxHeuristicCommit || r.TxType == protocol.TxHeuristicRollback) && !u.Admin {
			return deny("complete transactions heuristically (admin only)")
		}
	case protocol.OpSync:
		if !u.Admin {
			return deny("ship syncs (admin only: a sync master's replication_user)")
		}
	case protocol.OpStats:
		if adminStats(string(r.Item)) && !u.Admin {
			return deny("run stats " + string(r.Item) + " (admin only)")
		}
	}
	return true
}

// adminStats reports whether a stats item needs admin: it reveals the
// configuration, changes state or lists other users' transactions.
func adminStats(item string) bool {
	switch item {
	case "config", "reset", "transactions", switchoverItem:
		return true
	}
	// Binding a sync link to an epoch (failover.go) is a sync master's.
	return strings.HasPrefix(item, syncEpochItem)
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
func (c *conn) handleAuth(r *protocol.Request) {
	b := c.b
	if !b.config().Auth.Enabled {
		c.reply(protocol.StatusOK, "", r.Opaque) // auth is off: every connection has every right
		return
	}
	start := time.Now()
	user, reason := c.checkPlain(r)
	if reason == "" {
		c.auth.user = user
		c.markAuthenticated() // connlimits.go
		c.reply(protocol.StatusOK, "", r.Opaque)
		return
	}
	c.auth.user = nil
	b.stats.authFailures.Add(1)
	name := "(none)"
	if _, u, _, ok := protocol.ParseSASLPlain(r.Body); ok {
		name = protocol.Printable([]byte(u))
	}
	b.warnf("conn %s: auth failed for user %s: %s", c.nc.RemoteAddr(), name, reason)
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
// reason for the refusal (never the password).
func (c *conn) checkPlain(r *protocol.Request) (*conf.User, string) {
	if string(r.Item) != mechPlain {
		return nil, "unsupported SASL mechanism " + strconv.Quote(string(r.Item)) + ": only PLAIN is supported"
	}
	authzid, name, password, ok := protocol.ParseSASLPlain(r.Body)
	if !ok {
		return nil, "malformed PLAIN message: want [authzid] NUL user NUL password"
	}
	cfg := c.b.config()
	u, known := cfg.Auth.UserByName(name)
	hash := c.b.auth.dummy
	if known && u.PasswordHash != "" {
		hash = []byte(u.PasswordHash)
	}
	c.b.auth.sem <- struct{}{}
	err := bcrypt.CompareHashAndPassword(hash, []byte(password))
	<-c.b.auth.sem
	switch {
	case err != nil || !known || u.PasswordHash == "":
		return nil, "authentication failed for user " + strconv.Quote(name)
	case authzid != "" && authzid != name:
		return nil, "user " + strconv.Quote(name) + " may not act as " + strconv.Quote(authzid)
	}
	c.auth.from = cfg
	return u, ""
}
