package otelmetaq_test

import (
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/metaq-go/metaq/sdk/client/otelmetaq"
	"github.com/metaq-go/metaq/sdk/message"
)

// TestHeadersCarrier: Get reads the last header of a key (a null or
// non-UTF-8 value as none), Set replaces every header of its key by one at
// the end without touching the caller's backing array, Keys lists each key
// once.
func TestHeadersCarrier(t *testing.T) {
	m := &message.Message{Headers: message.Headers{
		{Key: "traceparent", Value: []byte("old")},
		{Key: "a", Value: []byte("1")},
		{Key: "traceparent", Value: []byte("older")},
		{Key: "null"},
		{Key: "bin", Value: []byte{0xff, 0xfe}},
	}}
	orig := m.Headers
	c := otelmetaq.NewHeadersCarrier(m)
	require.Equal(t, "older", c.Get("traceparent"))
	require.Equal(t, "", c.Get("null"))
	require.Equal(t, "", c.Get("bin"))
	require.Equal(t, "", c.Get("missing"))
	require.Equal(t, []string{"traceparent", "a", "null", "bin"}, c.Keys())

	c.Set("traceparent", "new")
	require.Equal(t, message.Headers{
		{Key: "a", Value: []byte("1")},
		{Key: "null"},
		{Key: "bin", Value: []byte{0xff, 0xfe}},
		{Key: "traceparent", Value: []byte("new")},
	}, m.Headers)
	require.Equal(t, "old", string(orig[0].Value), "the old slice is not rewritten")
	require.Equal(t, "new", c.Get("traceparent"))

	var empty otelmetaq.HeadersCarrier
	require.Equal(t, "", empty.Get("x"))
	require.Nil(t, empty.Keys())
	empty.Set("x", "y") // no headers to set: a no-op, no panic
}
