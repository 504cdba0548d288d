package broker

import (
	"bytes"
	"encoding/json"
	"io"
	"net/http"
	"net/http/httptest"
	"testing"
)

// FuzzAdminAPI sends arbitrary bodies to the admin API's POST endpoints
// of one real broker (through its mux, no network): every reply is JSON
// with a code below 500, and the broker keeps serving.
func FuzzAdminAPI(f *testing.F) {
	for _, s := range []string{
		`{"name":"fz","num_partitions":2}`,
		`{"num_partitions":3}`,
		`{"topic":"t","to":"latest","dry_run":true}`,
		`{"topic":"t","partition":1,"to":"offset","offset":0}`,
		`{"topic":"t","partition":0}`,
		`{"name":`, `[]`, `null`, `{"topic":"t","partition":-1,"to":"earliest"}`, "\x00\xff",
	} {
		f.Add([]byte(s))
	}
	b := startBroker(f, 1000)
	h := b.newMux()
	paths := []string{"/api/v1/topics", "/api/v1/topics/t/partitions", "/api/v1/groups/g/offsets", "/api/v1/groups/g/skip"}
	f.Fuzz(func(t *testing.T, body []byte) {
		for _, p := range paths {
			w := httptest.NewRecorder()
			req := localReq(http.MethodPost, p, bytes.NewReader(body))
			req.Header.Set("Content-Type", "application/json")
			h.ServeHTTP(w, req)
			if w.Code >= 500 {
				t.Fatalf("POST %s %q: %d %s", p, body, w.Code, w.Body)
			}
			if ct := w.Header().Get("Content-Type"); ct != "application/json" {
				t.Fatalf("POST %s: content type %q", p, ct)
			}
			if w.Code == http.StatusCreated { // keep the broker small
				var name struct{ Name string }
				if err := jsonUnmarshal(w.Body.Bytes(), &name); err == nil && name.Name != "t" {
					if err := b.DeleteTopic(name.Name, true); err != nil {
						t.Fatalf("delete %s: %v", name.Name, err)
					}
				}
			}
		}
		w := httptest.NewRecorder()
		h.ServeHTTP(w, httptest.NewRequest(http.MethodGet, "/readyz", nil))
		if w.Code != 200 {
			t.Fatalf("not ready after %q: %s", body, w.Body)
		}
	})
}

func jsonUnmarshal(b []byte, v any) error { return json.Unmarshal(b, v) }

// localReq is httptest.NewRequest with Host localhost: with [auth] off
// the broker answers only its own names (httpguard.go), and
// httptest's default Host is example.com.
func localReq(method, target string, body io.Reader) *http.Request {
	r := httptest.NewRequest(method, target, body)
	r.Host = "localhost"
	return r
}
