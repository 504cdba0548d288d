package security

import (
	"net"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/metaq-go/metaq/conf"
)

// TestFailedLogin: the user a failed auth names (printable, "(none)" for
// a message that does not parse), why, and whether it was throttled.
func TestFailedLogin(t *testing.T) {
	name, why, throttled := FailedLogin(&LoginError{Why: "bad password"}, []byte("\x00al\nice\x00pw"))
	require.Equal(t, `"al\nice"`, name)
	require.Equal(t, "bad password", why)
	require.False(t, throttled)
	name, _, throttled = FailedLogin(&LoginError{Why: "locked", Wait: time.Second}, []byte("junk"))
	require.Equal(t, "(none)", name)
	require.True(t, throttled)
	name, why, _ = FailedLogin(&SASLError{Mech: "X"}, nil)
	require.Equal(t, "(none)", name)
	require.Equal(t, (&SASLError{Mech: "X"}).Error(), why)
}

// TestWaitFailureDelay: it waits out failure_delay from start, not past
// it, and a stop ends the wait.
func TestWaitFailureDelay(t *testing.T) {
	a := &conf.Auth{FailureDelay: 50}
	start := time.Now()
	WaitFailureDelay(a, start, nil, nil)
	require.GreaterOrEqual(t, time.Since(start), 50*time.Millisecond)
	t0 := time.Now()
	WaitFailureDelay(a, start, nil, nil) // already past
	require.Less(t, time.Since(t0), 40*time.Millisecond)
	stop := make(chan struct{})
	close(stop)
	t0 = time.Now()
	WaitFailureDelay(&conf.Auth{FailureDelay: 60_000}, t0, nil, stop)
	require.Less(t, time.Since(t0), 10*time.Second)
}

// TestCertUserPlain: a plaintext connection has no certificate.
func TestCertUserPlain(t *testing.T) {
	c1, c2 := net.Pipe()
	defer c1.Close()
	defer c2.Close()
	u, cn, cert, ok := CertUser(c1, &conf.Auth{})
	require.Nil(t, u)
	require.Empty(t, cn)
	require.False(t, cert)
	require.False(t, ok)
}
