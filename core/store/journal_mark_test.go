package store

import (
	"os"
	"path/filepath"
	"testing"

	"github.com/stretchr/testify/require"
)

// TestJournalMarkCapped: a durable mark further back than the header's
// 24-bit field can say (about 256 MiB) is written as markMax and read as
// markCapped, a mark without a position: never as a mark higher than the
// true one. A torn tail inside such a round (its records far past the
// round's mark) is then still told from damage: the capped records after
// it neither raise the highest mark nor count as unmarked.
func TestJournalMarkCapped(t *testing.T) {
	const start = int64(1) << 32
	const far = int64(300) << 20 // past the field's reach
	for _, pos := range []int64{start + far, start + 16*(markMax-1) + 1, start + 16*(markMax-1) + 100} {
		v := markField(pos, start)
		require.Equal(t, uint32(markMax), v, "distance %d", pos-start)
		var rec [jHeaderSize]byte
		sealJRecord(rec[:], pos, 1, start, recSkip)
		h := parseJHeader(rec[:])
		require.Equal(t, int64(markCapped), h.mark(), "distance %d: the decoded mark is not above the true one %d", pos-start, start)
		sealJRecord(rec[:], pos, 1, h.mark(), recSkip)
		require.Equal(t, uint32(markMax), parseJHeader(rec[:]).markv, "a capped mark round-trips")
	}
	// The largest distance the field still holds decodes exactly (to a
	// mark at or below the true one, by less than markUnit).
	for _, d := range []int64{16*(markMax-2) - 15, 16 * (markMax - 2)} {
		var rec [jHeaderSize]byte
		sealJRecord(rec[:], start+d, 1, start, recSkip)
		m := parseJHeader(rec[:]).mark()
		require.LessOrEqual(t, m, start, "distance %d", d)
		require.Greater(t, m, start-markUnit, "distance %d", d)
	}

	// One round staged with mark start: its first file (sparse, 300 MiB
	// long) holds a record, a damaged one (the torn page), another and
	// a skip record; the next file, 300 MiB on, holds a record whose
	// mark is too far back for its field.
	dir := t.TempDir()
	rec := func(pos int64, typ byte, payload []byte) []byte {
		r := append(make([]byte, jHeaderSize), payload...)
		sealJRecord(r, pos, 1, start, typ)
		return r
	}
	reg := func(name string) []byte {
		return appendRegisterPayload(nil, registerRecord{name: name, end: 0, lastID: 0})
	}
	var f1 []byte
	f1 = append(f1, rec(start, recRegister, reg("a-0"))...)
	torn := start + int64(len(f1))
	d := rec(torn, recRegister, reg("b-0"))
	d[len(d)-1] ^= 0x40 // a lost page: the record no longer verifies
	f1 = append(f1, d...)
	f1 = append(f1, rec(start+int64(len(f1)), recRegister, reg("c-0"))...)
	f1 = append(f1, rec(start+int64(len(f1)), recSkip, nil)...)
	second := start + far
	f2 := rec(second, recRegister, reg("d-0"))
	require.Equal(t, uint32(markMax), parseJHeader(f2).markv)

	open := func(at int64, b []byte, size int64) *jfile {
		f, err := os.OpenFile(filepath.Join(dir, journalName(at)), os.O_RDWR|os.O_CREATE, 0o644)
		require.NoError(t, err)
		t.Cleanup(func() { f.Close() })
		_, err = f.WriteAt(b, 0)
		require.NoError(t, err)
		require.NoError(t, f.Truncate(size)) // sparse
		return &jfile{start: at, size: size, f: f}
	}
	files := []*jfile{open(start, f1, far), open(second, f2, 64<<10)}
	sc, err := scanJournal(files)
	require.NoError(t, err)
	require.Equal(t, 4, sc.records, "records: %s", sc.stopped)
	require.Len(t, sc.holes, 1)
	require.Equal(t, torn, sc.holes[0].pos)
	require.Equal(t, start, sc.maxMark, "the capped mark raised the highest mark")
	require.Equal(t, int64(-1), sc.lastUnmarked, "the capped mark counted as none")
	h, ok := sc.tornCandidate()
	require.True(t, ok, "a torn tail past every durable mark is refused as damage")
	require.Equal(t, torn, h.pos)
}
