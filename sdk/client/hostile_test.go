package client

import (
	"bytes"
	"errors"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/metaq-go/metaq/sdk/protocol"
)

// TestHostileBrokerFlood: a "broker" that answers with 8 MiB of newlines
// (the stack overflow of issue 7, seen from the client side) or of " \r\n"
// makes the call fail with a clear error; the client does not crash.
func TestHostileBrokerFlood(t *testing.T) {
	for _, tc := range []struct{ name, unit, msg string }{
		{"newlines", "\n", "too many empty lines"},
		{"crlf", "\r\n", "too many empty lines"},
		{"space crlf", " \r\n", `unknown command ""`},
		{"NULs", "\x00", "header line too long"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			flood := bytes.Repeat([]byte(tc.unit), 8<<20/len(tc.unit))
			f := startFake(t, func(w *fakeWriter, r *protocol.Request) {
				w.write(flood)
				w.result(protocol.StatusOK, "STATS\r\nEND\r\n", r.Opaque)
			})
			cn := newConn(f.addr(), defaultConnOptions())
			defer cn.close()
			_, err := stats(ctxT(t, 10*time.Second), cn, "")
			require.ErrorIs(t, err, ErrConnectionLost)
			var pe *protocol.Error
			require.True(t, errors.As(err, &pe), "%v", err)
			require.Contains(t, pe.Msg, tc.msg)
		})
	}
}
