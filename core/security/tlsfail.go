package security

import (
	"crypto/tls"
	"errors"
	"log"
	"log/slog"
	"net"
	"strings"
	"sync/atomic"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/metaq-go/metaq/internal/logx"
	"github.com/metaq-go/metaq/sdk/protocol"
)

// TLSFailures counts the failed TLS handshakes of the protocol listener
// and of the HTTPS listener (stats tls_handshake_failures,
// metaq_tls_handshake_failures_total), and logs them at warn, throttled
// per source address (each listener its own logThrottle).
type TLSFailures struct {
	protocol, http       atomic.Int64
	protocolLog, httpLog *logThrottle
	warnf                func(format string, args ...any)
}

// NewTLSFailures returns the handshake failure counters, logging to log.
func NewTLSFailures(log *slog.Logger) *TLSFailures {
	return &TLSFailures{
		protocolLog: newLogThrottle(throttleEvery, throttleMaxKeys),
		httpLog:     newLogThrottle(throttleEvery, throttleMaxKeys),
		warnf:       logx.Printf(log, slog.LevelWarn),
	}
}

// Failed counts a failed handshake on listener ("protocol" or "http")
// from remote and logs it if the throttle lets it through.
func (f *TLSFailures) Failed(listener, remote, reason string) {
	th := f.protocolLog
	if listener == "http" {
		f.http.Add(1)
		th = f.httpLog
	} else {
		f.protocol.Add(1)
	}
	if ok, note := th.allow(sourceKey(remote)); ok {
		if len(reason) > 200 {
			reason = reason[:200] + "..."
		}
		f.warnf("%s: TLS handshake from %s failed: %s%s", listener, remote, protocol.Printable([]byte(reason)), note)
	}
}

// Count is the failed handshakes of listener ("protocol" or "http").
func (f *TLSFailures) Count(listener string) int64 {
	if listener == "http" {
		return f.http.Load()
	}
	return f.protocol.Load()
}

// Handshake runs a protocol connection's TLS handshake within auth_timeout
// of its accept (idle_timeout if that is 0; no limit if both are), then
// clears the deadline.
func Handshake(tc *tls.Conn, accepted time.Time, authTimeout, idleTimeout time.Duration) error {
	var dl time.Time
	if authTimeout > 0 {
		dl = accepted.Add(authTimeout)
	} else if idleTimeout > 0 {
		dl = accepted.Add(idleTimeout)
	}
	tc.SetDeadline(dl)
	err := tc.Handshake()
	tc.SetDeadline(time.Time{})
	return err
}

// HandshakeReason is what Failed logs of a protocol handshake that failed
// with err: its text, and if it ran out of time (its deadline, or
// auth_timeout: expired) what it was not completed within. timedOut
// says its deadline passed.
func HandshakeReason(err error, expired bool) (reason string, timedOut bool) {
	var ne net.Error
	timedOut = errors.As(err, &ne) && ne.Timeout()
	reason = err.Error()
	if expired || timedOut {
		reason = "not completed within auth_timeout (" + reason + ")"
	}
	return reason, timedOut
}

// ErrorLog is the HTTP server's ErrorLog: "http: TLS handshake error"
// lines are counted and throttled (Failed); the rest go to next.
func (f *TLSFailures) ErrorLog(next *log.Logger) *log.Logger {
	return log.New(&httpErrorFilter{f: f, next: next}, "", 0)
}

// httpErrorFilter is the writer under ErrorLog.
type httpErrorFilter struct {
	f    *TLSFailures
	next *log.Logger
}

// tlsHandshakeErr is how net/http starts its handshake failure lines:
// "http: TLS handshake error from <addr>: <reason>".
const tlsHandshakeErr = "http: TLS handshake error from "

func (w *httpErrorFilter) Write(p []byte) (int, error) {
	line := strings.TrimSuffix(string(p), "\n")
	if i := strings.Index(line, tlsHandshakeErr); i >= 0 {
		rest := line[i+len(tlsHandshakeErr):]
		addr, reason, _ := strings.Cut(rest, ": ")
		w.f.Failed("http", addr, reason)
		return len(p), nil
	}
	w.next.Print(line)
	return len(p), nil
}

var dTLSFailures = prometheus.NewDesc("metaq_tls_handshake_failures_total", "Failed TLS handshakes, by listener: protocol (tls_port) or http (the HTTPS port).", []string{"listener"}, nil)

// Stats writes the stats line of the failures.
func (f *TLSFailures) Stats(kv func(string, any)) {
	kv("tls_handshake_failures", f.protocol.Load()+f.http.Load())
}

// Collect sends the failures' metrics.
func (f *TLSFailures) Collect(ch chan<- prometheus.Metric) {
	ch <- prometheus.MustNewConstMetric(dTLSFailures, prometheus.CounterValue, float64(f.protocol.Load()), "protocol")
	ch <- prometheus.MustNewConstMetric(dTLSFailures, prometheus.CounterValue, float64(f.http.Load()), "http")
}
