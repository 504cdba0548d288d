package security

import (
	"errors"
	"testing"

	"github.com/stretchr/testify/require"
	"golang.org/x/crypto/bcrypt"

	"github.com/metaq-go/metaq/conf"
)

// TestUsersCheck: the right password logs in; a wrong one, an unknown
// user, a certificate-only user and a foreign authzid are one LoginError
// text, with the reason only in Why; after max_failures the limiter
// refuses unchecked, with the wait.
func TestUsersCheck(t *testing.T) {
	hash, err := bcrypt.GenerateFromPassword([]byte("secret"), bcrypt.MinCost)
	require.NoError(t, err)
	a := &conf.Auth{Enabled: true, MaxFailures: 3, Lockout: 60000, MaxLockout: 60000, FailureWindow: 60000,
		Users: []conf.User{{Name: "alice", PasswordHash: string(hash)}, {Name: "cert"}}}
	us, err := NewUsers(a)
	require.NoError(t, err)

	u, err := us.Check(a, "", "alice", "secret", "10.0.0.1:1")
	require.NoError(t, err)
	require.Equal(t, "alice", u.Name)

	for _, tc := range []struct{ authzid, name, password, why, from string }{
		{"", "alice", "wrong", "the password does not match", "10.0.1.1:1"},
		{"", "bob", "secret", "no such user", "10.0.2.1:1"},
		{"", "cert", "", "the user has no password (client certificate only)", "10.0.3.1:1"},
		{"bob", "alice", "secret", "right password, but a user may only act as itself", "10.0.4.1:1"},
	} {
		u, err := us.Check(a, tc.authzid, tc.name, tc.password, tc.from)
		require.Nil(t, u)
		var le *LoginError
		require.True(t, errors.As(err, &le), "%v", err)
		require.Equal(t, LoginFailed(tc.name), err.Error())
		require.Contains(t, le.Why, tc.why)
		require.Zero(t, le.Wait)
	}

	// A fresh source guessing one user: three failures lock the pair.
	for range 3 {
		_, err = us.Check(a, "", "alice", "wrong", "10.0.5.1:1")
		require.Error(t, err)
	}
	_, err = us.Check(a, "", "alice", "secret", "10.0.5.1:1")
	var le *LoginError
	require.True(t, errors.As(err, &le))
	require.Positive(t, le.Wait)
	require.Contains(t, err.Error(), "too many failed logins, retry after")
	require.NotNil(t, us.Logins())
	require.Nil(t, (*Users)(nil).Logins())
}
