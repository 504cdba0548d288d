package httpapi

import (
	"errors"
	"io"
	"net/http"
	"net/url"
	"strconv"

	"github.com/metaq-go/metaq/sdk/protocol"
)

// MetaQ's HTTP interface, its jettyBroker plugin (docs/http.md, "MetaQ's
// /put, /get and /offset"): the query parameters name the wire request's
// tokens, the HTTP status is the reply's code, and the body is the
// reply's: a get's records as the wire sends them (200,
// application/octet-stream), else the result's text (text/plain).
//
//	/put?topic&partition&flag&length[&checksum]   body: the put's data
//	/get?topic&partition&group&offset&maxsize
//	/offset?topic&partition&group&offset

// metaqParams reads the named query parameters: topic and group as wire
// tokens, the rest as integers. It answers 400 and reports false when
// one is missing or bad.
type metaqParams struct {
	q   url.Values
	err error
}

func (p *metaqParams) token(name string) string {
	v := p.q.Get(name)
	if err := wireToken(name, v); err != nil && p.err == nil {
		p.err = err
	}
	return v
}

func (p *metaqParams) int(name string, bits int, opt bool, def int64) int64 {
	v := p.q.Get(name)
	if v == "" && opt {
		return def
	}
	n, err := strconv.ParseInt(v, 10, bits)
	if err != nil && p.err == nil {
		if v == "" {
			p.err = errors.New(name + " is required")
		} else {
			p.err = errors.New(name + " " + quoteName(v) + " is not an integer")
		}
	}
	return n
}

// metaqText writes a MetaQ reply: its code as the status, its text.
func metaqText(w http.ResponseWriter, code int, body []byte) {
	w.Header().Set("Content-Type", "text/plain; charset=utf-8")
	w.Header().Set("X-Content-Type-Options", "nosniff")
	w.WriteHeader(httpStatus(code))
	w.Write(body)
}

// metaqReply writes rep as MetaQ's HTTP interface does.
func metaqReply(w http.ResponseWriter, rep reply) {
	if rep.Op == protocol.OpValue {
		w.Header().Set("Content-Type", "application/octet-stream")
		w.Header().Set("X-Content-Type-Options", "nosniff")
		w.Header().Set("Content-Length", strconv.Itoa(len(rep.Body)))
		w.WriteHeader(http.StatusOK)
		w.Write(rep.Body)
		return
	}
	metaqText(w, rep.Code, rep.Body)
}

// metaqRoundTrip sends req on r's data connection and writes the reply.
func (s *Server) metaqRoundTrip(w http.ResponseWriter, r *http.Request, req []byte) {
	d, ok := s.dial(w, r)
	if !ok {
		return
	}
	defer d.Close()
	rep, err := d.one(r.Context(), req)
	if err != nil {
		var re *RequestError
		if errors.As(err, &re) {
			metaqText(w, re.Status, []byte(re.Msg))
			return
		}
		failed(w, err)
		return
	}
	metaqReply(w, rep)
}

// handleMetaQPut is /put?topic&partition&flag&length[&checksum].
func (s *Server) handleMetaQPut(w http.ResponseWriter, r *http.Request) {
	p := metaqParams{q: r.URL.Query()}
	topic := p.token("topic")
	part := p.int("partition", 32, false, 0)
	flag := p.int("flag", 32, true, 0)
	length := p.int("length", 32, false, 0)
	checksum := p.int("checksum", 64, true, protocol.NoChecksum)
	if p.err != nil {
		metaqText(w, http.StatusBadRequest, []byte(p.err.Error()))
		return
	}
	limit := s.maxBody(r) // max_message_size, at least MaxBody
	if length < 0 {
		metaqText(w, http.StatusBadRequest, []byte("length "+strconv.FormatInt(length, 10)+" out of range (0 to "+strconv.Itoa(limit)+")"))
		return
	}
	if length > int64(limit) {
		metaqText(w, http.StatusRequestEntityTooLarge, []byte("length "+strconv.FormatInt(length, 10)+" over the largest message, "+strconv.Itoa(limit)+" bytes (max_message_size)"))
		return
	}
	data := make([]byte, length)
	n, err := io.ReadFull(r.Body, data)
	if err != nil {
		var tooBig *http.MaxBytesError
		if errors.As(err, &tooBig) {
			metaqText(w, http.StatusRequestEntityTooLarge, []byte("request body over "+strconv.Itoa(limit)+" bytes (max_message_size)"))
			return
		}
		metaqText(w, http.StatusBadRequest, []byte("body of "+strconv.Itoa(n)+" bytes is shorter than length "+strconv.FormatInt(length, 10)))
		return
	}
	s.metaqRoundTrip(w, r, protocol.AppendPut(nil, topic, int32(part), int32(flag), checksum, 1, data))
}

// handleMetaQGet is /get?topic&partition&group&offset&maxsize.
func (s *Server) handleMetaQGet(w http.ResponseWriter, r *http.Request) {
	p := metaqParams{q: r.URL.Query()}
	topic := p.token("topic")
	part := p.int("partition", 32, false, 0)
	group := p.token("group")
	offset := p.int("offset", 64, false, 0)
	maxSize := p.int("maxsize", 32, false, 0)
	if p.err != nil {
		metaqText(w, http.StatusBadRequest, []byte(p.err.Error()))
		return
	}
	maxSize = min(maxSize, maxDataGet)
	s.metaqRoundTrip(w, r, protocol.AppendGet(nil, topic, group, int32(part), offset, int32(maxSize), 1))
}

// handleMetaQOffset is /offset?topic&partition&group&offset.
func (s *Server) handleMetaQOffset(w http.ResponseWriter, r *http.Request) {
	p := metaqParams{q: r.URL.Query()}
	topic := p.token("topic")
	part := p.int("partition", 32, false, 0)
	group := p.token("group")
	offset := p.int("offset", 64, false, 0)
	if p.err != nil {
		metaqText(w, http.StatusBadRequest, []byte(p.err.Error()))
		return
	}
	s.metaqRoundTrip(w, r, protocol.AppendOffset(nil, topic, group, int32(part), offset, 1))
}
