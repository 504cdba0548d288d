package broker

import (
	"net/http"
	"net/http/httptest"
	"net/url"
	"strings"
	"testing"
)

// FuzzDashboard sends arbitrary query strings and path segments to the
// dashboard's pages of one real broker with data (through its mux, no
// network): every reply is an HTML page with a code below 500, and the
// broker keeps serving.
func FuzzDashboard(f *testing.F) {
	for _, s := range []string{
		"partition=0&offset=0", "partition=1&offset=26&count=3&format=hex", "offset=1", "offset=-1",
		"offset=9223372036854775807", "partition=99999999999999999999", "count=0", "format=%00",
		"partition=0&partition=1", "topic=t", "topic=", "%zz", "offset=0x10", "offset=+5",
	} {
		f.Add(s, "t")
	}
	f.Add("", "g 1")
	f.Add("offset=0", "..")
	b := startBroker(f, 0)
	c := dialAuth(f, b.Addr(), nil)
	for range 3 {
		if code, msg := c.put("t"); code != 200 {
			f.Fatalf("put: %d %s", code, msg)
		}
	}
	h := b.newMux()
	f.Fuzz(func(t *testing.T, query, name string) {
		esc := url.PathEscape(name)
		for _, p := range []string{"/ui/topics/t/messages", "/ui/topics/" + esc + "/messages", "/ui/topics/" + esc,
			"/ui/groups/" + esc, "/ui/groups", "/ui/topics"} {
			req := localReq(http.MethodGet, "/", nil)
			req.URL.Path, req.URL.RawPath, req.URL.RawQuery = "", "", query
			u, err := url.Parse(p)
			if err != nil {
				continue
			}
			req.URL.Path, req.URL.RawPath = u.Path, u.RawPath
			w := httptest.NewRecorder()
			h.ServeHTTP(w, req)
			if w.Code >= 500 {
				t.Fatalf("GET %s?%s: %d %s", p, query, w.Code, w.Body)
			}
			if ct := w.Header().Get("Content-Type"); w.Code < 300 && !strings.HasPrefix(ct, "text/html") {
				t.Fatalf("GET %s?%s: content type %q", p, query, ct)
			}
		}
		w := httptest.NewRecorder()
		h.ServeHTTP(w, httptest.NewRequest(http.MethodGet, "/readyz", nil))
		if w.Code != 200 {
			t.Fatalf("not ready after %q %q: %s", query, name, w.Body)
		}
	})
}
