package message

import (
	"bytes"
	"errors"
	"hash/crc32"
	"testing"

	"github.com/stretchr/testify/require"
)

func TestChecksumMasksSignBit(t *testing.T) {
	b := []byte("hello")
	require.Equal(t, crc32.ChecksumIEEE(b)&0x7FFFFFFF, Checksum(b))
	require.Equal(t, uint32(907060870), Checksum(b)) // reference §1's example
}

func TestRecordRoundTrip(t *testing.T) {
	m := Message{Topic: "t", Body: []byte("payload"), Attribute: "tag=a", HasAttribute: true}
	data := m.AppendData(nil)
	require.Equal(t, m.DataLen(), len(data))
	rec := AppendRecord(nil, 42, m.Flag(), data)
	require.Len(t, rec, HeaderSize+len(data))
	r, n, err := ParseRecord(rec, 0)
	require.NoError(t, err)
	require.Equal(t, len(rec), n)
	require.Equal(t, int64(42), r.ID)
	got, err := r.Message("t", 3)
	require.NoError(t, err)
	require.Equal(t, "tag=a", got.Attribute)
	require.True(t, got.HasAttribute)
	require.Equal(t, "payload", string(got.Body))
	require.Equal(t, int32(3), got.Partition)
}

func TestParseRecordErrors(t *testing.T) {
	rec := AppendRecord(nil, 1, 0, []byte("abcdef"))
	for cut := 0; cut < len(rec); cut++ {
		_, _, err := ParseRecord(rec[:cut], 0)
		require.ErrorIs(t, err, ErrShortRecord, "cut %d", cut)
	}
	for i := range rec {
		if i >= 8 && i < 20 { // id and flag are not covered by the crc
			continue
		}
		bad := bytes.Clone(rec)
		bad[i] ^= 0x40
		_, _, err := ParseRecord(bad, 0)
		require.Error(t, err, "flip at %d", i)
	}
	_, _, err := ParseRecord(rec, 3)
	require.ErrorIs(t, err, ErrCorruptRecord)
}

func TestIterator(t *testing.T) {
	var buf []byte
	for i := 0; i < 5; i++ {
		buf = AppendRecord(buf, int64(i), 0, bytes.Repeat([]byte{byte('a' + i)}, i+1))
	}
	full := len(buf)
	buf = append(buf, AppendRecord(nil, 9, 0, []byte("partial"))[:10]...)
	it := NewIterator(buf, 1000, 0)
	var ids []int64
	var offs []int64
	for it.Next() {
		ids = append(ids, it.Record().ID)
		offs = append(offs, it.Record().Offset)
	}
	require.NoError(t, it.Err())
	require.Equal(t, []int64{0, 1, 2, 3, 4}, ids)
	require.Equal(t, int64(1000), offs[0])
	require.Equal(t, int64(1000+21), offs[1])
	require.Equal(t, full, it.Consumed())
	require.Equal(t, int64(1000+full), it.NextOffset())

	bad := bytes.Clone(buf[:full])
	bad[HeaderSize+21] ^= 1 // corrupt second record's data
	it = NewIterator(bad, 0, 0)
	require.True(t, it.Next())
	require.False(t, it.Next())
	require.True(t, errors.Is(it.Err(), ErrCorruptRecord))
	require.Equal(t, 21, it.Consumed())
}

func TestSplitDataErrors(t *testing.T) {
	_, _, _, err := SplitData(FlagHasAttribute, []byte{0, 0})
	require.ErrorIs(t, err, ErrBadAttribute)
	_, _, _, err = SplitData(FlagHasAttribute, []byte{0, 0, 0, 9, 'a'})
	require.ErrorIs(t, err, ErrBadAttribute)
	_, _, _, err = SplitData(FlagHasAttribute, []byte{0, 0, 0, 1, 0xff})
	require.ErrorIs(t, err, ErrBadAttribute)
	a, has, body, err := SplitData(FlagHasAttribute, []byte{0, 0, 0, 0, 'x'})
	require.NoError(t, err)
	require.True(t, has)
	require.Empty(t, a)
	require.Equal(t, "x", string(body))
}

func TestIDParts(t *testing.T) {
	id := int64(1000)<<22 | int64(5)<<12 | 7
	ms, b, s := IDParts(id)
	require.Equal(t, IDEpoch+1000, ms)
	require.Equal(t, 5, b)
	require.Equal(t, 7, s)
}

// FuzzParseRecord: never panics; a record that parses re-encodes to the same bytes.
func FuzzParseRecord(f *testing.F) {
	f.Add(AppendRecord(nil, 1, 0, []byte("hello")))
	f.Add(AppendRecord(nil, -1, 1, []byte{0, 0, 0, 1, 'a', 'b'}))
	f.Add([]byte{0xff, 0xff, 0xff, 0xff, 0, 0, 0, 0})
	f.Add(make([]byte, 20))
	f.Fuzz(func(t *testing.T, b []byte) {
		it := NewIterator(b, 0, 1<<20)
		for it.Next() {
			r := it.Record()
			enc := AppendRecordCRC(nil, r.ID, r.Flag, r.CRC, r.Data)
			if !bytes.Equal(enc, b[r.Offset:r.Offset+int64(len(enc))]) {
				t.Fatal("re-encode differs")
			}
			_, _ = r.Message("t", 0)
		}
		if it.Consumed() > len(b) {
			t.Fatal("consumed past end")
		}
	})
}
