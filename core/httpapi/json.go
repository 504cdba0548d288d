package httpapi

import (
	"bytes"
	"encoding/json"
	"errors"
	"io"
	"net/http"
	"strconv"
	"strings"
	"sync"
)

// WriteJSON writes v as the JSON body of a reply with code.
func WriteJSON(w http.ResponseWriter, code int, v any) {
	w.Header().Set("Content-Type", "application/json")
	w.Header().Set("X-Content-Type-Options", "nosniff")
	w.WriteHeader(code)
	enc := json.NewEncoder(w)
	enc.SetIndent("", "  ")
	enc.Encode(v)
}

// apiError is the body of every error reply: {"error": ..., "status": ...}.
type apiError struct {
	Error  string `json:"error"`
	Status int    `json:"status"`
}

// WriteError writes the JSON error reply of code with msg (cut to
// httpMaxErrorMsg).
func WriteError(w http.ResponseWriter, code int, msg string) {
	WriteJSON(w, code, apiError{Error: CapMsg(msg), Status: code})
}

// DecodeBody decodes r's JSON body into v: unknown fields, duplicate keys
// (jsonDupKeys), trailing data and bodies over MaxBody are errors,
// answered 400 or 413 here (ok false). The guard checked the body's
// Content-Type.
func DecodeBody(w http.ResponseWriter, r *http.Request, v any) bool {
	return decodeBody(w, r, v, true)
}

// decodeBody is DecodeBody; dups false skips the walk for duplicate keys,
// for the data plane's bodies of records (a record's duplicate key is its
// last value, as in a put of the same message; the broker checks every
// request's rights whatever the body says).
func decodeBody(w http.ResponseWriter, r *http.Request, v any, dups bool) bool {
	data, err := io.ReadAll(r.Body)
	return decodeData(w, data, err, v, dups)
}

// decodeData is decodeBody's decoding of data, read with err.
func decodeData(w http.ResponseWriter, data []byte, err error, v any, dups bool) bool {
	if err == nil && dups {
		err = jsonDupKeys(data) // guard.go
	}
	if err == nil {
		dec := json.NewDecoder(bytes.NewReader(data))
		dec.DisallowUnknownFields()
		err = dec.Decode(v)
	}
	if err != nil {
		bodyError(w, err)
		return false
	}
	return true
}

// bodyError answers a request whose body could not be read or decoded:
// 413 for one over MaxBody, else 400 with the decoder's words and, for
// bad JSON, the byte where it went wrong.
func bodyError(w http.ResponseWriter, err error) {
	var tooBig *http.MaxBytesError
	if errors.As(err, &tooBig) {
		WriteError(w, http.StatusRequestEntityTooLarge, "request body over "+strconv.Itoa(MaxBody)+" bytes")
		return
	}
	if errors.Is(err, io.EOF) {
		err = errors.New("empty body: a JSON object is required")
	}
	msg := err.Error()
	if f, ok := strings.CutPrefix(msg, "json: unknown field "); ok { // it quotes the whole key
		if k, e := strconv.Unquote(f); e == nil {
			msg = "unknown field " + quoteName(k)
		}
	}
	var syn *json.SyntaxError
	var typ *json.UnmarshalTypeError
	switch {
	case errors.As(err, &syn):
		msg += " (at byte " + strconv.FormatInt(syn.Offset, 10) + ")"
	case errors.As(err, &typ):
		msg += " (at byte " + strconv.FormatInt(typ.Offset, 10) + ")"
	}
	WriteError(w, http.StatusBadRequest, "bad JSON body: "+msg)
}

// bodyPool holds the buffers readBody reads into.
var bodyPool = sync.Pool{New: func() any { return new(bytes.Buffer) }}

// readBody reads r's body into a pooled buffer, sized by its
// Content-Length when it gives one; give the buffer back with putBody
// once nothing refers to its bytes.
func readBody(r *http.Request) (*bytes.Buffer, error) {
	buf := bodyPool.Get().(*bytes.Buffer)
	buf.Reset()
	if n := r.ContentLength; n > 0 && n <= MaxBody {
		buf.Grow(int(n) + bytes.MinRead)
	}
	_, err := buf.ReadFrom(r.Body)
	return buf, err
}

// putBody gives back readBody's buffer (one over 4 MiB is dropped).
func putBody(buf *bytes.Buffer) {
	if buf.Cap() <= 4<<20 {
		bodyPool.Put(buf)
	}
}
