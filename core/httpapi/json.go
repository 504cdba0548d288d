package httpapi

import (
	"bytes"
	"encoding/json"
	"errors"
	"io"
	"net/http"
	"strconv"
	"strings"
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
	if err == nil && dups {
		err = jsonDupKeys(data) // guard.go
	}
	if err == nil {
		dec := json.NewDecoder(bytes.NewReader(data))
		dec.DisallowUnknownFields()
		err = dec.Decode(v)
	}
	if err != nil {
		var tooBig *http.MaxBytesError
		if errors.As(err, &tooBig) {
			WriteError(w, http.StatusRequestEntityTooLarge, "request body over "+strconv.Itoa(MaxBody)+" bytes")
			return false
		}
		if errors.Is(err, io.EOF) {
			err = errors.New("empty body: a JSON object is required")
		}
		if f, ok := strings.CutPrefix(err.Error(), "json: unknown field "); ok { // it quotes the whole key
			if k, e := strconv.Unquote(f); e == nil {
				err = errors.New("unknown field " + quoteName(k))
			}
		}
		WriteError(w, http.StatusBadRequest, "bad JSON body: "+err.Error())
		return false
	}
	return true
}
