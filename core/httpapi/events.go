package httpapi

import (
	"bytes"
	"context"
	"net/http"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/metaq-go/metaq/sdk/message"
	"github.com/metaq-go/metaq/sdk/protocol"
)

// Reading a partition from an offset without a group (GET .../records)
// and following it as Server-Sent Events (GET .../events).

const (
	// defaultReadBytes is a read's max_bytes unless given.
	defaultReadBytes = 256 << 10
	// maxReadWait bounds a read's timeout_ms (the request's own context
	// ends after the listener's write timeout).
	maxReadWait = 30 * time.Second
	// readPollMin and readPollMax are the waits between gets while a
	// long poll or a stream finds no new record.
	readPollMin = 10 * time.Millisecond
	readPollMax = 200 * time.Millisecond
	// defaultReadGroup names the reader in the broker's statistics when
	// the request names no group.
	defaultReadGroup = "metaq-http"
)

// readParams are a read's or a stream's query parameters.
type readParams struct {
	topic, group, format string
	part                 int32
	offset               int64
	maxBytes             int32
	wait                 time.Duration
}

// parseRead reads r's path and query; it answers 400 and reports false
// for a bad one.
func parseRead(w http.ResponseWriter, r *http.Request) (readParams, bool) {
	q := r.URL.Query()
	rp := readParams{topic: r.PathValue("topic"), group: q.Get("group"), format: q.Get("format"), maxBytes: defaultReadBytes}
	bad := func(msg string) (readParams, bool) {
		WriteError(w, http.StatusBadRequest, msg)
		return readParams{}, false
	}
	group := r.PathValue("instance") != "" // a consumer instance's fetch: its own topics and group
	if err := wireToken("topic", rp.topic); err != nil && !group {
		return bad(err.Error())
	}
	if rp.group == "" {
		rp.group = defaultReadGroup
	} else if err := wireToken("group", rp.group); err != nil {
		return bad(err.Error())
	}
	if rp.format == "" {
		rp.format = formatBinary
	}
	if !validFormat(rp.format) {
		return bad("format " + quoteName(rp.format) + ": want json, text or binary")
	}
	p, ok := pathPartition(w, r)
	if !ok {
		return readParams{}, false
	}
	rp.part = p
	if group && (q.Has("offset") || q.Has("group")) {
		return bad("a consumer instance reads from its group's offsets: offset and group are not parameters of its fetch")
	}
	num := func(name string, lo, hi int64) (int64, bool) {
		v := q.Get(name)
		n, err := strconv.ParseInt(v, 10, 64)
		if err != nil || n < lo || n > hi {
			bad(name + " " + quoteName(v) + " is not an integer from " + strconv.FormatInt(lo, 10) + " to " + strconv.FormatInt(hi, 10))
			return 0, false
		}
		return n, true
	}
	if q.Has("offset") {
		if rp.offset, ok = num("offset", 0, 1<<62); !ok {
			return readParams{}, false
		}
	}
	if q.Has("max_bytes") {
		n, ok := num("max_bytes", 1, maxDataGet)
		if !ok {
			return readParams{}, false
		}
		rp.maxBytes = int32(n)
	}
	if q.Has("timeout_ms") {
		n, ok := num("timeout_ms", 0, int64(maxReadWait/time.Millisecond))
		if !ok {
			return readParams{}, false
		}
		rp.wait = time.Duration(n) * time.Millisecond
	}
	return rp, true
}

// recJSON is one record read, as JSON (appendRecordJSON).
type recJSON struct {
	offset int64
	js     []byte
	// run, in the first record of a read, is the JSON of its n records
	// with commas between, as writeRecords writes them (not copied).
	run []byte
	n   int
}

// readOnce gets rp's partition at rp.offset. It returns the records (none
// when there is nothing new) and the next offset; moved says the offset
// was out of range and next is the one to use.
func readOnce(ctx context.Context, d *dataConn, rp *readParams) (recs []recJSON, next int64, moved bool, err error) {
	d.shared = true // the body is done with before the next round trip
	rep, err := d.one(ctx, protocol.AppendGet(nil, rp.topic, rp.group, rp.part, rp.offset, rp.maxBytes, 1))
	d.shared = false
	if err != nil {
		return nil, 0, false, err
	}
	switch {
	case rep.Op == protocol.OpValue:
	case rep.Code == protocol.StatusMoved:
		n, ok := protocol.ParseInt64(bytes.TrimSpace(rep.Body))
		if !ok {
			return nil, 0, false, &RequestError{Status: http.StatusBadGateway, Msg: "bad 301 reply: " + quoteName(string(rep.Body))}
		}
		return nil, n, true, nil
	case rep.Code == protocol.StatusNotFound && strings.HasPrefix(string(rep.Body), "Could not find message at position"):
		return nil, rp.offset, false, nil
	default:
		return nil, 0, false, &RequestError{Status: httpStatus(rep.Code), Msg: string(rep.Body)}
	}
	it := message.NewIterator(rep.Body, rp.offset, 0)
	buf := make([]byte, 0, len(rep.Body)*4/3+1024)
	var ends []int
	for it.Next() {
		rec := it.Record()
		if len(ends) > 0 {
			buf = append(buf, ',')
		}
		if room := cap(buf) - len(buf); room < 2*len(rec.Data)+512 {
			// What is left at the ratio of JSON to record bytes so far.
			used := max(it.NextOffset()-rp.offset, 1)
			left := int64(len(rep.Body)) - used + int64(len(rec.Data)) + message.HeaderSize
			buf = slices.Grow(buf, int(left*int64(len(buf))/used)+2*len(rec.Data)+1024)
		}
		if buf, err = appendRecordJSON(buf, rp.topic, rp.part, rp.format, rec); err != nil {
			return nil, 0, false, &RequestError{Status: http.StatusNotAcceptable, Msg: err.Error()}
		}
		recs = append(recs, recJSON{offset: rec.Offset})
		ends = append(ends, len(buf))
	}
	if err := it.Err(); err != nil {
		return nil, 0, false, &RequestError{Status: http.StatusBadGateway, Msg: err.Error()}
	}
	if len(recs) == 0 && len(rep.Body) > 0 {
		return nil, 0, false, &RequestError{Status: http.StatusRequestEntityTooLarge,
			Msg: "no whole record at offset " + strconv.FormatInt(rp.offset, 10) + " within max_bytes " + strconv.Itoa(int(rp.maxBytes)) +
				": a larger record, or an offset that is not a record's start"}
	}
	start := 0
	for i, e := range ends {
		recs[i].js = buf[start:e:e]
		start = e + 1 // the comma
	}
	if len(recs) > 0 {
		recs[0].run, recs[0].n = buf, len(recs)
	}
	return recs, it.NextOffset(), false, nil
}

// writeRecords writes a read's reply: ReadReply's JSON (compact). The
// records' runs are written as they are, not copied into one reply.
func writeRecords(w http.ResponseWriter, recs []recJSON, next int64, moved bool) {
	head := []byte(`{"records":[`)
	tail := []byte(`],"next_offset":`)
	tail = strconv.AppendInt(tail, next, 10)
	if moved {
		tail = append(tail, `,"out_of_range":true`...)
	}
	tail = append(tail, "}\n"...)
	var parts [][]byte
	n := len(head) + len(tail)
	for i := 0; i < len(recs); {
		js := recs[i].js
		k := 1
		if recs[i].run != nil && i+recs[i].n <= len(recs) {
			js, k = recs[i].run, recs[i].n
		}
		if i > 0 {
			n++
		}
		parts = append(parts, js)
		n += len(js)
		i += k
	}
	w.Header().Set("Content-Type", "application/json")
	w.Header().Set("X-Content-Type-Options", "nosniff")
	w.Header().Set("Content-Length", strconv.Itoa(n))
	w.WriteHeader(http.StatusOK)
	w.Write(head)
	for i, js := range parts {
		if i > 0 {
			w.Write([]byte{','})
		}
		w.Write(js)
	}
	w.Write(tail)
}

// isEventStream reports whether r is for an event stream (handleEvents),
// which has no overall timeout.
func isEventStream(r *http.Request) bool {
	return r.Method == http.MethodGet && strings.HasPrefix(r.URL.Path, "/api/v1/data/topics/") && strings.HasSuffix(r.URL.Path, "/events")
}

// pollWait sleeps for d or until ctx ends (false then).
func pollWait(ctx context.Context, d time.Duration) bool {
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-t.C:
		return true
	case <-ctx.Done():
		return false
	}
}

// handleRead is GET /api/v1/data/topics/{topic}/partitions/{partition}/records.
func (s *Server) handleRead(w http.ResponseWriter, r *http.Request) {
	rp, ok := parseRead(w, r)
	if !ok {
		return
	}
	d, ok := s.dial(w, r)
	if !ok {
		return
	}
	defer d.Close()
	ctx := r.Context()
	until := time.Now().Add(rp.wait)
	poll := readPollMin
	for {
		recs, next, moved, err := readOnce(ctx, d, &rp)
		if err != nil {
			failed(w, err)
			return
		}
		if len(recs) > 0 || moved || !time.Now().Before(until) {
			writeRecords(w, recs, next, moved)
			return
		}
		if !pollWait(ctx, min(poll, time.Until(until))) {
			writeRecords(w, nil, rp.offset, false)
			return
		}
		poll = min(2*poll, readPollMax)
	}
}

// handleEvents is GET /api/v1/data/topics/{topic}/partitions/{partition}/events:
// the partition's records from offset (or Last-Event-ID, the offset after
// the last record the client got) as Server-Sent Events, "record" events
// whose id is the offset after the record, for as long as the client
// stays: the request's context has no timeout (the gate's isEventStream),
// the connection no read deadline (a client that goes away ends the read
// net/http keeps pending, and so the context), and each write its own
// deadline, http_write_timeout (a client that stops reading ends the
// stream); an idle stream gets a comment every http_event_keepalive. The
// stream holds a request slot (http_max_connections bounds them) and ends
// when the listener closes.
func (s *Server) handleEvents(w http.ResponseWriter, r *http.Request) {
	rp, ok := parseRead(w, r)
	if !ok {
		return
	}
	if id := r.Header.Get("Last-Event-ID"); id != "" {
		n, err := strconv.ParseInt(id, 10, 64)
		if err != nil || n < 0 {
			WriteError(w, http.StatusBadRequest, "Last-Event-ID "+quoteName(id)+" is not an offset")
			return
		}
		rp.offset = n
	}
	d, ok := s.dial(w, r)
	if !ok {
		return
	}
	defer d.Close()
	ctx, cancel := context.WithCancel(r.Context())
	defer cancel()
	go func() { // the listener closing ends the stream
		select {
		case <-s.done:
			cancel()
		case <-ctx.Done():
		}
	}()
	// The first get answers what a plain read would (no topic, no
	// right, ...) with a JSON error before the stream starts.
	recs, next, moved, err := readOnce(ctx, d, &rp)
	if err != nil {
		failed(w, err)
		return
	}
	rc := http.NewResponseController(w)
	cfg := s.config()
	rc.SetReadDeadline(time.Time{}) // the listener's read timeout is the request's
	rc.SetWriteDeadline(time.Now().Add(cfg.WriteTimeout))
	h := w.Header()
	h.Set("Content-Type", "text/event-stream")
	h.Set("Cache-Control", "no-cache")
	h.Set("X-Accel-Buffering", "no")
	w.WriteHeader(http.StatusOK)
	var buf bytes.Buffer
	buf.WriteString("retry: 1000\n\n")
	lastSent := time.Now()
	poll := readPollMin
	for {
		for i := range recs {
			body := recs[i].js
			nextOff := next
			if i+1 < len(recs) {
				nextOff = recs[i+1].offset
			}
			buf.WriteString("id: ")
			buf.WriteString(strconv.FormatInt(nextOff, 10))
			buf.WriteString("\nevent: record\ndata: ")
			buf.Write(body)
			buf.WriteString("\n\n")
		}
		if moved {
			buf.WriteString("event: moved\ndata: {\"next_offset\":" + strconv.FormatInt(next, 10) + "}\n\n")
		}
		if len(recs) == 0 && !moved && time.Since(lastSent) >= s.config().EventKeepAlive {
			buf.WriteString(": keep-alive\n\n")
		}
		if buf.Len() > 0 {
			if rc.SetWriteDeadline(time.Now().Add(cfg.WriteTimeout)) != nil {
				return
			}
			if _, err := w.Write(buf.Bytes()); err != nil {
				return
			}
			if rc.Flush() != nil {
				return
			}
			buf.Reset()
			lastSent = time.Now()
		}
		rp.offset = next
		if len(recs) > 0 || moved {
			poll = readPollMin
		} else {
			if !pollWait(ctx, poll) {
				return
			}
			poll = min(2*poll, readPollMax)
		}
		if recs, next, moved, err = readOnce(ctx, d, &rp); err != nil {
			return // the stream is open: it ends, the client reconnects
		}
	}
}
