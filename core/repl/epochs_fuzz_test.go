package repl

import (
	"bytes"
	"testing"

	"github.com/stretchr/testify/require"
)

// FuzzEpochs: ParseEpochs (data_dir/epochs) and ParseStarts (the answer
// to stats epoch-start:<E>) never panic on any input, and what they
// accept formats back to something they parse to the same value.
func FuzzEpochs(f *testing.F) {
	book := &EpochBook{}
	book.Add(EpochEntry{Epoch: 1, Held: true, Starts: map[PartKey]int64{{"repl", 0}: 0, {"repl", 1}: 0}})
	book.Add(EpochEntry{Epoch: 4, Starts: map[PartKey]int64{{"repl", 0}: 56780, {"t.x-y", 3}: 12}})
	f.Add(book.Format())
	f.Add([]byte(epochsHeader + "\n"))
	f.Add([]byte(epochsHeader + "\nepoch 2 held\nstart t 0 -1\n"))
	f.Add([]byte(epochsHeader + "\nepoch 3 copied\nepoch 2 held\n"))
	f.Add([]byte("metaq-epochs 2\n"))
	f.Add(FormatStarts(4, 5, map[PartKey]int64{{"repl", 0}: 56780, {"repl", 1}: 9}))
	f.Add(FormatStarts(0, 1, nil))
	f.Add([]byte("epoch 1\n"))
	f.Add([]byte("epoch 1 2\nrepl x 3\n"))
	f.Fuzz(func(t *testing.T, data []byte) {
		if eb, err := ParseEpochs(data); err == nil {
			again, err := ParseEpochs(eb.Format())
			require.NoError(t, err)
			require.True(t, bytes.Equal(eb.Format(), again.Format()))
		}
		if e, cur, starts, err := ParseStarts(data); err == nil {
			e2, cur2, starts2, err := ParseStarts(FormatStarts(e, cur, starts))
			require.NoError(t, err)
			require.Equal(t, e, e2)
			require.Equal(t, cur, cur2)
			require.Equal(t, starts, starts2)
		}
	})
}

// TestEpochBook: add keeps epochs rising (a later entry replaces those at
// or above its epoch), firstAfter finds the next epoch, upTo cuts, and the
// file round-trips through save and LoadEpochs.
func TestEpochBook(t *testing.T) {
	eb := &EpochBook{}
	for _, e := range []int64{1, 3, 5} {
		eb.Add(EpochEntry{Epoch: e, Held: e != 3, Starts: map[PartKey]int64{{"t", 0}: e * 100}})
	}
	en, ok := eb.FirstAfter(1)
	require.True(t, ok)
	require.Equal(t, int64(3), en.Epoch)
	_, ok = eb.FirstAfter(5)
	require.False(t, ok)
	require.Equal(t, int64(3), eb.UpTo(4).Last())
	eb.Add(EpochEntry{Epoch: 4, Starts: map[PartKey]int64{{"t", 0}: 350}})
	require.Equal(t, int64(4), eb.Last())
	require.Len(t, eb.entries, 3)
	dir := t.TempDir()
	require.NoError(t, eb.Save(dir))
	got, err := LoadEpochs(dir)
	require.NoError(t, err)
	require.Equal(t, eb.Format(), got.Format())
	empty, err := LoadEpochs(t.TempDir())
	require.NoError(t, err)
	require.Zero(t, empty.Last())
}
