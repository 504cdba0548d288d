package msgsout

import (
	"sync/atomic"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/metaq-go/metaq/core/store"
)

// TestNoteCoalesces: a range starting inside the open one extends it and
// notes what the two share as an overlap; a range elsewhere closes the
// open one.
func TestNoteCoalesces(t *testing.T) {
	var led Ledger
	var out atomic.Int64
	s := led.Open(new(store.Log))
	s.Note(&out, 0, 100)
	s.Note(&out, 90, 100) // a consumer reading on: re-fetches [90, 100)
	require.Equal(t, []span{{90, 100, true}}, s.todo)
	require.Equal(t, [2]int64{0, 190}, [2]int64{s.a, s.b})
	s.Note(&out, 190, 10) // exactly at the end: no overlap
	require.Len(t, s.todo, 1)
	require.Equal(t, int64(200), s.b)
	s.Note(&out, 500, 10) // elsewhere: [0, 200) closes
	require.Equal(t, []span{{90, 100, true}, {0, 200, false}}, s.todo)
	require.Equal(t, [2]int64{500, 510}, [2]int64{s.a, s.b})
	s.Note(&out, 0, 50) // before the open range: [500, 510) closes
	require.Equal(t, span{500, 510, false}, s.todo[2])
	s.Close()
	require.True(t, s.dead)
	require.Contains(t, led.streams, s)
}

// BenchmarkNoteSent is what messages out cost a get: the connection's
// stream lookup and the note of the range sent (here a consumer reading
// on, each get re-fetching the previous one's partial record: an overlap
// to check later).
func BenchmarkNoteSent(b *testing.B) {
	var led Ledger
	outs := map[*store.Log]*Stream{}
	l := new(store.Log)
	var out atomic.Int64
	off := int64(0)
	b.ReportAllocs()
	for range b.N {
		s := outs[l]
		if s == nil {
			s = led.Open(l)
			outs[l] = s
		}
		s.Note(&out, off, 65536)
		off += 65000
		if len(s.todo) >= 4096 { // what a counting pass takes
			s.todo = s.todo[:0]
		}
	}
}
