package httpapi

import (
	"encoding/json"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"
)

// TestJSONDupKeys: the duplicate-key checker on objects at every depth,
// with keys compared as encoding/json matches them to fields.
func TestJSONDupKeys(t *testing.T) {
	for _, tc := range []struct {
		in  string
		bad string // "" = accepted
	}{
		{`{}`, ""},
		{`{"a":1,"b":2}`, ""},
		{` {"a":{"a":1},"b":[{"a":1},{"a":2}]} ` + "\r\n", ""},
		{`[1,2,{"x":null}]`, ""},
		{`"s"`, ""},
		{`null`, ""},
		{`{"a":1,"a":2}`, `duplicate key "a"`},
		{`{"name":"=","name":"x"}` + "\r\n", `duplicate key "name"`},
		{`{"name":1,"NaMe":2}`, `duplicate key "NaMe"`},
		{`{"k":1,"\u212a":2}`, `duplicate key`}, // the Kelvin sign folds to k
		{`{"s":1,"\u017f":2}`, `duplicate key`}, // long s folds to s
		{`{"na\u006de":1,"name":2}`, `duplicate key "name"`},
		{`{"a":{"b":1,"b":2}}`, `duplicate key "b"`},
		{`[{"b":1},{"c":[{"d":1,"d":1}]}]`, `duplicate key "d"`},
		{`{"a":1}{"a":2}`, "trailing data"},
		{`{"a":1} x`, "trailing data"},
		{``, "empty body"},
		{`{"a":`, "unexpected EOF"},
		{`{"a" 1}`, "invalid character"},
		{strings.Repeat("[", 40) + strings.Repeat("]", 40), "nested deeper than 32"},
		{`{"` + strings.Repeat("x", 1000) + `":1,"` + strings.Repeat("x", 1000) + `":2}`, `"...`},
	} {
		err := jsonDupKeys([]byte(tc.in))
		if tc.bad == "" {
			require.NoError(t, err, "%.100s", tc.in)
			continue
		}
		require.Error(t, err, "%.100s", tc.in)
		require.Contains(t, err.Error(), tc.bad, "%.100s", tc.in)
		require.Less(t, len(err.Error()), 200)
	}
}

// FuzzJSONDupKeys: the checker never panics; what it accepts is valid
// JSON whose re-encoding it accepts too; an object it accepts gets a
// duplicate (its first key in upper case) refused.
func FuzzJSONDupKeys(f *testing.F) {
	for _, s := range []string{
		`{}`, `{"a":1,"b":[1,{"c":2}]}`, `{"a":1,"a":2}`, `{"name":"=","name":"x"}` + "\r\n", `[{"x":1},{"x":1}]`,
		`{"k":1,"\u212a":2}`, `{"a":{"b":{"c":{}}}}`, `"x"`, `1e5`, `{"a":1}{}`, `{"a`, "\xff", `[[[[]]]]`, `{"\u00e9":1,"\u00c9":2}`,
	} {
		f.Add([]byte(s))
	}
	f.Fuzz(func(t *testing.T, data []byte) {
		err := jsonDupKeys(data)
		if err != nil {
			return
		}
		require.True(t, json.Valid(data), "accepted invalid JSON %q", data)
		var v any
		vd := json.NewDecoder(strings.NewReader(string(data)))
		vd.UseNumber() // 1e700 is valid JSON, not a float64
		require.NoError(t, vd.Decode(&v))
		re, merr := json.Marshal(v)
		require.NoError(t, merr)
		require.NoError(t, jsonDupKeys(re), "re-encoded %q", re)
		obj, ok := v.(map[string]any)
		if !ok || len(obj) == 0 {
			return
		}
		if len(obj) <= 64 {
			for k1 := range obj {
				for k2 := range obj {
					require.False(t, k1 != k2 && strings.EqualFold(k1, k2), "accepted %q and %q in one object", k1, k2)
				}
			}
		}
		dec := json.NewDecoder(strings.NewReader(string(data)))
		_, _ = dec.Token() // {
		k, kerr := dec.Token()
		require.NoError(t, kerr)
		up, _ := json.Marshal(strings.ToUpper(k.(string)))
		i := strings.IndexByte(string(data), '{')
		dup := string(data[:i+1]) + string(up) + ":0," + string(data[i+1:])
		require.Error(t, jsonDupKeys([]byte(dup)), "%q", dup)
	})
}
