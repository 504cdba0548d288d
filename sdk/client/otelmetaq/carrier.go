package otelmetaq

import (
	"unicode/utf8"

	"go.opentelemetry.io/otel/propagation"

	"github.com/metaq-go/metaq/sdk/message"
)

// HeadersCarrier is a propagation.TextMapCarrier over a message's headers:
// what a propagator injects into and extracts from (W3C traceparent and
// tracestate by default).
type HeadersCarrier struct {
	Headers *message.Headers
}

var _ propagation.TextMapCarrier = HeadersCarrier{}

// NewHeadersCarrier returns the carrier of m's headers.
func NewHeadersCarrier(m *message.Message) HeadersCarrier {
	return HeadersCarrier{Headers: &m.Headers}
}

// Get returns the value of the last header named key (message.Headers.Get),
// or "" when there is none, its value is null, or it is not valid UTF-8
// (a propagator then ignores it).
func (c HeadersCarrier) Get(key string) string {
	if c.Headers == nil {
		return ""
	}
	v, ok := c.Headers.Get(key)
	if !ok || !utf8.Valid(v) {
		return ""
	}
	return string(v)
}

// Set replaces every header named key by one header key=value at the end,
// so that a message sent again (or produced with stale trace headers)
// carries exactly one.
func (c HeadersCarrier) Set(key, value string) {
	if c.Headers == nil {
		return
	}
	h := (*c.Headers)[:0:0]
	for _, x := range *c.Headers {
		if x.Key != key {
			h = append(h, x)
		}
	}
	*c.Headers = append(h, message.Header{Key: key, Value: []byte(value)})
}

// Keys returns the header keys, each once, in order of first appearance.
func (c HeadersCarrier) Keys() []string {
	if c.Headers == nil {
		return nil
	}
	keys := make([]string, 0, len(*c.Headers))
	seen := make(map[string]struct{}, len(*c.Headers))
	for _, x := range *c.Headers {
		if _, ok := seen[x.Key]; !ok {
			seen[x.Key] = struct{}{}
			keys = append(keys, x.Key)
		}
	}
	return keys
}
