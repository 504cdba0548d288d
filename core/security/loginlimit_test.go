package security

import (
	"fmt"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
)

// clock is a settable clock for the limiter.
type clock struct {
	mu sync.Mutex
	t  time.Time
}

func (c *clock) now() time.Time { c.mu.Lock(); defer c.mu.Unlock(); return c.t }
func (c *clock) add(d time.Duration) {
	c.mu.Lock()
	c.t = c.t.Add(d)
	c.mu.Unlock()
}

var testLimits = LoginLimits{
	MaxFailures:   3,
	Lockout:       time.Second,
	MaxLockout:    8 * time.Second,
	FailureWindow: time.Minute,
}

func newTestLimiter(lim LoginLimits) (*LoginLimiter, *clock) {
	c := &clock{t: time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)}
	return NewLoginLimiter(func() LoginLimits { return lim }, c.now), c
}

// fail runs one failed attempt; it reports whether the attempt was
// checked (false: refused by the limiter).
func fail(l *LoginLimiter, user, remote string) bool {
	a, _ := l.Begin(user, remote)
	if a == nil {
		return false
	}
	a.Fail()
	return true
}

func succeed(l *LoginLimiter, user, remote string) bool {
	a, _ := l.Begin(user, remote)
	if a == nil {
		return false
	}
	a.Succeed()
	return true
}

func TestLoginLimiterCountsAndLocks(t *testing.T) {
	l, c := newTestLimiter(testLimits)
	for i := range 3 {
		require.True(t, fail(l, "alice", "10.0.0.1:1000"), "failure %d", i+1)
	}
	// Locked for Lockout: refused without a check, and Refused says so.
	a, wait := l.Begin("alice", "10.0.0.1:2000")
	require.Nil(t, a)
	require.Equal(t, time.Second, wait)
	require.Equal(t, time.Second, l.Refused("alice", "10.0.0.1:3000"))
	// The right password changes nothing while locked.
	require.False(t, succeed(l, "alice", "10.0.0.1:1000"))
	c.add(999 * time.Millisecond)
	require.False(t, fail(l, "alice", "10.0.0.1:1000"))
	c.add(time.Millisecond)
	require.Zero(t, l.Refused("alice", "10.0.0.1:1000"))
	// A success after the lock is unaffected.
	require.True(t, succeed(l, "alice", "10.0.0.1:1000"))
}

func TestLoginLimiterBackoffGrowsAndCaps(t *testing.T) {
	l, c := newTestLimiter(testLimits)
	for range 3 {
		require.True(t, fail(l, "bob", "10.0.0.2"))
	}
	var locks []time.Duration
	for range 6 {
		wait := l.Refused("bob", "10.0.0.2")
		locks = append(locks, wait)
		c.add(wait)
		require.True(t, fail(l, "bob", "10.0.0.2"))
	}
	require.Equal(t, []time.Duration{1 * time.Second, 2 * time.Second, 4 * time.Second, 8 * time.Second, 8 * time.Second, 8 * time.Second}, locks)
	require.Equal(t, 8*time.Second, testLimits.Backoff(100))
	require.Equal(t, 8*time.Second, testLimits.Backoff(1<<30))
}

func TestLoginLimiterWindowForgets(t *testing.T) {
	l, c := newTestLimiter(testLimits)
	for range 2 {
		require.True(t, fail(l, "carol", "10.0.0.3"))
	}
	c.add(time.Minute) // a quiet FailureWindow
	for range 2 {
		require.True(t, fail(l, "carol", "10.0.0.3"))
	}
	require.Zero(t, l.Refused("carol", "10.0.0.3"), "the first two failures were forgotten")
	require.True(t, fail(l, "carol", "10.0.0.3"))
	require.Equal(t, time.Second, l.Refused("carol", "10.0.0.3"))
}

func TestLoginLimiterPerUserAcrossSources(t *testing.T) {
	l, _ := newTestLimiter(testLimits)
	// Three sources, one failure each: the user is locked everywhere new.
	for i := range 3 {
		require.True(t, fail(l, "root", fmt.Sprintf("10.1.0.%d:5000", i)))
	}
	require.Equal(t, time.Second, l.Refused("root", "10.9.9.9:1"))
	require.Equal(t, time.Second, l.Refused("root", "[2001:db8::1]:1"))
	// Other users from those sources are not (each source failed once).
	require.Zero(t, l.Refused("alice", "10.1.0.0:5000"))
}

func TestLoginLimiterPerSourceAcrossUsers(t *testing.T) {
	l, _ := newTestLimiter(testLimits)
	for i := range 3 {
		require.True(t, fail(l, fmt.Sprintf("user%d", i), "192.0.2.7:4000"))
	}
	require.Equal(t, time.Second, l.Refused("anyone", "192.0.2.7:4001"))
	require.Zero(t, l.Refused("anyone", "192.0.2.8:4001"))
	require.Zero(t, l.Refused("user0", "192.0.2.8:4001"))
}

func TestLoginLimiterIPv6Slash64(t *testing.T) {
	l, _ := newTestLimiter(testLimits)
	for i := range 3 {
		require.True(t, fail(l, fmt.Sprintf("u%d", i), fmt.Sprintf("[2001:db8:1:2::%x]:1", i+1)))
	}
	require.Equal(t, time.Second, l.Refused("x", "[2001:db8:1:2:ffff::1]:9"), "same /64")
	require.Zero(t, l.Refused("x", "[2001:db8:1:3::1]:9"), "another /64")
	require.Equal(t, "2001:db8:1:2::/64", Source("[2001:db8:1:2:aaaa::1%eth0]:80"))
	require.Equal(t, "192.0.2.1", Source("[::ffff:192.0.2.1]:80"))
	require.Equal(t, "192.0.2.1", Source("192.0.2.1:80"))
	require.Equal(t, "192.0.2.1", Source("192.0.2.1"))
	require.Equal(t, "@sock", Source("@sock"))
}

// TestLoginLimiterTrustedSource checks the answer to lockout by name: a
// source the user logged in from keeps logging in while the user and a
// shared source are locked; the pair's own failures still lock it.
func TestLoginLimiterTrustedSource(t *testing.T) {
	l, c := newTestLimiter(testLimits)
	require.True(t, succeed(l, "admin", "10.0.0.5:1"))
	// An attacker locks "admin" from elsewhere, and the shared source 10.0.0.5.
	for i := range 3 {
		require.True(t, fail(l, "admin", fmt.Sprintf("10.6.0.%d:1", i)))
		require.True(t, fail(l, fmt.Sprintf("junk%d", i), "10.0.0.5:2"))
	}
	require.Equal(t, time.Second, l.Refused("admin", "10.7.0.1:1"), "a new source is refused")
	require.Equal(t, time.Second, l.Refused("other", "10.0.0.5:1"), "the shared source is locked for others")
	require.Zero(t, l.Refused("admin", "10.0.0.5:3"), "the trusted pair is not")
	require.True(t, succeed(l, "admin", "10.0.0.5:3"))
	// The pair itself: MaxFailures failures lock it too.
	for range 3 {
		require.True(t, fail(l, "admin", "10.0.0.5:4"))
	}
	require.Equal(t, time.Second, l.Refused("admin", "10.0.0.5:4"))
	// Trust ends after TrustFor.
	c.add(DefaultTrustFor)
	require.Zero(t, l.Refused("admin", "10.0.0.5:4"), "everything expired")
}

// TestLoginLimiterSuccessResetsPair checks that a success clears its pair's
// failures but not the user's (from other sources) nor the source's.
func TestLoginLimiterSuccessResetsPair(t *testing.T) {
	lim := testLimits
	lim.MaxFailures = 4
	l, _ := newTestLimiter(lim)
	for range 2 {
		require.True(t, fail(l, "dave", "10.0.0.8"))
	}
	require.True(t, succeed(l, "dave", "10.0.0.8"))
	require.True(t, fail(l, "dave", "10.3.0.1"))
	require.True(t, fail(l, "dave", "10.3.0.2"))
	// The user has 4 failures: locked for new sources, not the trusted one.
	require.Equal(t, time.Second, l.Refused("dave", "10.3.0.3"))
	require.Zero(t, l.Refused("dave", "10.0.0.8"))
	// The pair was cleared: four more failures from the trusted pair lock it.
	for range 3 {
		require.True(t, fail(l, "dave", "10.0.0.8"))
	}
	require.Zero(t, l.Refused("dave", "10.0.0.8"))
	require.True(t, fail(l, "dave", "10.0.0.8"))
	require.Equal(t, time.Second, l.Refused("dave", "10.0.0.8"))
}

// TestLoginLimiterInFlight checks that checks running at once cannot pass
// the limit: below MaxFailures, failures plus checks in flight are bounded;
// after a lock, one check at a time.
func TestLoginLimiterInFlight(t *testing.T) {
	l, c := newTestLimiter(testLimits)
	require.True(t, fail(l, "eve", "10.0.0.9"))
	a1, _ := l.Begin("eve", "10.0.0.9")
	a2, _ := l.Begin("eve", "10.0.0.9")
	require.NotNil(t, a1)
	require.NotNil(t, a2)
	a3, wait := l.Begin("eve", "10.0.0.9")
	require.Nil(t, a3, "1 failure + 2 in flight reach MaxFailures")
	require.Equal(t, time.Second, wait)
	a1.Fail()
	a2.Fail()
	a2.Fail() // a second call is ignored
	c.add(time.Second)
	p1, _ := l.Begin("eve", "10.0.0.9")
	require.NotNil(t, p1)
	p2, _ := l.Begin("eve", "10.0.0.9")
	require.Nil(t, p2, "one check at a time once a lock ends")
	p1.Fail()
	require.Equal(t, 2*time.Second, l.Refused("eve", "10.0.0.9"))
}

// TestLoginLimiterMemoryBound cycles user names and sources past
// MaxEntries: every table stays at the cap, and a locked entry is not the
// one pushed out.
func TestLoginLimiterMemoryBound(t *testing.T) {
	lim := testLimits
	lim.MaxEntries = 50
	lim.Lockout, lim.MaxLockout, lim.FailureWindow = time.Hour, time.Hour, time.Hour
	l, c := newTestLimiter(lim)
	for range 3 {
		require.True(t, fail(l, "root", "10.0.0.1"))
	}
	for i := range 1000 {
		c.add(time.Millisecond)
		fail(l, fmt.Sprintf("junk-%d", i), fmt.Sprintf("10.%d.%d.1", i/250, i%250+2))
		succeed(l, fmt.Sprintf("ok-%d", i), fmt.Sprintf("10.%d.%d.2", i/250, i%250+2))
	}
	pairs, users, sources, trusted := l.Sizes()
	for _, n := range []int{pairs, users, sources, trusted} {
		require.LessOrEqual(t, n, 50)
	}
	require.Positive(t, l.Refused("root", "10.200.0.1"), "the locked user survived the flood of names")
	// Expired entries are swept once FailureWindow and the sweep period pass.
	c.add(time.Hour + sweepEvery)
	require.True(t, fail(l, "late", "10.250.0.1"))
	pairs, users, sources, _ = l.Sizes()
	require.Equal(t, []int{1, 1, 1}, []int{pairs, users, sources})
}

// TestLoginLimiterLongNames checks that user names past 255 bytes share a
// key (bounded memory per entry).
func TestLoginLimiterLongNames(t *testing.T) {
	l, _ := newTestLimiter(testLimits)
	long := string(make([]byte, 300))
	for i := range 3 {
		require.True(t, fail(l, long+fmt.Sprint(i), fmt.Sprintf("10.0.%d.1", i)))
	}
	require.Equal(t, time.Second, l.Refused(long+"x", "10.0.9.1"))
}

func TestLoginLimiterOff(t *testing.T) {
	l, _ := newTestLimiter(LoginLimits{})
	for range 100 {
		require.True(t, fail(l, "alice", "10.0.0.1"))
	}
	require.Zero(t, l.Refused("alice", "10.0.0.1"))
	pairs, users, sources, trusted := l.Sizes()
	require.Zero(t, pairs+users+sources+trusted)
	require.Equal(t, -1, LoginLimits{}.MaxChecks(time.Hour, 1))
}

// TestMaxChecks checks the documented bound against the limiter driven by
// an attacker who retries the moment each lock ends.
func TestMaxChecks(t *testing.T) {
	for _, lim := range []LoginLimits{
		testLimits,
		{MaxFailures: 5, Lockout: time.Second, MaxLockout: time.Minute, FailureWindow: 15 * time.Minute},
		{MaxFailures: 1, Lockout: 100 * time.Millisecond, MaxLockout: 100 * time.Millisecond, FailureWindow: time.Minute},
	} {
		for _, span := range []time.Duration{0, time.Second, 5 * time.Second, time.Minute, 10 * time.Minute} {
			l, c := newTestLimiter(lim)
			start := c.now()
			checks := 0
			for c.now().Sub(start) <= span {
				if fail(l, "x", "10.0.0.1") {
					checks++
					continue
				}
				c.add(l.Refused("x", "10.0.0.1"))
			}
			require.Equal(t, lim.MaxChecks(span, 1), checks, "%+v over %v", lim, span)
			require.Equal(t, lim.MaxChecks(span, 1)+3, lim.MaxChecks(span, 4))
		}
	}
	// Defaults: 5 at once, then one a minute at most after 63 s.
	def := LoginLimits{MaxFailures: 5, Lockout: time.Second, MaxLockout: time.Minute, FailureWindow: 15 * time.Minute}
	require.Equal(t, 5+6, def.MaxChecks(63*time.Second, 1))
	require.Equal(t, 5+6+1, def.MaxChecks(123*time.Second, 1))
}

// TestLoginLimiterRace runs attempts from many goroutines (go test -race)
// and checks the bound holds under concurrency.
func TestLoginLimiterRace(t *testing.T) {
	l, c := newTestLimiter(testLimits)
	var wg sync.WaitGroup
	var mu sync.Mutex
	checked := 0
	for g := range 16 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := range 200 {
				if fail(l, "target", fmt.Sprintf("10.0.%d.%d", g, i%4)) {
					mu.Lock()
					checked++
					mu.Unlock()
				}
			}
		}()
	}
	wg.Wait()
	// The clock never moved: only the first failures were checked, at most
	// MaxFailures plus what was in flight before an entry existed.
	require.LessOrEqual(t, checked, testLimits.MaxChecks(0, 16))
	c.add(time.Second)
	require.Zero(t, l.Refused("target", "10.0.0.1"))
	require.Equal(t, fmt.Sprint(2), RetryAfterSeconds(1001*time.Millisecond))
	require.Equal(t, "retry after 1s", RetryAfter(0))
}
