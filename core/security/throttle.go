package security

import (
	"net"
	"strconv"
	"strings"
	"sync"
	"time"
)

// Throttled logging of failures a client can cause at will (issue 22,
// finding 10b): every bare connect to a TLS port fails its handshake, and
// each failure used to be one log line. A logThrottle lets one line per
// source address and minute through and counts the rest, which the next
// line reports; the failures themselves are all counted (TLSFailures,
// Admission).

const (
	// throttleEvery is how often a line about one source address may be
	// logged.
	throttleEvery = time.Minute
	// throttleMaxKeys bounds the addresses remembered; beyond it, new
	// addresses share one entry (throttleOverflow).
	throttleMaxKeys = 4096
	// throttleOverflow is the key of the addresses past throttleMaxKeys.
	throttleOverflow = "(other addresses)"
)

// logThrottle decides which lines about a source address are logged: at
// most one per every per address, with the count of those held back since.
type logThrottle struct {
	every   time.Duration
	maxKeys int
	now     func() time.Time // time.Now; tests replace it

	mu   sync.Mutex
	seen map[string]*throttled
	// dropped counts lines held back for addresses forgotten since (their
	// entry was pruned), reported with the next line logged.
	dropped   int
	lastPrune time.Time
}

type throttled struct {
	last       time.Time // when a line was last logged
	suppressed int       // lines held back since
}

func newLogThrottle(every time.Duration, maxKeys int) *logThrottle {
	return &logThrottle{every: every, maxKeys: maxKeys, now: time.Now, seen: make(map[string]*throttled)}
}

// allow reports whether a line about key may be logged now; if so, note
// is what to append to it about the lines held back before ("" if none).
func (t *logThrottle) allow(key string) (ok bool, note string) {
	t.mu.Lock()
	defer t.mu.Unlock()
	now := t.now()
	e := t.seen[key]
	if e == nil {
		if len(t.seen) >= t.maxKeys {
			t.prune(now)
		}
		if len(t.seen) >= t.maxKeys {
			key = throttleOverflow
			e = t.seen[key]
		}
		if e == nil {
			e = &throttled{}
			t.seen[key] = e
		}
	}
	if !e.last.IsZero() && now.Sub(e.last) < t.every {
		e.suppressed++
		return false, ""
	}
	var parts []string
	if e.suppressed > 0 {
		parts = append(parts, strconv.Itoa(e.suppressed)+" more from "+key+" not logged since "+e.last.UTC().Format(time.TimeOnly))
	}
	if t.dropped > 0 {
		parts = append(parts, strconv.Itoa(t.dropped)+" more from other addresses not logged")
		t.dropped = 0
	}
	e.last, e.suppressed = now, 0
	if len(parts) > 0 {
		note = " (" + strings.Join(parts, "; ") + ")"
	}
	return true, note
}

// prune forgets the entries last logged more than every ago (their next
// line would be logged anyway), at most once a second. The caller holds mu.
func (t *logThrottle) prune(now time.Time) {
	if now.Sub(t.lastPrune) < time.Second {
		return
	}
	t.lastPrune = now
	for k, e := range t.seen {
		if now.Sub(e.last) >= t.every {
			t.dropped += e.suppressed
			delete(t.seen, k)
		}
	}
}

// sourceKey is the throttling key of a remote address: its IP without the
// port (a client reconnecting gets a new port).
func sourceKey(remote string) string {
	if h, _, err := net.SplitHostPort(remote); err == nil {
		return h
	}
	return remote
}
