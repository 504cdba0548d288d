package httpapi

import (
	"bytes"
	"encoding/binary"
	"encoding/json"
	"math/rand/v2"
	"net/http/httptest"
	"reflect"
	"runtime"
	"strconv"
	"strings"
	"testing"
)

// produceSeeds are produce bodies of every shape: the fast decoder's and
// others it leaves to encoding/json.
var produceSeeds = []string{
	`{"format":"text","records":[{"key":"k","value":"v","headers":[{"key":"h","value":null}],"tags":["a"],"timestamp":1}]}`,
	`{"format":"binary","records":[{"value":"AAEC"},{"value":"not base64"},{"value":"\u0041QID"}]}`,
	`{"records":[{"value":{"a":[1,2]}},{"key":null,"value":null},{"partition":3,"value":"x\"y"}]}`,
	` { "records" : [ { "partition" : -1 , "value" : [ 1 , { "b" : "]}" } ] , "key" : 12.5e3 } ] , "format" : "json" } `,
	`{"records":[{"value":true,"key":false,"headers":[],"tags":[]},{"value":"x","headers":null,"tags":null,"timestamp":null,"partition":null}]}`,
	`{"records":[]}`,
	`{}`,
	`{"records":[{"timestamp":-5,"value":1}]}`,
	`{"Records":[{"value":1}]}`,
	`{"records":[{"value":1,"value":2}]}`,
	`{"records":[{"value":1}],"records":[]}`,
	`{"records":[{"value":1,"extra":2}]}`,
	`{"records":[{"partition":"1","value":1}]}`,
	`{"records":[{"partition":1.0,"value":1}]}`,
	`{"records":[{"partition":2147483648,"value":1}]}`,
	`{"records":[{"partition":01,"value":1}]}`,
	`{"records":[{"value":"a` + "\x01" + `b"}]}`,
	`{"records":[{"value":"\x"}]}`,
	`{"records":[{"value":"\u12"}]}`,
	`{"records":[{"headers":[{"key":"\u0041","value":"b"}],"value":1}]}`,
	`{"records":[{"headers":[{"key":"a","value":"b","key":"c"}],"value":1}]}`,
	`{"records":[{"tags":["a\nb"],"value":1}]}`,
	"{\"records\":[{\"tags\":[\"\xff\"],\"value\":\"\xfe\"}]}",
	`{"records":[{"value":[1,2}]}`,
	`{"records":[{"value":{"a":1]]}`,
	`{"records":[{"value":1}]} {"x":1}`,
	`{"records":[{"value":1}]`,
	`{"records":[{"value":nul}]}`,
	`{"records":[{"value":}]}`,
	`{"records":[null]}`,
	`null`,
	``,
	`{"format":"text","records":[{"value":"v"},]}`,
	`{"format":"text",}`,
}

// FuzzProduceFast: a body the fast decoder (parseProduce) accepts is one
// encoding/json accepts as well, giving the same request.
func FuzzProduceFast(f *testing.F) {
	for _, s := range produceSeeds {
		f.Add([]byte(s))
	}
	f.Fuzz(func(t *testing.T, body []byte) {
		var fast ProduceRequest
		if !parseProduce(body, &fast) {
			return
		}
		if !json.Valid(body) {
			t.Fatalf("%q: accepted, not JSON", body)
		}
		var slow ProduceRequest
		dec := json.NewDecoder(bytes.NewReader(body))
		dec.DisallowUnknownFields()
		if err := dec.Decode(&slow); err != nil {
			t.Fatalf("%q: accepted, encoding/json refuses it: %v", body, err)
		}
		if n := produceArrayLen(body); n != len(fast.Records) {
			t.Fatalf("%q: produceArrayLen %d, %d records", body, n, len(fast.Records))
		}
		if !reflect.DeepEqual(fast, slow) {
			fj, _ := json.Marshal(fast)
			sj, _ := json.Marshal(slow)
			t.Fatalf("%q:\nfast %s\nencoding/json %s", body, fj, sj)
		}
		// parseProduceMarks: the same request, and each value's mark
		// says whether it is a string without a backslash.
		var marked ProduceRequest
		plain, ok := parseProduceMarks(body, &marked, nil)
		if !ok || !reflect.DeepEqual(fast, marked) || len(plain) != len(fast.Records) {
			t.Fatalf("%q: parseProduceMarks %v, %d marks for %d records", body, ok, len(plain), len(fast.Records))
		}
		for i, r := range fast.Records {
			if want := len(r.Value) > 0 && r.Value[0] == '"' && bytes.IndexByte(r.Value, '\\') < 0; plain[i] != want {
				t.Fatalf("%q: record %d's value %s marked %v", body, i, r.Value, plain[i])
			}
		}
	})
}

// TestProduceFastShapes: the bodies clients send take the fast decoder
// (docs/http.md's, the benchmark's); the others fall back.
func TestProduceFastShapes(t *testing.T) {
	fast := []string{produceSeeds[0], produceSeeds[1], produceSeeds[2], produceSeeds[3], produceSeeds[4], produceSeeds[5], produceSeeds[6], produceSeeds[7],
		`{"format":"binary","records":[{"value":"` + strings.Repeat("QUJD", 300) + `"}]}`}
	for _, s := range fast {
		var req ProduceRequest
		if !parseProduce([]byte(s), &req) {
			t.Errorf("%s: not the fast decoder's", s)
		}
	}
	for _, s := range produceSeeds[8:] {
		var req ProduceRequest
		if parseProduce([]byte(s), &req) {
			t.Errorf("%q: fast decoder accepted it", s)
		}
	}
}

// TestProduceReplyJSON: appendProduceReply writes what WriteJSON does.
func TestProduceReplyJSON(t *testing.T) {
	p, o, m := int32(3), int64(1<<40), int64(-7)
	ok := ProduceResult{Partition: &p, Offset: &o, MsgID: &m}
	for _, res := range [][]ProduceResult{{}, {ok}, {ok, ok, ok}} {
		var want bytes.Buffer
		enc := json.NewEncoder(&want)
		enc.SetIndent("", "  ")
		enc.Encode(ProduceReply{Offsets: res})
		if got := appendProduceReply(nil, res); string(got) != want.String() {
			t.Errorf("got\n%s\nwant\n%s", got, want.String())
		}
	}
	if appendProduceReply(nil, []ProduceResult{ok, {ErrorCode: 400, Error: "x"}}) != nil {
		t.Error("a failed record: not written by WriteJSON")
	}
}

// TestSpecial8: special8 finds a quote, a backslash or a control byte
// among eight exactly when one is there.
func TestSpecial8(t *testing.T) {
	picks := []byte{0, 1, 0x1f, 0x20, 0x21, '"', '#', '\\', ']', 'A', 0x7f, 0x80, 0x9f, 0xa0, 0xdc, 0xff}
	rng := rand.New(rand.NewPCG(1, 2))
	for range 200000 {
		var w [8]byte
		want := false
		for k := range w {
			w[k] = picks[rng.IntN(len(picks))]
			if rng.IntN(3) == 0 {
				w[k] = byte(rng.IntN(256))
			}
			want = want || w[k] < 0x20 || w[k] == '"' || w[k] == '\\'
		}
		if got := special8(binary.LittleEndian.Uint64(w[:])); got != want {
			t.Fatalf("% x: %v, want %v", w, got, want)
		}
	}
}

// TestStringEndFast: stringEnd (the first quote when nothing before it
// is a backslash or a control byte) ends every string where the byte by
// byte scan does, strings of 0..100 bytes with a special byte at each
// place, and plainBytes finds a control byte or backslash exactly.
func TestStringEndFast(t *testing.T) {
	picks := []byte{0, 1, 0x1f, 0x20, '"', '\\', 'n', 'u', 'A', 0x7f, 0x80, 0xff}
	rng := rand.New(rand.NewPCG(3, 4))
	for n := range 100 {
		for range 40 {
			b := []byte(`"` + strings.Repeat("QUJD", n/4+1)[:n] + `"xx`)
			for range rng.IntN(3) {
				b[1+rng.IntN(len(b)-1)] = picks[rng.IntN(len(picks))]
			}
			p := &jsonParser{b: b}
			ge, gesc := p.stringEnd(0)
			we, wesc := stringEndSlow(b, 0)
			if ge != we || gesc != wesc {
				t.Fatalf("%q: stringEnd %d %v, the slow scan's %d %v", b, ge, gesc, we, wesc)
			}
			want := true
			for _, c := range b {
				want = want && c >= 0x20 && c != '\\'
			}
			if plainBytes(b) != want {
				t.Fatalf("%q: plainBytes %v", b, !want)
			}
		}
	}
}

// TestWriteRecordsRuns: writeRecords writes each read's run of records as
// it would write the records one by one, whole runs, a run cut short and
// single records alike, with the Content-Length of what it wrote.
func TestWriteRecordsRuns(t *testing.T) {
	read := func(js ...string) []recJSON {
		run := []byte(strings.Join(js, ","))
		var recs []recJSON
		at := 0
		for i, j := range js {
			recs = append(recs, recJSON{offset: int64(i), js: run[at : at+len(j)]})
			at += len(j) + 1
		}
		recs[0].run, recs[0].n = run, len(recs)
		return recs
	}
	a, b := read(`{"a":1}`, `{"b":2}`, `{"c":3}`), read(`{"d":4}`)
	single := []recJSON{{js: []byte(`{"e":5}`)}}
	for _, tc := range []struct {
		recs []recJSON
		want string
	}{
		{nil, `{"records":[],"next_offset":7}` + "\n"},
		{a, `{"records":[{"a":1},{"b":2},{"c":3}],"next_offset":7}` + "\n"},
		{append(append(append([]recJSON{}, a...), b...), single...), `{"records":[{"a":1},{"b":2},{"c":3},{"d":4},{"e":5}],"next_offset":7}` + "\n"},
		{a[:2], `{"records":[{"a":1},{"b":2}],"next_offset":7}` + "\n"},
		{a[1:], `{"records":[{"b":2},{"c":3}],"next_offset":7}` + "\n"},
	} {
		w := httptest.NewRecorder()
		writeRecords(w, tc.recs, 7, false)
		if got := w.Body.String(); got != tc.want {
			t.Errorf("got %s want %s", got, tc.want)
		}
		if cl := w.Header().Get("Content-Length"); cl != strconv.Itoa(len(tc.want)) {
			t.Errorf("Content-Length %s, wrote %d", cl, len(tc.want))
		}
	}
}

// TestProduceArrayLen: for a body encoding/json accepts, produceArrayLen
// is its number of records, or more when it has "records" twice (the seeds, and records whose strings and
// values hold brackets, commas and escaped quotes).
func TestProduceArrayLen(t *testing.T) {
	bodies := append([]string{
		`{"records":[{"value":"a,b]"},{"value":"\\\"],["},{"value":[1,[2,3],{"x":","}]}]}`,
		`{"format":"json","records":[1,"x",null,[],{}]}`,
		`{"records":[ ]}`,
		`{"records":[ {} ]}`,
	}, produceSeeds...)
	for _, b := range bodies {
		var req ProduceRequest
		dec := json.NewDecoder(strings.NewReader(b))
		dec.DisallowUnknownFields()
		if dec.Decode(&req) != nil || dec.More() {
			continue
		}
		// With "records" twice encoding/json keeps the last; the count is
		// the longest (never less: a refusal it leads to is 400 either way).
		n := produceArrayLen([]byte(b))
		if n < len(req.Records) || n != len(req.Records) && strings.Count(b, `"records"`) == 1 {
			t.Errorf("%s: produceArrayLen %d, %d records", b, n, len(req.Records))
		}
	}
}

// TestProduceTooManyRecordsBounded: a 1 MiB body of empty records is
// refused with 400 before its records are built (encoding/json built
// 349,518 of them, 204 MiB), on the fast path and when an escape sends
// the body to encoding/json.
func TestProduceTooManyRecordsBounded(t *testing.T) {
	s := &Server{}
	for _, first := range []string{`{}`, `{"key":"\u0041"}`} {
		body := `{"records":[` + first + strings.Repeat(`,{}`, (1<<20)/3) + `]}`
		var before, after runtime.MemStats
		runtime.GC()
		runtime.ReadMemStats(&before)
		w := httptest.NewRecorder()
		r := httptest.NewRequest("POST", "/api/v1/data/topics/t/records", strings.NewReader(body))
		r.Header.Set("Content-Type", "application/json")
		r.SetPathValue("topic", "t")
		s.handleProduce(w, r)
		runtime.ReadMemStats(&after)
		if w.Code != 400 || !strings.Contains(w.Body.String(), "at most 4096") {
			t.Fatalf("first record %s: %d %s", first, w.Code, w.Body.String())
		}
		if got := after.TotalAlloc - before.TotalAlloc; got > 16<<20 {
			t.Errorf("first record %s: %d MiB allocated to refuse it", first, got>>20)
		}
	}
}
