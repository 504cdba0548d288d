package index

import (
	"bytes"
	"testing"
)

// FuzzParseChunk: parseChunk never panics; a chunk it accepts answers
// candidates for any hash without error, each offset inside its range.
func FuzzParseChunk(f *testing.F) {
	for _, n := range []int{0, 1, 9, 200} {
		ents := make([]entry, n)
		for i := range ents {
			ents[i] = entry{hash: uint32(i) * 0x9E3779B1, rel: uint32(i * 3)}
		}
		b := encodeChunk(chunkHeader{from: 10, to: 10 + int64(n)*3 + 1, seg: 0, minID: 5, maxID: 50}, ents)
		f.Add(b, uint32(0x9E3779B1))
		if len(b) > headerSize+8 {
			f.Add(b[:len(b)-8], uint32(0))
		}
	}
	f.Add([]byte("MQKX\x01"), uint32(1))
	f.Fuzz(func(t *testing.T, b []byte, hash uint32) {
		if _, err := parseHeader(b); err != nil {
			if _, err2 := parseChunk(b); err2 == nil {
				t.Fatal("parseChunk accepted what parseHeader refused")
			}
			return
		}
		h, err := parseChunk(b)
		if err != nil {
			return
		}
		offs, err := candidates(bytes.NewReader(b).ReadAt, h, hash)
		if err != nil {
			t.Fatalf("candidates on a valid chunk: %v", err)
		}
		for _, o := range offs {
			if o < h.from || o >= h.to {
				t.Fatalf("candidate %d outside %d..%d", o, h.from, h.to)
			}
		}
		// A valid chunk re-encodes to itself.
		var ents []entry
		for k := 0; k < int(h.n); k++ {
			p := int(h.validatedBytes) - entrySize*int(h.n) + entrySize*k
			ents = append(ents, entry{be32(b[p:]), be32(b[p+4:])})
		}
		if fanBits(len(ents)) == h.bits {
			if again := encodeChunk(h, ents); !bytes.Equal(again, b) {
				t.Fatal("a valid chunk does not re-encode to itself")
			}
		}
	})
}

func be32(b []byte) uint32 {
	return uint32(b[0])<<24 | uint32(b[1])<<16 | uint32(b[2])<<8 | uint32(b[3])
}
