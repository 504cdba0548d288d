package broker

import (
	"cmp"
	"fmt"
	"slices"
	"strconv"
	"sync"
	"time"

	"github.com/metaq-go/metaq/core/httpapi"
	"github.com/metaq-go/metaq/core/index"
	"github.com/metaq-go/metaq/core/store"
	"github.com/metaq-go/metaq/sdk/message"
)

// indexSet is the key and id index of the broker's partitions
// (core/index): one background Indexer per data directory, following the
// logs opened in it. With index_keys = false it holds none, and lookups
// scan the logs.
type indexSet struct {
	mu     sync.Mutex
	byDir  map[string]*index.Indexer
	closed bool
}

// indexLogs starts following parts (opened in data directory dir) when
// index_keys is on.
func (b *Broker) indexLogs(dir string, parts []*store.Log) {
	cfg := b.config()
	if !cfg.IndexKeys || len(parts) == 0 {
		return
	}
	s := &b.indexes
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.closed {
		return
	}
	if s.byDir == nil {
		s.byDir = map[string]*index.Indexer{}
	}
	x := s.byDir[dir]
	if x == nil {
		x = index.NewIndexer(b.logf)
		x.Start()
		s.byDir[dir] = x
	}
	for _, l := range parts {
		if _, err := x.Add(l, index.Options{MaxMessageSize: cfg.MaxMessageSize}); err != nil {
			b.errorf("index: %v (lookups in %s scan its log)", err, l.Dir())
		}
	}
}

// unindex stops following parts and seals their open chunks; call it
// before they close.
func (s *indexSet) unindex(parts []*store.Log) {
	s.mu.Lock()
	xs := make([]*index.Indexer, 0, len(s.byDir))
	for _, x := range s.byDir {
		xs = append(xs, x)
	}
	s.mu.Unlock()
	for _, l := range parts {
		for _, x := range xs {
			x.Remove(l)
		}
	}
}

// part returns the index of l, nil when it has none.
func (s *indexSet) part(l *store.Log) *index.Part {
	s.mu.Lock()
	defer s.mu.Unlock()
	for _, x := range s.byDir {
		if p := x.Part(l); p != nil {
			return p
		}
	}
	return nil
}

// statuses are the metrics of each data directory's index.
func (s *indexSet) statuses() []httpapi.KeyIndexStatus {
	s.mu.Lock()
	dirs := make([]string, 0, len(s.byDir))
	xs := map[string]*index.Indexer{}
	for d, x := range s.byDir {
		dirs = append(dirs, d)
		xs[d] = x
	}
	s.mu.Unlock()
	slices.Sort(dirs)
	out := make([]httpapi.KeyIndexStatus, 0, len(dirs))
	for _, d := range dirs {
		st := xs[d].Stats()
		out = append(out, httpapi.KeyIndexStatus{Dir: d, Bytes: st.Bytes, Entries: st.Entries, Lag: st.Lag})
	}
	return out
}

// close stops every Indexer (before the logs close).
func (s *indexSet) close() {
	s.mu.Lock()
	s.closed = true
	xs := s.byDir
	s.byDir = nil
	s.mu.Unlock()
	for _, x := range xs {
		x.Close()
	}
}

// findBudget bounds a lookup's time (docs/http.md, "Find messages").
const findBudget = 3 * time.Second

// FindMessages looks messages up by key or id in topics' partitions,
// through their index (or a scan of the log where there is none): at most
// q.Limit records, the newest, within findBudget.
func (h httpBackend) FindMessages(topics []string, q httpapi.FindQuery) (httpapi.FindResult, error) {
	b := h.b
	start := time.Now()
	if q.Limit <= 0 {
		q.Limit = httpapi.FindDefaultLimit
	}
	iq := index.Query{Key: q.Key, ID: q.ID, ByID: q.ByID, Limit: q.Limit, Deadline: start.Add(findBudget)}
	res := httpapi.FindResult{Limit: q.Limit}
	maxMsg := b.config().MaxMessageSize
	for _, name := range topics {
		b.mu.RLock()
		t := b.topics[name]
		b.mu.RUnlock()
		if t == nil {
			continue
		}
		for p, l := range t.parts {
			part := b.indexes.part(l)
			var r index.Result
			var err error
			if part != nil {
				r, err = part.Lookup(iq)
			} else {
				r, err = index.Scan(l, iq, maxMsg)
			}
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
				res.Found = append(res.Found, httpapi.FoundRecord{Topic: name, Partition: p, Record: rec})
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
		slices.SortFunc(res.Found, func(a, b httpapi.FoundRecord) int { return cmp.Compare(b.Record.ID, a.Record.ID) })
		res.Found, res.More = res.Found[:q.Limit], true
	}
	slices.SortFunc(res.Found, func(a, b httpapi.FoundRecord) int {
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
		if self := b.config().BrokerID; broker != self {
			res.Notes = append(res.Notes, fmt.Sprintf("msgId %d was assigned by broker %d at %s; this is broker %d: ask broker %d (or its slaves)",
				q.ID, broker, time.UnixMilli(ms).UTC().Format(time.RFC3339Nano), self, broker))
		}
	}
	res.Took = time.Since(start)
	res.Indexed = b.config().IndexKeys
	return res, nil
}
