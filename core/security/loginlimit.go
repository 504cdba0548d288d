package security

import (
	"crypto/sha256"
	"net"
	"net/netip"
	"strconv"
	"sync"
	"time"
)

// The failed-login limiter (server.toml [auth] max_failures, lockout,
// max_lockout, failure_window; docs/security.md "Password guessing").
//
// Failures are counted in three tables, across every connection and both
// doors (auth PLAIN on the wire and HTTP basic auth):
//
//   - per pair (user name, source): one source guessing one user;
//   - per user name, from any source;
//   - per source, for any user name.
//
// A source is the client's IP address; an IPv6 address counts as its /64,
// the block one host or one customer usually holds. User names are counted
// whether or not they exist, so the limiter does not tell them apart.
//
// Once a table's entry has MaxFailures failures it is locked: attempts it
// applies to are refused without a password check, for Lockout after the
// MaxFailures-th failure, then twice as long after each further failure,
// up to MaxLockout. When a lock ends, one attempt at a time is let through
// and checked; if it fails, the next lock is longer. An entry is forgotten
// after FailureWindow without a failure (and once its lock has ended).
//
// A successful login clears its pair's failures and marks the pair as
// trusted for TrustFor: a source a user has logged in from is exempt from
// that user's and that source's locks (not from the pair's own). That keeps
// an attacker who names the admin, or shares a NAT address with a service,
// from locking out clients that already logged in from their usual source;
// and every attempt still falls under at least one lock (the pair's).
// A success does not clear the user's or the source's counts: if it did, a
// client logging in every few seconds would hand an attacker elsewhere a
// fresh budget each time.
//
// Checks are rate limited even when they run in parallel: an entry with
// failures below MaxFailures admits at most MaxFailures minus its failures
// attempts in flight, a locked one exactly one once its lock ends. Only an
// entry without failures admits attempts freely (so a client pool may log
// in at once); the broker reserves an attempt while it holds its bcrypt
// slot, so at most that many (GOMAXPROCS) get in before a first failure is
// counted.
//
// Memory is bounded: each table holds at most MaxEntries entries (default
// DefaultMaxEntries). Expired entries are swept; when a table is full, the
// entry with the fewest failures (the oldest of those) makes room, so an
// attacker cycling names or sources cannot push a locked entry out cheaply.

// DefaultMaxEntries bounds each table of a LoginLimiter.
const DefaultMaxEntries = 10000

// DefaultTrustFor is how long a successful login exempts its pair from the
// user's and the source's locks.
const DefaultTrustFor = 7 * 24 * time.Hour

// maxUserKey bounds the bytes of a user name kept as a key: configured
// names have at most 255 bytes, longer ones share a key.
const maxUserKey = 255

// sweepEvery is how often a LoginLimiter drops expired entries.
const sweepEvery = time.Minute

// LoginLimits configures a LoginLimiter.
type LoginLimits struct {
	// MaxFailures is how many failures lock an entry; 0 turns the limiter
	// off.
	MaxFailures int
	// Lockout is the first lock; each further failure doubles it.
	Lockout time.Duration
	// MaxLockout caps a lock.
	MaxLockout time.Duration
	// FailureWindow is how long an entry's failures are kept without a new
	// one.
	FailureWindow time.Duration
	// MaxEntries bounds each table; 0 means DefaultMaxEntries.
	MaxEntries int
	// TrustFor is how long a success exempts its pair from the user's and
	// the source's locks; 0 means DefaultTrustFor.
	TrustFor time.Duration
}

// Backoff is the lock after the n-th failure (n >= MaxFailures).
func (l LoginLimits) Backoff(n int) time.Duration {
	d := l.Lockout
	for i := l.MaxFailures; i < n && d < l.MaxLockout; i++ {
		d *= 2
	}
	return min(d, l.MaxLockout)
}

// MaxChecks is the most password checks a single entry (one user, one
// source, or one pair) admits in a span of d: MaxFailures, then one more
// each time a lock ends (Lockout, 2·Lockout, ... up to MaxLockout). burst
// is how many checks may already be in flight when the first failure is
// counted (the broker's bcrypt slots, GOMAXPROCS); they add burst-1 at
// most. With the limiter off it returns -1 (no bound).
func (l LoginLimits) MaxChecks(d time.Duration, burst int) int {
	if l.MaxFailures <= 0 || l.Lockout <= 0 {
		return -1
	}
	n := l.MaxFailures + max(burst, 1) - 1
	var t time.Duration
	for k := l.MaxFailures; ; k++ {
		t += l.Backoff(k)
		if t > d {
			return n
		}
		n++
	}
}

// entry is one table's count for a key.
type entry struct {
	failures int
	last     time.Time // the last failure
	until    time.Time // locked until (zero: not locked)
	pending  int       // attempts admitted and not yet done
}

// table is one of the three counts.
type table map[[32]byte]*entry

// LoginLimiter counts failed logins (see the comment above). It is safe for
// concurrent use.
type LoginLimiter struct {
	limits func() LoginLimits
	now    func() time.Time

	mu        sync.Mutex
	pairs     table
	users     table
	sources   table
	trusted   map[[32]byte]time.Time // pair -> last success
	lastSweep time.Time
}

// NewLoginLimiter returns a limiter that reads its limits from limits at
// every call (so a configuration reload applies at once). now is the
// clock; nil means time.Now.
func NewLoginLimiter(limits func() LoginLimits, now func() time.Time) *LoginLimiter {
	if now == nil {
		now = time.Now
	}
	return &LoginLimiter{
		limits: limits, now: now,
		pairs: table{}, users: table{}, sources: table{},
		trusted: map[[32]byte]time.Time{},
	}
}

// Source returns the key a remote address ("ip:port", or an IP) counts
// under: the IP without port or zone, an IPv4-mapped IPv6 address as IPv4,
// other IPv6 addresses as their /64 prefix. An address that does not
// parse is its own key.
func Source(remote string) string {
	host := remote
	if h, _, err := net.SplitHostPort(remote); err == nil {
		host = h
	}
	a, err := netip.ParseAddr(host)
	if err != nil {
		return remote
	}
	a = a.WithZone("").Unmap()
	if a.Is4() {
		return a.String()
	}
	p, _ := a.Prefix(64)
	return p.String()
}

// keys are an attempt's keys in the three tables.
type keys struct{ pair, user, source [32]byte }

func keysOf(user, remote string) keys {
	if len(user) > maxUserKey {
		user = user[:maxUserKey]
	}
	src := Source(remote)
	return keys{
		pair:   sha256.Sum256([]byte("p\x00" + user + "\x00" + src)),
		user:   sha256.Sum256([]byte("u\x00" + user)),
		source: sha256.Sum256([]byte("s\x00" + src)),
	}
}

// live returns t's entry for k, dropping it if it expired.
func (t table) live(k [32]byte, now time.Time, l LoginLimits) *entry {
	e := t[k]
	if e != nil && e.expired(now, l) {
		delete(t, k)
		return nil
	}
	return e
}

func (e *entry) expired(now time.Time, l LoginLimits) bool {
	return e.pending == 0 && !now.Before(e.until) && now.Sub(e.last) >= l.FailureWindow
}

// blocked returns how long e refuses a new attempt (0: admitted).
func (e *entry) blocked(now time.Time, l LoginLimits) time.Duration {
	if e == nil || e.failures == 0 {
		return 0
	}
	if e.failures < l.MaxFailures {
		if e.failures+e.pending < l.MaxFailures {
			return 0
		}
		// The checks in flight will lock it if they fail.
		return l.Lockout
	}
	if now.Before(e.until) {
		return e.until.Sub(now)
	}
	if e.pending > 0 { // the one attempt after the lock is being checked
		return l.Backoff(e.failures + 1)
	}
	return 0
}

// applying returns the entries an attempt falls under: its pair always,
// the user's and the source's unless the pair is trusted.
func (l *LoginLimiter) applying(k keys, now time.Time, lim LoginLimits) (tables []table, ks [][32]byte) {
	tables, ks = []table{l.pairs}, [][32]byte{k.pair}
	if at, ok := l.trusted[k.pair]; ok && now.Sub(at) < trustFor(lim) {
		return tables, ks
	}
	return append(tables, l.users, l.sources), append(ks, k.user, k.source)
}

func trustFor(l LoginLimits) time.Duration {
	if l.TrustFor > 0 {
		return l.TrustFor
	}
	return DefaultTrustFor
}

func maxEntries(l LoginLimits) int {
	if l.MaxEntries > 0 {
		return l.MaxEntries
	}
	return DefaultMaxEntries
}

// Refused reports how long an attempt by user from remote would be refused
// now (0: it would be checked). It reserves nothing: Begin decides.
func (l *LoginLimiter) Refused(user, remote string) time.Duration {
	lim := l.limits()
	if lim.MaxFailures <= 0 {
		return 0
	}
	k := keysOf(user, remote)
	l.mu.Lock()
	defer l.mu.Unlock()
	now := l.now()
	var wait time.Duration
	tables, ks := l.applying(k, now, lim)
	for i, t := range tables {
		wait = max(wait, t.live(ks[i], now, lim).blocked(now, lim))
	}
	return wait
}

// LoginAttempt is an attempt Begin admitted; exactly one of Fail or
// Succeed must be called once its password was checked.
type LoginAttempt struct {
	l       *LoginLimiter
	k       keys
	held    []*entry // entries whose pending count this attempt holds
	done    bool
	limited bool
}

// Begin admits an attempt by user (the name as given, known or not) from
// remote, or returns nil and how long the attempt is refused. An admitted
// attempt is counted as in flight until Fail or Succeed.
func (l *LoginLimiter) Begin(user, remote string) (*LoginAttempt, time.Duration) {
	lim := l.limits()
	a := &LoginAttempt{l: l, k: keysOf(user, remote), limited: lim.MaxFailures > 0}
	if !a.limited {
		return a, 0
	}
	l.mu.Lock()
	defer l.mu.Unlock()
	now := l.now()
	tables, ks := l.applying(a.k, now, lim)
	var wait time.Duration
	entries := make([]*entry, len(tables))
	for i, t := range tables {
		entries[i] = t.live(ks[i], now, lim)
		wait = max(wait, entries[i].blocked(now, lim))
	}
	if wait > 0 {
		return nil, wait
	}
	for _, e := range entries {
		if e != nil {
			e.pending++
			a.held = append(a.held, e)
		}
	}
	return a, 0
}

// release drops the attempt's pending counts; the caller holds l.mu.
func (a *LoginAttempt) release() bool {
	if a.done {
		return false
	}
	a.done = true
	for _, e := range a.held {
		e.pending--
	}
	a.held = nil
	return true
}

// Lock is a lock a failure set: which table, and for how long.
type Lock struct {
	// What is "user", "source" or "user from source".
	What string
	For  time.Duration
}

// Fail records a failed check (wrong password, unknown user, or an
// authorization identity the user may not assume) in all three tables,
// trusted pair or not. It returns the locks this failure set or renewed,
// for the broker's log.
func (a *LoginAttempt) Fail() []Lock {
	l := a.l
	lim := l.limits()
	l.mu.Lock()
	defer l.mu.Unlock()
	if !a.release() || !a.limited || lim.MaxFailures <= 0 {
		return nil
	}
	now := l.now()
	var locks []Lock
	for _, x := range []struct {
		t    table
		k    [32]byte
		what string
	}{{l.pairs, a.k.pair, "user from source"}, {l.users, a.k.user, "user"}, {l.sources, a.k.source, "source"}} {
		e := x.t.live(x.k, now, lim)
		if e == nil {
			e = &entry{}
			x.t.insert(x.k, e, now, lim)
		}
		e.failures++
		e.last = now
		if e.failures >= lim.MaxFailures {
			d := lim.Backoff(e.failures)
			e.until = now.Add(d)
			locks = append(locks, Lock{What: x.what, For: d})
		}
	}
	l.maybeSweep(now, lim)
	return locks
}

// Succeed records a successful login: the pair's failures are cleared and
// the pair is trusted (exempt from the user's and the source's locks) for
// TrustFor.
func (a *LoginAttempt) Succeed() {
	l := a.l
	lim := l.limits()
	l.mu.Lock()
	defer l.mu.Unlock()
	if !a.release() || !a.limited || lim.MaxFailures <= 0 {
		return
	}
	l.succeeded(a.k, lim)
}

// Succeeded records a login that succeeded without a password check (the
// HTTP cache of verified credentials): as Succeed.
func (l *LoginLimiter) Succeeded(user, remote string) {
	lim := l.limits()
	if lim.MaxFailures <= 0 {
		return
	}
	l.mu.Lock()
	defer l.mu.Unlock()
	l.succeeded(keysOf(user, remote), lim)
}

func (l *LoginLimiter) succeeded(k keys, lim LoginLimits) {
	now := l.now()
	if e := l.pairs[k.pair]; e != nil && e.pending == 0 {
		delete(l.pairs, k.pair)
	} else if e != nil {
		e.failures, e.until = 0, time.Time{}
	}
	if _, ok := l.trusted[k.pair]; !ok && len(l.trusted) >= maxEntries(lim) {
		l.sweepTrusted(now, lim)
		if len(l.trusted) >= maxEntries(lim) {
			var oldest [32]byte
			var at time.Time
			first := true
			for tk, t := range l.trusted {
				if first || t.Before(at) {
					oldest, at, first = tk, t, false
				}
			}
			delete(l.trusted, oldest)
		}
	}
	l.trusted[k.pair] = now
	l.maybeSweep(now, lim)
}

// insert adds e under k, making room if the table is full: expired
// entries go first, then the one with the fewest failures (the oldest of
// those), never one with an attempt in flight.
func (t table) insert(k [32]byte, e *entry, now time.Time, l LoginLimits) {
	if len(t) >= maxEntries(l) {
		t.sweep(now, l)
	}
	for len(t) >= maxEntries(l) {
		var victim [32]byte
		var v *entry
		for vk, ve := range t {
			if ve.pending > 0 {
				continue
			}
			if v == nil || ve.failures < v.failures || ve.failures == v.failures && ve.last.Before(v.last) {
				victim, v = vk, ve
			}
		}
		if v == nil {
			break // every entry has an attempt in flight: exceed the cap by those
		}
		delete(t, victim)
	}
	t[k] = e
}

func (t table) sweep(now time.Time, l LoginLimits) {
	for k, e := range t {
		if e.expired(now, l) {
			delete(t, k)
		}
	}
}

func (l *LoginLimiter) sweepTrusted(now time.Time, lim LoginLimits) {
	for k, at := range l.trusted {
		if now.Sub(at) >= trustFor(lim) {
			delete(l.trusted, k)
		}
	}
}

// maybeSweep drops expired entries at most once per sweepEvery.
func (l *LoginLimiter) maybeSweep(now time.Time, lim LoginLimits) {
	if now.Sub(l.lastSweep) < sweepEvery {
		return
	}
	l.lastSweep = now
	for _, t := range []table{l.pairs, l.users, l.sources} {
		t.sweep(now, lim)
	}
	l.sweepTrusted(now, lim)
}

// Sizes returns the number of entries in each table: pairs, users,
// sources, trusted pairs.
func (l *LoginLimiter) Sizes() (pairs, users, sources, trusted int) {
	l.mu.Lock()
	defer l.mu.Unlock()
	return len(l.pairs), len(l.users), len(l.sources), len(l.trusted)
}

// RetryAfterSeconds renders a refusal's wait in whole seconds, rounded
// up, at least 1 (an HTTP Retry-After value).
func RetryAfterSeconds(d time.Duration) string {
	return strconv.FormatInt(max(int64((d+time.Second-1)/time.Second), 1), 10)
}

// RetryAfter renders a refusal's wait for a reply: "retry after 3s".
func RetryAfter(d time.Duration) string { return "retry after " + RetryAfterSeconds(d) + "s" }
