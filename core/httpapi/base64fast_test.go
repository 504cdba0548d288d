package httpapi

import (
	"bytes"
	"encoding/base64"
	"testing"
)

// checkBase64 fails t unless decodeBase64 of src is what
// base64.StdEncoding.Decode makes of it: the same bytes, the same error.
func checkBase64(t *testing.T, src []byte) {
	t.Helper()
	want := make([]byte, base64.StdEncoding.DecodedLen(len(src)))
	wn, werr := base64.StdEncoding.Decode(want, src)
	got := make([]byte, base64.StdEncoding.DecodedLen(len(src)))
	gn, gerr := decodeBase64(got, src)
	if (werr == nil) != (gerr == nil) || werr != nil && werr.Error() != gerr.Error() {
		t.Fatalf("%q: error %v, encoding/base64's %v", src, gerr, werr)
	}
	if werr == nil && (gn != wn || !bytes.Equal(got[:gn], want[:wn])) {
		t.Fatalf("%q: %q, encoding/base64's %q", src, got[:gn], want[:wn])
	}
	if n, ok := decodeBase64Fast(got, src); ok && (werr != nil || n != wn) {
		t.Fatalf("%q: the fast path took what encoding/base64 refuses or reads otherwise", src)
	}
}

// base64Seeds are values the fast path takes and values it leaves to
// encoding/base64 (line breaks, nonzero bits before the padding, padding
// inside, bad characters, lengths not a multiple of four).
var base64Seeds = []string{
	"", "AA==", "AAE=", "AAEC", "AAECAwQFBgcICQ==", "QUJDREVGR0hJSktMTU5PUFFSU1RVVldYWVo=",
	"AB==", "AAF=", "A===", "====", "A", "AAE", "AA=A", "AA==AAEC", "AAEC\nAwQF", "AAEC\r\nAwQF\r\n",
	"AAEC!AAE", "AAECAwQF\"", "-_-_", "AAECAwQFBgcICQoLDA0ODxAREhMUFRYXGBkaGxwdHh8g", "+/+/+/+/",
}

func TestDecodeBase64(t *testing.T) {
	for _, s := range base64Seeds {
		checkBase64(t, []byte(s))
	}
	// Every length of 0..300 bytes, with a bad character at each place
	// of some and the padding's bits set.
	for n := range 300 {
		p := make([]byte, n)
		for i := range p {
			p[i] = byte(i*131 + n)
		}
		enc := []byte(base64.StdEncoding.EncodeToString(p))
		checkBase64(t, enc)
		if n%7 == 0 {
			for i := range enc {
				bad := bytes.Clone(enc)
				bad[i] = '*'
				checkBase64(t, bad)
			}
		}
		if k := bytes.IndexByte(enc, '='); k > 0 {
			bits := bytes.Clone(enc)
			bits[k-1] = '/'
			checkBase64(t, bits)
		}
	}
}

// FuzzBase64 checks decodeBase64 against encoding/base64.
func FuzzBase64(f *testing.F) {
	for _, s := range base64Seeds {
		f.Add([]byte(s))
	}
	f.Fuzz(func(t *testing.T, src []byte) {
		checkBase64(t, src)
	})
}

func BenchmarkDecodeBase64(b *testing.B) {
	src := []byte(base64.StdEncoding.EncodeToString(bytes.Repeat([]byte("abcdefghijklmnop"), 64)))
	dst := make([]byte, base64.StdEncoding.DecodedLen(len(src)))
	for _, c := range []struct {
		name string
		dec  func([]byte, []byte) (int, error)
	}{{"stdlib", base64.StdEncoding.Decode}, {"fast", decodeBase64}} {
		b.Run(c.name, func(b *testing.B) {
			b.SetBytes(int64(len(src)))
			for b.Loop() {
				c.dec(dst, src)
			}
		})
	}
}
