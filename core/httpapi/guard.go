package httpapi

import (
	"bytes"
	"encoding/json"
	"errors"
	"io"
	"mime"
	"net"
	"net/http"
	"net/netip"
	"net/url"
	"path"
	"strconv"
	"strings"
	"unicode"
	"unicode/utf8"

	"github.com/metaq-go/metaq/sdk/protocol"
)

// The HTTP listener's guard (docs/http.md, docs/security.md): what every
// request passes before its route, so that no web page a user visits can
// drive the broker with the user's credentials or address.
//
//   - With [auth] off, the Host header must name this broker: host,
//     "localhost", an IP address or an http_allowed_hosts entry (421
//     otherwise). A page whose name an attacker rebinds to 127.0.0.1 (DNS
//     rebinding) sends its own name, so it reaches nothing. The port is not
//     checked: a browser connects to the port its Host names. /healthz and
//     /readyz answer every name (probes address the broker however they
//     like, and they show nothing a page could use). With [auth] on the
//     check is not made: a rebinding page is another origin, to which the
//     browser sends no credentials, and every route but the probes needs
//     them.
//   - Outside the dashboard (/ui/, whose forms carry a token and are
//     checked by csrf) a request from a page of another site is refused
//     with 403, whatever its method: Sec-Fetch-Site cross-site or
//     same-site, or an Origin (else Referer) that is not this broker's
//     host:port (CrossSite, the check the dashboard forms make). Programs
//     (curl, metaq, Prometheus) send neither header. A cross-site GET
//     could not read the reply anyway (no CORS headers are sent); it is
//     refused too, so that no GET with side costs (a pprof profile) runs
//     for a foreign page.
//   - A request body to the API needs Content-Type: application/json (415
//     otherwise), and so does every POST, PUT and PATCH: an HTML form can
//     only send the types a form may (text/plain among them), and a page's
//     fetch with application/json is cross-origin with a preflight the
//     broker never grants.
//   - DecodeBody refuses duplicate keys in a JSON body (jsonDupKeys), so
//     that {"name":"=","name":"x"} is not read as its last key.

// httpMaxErrorMsg bounds a whole error message (uiError's and
// writeError's): a name in one is quoted with quoteName, and a deeper
// layer's error that quotes more is cut here.
const httpMaxErrorMsg = 1024

// quoteName quotes a client's name for an error reply or a log line: at
// most 64 bytes of it, escaped (protocol.Printable, the one quoting of
// the core).
func quoteName(s string) string { return protocol.Printable([]byte(s)) }

// ShownName is a client's name or path for an error reply or a log line:
// as it is when short and plain (printable ASCII, no space, quote or
// backslash), else quoted and cut (quoteName).
func ShownName(p string) string {
	if len(p) > 64 {
		return quoteName(p)
	}
	for i := 0; i < len(p); i++ {
		if p[i] <= ' ' || p[i] >= 0x7f || p[i] == '"' || p[i] == '\\' {
			return quoteName(p)
		}
	}
	return p
}

// CapMsg cuts msg to httpMaxErrorMsg bytes (on a rune boundary), marking
// the cut: no error reply echoes a client's megabyte.
func CapMsg(msg string) string {
	if len(msg) <= httpMaxErrorMsg {
		return msg
	}
	cut := httpMaxErrorMsg
	for cut > 0 && !utf8.RuneStart(msg[cut]) {
		cut--
	}
	return msg[:cut] + "... (" + strconv.Itoa(len(msg)-cut) + " more bytes)"
}

// guard wraps the mux with the checks above.
func (s *Server) guard(next http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		p := path.Clean("/" + r.URL.Path)
		if p == "/healthz" || p == "/readyz" {
			next.ServeHTTP(w, r)
			return
		}
		if cfg := s.config(); !cfg.authOn() {
			if why := cfg.misdirected(r); why != "" {
				WriteError(w, http.StatusMisdirectedRequest, why)
				return
			}
		}
		if p == "/" || p == "/ui" || strings.HasPrefix(p, "/ui/") { // the dashboard: uiCSRF checks its forms
			next.ServeHTTP(w, r)
			return
		}
		if why := CrossSite(r); why != "" {
			WriteError(w, http.StatusForbidden, "refused: "+why+": the API does not take requests from web pages of other sites (docs/http.md)")
			return
		}
		if why := jsonBodyType(r); why != "" && !metaqPath(p) { // MetaQ's put: the body is the message
			WriteError(w, http.StatusUnsupportedMediaType, why)
			return
		}
		next.ServeHTTP(w, r)
	})
}

// metaqPath says whether p is one of MetaQ's HTTP endpoints
// (metaqhttp.go), whose bodies are not JSON.
func metaqPath(p string) bool { return p == "/put" || p == "/get" || p == "/offset" }

// misdirected says why r's Host is not a name of this broker ("" if it
// is one), for the check made with [auth] off.
func (cfg *Config) misdirected(r *http.Request) string {
	if r.Host == "" { // HTTP/1.0 without Host: no browser sends that
		return ""
	}
	name := r.Host
	if h, _, err := net.SplitHostPort(name); err == nil {
		name = h
	}
	name = strings.TrimSuffix(strings.TrimPrefix(name, "["), "]")
	if _, err := netip.ParseAddr(name); err == nil {
		return "" // an address names no page an attacker's DNS can move
	}
	name = strings.ToLower(strings.TrimSuffix(name, "."))
	if name == "localhost" || name == strings.ToLower(strings.TrimSuffix(cfg.Host, ".")) {
		return ""
	}
	for _, a := range cfg.AllowedHosts {
		if a == "*" || name == strings.ToLower(strings.TrimSuffix(a, ".")) {
			return ""
		}
	}
	return "host " + quoteName(r.Host) + " is not a name of this broker: with [auth] off the HTTP listener answers host " +
		quoteName(cfg.Host) + ", localhost, IP addresses and http_allowed_hosts (docs/http.md)"
}

// CrossSite says why r comes from a page of another site ("" if it does
// not): Sec-Fetch-Site cross-site or same-site, or an Origin (else
// Referer) naming another host:port than r's Host. The scheme is not
// compared: one host:port serves one scheme, and a proxy that ends TLS
// in front of the broker leaves an https Origin on an http request.
// The API (guard) and the dashboard's forms (uiCSRF) both ask it.
func CrossSite(r *http.Request) string {
	switch s := r.Header.Get("Sec-Fetch-Site"); s {
	case "cross-site", "same-site":
		return "cross-site request (Sec-Fetch-Site " + s + ")"
	}
	check := func(what, v string) string {
		u, err := url.Parse(v)
		if err != nil || u.Host == "" || !strings.EqualFold(u.Host, r.Host) {
			return "cross-origin request (" + what + " " + quoteName(v) + ", this is " + quoteName(r.Host) + ")"
		}
		return ""
	}
	if o := r.Header.Get("Origin"); o != "" {
		return check("Origin", o)
	}
	if ref := r.Header.Get("Referer"); ref != "" {
		return check("Referer", ref)
	}
	return ""
}

// jsonBodyType says why r's body is not one the API takes ("" if it is):
// a body, and every POST, PUT and PATCH, needs Content-Type
// application/json (parameters such as charset allowed).
func jsonBodyType(r *http.Request) string {
	switch r.Method {
	case http.MethodPost, http.MethodPut, http.MethodPatch:
	default:
		if r.ContentLength == 0 {
			return ""
		}
	}
	ct := r.Header.Get("Content-Type")
	if mt, _, err := mime.ParseMediaType(ct); err == nil && mt == "application/json" {
		return ""
	}
	if ct == "" {
		return "Content-Type application/json is required for " + r.Method + " (none was given)"
	}
	return "Content-Type application/json is required for " + r.Method + ", got " + quoteName(ct)
}

// maxJSONDepth bounds the nesting of a JSON body: the API's bodies are
// flat objects.
const maxJSONDepth = 32

// jsonDupKeys walks one JSON value in data, tokens only, and reports a key
// given twice in an object (at any depth), nesting deeper than
// maxJSONDepth, a syntax error or data after the value. Keys are compared
// as Go's decoder matches them to struct fields, without regard to case
// ("name" and "NAME" would fill the same field), after unescaping.
func jsonDupKeys(data []byte) error {
	dec := json.NewDecoder(bytes.NewReader(data))
	dec.UseNumber()
	type frame struct {
		keys   map[string]bool // nil in an array
		wasKey bool            // the object's next token is a value
	}
	var stack []frame
	for {
		tok, err := dec.Token()
		if err == io.EOF {
			if len(stack) > 0 {
				return io.ErrUnexpectedEOF
			}
			return errors.New("empty body: a JSON object is required")
		}
		if err != nil {
			return err
		}
		top := len(stack) - 1
		if top >= 0 && stack[top].keys != nil && !stack[top].wasKey {
			if d, ok := tok.(json.Delim); !ok || d != '}' {
				k, _ := tok.(string) // the decoder gives an object's keys as strings
				f := foldKey(k)
				if stack[top].keys[f] {
					return errors.New("duplicate key " + quoteName(k) + " in a JSON object")
				}
				stack[top].keys[f] = true
				stack[top].wasKey = true
				continue
			}
		}
		if top >= 0 {
			stack[top].wasKey = false
		}
		switch tok {
		case json.Delim('{'), json.Delim('['):
			if len(stack) >= maxJSONDepth {
				return errors.New("JSON nested deeper than " + strconv.Itoa(maxJSONDepth) + " levels")
			}
			fr := frame{}
			if tok == json.Delim('{') {
				fr.keys = map[string]bool{}
			}
			stack = append(stack, fr)
		case json.Delim('}'), json.Delim(']'):
			stack = stack[:top]
		}
		if len(stack) == 0 {
			break
		}
	}
	if _, err := dec.Token(); err != io.EOF {
		return errors.New("trailing data after the JSON value")
	}
	return nil
}

// foldKey is k folded as encoding/json matches a key to a field name
// without regard to case (bytes.EqualFold's simple folding).
func foldKey(k string) string {
	return strings.Map(func(r rune) rune { return unicode.ToUpper(unicode.ToLower(r)) }, k)
}
