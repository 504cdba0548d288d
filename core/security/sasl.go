package security

import (
	"errors"
	"strconv"
	"time"

	"github.com/metaq-go/metaq/conf"
	"github.com/metaq-go/metaq/sdk/protocol"
)

// MechPlain is the one SASL mechanism the broker supports.
const MechPlain = "PLAIN"

// SASLError is an auth request refused before any password check: an
// unsupported mechanism, or a PLAIN message that does not parse. Its
// Error is the reply, and the log's reason.
type SASLError struct {
	// Mech is the mechanism asked for.
	Mech string
	// Malformed: the mechanism was PLAIN, its message did not parse.
	Malformed bool
}

func (e *SASLError) Error() string {
	if e.Malformed {
		return "malformed PLAIN message: want [authzid] NUL user NUL password"
	}
	return "unsupported SASL mechanism " + strconv.Quote(e.Mech) + ": only PLAIN is supported"
}

// CheckPlain checks `auth <mech>` carrying msg, a SASL PLAIN message (RFC
// 4616: [authzid] NUL user NUL password), from remote against the users
// of a (Check). It returns the user, a *SASLError or a *LoginError.
func (us *Users) CheckPlain(a *conf.Auth, mech string, msg []byte, remote string) (*conf.User, error) {
	if mech != MechPlain {
		return nil, &SASLError{Mech: mech}
	}
	authzid, name, password, ok := protocol.ParseSASLPlain(msg)
	if !ok {
		return nil, &SASLError{Mech: mech, Malformed: true}
	}
	return us.Check(a, authzid, name, password, remote)
}

// LoginWhy is what the broker logs of a failed login err (CheckPlain's):
// why it failed, never shown to the client; throttled says the login
// limiter refused it unchecked (not logged one by one: the lock was
// logged when it was set).
func LoginWhy(err error) (why string, throttled bool) {
	var le *LoginError
	if errors.As(err, &le) {
		return le.Why, le.Wait > 0
	}
	return err.Error(), false
}

// FailedLogin is what the broker counts and logs of a failed `auth`
// carrying msg (CheckPlain's err): the user msg names, printable ("(none)"
// when it names none), why it failed, and whether the limiter refused it
// unchecked (LoginWhy).
func FailedLogin(err error, msg []byte) (name, why string, throttled bool) {
	why, throttled = LoginWhy(err)
	name = "(none)"
	if _, u, _, ok := protocol.ParseSASLPlain(msg); ok {
		name = protocol.Printable([]byte(u))
	}
	return name, why, throttled
}

// WaitFailureDelay waits until a.failure_delay has passed since start (a
// failed login's answer, so that its time does not tell whether the user
// exists and one connection cannot try passwords faster), or until stop
// or done closes.
func WaitFailureDelay(a *conf.Auth, start time.Time, stop, done <-chan struct{}) {
	delay := time.Until(start.Add(time.Duration(a.FailureDelay) * time.Millisecond))
	if delay <= 0 {
		return
	}
	t := time.NewTimer(delay)
	defer t.Stop()
	select {
	case <-t.C:
	case <-stop:
	case <-done:
	}
}

// CheckPassword is Check for HTTP basic auth, in the shape
// httpapi.Backend asks for: the user; or wait > 0 when the limiter
// refused the attempt without a check; or nil and why it failed, for the
// broker's log only.
func (us *Users) CheckPassword(a *conf.Auth, name, password, remote string) (*conf.User, time.Duration, string) {
	u, err := us.Check(a, "", name, password, remote)
	var le *LoginError
	if errors.As(err, &le) {
		return nil, le.Wait, le.Why
	}
	return u, 0, ""
}
