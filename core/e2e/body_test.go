package e2e

import (
	"fmt"
	"math/rand/v2"
	"testing"

	"github.com/stretchr/testify/require"
)

// TestParseBodyFormat holds matchBody, the hand-written parser readLog
// uses, to bodyRE, the body format: on bodies makeBody writes and on
// every one-byte change, cut and extension of some of them, both accept
// the same bodies with the same fields.
func TestParseBodyFormat(t *testing.T) {
	t.Parallel()
	rng := rand.New(rand.NewPCG(7, 8))
	alphabet := []byte("09afgz|AZ e=rpsn\x00\xff")
	check := func(b []byte) {
		t.Helper()
		m := bodyRE.FindSubmatch(b)
		r, p, s, n, pad, sum, ok := matchBody(b)
		require.Equal(t, m != nil, ok, "body %q", b)
		if m == nil {
			return
		}
		require.Equal(t, [4]string{string(m[1]), string(m[2]), string(m[3]), string(m[4])},
			[4]string{fmt.Sprintf("%02d", r), fmt.Sprintf("%02d", p), fmt.Sprintf("%07d", s), fmt.Sprintf("%05d", n)}, "body %q", b)
		require.Equal(t, string(m[5]), string(pad), "body %q", b)
		require.Equal(t, string(m[6]), string(sum), "body %q", b)
	}
	for i := 0; i < 40; i++ {
		k := msgKey{Round: rng.IntN(100), Prod: rng.IntN(100), Seq: rng.IntN(10_000_000)}
		b := makeBody(rng, k, rng.IntN(12))
		check(b)
		got, err := parseBody(b)
		require.NoError(t, err)
		require.Equal(t, k, got)
		for at := range b {
			for _, c := range alphabet {
				changed := append([]byte(nil), b...)
				changed[at] = c
				check(changed)
			}
			check(b[:at])
			check(append(append([]byte(nil), b[:at]...), append([]byte{'a'}, b[at:]...)...))
		}
		check(append(append([]byte(nil), b...), 'a'))
	}
}
