package httpapi

import (
	"context"
	"crypto/sha256"
	"net/http"
	"strings"
	"time"

	"github.com/metaq-go/metaq/conf"
	"github.com/metaq-go/metaq/core/security"
)

// needUser wraps h with the [auth] check: with auth on, a user is needed
// (401 otherwise), and an admin when admin is set or the method changes
// something (403 otherwise).
func (s *Server) needUser(h http.HandlerFunc, admin bool) http.Handler {
	return s.needUserFor(h, admin, false)
}

// needDataUser wraps a data plane handler with the [auth] check: a user
// is needed, whatever the method; the broker checks the request's rights
// (publish, subscribe) as on the wire.
func (s *Server) needDataUser(h http.HandlerFunc) http.Handler { return s.needUserFor(h, false, true) }

// needUserFor is needUser; data skips the admin check of changes.
func (s *Server) needUserFor(h http.HandlerFunc, admin, data bool) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if !s.config().authOn() {
			h(w, r)
			return
		}
		deny := func(r *http.Request, code int, msg string) {
			if strings.HasPrefix(r.URL.Path, "/ui/") { // the dashboard: an HTML page that says why
				s.UIError(w, r, code, msg)
			} else {
				WriteError(w, code, msg)
			}
		}
		u, reason, retry := s.httpUser(r)
		if u == nil {
			w.Header().Set("WWW-Authenticate", `Basic realm="metaq", charset="UTF-8"`)
			if retry > 0 {
				w.Header().Set("Retry-After", security.RetryAfterSeconds(retry))
			}
			deny(r, http.StatusUnauthorized, reason)
			return
		}
		r = r.WithContext(context.WithValue(r.Context(), userKey{}, u))
		change := r.Method != http.MethodGet && r.Method != http.MethodHead && !data
		if admin || change {
			if err := security.Authorize(true, u, security.Admin, r.Method+" "+r.URL.Path); err != nil {
				deny(r, http.StatusForbidden, err.Error())
				return
			}
		}
		h(w, r)
	})
}

type userKey struct{}

// User is the authenticated user of r, nil with auth off.
func User(r *http.Request) *conf.User {
	u, _ := r.Context().Value(userKey{}).(*conf.User)
	return u
}

// viewer is the viewer of r's lists (its user is set by needUser).
func (s *Server) viewer(r *http.Request) security.Viewer {
	return security.Viewer{On: s.config().authOn(), User: User(r)}
}

// httpUser authenticates r: a verified client certificate naming a user,
// else basic auth. It returns the user or why not; retry > 0 when the
// login limiter refused the attempt unchecked (the caller sets
// Retry-After).
//
// Basic auth goes through the login limiter the wire uses
// (Backend.CheckPassword), the cache of verified credentials included: a
// locked user or source is refused even with cached credentials, so that
// the lock does not answer a right guess differently. Only successes are
// cached, so every failure is a bcrypt check the limiter counts.
func (s *Server) httpUser(r *http.Request) (u *conf.User, reason string, retry time.Duration) {
	cfg := s.config()
	if r.TLS != nil && len(r.TLS.VerifiedChains) > 0 && len(r.TLS.PeerCertificates) > 0 {
		if u, ok := cfg.Auth.UserByName(r.TLS.PeerCertificates[0].Subject.CommonName); ok {
			return u, "", 0
		}
	}
	name, password, ok := r.BasicAuth()
	if !ok {
		return nil, "authentication required: use HTTP basic auth with an [[auth.user]] name and password", 0
	}
	start := time.Now()
	logins := s.be.Logins()
	var why string
	if retry = logins.Refused(name, r.RemoteAddr); retry == 0 {
		key := sha256.Sum256([]byte(name + "\x00" + password))
		cu, known := cfg.Auth.UserByName(name)
		s.authMu.Lock()
		cached := s.authCache[key]
		s.authMu.Unlock()
		if known && cached == cu {
			logins.Succeeded(name, r.RemoteAddr)
			return cu, "", 0
		}
		if u, retry, why = s.be.CheckPassword(name, password, r.RemoteAddr); u != nil {
			s.authMu.Lock()
			if s.authCache == nil || len(s.authCache) >= maxAuthCache {
				s.authCache = make(map[[32]byte]*conf.User)
			}
			s.authCache[key] = u
			s.authMu.Unlock()
			return u, "", 0
		}
	}
	reason = security.LoginFailed(name)
	s.be.AuthFailed(retry > 0)
	if retry > 0 {
		reason += ": too many failed logins, " + security.RetryAfter(retry)
	} else {
		s.logf("http %s: auth failed for user %s: %s", r.RemoteAddr, quoteName(name), why)
	}
	// As on the wire: a failure is answered after failure_delay.
	delay := time.Until(start.Add(time.Duration(cfg.Auth.FailureDelay) * time.Millisecond))
	if delay > 0 {
		t := time.NewTimer(delay)
		select {
		case <-t.C:
		case <-r.Context().Done():
		case <-s.done:
		}
		t.Stop()
	}
	return nil, reason, retry
}
