package httpapi

import (
	"cmp"
	"fmt"
	"net/http"
	"net/url"
	"slices"
	"strconv"
	"time"

	"github.com/metaq-go/metaq/core/index"
	"github.com/metaq-go/metaq/core/security"
	"github.com/metaq-go/metaq/core/store"
	"github.com/metaq-go/metaq/sdk/message"
)

// Finding messages by key or msgId (docs/http.md, "Find messages"):
// GET /api/v1/messages?key=K or ?id=ID, optionally &topic=T&limit=N, and
// the search box of the dashboard's topic page.

// FindQuery is a lookup by Key, or by ID when ByID is set; Limit bounds
// the records returned (the newest).
type FindQuery struct {
	Key   []byte
	ID    int64
	ByID  bool
	Limit int
}

// FoundRecord is a record a lookup found.
type FoundRecord struct {
	Topic     string
	Partition int
	Record    message.Record
}

// FindResult is what a lookup found.
type FindResult struct {
	Found []FoundRecord
	// More: more records matched than Limit; TimedOut: the time budget
	// ended the lookup (Found is what it had found).
	More, TimedOut bool
	Limit          int
	// Candidates are the index entries whose records were read and
	// compared; ScannedBytes the bytes of the logs scanned (not indexed
	// yet, damaged index files, or index_keys off).
	Candidates   int
	ScannedBytes int64
	Notes        []string
	Took         time.Duration
	Indexed      bool // index_keys is on
}

// Find bounds.
const (
	FindDefaultLimit = 20
	FindMaxLimit     = 1000
)

// ParseFindQuery reads a lookup from a query string: key or id (one of
// them), limit.
func ParseFindQuery(v url.Values) (FindQuery, error) {
	q := FindQuery{Limit: FindDefaultLimit}
	key, hasKey := v["key"]
	id := v.Get("id")
	switch {
	case hasKey && id != "":
		return q, fmt.Errorf("give key or id, not both")
	case hasKey:
		q.Key = []byte(key[0])
		if len(q.Key) > message.MaxKeyBytes {
			return q, fmt.Errorf("key is %d bytes, more than a key may have (%d)", len(q.Key), message.MaxKeyBytes)
		}
	case id != "":
		n, err := strconv.ParseInt(id, 10, 64)
		if err != nil || n <= 0 {
			return q, fmt.Errorf("id must be a msgId (a positive decimal integer), got %s", quoteName(id))
		}
		q.ID, q.ByID = n, true
	default:
		return q, fmt.Errorf("give key=K or id=MSGID")
	}
	if s := v.Get("limit"); s != "" {
		n, err := strconv.Atoi(s)
		if err != nil || n < 1 || n > FindMaxLimit {
			return q, fmt.Errorf("limit must be 1..%d, got %s", FindMaxLimit, quoteName(s))
		}
		q.Limit = n
	}
	return q, nil
}

// findTopics returns the topics a lookup searches: topic when given (a
// 403 or 404 *RequestError when v may not read it or it is not open),
// else every open topic v may subscribe to.
func (s *Server) findTopics(v security.Viewer, topic string) ([]string, error) {
	if topic != "" {
		if err := v.Authorize(security.Subscribe, topic); err != nil {
			return nil, &RequestError{Status: http.StatusForbidden, Msg: err.Error()}
		}
		if _, err := s.be.Topic(topic); err != nil {
			return nil, err
		}
		return []string{topic}, nil
	}
	var out []string
	for _, t := range s.be.Topics(v) {
		if v.Authorize(security.Subscribe, t.Name) == nil {
			out = append(out, t.Name)
		}
	}
	return out, nil
}

// FoundJSON is one record of GET /api/v1/messages: the shape of `metaq
// consume --json`'s objects (sdk/admin.FoundMessage, which this package
// may not import: sdk/client's tests import the broker).
type FoundJSON struct {
	Topic     string `json:"topic"`
	Partition int    `json:"partition"`
	Offset    int64  `json:"offset"`
	MsgID     string `json:"msgId"`
	Time      int64  `json:"time"` // unix ms: the create time, else the msgId's
	message.JSONContent
}

// FindJSON is GET /api/v1/messages's reply (sdk/admin.Found).
type FindJSON struct {
	Messages     []FoundJSON `json:"messages"`
	More         bool        `json:"more"`
	TimedOut     bool        `json:"timedOut"`
	Limit        int         `json:"limit"`
	Indexed      bool        `json:"indexed"`
	Candidates   int         `json:"candidates"`
	ScannedBytes int64       `json:"scannedBytes"`
	TookMs       float64     `json:"tookMs"`
	Notes        []string    `json:"notes,omitempty"`
}

// foundJSON converts f for the JSON reply.
func foundJSON(f FoundRecord) (FoundJSON, error) {
	m, err := f.Record.Message(f.Topic, int32(f.Partition))
	if err != nil {
		return FoundJSON{}, err
	}
	return FoundJSON{Topic: f.Topic, Partition: f.Partition, Offset: f.Record.Offset,
		MsgID: strconv.FormatInt(f.Record.ID, 10), Time: m.Time().UnixMilli(), JSONContent: message.NewJSONContent(&m)}, nil
}

// apiFindMessages is GET /api/v1/messages: it reads messages, so each
// topic searched needs subscribe, as get does.
func (s *Server) apiFindMessages(w http.ResponseWriter, r *http.Request) {
	q, err := ParseFindQuery(r.URL.Query())
	if err != nil {
		WriteError(w, http.StatusBadRequest, err.Error())
		return
	}
	topics, err := s.findTopics(s.viewer(r), r.URL.Query().Get("topic"))
	if err != nil {
		writeErr(w, err)
		return
	}
	res, err := s.be.FindMessages(topics, q)
	if err != nil {
		writeErr(w, err)
		return
	}
	out := FindJSON{Messages: []FoundJSON{}, More: res.More, TimedOut: res.TimedOut, Limit: q.Limit, Indexed: res.Indexed,
		Candidates: res.Candidates, ScannedBytes: res.ScannedBytes, TookMs: float64(res.Took.Microseconds()) / 1000, Notes: res.Notes}
	for _, f := range res.Found {
		j, err := foundJSON(f)
		if err != nil {
			out.Notes = append(out.Notes, fmt.Sprintf("%s-%d offset %d: %v", f.Topic, f.Partition, f.Record.Offset, err))
			continue
		}
		out.Messages = append(out.Messages, j)
	}
	WriteJSON(w, http.StatusOK, out)
}

// FoundShown is a record of the dashboard's search results.
type FoundShown struct {
	Partition int
	ShownMessage
}

// uiFind is the topic page's search: the messages of the topic with a
// key or msgId (?by=key|id&q=...), shown as the messages page shows them.
// It reads messages, so it needs subscribe, as get does.
func (s *Server) uiFind(w http.ResponseWriter, r *http.Request) {
	t, ok := s.uiTopicNamed(w, r, security.Subscribe)
	if !ok {
		return
	}
	by, text := r.URL.Query().Get("by"), r.URL.Query().Get("q")
	v := url.Values{}
	switch by {
	case "key", "":
		by = "key"
		v.Set("key", text)
	case "id":
		v.Set("id", text)
	default:
		s.UIError(w, r, http.StatusBadRequest, "by must be key or id, got "+quoteName(by))
		return
	}
	q, err := ParseFindQuery(v)
	if err != nil {
		s.UIError(w, r, http.StatusBadRequest, err.Error())
		return
	}
	res, err := s.be.FindMessages([]string{t.Name}, q)
	if err != nil {
		code, msg := statusOf(err)
		s.UIError(w, r, code, msg)
		return
	}
	var found []FoundShown
	notes := res.Notes
	for _, f := range res.Found {
		m, err := f.Record.Message(f.Topic, int32(f.Partition))
		if err != nil {
			notes = append(notes, fmt.Sprintf("partition %d offset %d: %v", f.Partition, f.Record.Offset, err))
			continue
		}
		found = append(found, FoundShown{Partition: f.Partition, ShownMessage: shownRecord(&f.Record, &m, false)})
	}
	s.Render(w, r, http.StatusOK, "find", "Find in "+t.Name, "topics", map[string]any{
		"Topic": t.Name, "By": by, "Q": text, "Found": found, "More": res.More, "TimedOut": res.TimedOut,
		"Limit": q.Limit, "Notes": notes, "Indexed": res.Indexed, "TookMs": float64(res.Took.Microseconds()) / 1000,
	}, "")
}

// FindBudget bounds a lookup's time (docs/http.md, "Find messages").
const FindBudget = 3 * time.Second

// FindSource is what Find searches: the partitions of an open topic (nil
// when it is not open), a partition's lookup (core/index: its index, or a
// scan of its log), and this broker's id and index_keys for the notes.
type FindSource struct {
	Parts    func(topic string) []*store.Log
	Lookup   func(l *store.Log, q index.Query) (index.Result, error)
	BrokerID int
	Indexed  bool
}

// Find looks messages up by key or id in topics' partitions: at most
// q.Limit records, the newest, within FindBudget, shown by topic,
// partition and offset.
func Find(topics []string, q FindQuery, src FindSource) FindResult {
	start := time.Now()
	if q.Limit <= 0 {
		q.Limit = FindDefaultLimit
	}
	iq := index.Query{Key: q.Key, ID: q.ID, ByID: q.ByID, Limit: q.Limit, Deadline: start.Add(FindBudget)}
	res := FindResult{Limit: q.Limit}
	for _, name := range topics {
		for p, l := range src.Parts(name) {
			r, err := src.Lookup(l, iq)
			if err != nil {
				res.Notes = append(res.Notes, name+"-"+strconv.Itoa(p)+": "+err.Error())
				continue
			}
			res.Candidates += r.Candidates
			res.ScannedBytes += r.Scanned
			res.More = res.More || r.More
			res.TimedOut = res.TimedOut || r.TimedOut
			for _, n := range r.Notes {
				res.Notes = append(res.Notes, name+"-"+strconv.Itoa(p)+": "+n)
			}
			for _, rec := range r.Records {
				res.Found = append(res.Found, FoundRecord{Topic: name, Partition: p, Record: rec})
			}
			if r.TimedOut {
				break
			}
		}
		if res.TimedOut {
			break
		}
	}
	// The newest q.Limit of all (ids rise with time), shown by topic,
	// partition and offset.
	if len(res.Found) > q.Limit {
		slices.SortFunc(res.Found, func(a, b FoundRecord) int { return cmp.Compare(b.Record.ID, a.Record.ID) })
		res.Found, res.More = res.Found[:q.Limit], true
	}
	slices.SortFunc(res.Found, func(a, b FoundRecord) int {
		switch {
		case a.Topic != b.Topic:
			if a.Topic < b.Topic {
				return -1
			}
			return 1
		case a.Partition != b.Partition:
			return a.Partition - b.Partition
		}
		return cmp.Compare(a.Record.Offset, b.Record.Offset)
	})
	if q.ByID && len(res.Found) == 0 {
		ms, broker, _ := message.IDParts(q.ID)
		if self := src.BrokerID; broker != self {
			res.Notes = append(res.Notes, fmt.Sprintf("msgId %d was assigned by broker %d at %s; this is broker %d: ask broker %d (or its slaves)",
				q.ID, broker, time.UnixMilli(ms).UTC().Format(time.RFC3339Nano), self, broker))
		}
	}
	res.Took = time.Since(start)
	res.Indexed = src.Indexed
	return res
}
