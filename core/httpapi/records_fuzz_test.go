package httpapi

import (
	"bytes"
	"encoding/base64"
	"encoding/json"
	"testing"
)

// FuzzProduceBody decodes produce bodies as the server does: nothing
// panics, and a key or value in format text or binary is the bytes
// encoding/json makes of the string (the fast path of strings without
// escapes included).
func FuzzProduceBody(f *testing.F) {
	f.Add([]byte(`{"format":"text","records":[{"key":"k","value":"v","headers":[{"key":"h","value":null}],"tags":["a"],"timestamp":1}]}`))
	f.Add([]byte(`{"format":"binary","records":[{"value":"AAEC"},{"value":"not base64"},{"value":"\u0041QID"}]}`))
	f.Add([]byte(`{"format":"binary","records":[{"value":"!!!!"},{"value":"AA=="},{"value":"AAE="},{"value":""},{"value":"A==="}]}`))
	f.Add([]byte(`{"records":[{"value":{"a":[1,2]}},{"key":null,"value":null},{"partition":3,"value":"x\"y"}]}`))
	f.Add([]byte("{\"reCords\":[{\"vAlue\":\"\xdc\xdc\"}]}"))
	f.Fuzz(func(t *testing.T, body []byte) {
		var req ProduceRequest
		if json.Unmarshal(body, &req) != nil {
			return
		}
		for i := range req.Records {
			rec := &req.Records[i]
			if n := plainBase64(rec.Value, false); n >= 0 {
				// What handleProduce decodes in place: plainBase64's
				// length is the decoded one when the value is base64.
				got, _, err := decodeField(formatBinary, rec.Value)
				if err == nil && len(got) != n {
					t.Fatalf("%q: plainBase64 %d, decoded %d bytes", rec.Value, n, len(got))
				}
			}
			for _, fm := range []string{formatJSON, formatText, formatBinary} {
				recordMessage(fm, rec) // no panic
				for _, raw := range []json.RawMessage{rec.Key, rec.Value} {
					got, _, err := decodeField(fm, raw)
					if fm == formatJSON || len(raw) == 0 || string(raw) == "null" {
						continue
					}
					var s string
					if json.Unmarshal(raw, &s) != nil {
						if err == nil {
							t.Fatalf("%s %q: accepted, not a string", fm, raw)
						}
						continue
					}
					want := []byte(s)
					if fm == formatBinary {
						b, berr := base64.StdEncoding.DecodeString(s)
						if (berr != nil) != (err != nil) {
							t.Fatalf("binary %q: error %v, encoding/json's %v", raw, err, berr)
						}
						want = b
					}
					// A text value's bytes are kept as they are, where
					// encoding/json makes each byte of bad UTF-8 a U+FFFD
					// (as a conversion to runes does; bytes.ToValidUTF8
					// makes a run of them one).
					if err == nil && !bytes.Equal(got, want) && !bytes.Equal([]byte(string([]rune(string(got)))), want) &&
						!bytes.Equal(bytes.ToValidUTF8(got, []byte("\uFFFD")), want) {
						t.Fatalf("%s %q: %q, want %q", fm, raw, got, want)
					}
				}
			}
		}
	})
}

// FuzzParseView: a join or heartbeat reply never panics and a view read
// is written back the same.
func FuzzParseView(f *testing.F) {
	f.Add([]byte("3 0,1,2"))
	f.Add([]byte("7 "))
	f.Add([]byte("x 1"))
	f.Fuzz(func(t *testing.T, body []byte) {
		parseView(body)
	})
}
