package httpapi

import (
	"bytes"
	"encoding/base64"
	"encoding/binary"
	"encoding/json"
	"errors"
	"math"
	"math/rand/v2"
	"net/http"
	"slices"
	"strconv"
	"sync"
	"time"

	"github.com/metaq-go/metaq/sdk/message"
	"github.com/metaq-go/metaq/sdk/protocol"
	"github.com/metaq-go/metaq/sdk/selector"
)

// The JSON records API (docs/http.md, "Records"), in the style of the
// Confluent REST proxy v2 and Redpanda's pandaproxy, under
// /api/v1/data/: produce records to a topic or a partition, read a
// partition from an offset, follow it as Server-Sent Events (events.go).

// Formats of keys and values in the records API.
const (
	formatJSON   = "json"   // any JSON value, stored as its JSON text
	formatText   = "text"   // a JSON string, stored as its UTF-8 bytes
	formatBinary = "binary" // a base64 string (standard, padded)
)

func validFormat(f string) bool { return f == formatJSON || f == formatText || f == formatBinary }

// ProduceRequest is the body of a produce.
type ProduceRequest struct {
	// Format is how keys and values are given: json (default), text or
	// binary (base64).
	Format  string          `json:"format,omitempty"`
	Records []ProduceRecord `json:"records"`
}

// ProduceRecord is one record to produce.
type ProduceRecord struct {
	// Partition, if set, is the record's partition; else the path's, else
	// the key's hash (as the Go client's default selector), else one the
	// broker picks.
	Partition *int32          `json:"partition,omitempty"`
	Key       json.RawMessage `json:"key,omitempty"`
	Value     json.RawMessage `json:"value,omitempty"`
	Headers   []RecordHeader  `json:"headers,omitempty"`
	Tags      []string        `json:"tags,omitempty"`
	// Timestamp is the record's create time in Unix milliseconds.
	Timestamp *int64 `json:"timestamp,omitempty"`
}

// RecordHeader is one header: a UTF-8 key and a text value (null: a
// header without value).
type RecordHeader struct {
	Key   string  `json:"key"`
	Value *string `json:"value"`
}

// ProduceResult is one record's outcome: where it was stored, or why not.
type ProduceResult struct {
	Partition *int32 `json:"partition,omitempty"`
	Offset    *int64 `json:"offset,omitempty"`
	MsgID     *int64 `json:"msg_id,omitempty"`
	ErrorCode int    `json:"error_code,omitempty"`
	Error     string `json:"error,omitempty"`
}

// ProduceReply is the reply of a produce, one result per record in order.
type ProduceReply struct {
	Offsets []ProduceResult `json:"offsets"`
}

// decodeField turns a key or value of format f into bytes; raw is nil
// (absent) or JSON null for none.
func decodeField(f string, raw json.RawMessage) ([]byte, bool, error) {
	if len(raw) == 0 || string(raw) == "null" {
		return nil, false, nil
	}
	if f != formatJSON && len(raw) >= 2 && raw[0] == '"' && bytes.IndexByte(raw, '\\') < 0 {
		// A string without escapes (the decoder checked it): its bytes.
		if f == formatText {
			return raw[1 : len(raw)-1], true, nil
		}
		b := make([]byte, base64.StdEncoding.DecodedLen(len(raw)-2))
		n, err := decodeBase64(b, raw[1:len(raw)-1])
		if err != nil {
			return nil, false, errors.New("not base64 (format binary): " + err.Error())
		}
		return b[:n], true, nil
	}
	switch f {
	case formatJSON:
		return []byte(raw), true, nil
	case formatText:
		var s string
		if err := json.Unmarshal(raw, &s); err != nil {
			return nil, false, errors.New("not a JSON string (format text)")
		}
		return []byte(s), true, nil
	default:
		var s string
		if err := json.Unmarshal(raw, &s); err != nil {
			return nil, false, errors.New("not a JSON string (format binary: base64)")
		}
		b, err := base64.StdEncoding.DecodeString(s)
		if err != nil {
			return nil, false, errors.New("not base64 (format binary): " + err.Error())
		}
		return b, true, nil
	}
}

// pathPartition is the {partition} of r's path, or -1 without one; it
// answers 400 and reports false for a bad one.
func pathPartition(w http.ResponseWriter, r *http.Request) (int32, bool) {
	v := r.PathValue("partition")
	if v == "" {
		return -1, true
	}
	n, err := strconv.ParseInt(v, 10, 32)
	if err != nil || n < 0 {
		WriteError(w, http.StatusBadRequest, "partition "+quoteName(v)+" is not a partition number")
		return 0, false
	}
	return int32(n), true
}

// pending is a run of records bound for one partition, sent as one mput.
type pending struct {
	part  int32
	idx   []int // the records' indexes in the request
	sizes []int // their data lengths
	body  []byte
}

// maxMPutBody bounds one mput's body (max_transfer_size defaults to 2 MiB).
const maxMPutBody = 1 << 20

// handleProduce is POST /api/v1/data/topics/{topic}/records and
// /api/v1/data/topics/{topic}/partitions/{partition}/records.
func (s *Server) handleProduce(w http.ResponseWriter, r *http.Request) {
	topic := r.PathValue("topic")
	if err := wireToken("topic", topic); err != nil {
		WriteError(w, http.StatusBadRequest, err.Error())
		return
	}
	pathPart, ok := pathPartition(w, r)
	if !ok {
		return
	}
	body, err := readBody(r)
	defer putBody(body) // the records' keys and values alias it
	if err != nil {
		bodyError(w, err)
		return
	}
	sc := produceScratchPool.Get().(*produceScratch)
	defer sc.put()
	var req ProduceRequest
	req.Records = sc.records[:0]
	sc.plain, ok = parseProduceMarks(body.Bytes(), &req, sc.plain)
	sc.records = req.Records // grown by parseProduce, or as it was
	plain := sc.plain
	if !ok {
		req, plain = ProduceRequest{}, nil
		if produceArrayLen(body.Bytes()) > protocol.MaxMPutCount {
			WriteError(w, http.StatusBadRequest, "records: at most "+strconv.Itoa(protocol.MaxMPutCount)+" in one request")
			return
		}
		if !decodeData(w, body.Bytes(), nil, &req, false) {
			return
		}
	}
	if req.Format == "" {
		req.Format = formatJSON
	}
	if !validFormat(req.Format) {
		WriteError(w, http.StatusBadRequest, "format "+quoteName(req.Format)+": want json, text or binary")
		return
	}
	if len(req.Records) == 0 {
		WriteError(w, http.StatusBadRequest, "records: at least one record is required")
		return
	}
	if len(req.Records) > protocol.MaxMPutCount {
		WriteError(w, http.StatusBadRequest, "records: at most "+strconv.Itoa(protocol.MaxMPutCount)+" in one request")
		return
	}
	res := sc.results(len(req.Records))
	nparts := s.be.Partitions(topic)
	// Records with neither partition nor key go to one partition chosen
	// at random for the request (0 for a topic not open here yet, which
	// auto_create_topics may create).
	anyPart := int32(0)
	if nparts > 0 {
		anyPart = int32(rand.IntN(nparts))
	}
	var runs []*pending
	open := map[int32]*pending{}
	m := &message.Message{} // each record's in turn (fillRecordMessage)
	for i := range req.Records {
		rec := &req.Records[i]
		b64, err := fillRecordMessage(m, req.Format, rec, i < len(plain) && plain[i])
		if err != nil {
			res[i] = ProduceResult{ErrorCode: http.StatusBadRequest, Error: "record " + strconv.Itoa(i) + ": " + err.Error()}
			continue
		}
		p := pathPart
		if rec.Partition != nil {
			p = *rec.Partition
			if p < 0 {
				res[i] = ProduceResult{ErrorCode: http.StatusBadRequest, Error: "record " + strconv.Itoa(i) + ": partition must not be negative"}
				continue
			}
		} else if p < 0 && m.Key != nil && nparts > 0 {
			p = int32(selector.KeyIndex(m.Key, nparts))
		}
		if p < 0 {
			p = anyPart
		}
		n := m.DataLen()
		if b64 != nil {
			n += base64Len(b64) // fillRecordMessage checked it is plainBase64
		}
		run := open[p]
		if run == nil || len(run.idx) == protocol.MaxMPutCount || len(run.body)+n+protocol.MPutEntryHeader > maxMPutBody {
			run = &pending{part: p, idx: make([]int, 0, len(req.Records)-i), sizes: make([]int, 0, len(req.Records)-i)}
			if len(runs) == 0 { // most requests: one run of every record
				buf := bodyPool.Get().(*bytes.Buffer)
				buf.Reset()
				buf.Grow(min(maxMPutBody, len(body.Bytes())+len(req.Records)*protocol.MPutEntryHeader))
				run.body = buf.AvailableBuffer()
				defer putBody(buf) // lent to the data connection: free once it was read or the connection closed (keep)
			}
			open[p] = run
			runs = append(runs, run)
		}
		// The entry's header, then its data in place: flag, length and
		// checksum filled in after.
		at := len(run.body)
		run.body = m.AppendData(append(run.body, make([]byte, protocol.MPutEntryHeader)...))
		if b64 != nil { // a base64 value decoded straight into the body
			to, dl := len(run.body), base64.StdEncoding.DecodedLen(len(b64))
			run.body = slices.Grow(run.body, dl)
			k, err := decodeBase64(run.body[to:to+dl], b64)
			if err != nil {
				run.body = run.body[:at]
				res[i] = ProduceResult{ErrorCode: http.StatusBadRequest, Error: "record " + strconv.Itoa(i) + ": " + valueBase64Error(err).Error()}
				continue
			}
			run.body = run.body[:to+k]
		}
		run.idx = append(run.idx, i)
		run.sizes = append(run.sizes, n)
		data := run.body[at+protocol.MPutEntryHeader:]
		h := run.body[at:]
		binary.BigEndian.PutUint32(h, uint32(m.Flag()))
		binary.BigEndian.PutUint32(h[4:], uint32(len(data)))
		// No checksum (-1): the broker computes the one it stores from
		// these very bytes, in this process, so a second one computed
		// here could never differ (a crc32 of each record's data, per
		// request, for nothing).
		binary.BigEndian.PutUint32(h[8:], math.MaxUint32) // int32 -1
	}
	// A run whose every record failed (a bad base64 value found in
	// place) is not sent.
	runs = slices.DeleteFunc(runs, func(run *pending) bool { return len(run.idx) == 0 })
	if len(runs) > 0 {
		d, ok := s.dialKept(w, r)
		if !ok {
			return
		}
		// Each run's header, then its body as it is (not copied again).
		wire := make([][]byte, 0, 2*len(runs))
		for k, run := range runs {
			wire = append(wire, protocol.AppendMPutHeader(nil, topic, run.part, len(run.body), len(run.idx), int32(k+1)), run.body)
		}
		reps, err := d.doBuffers(r.Context(), wire, len(runs))
		s.keep(d) // before the deferred putBody: what it lent is read, or dropped by a close
		if err != nil {
			failed(w, err)
			return
		}
		for k, run := range runs {
			produced(res, run, reps[k])
		}
	}
	status := http.StatusOK
	okCount := 0
	for _, x := range res {
		if x.ErrorCode == 0 {
			okCount++
		}
	}
	if okCount == 0 {
		status = httpStatus(res[0].ErrorCode)
	}
	sc.js = writeProduceReply(w, status, res, sc.js)
}

// produceScratch is what a produce request builds and drops once its
// reply is written: its records (aliasing its body), its results and its
// reply's JSON, kept for the next (an allocation of each per request
// before: 11, 6 and 8 KiB for 100 records).
type produceScratch struct {
	records []ProduceRecord
	plain   []bool // parseProduceMarks'

	res []ProduceResult
	js  []byte
}

var produceScratchPool = sync.Pool{New: func() any { return new(produceScratch) }}

// maxScratchRecords bounds the records and results a produceScratch keeps.
const maxScratchRecords = 1024

// results returns n zero results.
func (sc *produceScratch) results(n int) []ProduceResult {
	if cap(sc.res) < n {
		sc.res = make([]ProduceResult, n)
	}
	sc.res = sc.res[:n]
	clear(sc.res)
	return sc.res
}

// put clears what refers to the request (its body, its results' numbers)
// and gives sc back.
func (sc *produceScratch) put() {
	clear(sc.records[:cap(sc.records)])
	clear(sc.res[:cap(sc.res)])
	if cap(sc.records) > maxScratchRecords || cap(sc.res) > maxScratchRecords || cap(sc.js) > maxScratchRecords*128 {
		return
	}
	sc.records, sc.res, sc.js = sc.records[:0], sc.res[:0], sc.js[:0]
	produceScratchPool.Put(sc)
}

// writeProduceReply writes ProduceReply{res} as WriteJSON does; a reply
// of records all stored is written here, without reflection
// (TestProduceReplyJSON).
// It returns buf, the buffer it wrote the JSON into, for the next.
func writeProduceReply(w http.ResponseWriter, status int, res []ProduceResult, buf []byte) []byte {
	js := appendProduceReply(slices.Grow(buf[:0], 32+len(res)*128), res) // a result is 80 to 110 bytes
	if js == nil {
		WriteJSON(w, status, ProduceReply{Offsets: res})
		return buf
	}
	w.Header().Set("Content-Type", "application/json")
	w.Header().Set("X-Content-Type-Options", "nosniff")
	// Its length: net/http chunks a reply over 2 KiB without one (100
	// results are about 7 KiB).
	w.Header().Set("Content-Length", strconv.Itoa(len(js)))
	w.WriteHeader(status)
	w.Write(js)
	return js
}

// appendProduceReply appends the indented JSON of ProduceReply{res}, or
// returns nil if a result is not a stored record's.
func appendProduceReply(dst []byte, res []ProduceResult) []byte {
	dst = append(dst, "{\n  \"offsets\": ["...)
	for i, x := range res {
		if x.ErrorCode != 0 || x.Error != "" || x.Partition == nil || x.Offset == nil || x.MsgID == nil {
			return nil
		}
		if i > 0 {
			dst = append(dst, ',')
		}
		dst = append(dst, "\n    {\n      \"partition\": "...)
		dst = strconv.AppendInt(dst, int64(*x.Partition), 10)
		dst = append(dst, ",\n      \"offset\": "...)
		dst = strconv.AppendInt(dst, *x.Offset, 10)
		dst = append(dst, ",\n      \"msg_id\": "...)
		dst = strconv.AppendInt(dst, *x.MsgID, 10)
		dst = append(dst, "\n    }"...)
	}
	if len(res) > 0 {
		dst = append(dst, "\n  "...)
	}
	return append(dst, "]\n}\n"...)
}

// produced fills the results of run's records from its mput reply.
func produced(res []ProduceResult, run *pending, rep reply) {
	if rep.Code != protocol.StatusOK {
		for _, i := range run.idx {
			res[i] = ProduceResult{ErrorCode: rep.Code, Error: string(rep.Body)}
		}
		return
	}
	id, part, off, _, err := protocol.ParsePutResult(rep.Body)
	if err != nil {
		for _, i := range run.idx {
			res[i] = ProduceResult{ErrorCode: http.StatusBadGateway, Error: "bad put reply: " + err.Error()}
		}
		return
	}
	// The results' numbers in three arrays (not three allocations per
	// record).
	parts, offs, ids := make([]int32, len(run.idx)), make([]int64, len(run.idx)), make([]int64, len(run.idx))
	for k, i := range run.idx {
		parts[k], offs[k], ids[k] = part, off, id+int64(k)
		res[i] = ProduceResult{Partition: &parts[k], Offset: &offs[k], MsgID: &ids[k]}
		off += int64(message.HeaderSize + run.sizes[k])
	}
}

// recordMessage is rec as a message (its properties checked).
func recordMessage(format string, rec *ProduceRecord) (*message.Message, error) {
	m := &message.Message{}
	b64, err := fillRecordMessage(m, format, rec, false)
	if err != nil {
		return nil, err
	}
	if b64 == nil {
		return m, nil
	}
	m.Body = make([]byte, base64.StdEncoding.DecodedLen(len(b64)))
	n, err := decodeBase64(m.Body, b64)
	if err != nil {
		return nil, valueBase64Error(err)
	}
	m.Body = m.Body[:n]
	return m, nil
}

// valueBase64Error is the error of a value in format binary that is not
// base64 (decodeField's words).
func valueBase64Error(err error) error {
	return errors.New("value: not base64 (format binary): " + err.Error())
}

// plainBase64 is s's decoded length if s is a JSON string without
// escapes of a length base64 (standard, padded) allows, else -1.
//
// plain says raw is known to be a string without escapes
// (parseProduceMarks): it is not scanned for a backslash again.
func plainBase64(raw json.RawMessage, plain bool) int {
	if len(raw) < 2 || raw[0] != '"' || (len(raw)-2)%4 != 0 || !plain && bytes.IndexByte(raw, '\\') >= 0 {
		return -1
	}
	return base64Len(raw[1 : len(raw)-1])
}

// base64Len is the decoded length of s, base64 (standard, padded) of a
// length that is a multiple of 4.
func base64Len(s []byte) int {
	n := len(s) / 4 * 3
	for k := 0; k < 2 && len(s) > k && s[len(s)-1-k] == '='; k++ {
		n--
	}
	return n
}

// fillRecordMessage fills *m with rec (its properties checked), which
// it resets (keeping its headers' array: handleProduce fills one message
// per request, not one allocated per record), except that a value in
// format binary given as a plain string (plainBase64) is not decoded:
// m.Body is nil and b64 is its base64 text, for the caller to decode in
// place (handleProduce, into the mput body; recordMessage). A bad value
// is then found there.
//
// plain says rec's value is known to be a string without escapes
// (parseProduceMarks).
func fillRecordMessage(m *message.Message, format string, rec *ProduceRecord, plain bool) (b64 []byte, err error) {
	*m = message.Message{Headers: m.Headers[:0]}
	if m.Key, _, err = decodeField(format, rec.Key); err != nil {
		return nil, errors.New("key: " + err.Error())
	}
	if format == formatBinary && plainBase64(rec.Value, plain) >= 0 {
		b64 = rec.Value[1 : len(rec.Value)-1]
	} else if m.Body, _, err = decodeField(format, rec.Value); err != nil {
		return nil, errors.New("value: " + err.Error())
	}
	for _, h := range rec.Headers {
		hv := message.Header{Key: h.Key}
		if h.Value != nil {
			hv.Value = []byte(*h.Value)
		}
		m.Headers = append(m.Headers, hv)
	}
	m.Tags = rec.Tags
	if rec.Timestamp != nil {
		if *rec.Timestamp <= 0 {
			return nil, laterError(b64, errors.New("timestamp must be positive (Unix milliseconds)"))
		}
		m.Timestamp = time.UnixMilli(*rec.Timestamp)
	}
	if err := m.CheckProperties(); err != nil {
		return nil, laterError(b64, err)
	}
	return b64, nil
}

// laterError is err, found after the value, unless the value b64 (not
// decoded yet) is not base64: a record's first error is named, the
// value's before the timestamp's and the properties'.
func laterError(b64 []byte, err error) error {
	if b64 != nil {
		if _, berr := base64.StdEncoding.Decode(make([]byte, base64.StdEncoding.DecodedLen(len(b64))), b64); berr != nil {
			return valueBase64Error(berr)
		}
	}
	return err
}

// ConsumedRecord is one record read.
type ConsumedRecord struct {
	Topic     string          `json:"topic"`
	Partition int32           `json:"partition"`
	Offset    int64           `json:"offset"`
	MsgID     int64           `json:"msg_id"`
	Key       json.RawMessage `json:"key,omitempty"`
	Value     json.RawMessage `json:"value"`
	Headers   []RecordHeader  `json:"headers,omitempty"`
	Tags      []string        `json:"tags,omitempty"`
	Timestamp int64           `json:"timestamp"`
	Attribute *string         `json:"attribute,omitempty"`
}

// ReadReply is the reply of a read: the records and the offset to read
// next.
type ReadReply struct {
	Records    []ConsumedRecord `json:"records"`
	NextOffset int64            `json:"next_offset"`
	// OutOfRange says the offset asked for is no longer (or not yet) in
	// the partition: NextOffset is the one to use.
	OutOfRange bool `json:"out_of_range,omitempty"`
}
