package security

import (
	"fmt"
	"runtime"
	"strings"
	"sync/atomic"
	"time"

	"golang.org/x/crypto/bcrypt"

	"github.com/metaq-go/metaq/conf"
	"github.com/metaq-go/metaq/sdk/protocol"
)

// Users checks logins against the [[auth.user]] tables of server.toml
// (docs/security.md): a user's bcrypt password hash, through the
// failed-login limiter that every door (auth PLAIN on the wire, HTTP
// basic auth) shares. The conversation that carries the password (SASL
// on the wire, the Authorization header) is the door's; Users only
// decides.
type Users struct {
	// sem bounds the bcrypt comparisons running at once, so that a crowd of
	// connections sending auth cannot take every CPU.
	sem chan struct{}
	// dummy is the bcrypt hash checked for an unknown user (or one without
	// a password), so that a failure costs the same whether the user
	// exists. Its cost is that of the first configured hash.
	dummy []byte
	// limits are the login limiter's, from [auth] (Reload changes them).
	limits atomic.Pointer[LoginLimits]
	logins *LoginLimiter
}

// LimitsFromConf returns the login limiter's limits in [auth] a.
func LimitsFromConf(a *conf.Auth) LoginLimits {
	ms := func(v int) time.Duration { return time.Duration(v) * time.Millisecond }
	return LoginLimits{MaxFailures: a.MaxFailures, Lockout: ms(a.Lockout), MaxLockout: ms(a.MaxLockout), FailureWindow: ms(a.FailureWindow)}
}

// NewUsers returns the login checker of [auth] a (auth on).
func NewUsers(a *conf.Auth) (*Users, error) {
	cost := bcrypt.DefaultCost
	for _, u := range a.Users {
		if u.PasswordHash == "" {
			continue
		}
		c, err := bcrypt.Cost([]byte(u.PasswordHash))
		if err != nil {
			return nil, fmt.Errorf("auth.user %q: password_hash: %w", u.Name, err)
		}
		cost = c
		break
	}
	dummy, err := bcrypt.GenerateFromPassword([]byte("metaq-go: no such user"), cost)
	if err != nil {
		return nil, fmt.Errorf("auth: %w", err)
	}
	us := &Users{sem: make(chan struct{}, max(1, runtime.GOMAXPROCS(0))), dummy: dummy}
	us.Reload(a)
	us.logins = NewLoginLimiter(func() LoginLimits { return *us.limits.Load() }, nil)
	return us, nil
}

// Reload applies [auth] a's login limits. The users themselves are looked
// up in the configuration each Check is given.
func (us *Users) Reload(a *conf.Auth) {
	l := LimitsFromConf(a)
	us.limits.Store(&l)
}

// Logins is the failed-login limiter the doors share; nil on a nil Users
// (auth off).
func (us *Users) Logins() *LoginLimiter {
	if us == nil {
		return nil
	}
	return us.logins
}

// LoginError is a refused login. Its Error is the one text every door
// answers (LoginFailed, and the wait when the limiter refused it); Why is
// for the broker's log only.
type LoginError struct {
	// Name is the user name given.
	Name string
	// Wait > 0: the login limiter refused the attempt without a check;
	// retry after Wait.
	Wait time.Duration
	// Why the check failed ("" when refused unchecked): never shown to
	// the client, it may say that the password was right.
	Why string
}

func (e *LoginError) Error() string {
	if e.Wait > 0 {
		return LoginFailed(e.Name) + ": too many failed logins, " + RetryAfter(e.Wait)
	}
	return LoginFailed(e.Name)
}

// Check checks a login by name with password (and the authorization
// identity authzid, "" for none) from remote ("ip:port") against the users
// of a, through the login limiter. It returns the user, or a *LoginError.
// An unknown user or one without a password is checked against the dummy
// hash, so every failure costs one bcrypt. A wrong password, an unknown
// user and an authorization identity the user may not assume get the
// same error text (RFC 4616 lets the server refuse an authzid; saying so
// would tell that the password was right).
func (us *Users) Check(a *conf.Auth, authzid, name, password, remote string) (*conf.User, error) {
	lim := us.logins
	if wait := lim.Refused(name, remote); wait > 0 {
		return nil, &LoginError{Name: name, Wait: wait}
	}
	u, known := a.UserByName(name)
	hash := us.dummy
	if known && u.PasswordHash != "" {
		hash = []byte(u.PasswordHash)
	}
	us.sem <- struct{}{}
	defer func() { <-us.sem }()
	// Admitted while holding a bcrypt slot: at most GOMAXPROCS checks are
	// in flight, which bounds what the limiter lets through at once.
	att, wait := lim.Begin(name, remote)
	if att == nil {
		return nil, &LoginError{Name: name, Wait: wait}
	}
	err := bcrypt.CompareHashAndPassword(hash, []byte(password))
	var why string
	switch {
	case !known:
		why = "no such user"
	case u.PasswordHash == "":
		why = "the user has no password (client certificate only)"
	case err != nil:
		why = "the password does not match"
	case authzid != "" && authzid != name:
		// The password was right: only the log says so.
		why = "right password, but a user may only act as itself, not as " + protocol.Printable([]byte(authzid))
	default:
		att.Succeed()
		return u, nil
	}
	if locks := att.Fail(); len(locks) > 0 {
		parts := make([]string, len(locks))
		for i, l := range locks {
			parts[i] = l.What + " for " + l.For.String()
		}
		why += "; too many failed logins (source " + Source(remote) + "), locked: " + strings.Join(parts, ", ")
	}
	return nil, &LoginError{Name: name, Why: why}
}
