package broker

import (
	"bytes"
	"testing"

	"github.com/stretchr/testify/require"
)

// FuzzEpochs: parseEpochs (data_dir/epochs) and parseStarts (the answer
// to stats epoch-start:<E>) never panic on any input, and what they
// accept formats back to something they parse to the same value.
func FuzzEpochs(f *testing.F) {
	book := &epochBook{}
	book.add(epochEntry{Epoch: 1, Held: true, Starts: map[partKey]int64{{"repl", 0}: 0, {"repl", 1}: 0}})
	book.add(epochEntry{Epoch: 4, Starts: map[partKey]int64{{"repl", 0}: 56780, {"t.x-y", 3}: 12}})
	f.Add(book.format())
	f.Add([]byte(epochsHeader + "\n"))
	f.Add([]byte(epochsHeader + "\nepoch 2 held\nstart t 0 -1\n"))
	f.Add([]byte(epochsHeader + "\nepoch 3 copied\nepoch 2 held\n"))
	f.Add([]byte("metaq-epochs 2\n"))
	f.Add(formatStarts(4, 5, map[partKey]int64{{"repl", 0}: 56780, {"repl", 1}: 9}))
	f.Add(formatStarts(0, 1, nil))
	f.Add([]byte("epoch 1\n"))
	f.Add([]byte("epoch 1 2\nrepl x 3\n"))
	f.Fuzz(func(t *testing.T, data []byte) {
		if eb, err := parseEpochs(data); err == nil {
			again, err := parseEpochs(eb.format())
			require.NoError(t, err)
			require.True(t, bytes.Equal(eb.format(), again.format()))
		}
		if e, cur, starts, err := parseStarts(data); err == nil {
			e2, cur2, starts2, err := parseStarts(formatStarts(e, cur, starts))
			require.NoError(t, err)
			require.Equal(t, e, e2)
			require.Equal(t, cur, cur2)
			require.Equal(t, starts, starts2)
		}
	})
}

// TestEpochBook: add keeps epochs rising (a later entry replaces those at
// or above its epoch), firstAfter finds the next epoch, upTo cuts, and the
// file round-trips through save and loadEpochs.
func TestEpochBook(t *testing.T) {
	eb := &epochBook{}
	for _, e := range []int64{1, 3, 5} {
		eb.add(epochEntry{Epoch: e, Held: e != 3, Starts: map[partKey]int64{{"t", 0}: e * 100}})
	}
	en, ok := eb.firstAfter(1)
	require.True(t, ok)
	require.Equal(t, int64(3), en.Epoch)
	_, ok = eb.firstAfter(5)
	require.False(t, ok)
	require.Equal(t, int64(3), eb.upTo(4).last())
	eb.add(epochEntry{Epoch: 4, Starts: map[partKey]int64{{"t", 0}: 350}})
	require.Equal(t, int64(4), eb.last())
	require.Len(t, eb.entries, 3)
	dir := t.TempDir()
	require.NoError(t, eb.save(dir))
	got, err := loadEpochs(dir)
	require.NoError(t, err)
	require.Equal(t, eb.format(), got.format())
	empty, err := loadEpochs(t.TempDir())
	require.NoError(t, err)
	require.Zero(t, empty.last())
}
