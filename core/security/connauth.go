package security

import (
	"crypto/tls"
	"net"

	"github.com/metaq-go/metaq/conf"
)

// ConnAuth is a protocol connection's authentication state.
type ConnAuth struct {
	// User is the authenticated user, nil before authentication.
	User *conf.User
	// CertChecked is set once the TLS client certificate was looked at.
	CertChecked bool
	// from is the configuration User was taken from: after a Reload the
	// user is looked up again by name, so changed rights apply at once.
	from *conf.Config
}

// Login makes u, from cfg, the connection's user.
func (a *ConnAuth) Login(u *conf.User, cfg *conf.Config) { a.User, a.from = u, cfg }

// Current returns the connection's user under cfg: the same user after a
// Reload, with its new rights, or nil if it was removed.
func (a *ConnAuth) Current(cfg *conf.Config) *conf.User {
	if a.User == nil || a.from == cfg {
		return a.User
	}
	u, _ := cfg.Auth.UserByName(a.User.Name)
	a.User, a.from = u, cfg
	return u
}

// CertName is the Subject CN of the verified client certificate of st;
// false without one.
func CertName(st tls.ConnectionState) (string, bool) {
	if len(st.VerifiedChains) == 0 || len(st.PeerCertificates) == 0 {
		return "", false
	}
	return st.PeerCertificates[0].Subject.CommonName, true
}

// CertUser is the [[auth.user]] of a that the verified TLS client
// certificate of nc names by its CN: ok false when none does; cert false
// (and cn "") when nc is not TLS or has no verified certificate.
func CertUser(nc net.Conn, a *conf.Auth) (u *conf.User, cn string, cert, ok bool) {
	tc, isTLS := nc.(*tls.Conn)
	if !isTLS {
		return nil, "", false, false
	}
	if cn, cert = CertName(tc.ConnectionState()); !cert {
		return nil, "", false, false
	}
	u, ok = a.UserByName(cn)
	return u, cn, true, ok
}
