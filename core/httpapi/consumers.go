package httpapi

import (
	"bytes"
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"math"
	"net/http"
	"slices"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/metaq-go/metaq/sdk/message"
	"github.com/metaq-go/metaq/sdk/protocol"
)

// HTTP consumer instances (docs/http.md, "Consumer groups"), as the
// Confluent REST proxy v2 has them: a client creates an instance in a
// group, subscribes it to topics, fetches records (long poll), commits
// and deletes it. An instance is a member of the broker's own local
// groups (join, heartbeat, leave on its in-process connection), so Go,
// Python and HTTP consumers of one group split the partitions; its
// offsets go to the configured offset store through commit and fetch. A
// revoked partition is given up without a commit: what the client did
// not commit is read again by the next owner (at least once). An
// instance that sees no request for http_consumer_timeout is deleted.

const (
	// consumerHeartbeat is the wait between an instance's heartbeats
	// (the group session timeout defaults to 3 s).
	consumerHeartbeat = time.Second
	// maxSubscribedTopics bounds one instance's topics (a connection has
	// at most max_memberships_per_connection memberships, 64 by default).
	maxSubscribedTopics = 64
)

// consumer is one HTTP consumer instance.
type consumer struct {
	id, group, user, format string
	latest                  bool // auto_offset_reset latest
	created                 time.Time

	mu       sync.Mutex // one round trip on d at a time; the fields below
	d        *dataConn
	closed   bool
	topics   []string
	gens     map[string]int64
	owned    map[string][]int32
	pos      map[tpKey]int64 // next offset to fetch of each owned partition
	next     int             // round robin over the owned partitions
	lastUsed time.Time
	done     chan struct{}
}

type tpKey struct {
	topic string
	part  int32
}

// consumers is the server's consumer instances.
type consumers struct {
	mu   sync.Mutex
	byID map[string]*consumer
}

// CreateConsumerRequest is the body of a create.
type CreateConsumerRequest struct {
	// Format of keys and values in fetched records: binary (default),
	// json or text.
	Format string `json:"format,omitempty"`
	// AutoOffsetReset is where a partition with no committed offset
	// starts: earliest (default) or latest.
	AutoOffsetReset string `json:"auto_offset_reset,omitempty"`
}

// CreateConsumerReply names the new instance.
type CreateConsumerReply struct {
	InstanceID string `json:"instance_id"`
	BaseURI    string `json:"base_uri"`
}

// SubscribeRequest is the body of a subscription.
type SubscribeRequest struct {
	Topics []string `json:"topics"`
}

// TopicPartition names one partition.
type TopicPartition struct {
	Topic     string `json:"topic"`
	Partition int32  `json:"partition"`
}

// AssignmentsReply lists the partitions an instance owns now.
type AssignmentsReply struct {
	Partitions []TopicPartition `json:"partitions"`
}

// CommitOffset is one offset to commit: the next offset to read.
type CommitOffset struct {
	Topic     string `json:"topic"`
	Partition int32  `json:"partition"`
	Offset    int64  `json:"offset"`
}

// CommitRequest is the body of a commit; no offsets commits the instance's
// position in every partition it owns (after the records it fetched).
type CommitRequest struct {
	Offsets []CommitOffset `json:"offsets,omitempty"`
}

// CommitReply is what a commit stored.
type CommitReply struct {
	Offsets []CommitOffset `json:"offsets"`
}

// userName is r's user's name ("" with auth off).
func userName(r *http.Request) string {
	if u := User(r); u != nil {
		return u.Name
	}
	return ""
}

// handleCreateConsumer is POST /api/v1/data/consumers/{group}.
func (s *Server) handleCreateConsumer(w http.ResponseWriter, r *http.Request) {
	group := r.PathValue("group")
	if err := message.ValidateGroup(group); err != nil {
		WriteError(w, http.StatusBadRequest, err.Error())
		return
	}
	if err := wireToken("group", group); err != nil {
		WriteError(w, http.StatusBadRequest, err.Error())
		return
	}
	var req CreateConsumerRequest
	if r.ContentLength != 0 && !DecodeBody(w, r, &req) {
		return
	}
	if req.Format == "" {
		req.Format = formatBinary
	}
	if !validFormat(req.Format) {
		WriteError(w, http.StatusBadRequest, "format "+quoteName(req.Format)+": want json, text or binary")
		return
	}
	switch req.AutoOffsetReset {
	case "", "earliest", "latest":
	default:
		WriteError(w, http.StatusBadRequest, "auto_offset_reset "+quoteName(req.AutoOffsetReset)+": want earliest or latest")
		return
	}
	var rnd [8]byte
	rand.Read(rnd[:])
	c := &consumer{id: "http-" + hex.EncodeToString(rnd[:]), group: group, user: userName(r), format: req.Format,
		latest: req.AutoOffsetReset == "latest", created: time.Now(), lastUsed: time.Now(),
		gens: map[string]int64{}, owned: map[string][]int32{}, pos: map[tpKey]int64{}, done: make(chan struct{})}
	cfg := s.config()
	s.cons.mu.Lock()
	if s.cons.byID == nil {
		s.cons.byID = map[string]*consumer{}
	}
	if len(s.cons.byID) >= cfg.MaxConsumers {
		s.cons.mu.Unlock()
		w.Header().Set("Retry-After", "10")
		WriteError(w, http.StatusServiceUnavailable, "too many HTTP consumer instances ("+strconv.Itoa(cfg.MaxConsumers)+", http_max_consumers): delete some or let them expire")
		return
	}
	nc, err := s.be.DataConn(User(r), r.RemoteAddr)
	if err != nil {
		s.cons.mu.Unlock()
		WriteError(w, http.StatusServiceUnavailable, "broker unavailable: "+err.Error())
		return
	}
	c.d = &dataConn{nc: nc, dec: protocol.NewDecoder(nc, protocol.Limits{MaxLine: 4096, MaxBody: maxDataGet + 64<<10})}
	s.cons.byID[c.id] = c
	s.cons.mu.Unlock()
	s.wg.Add(1)
	go func() { defer s.wg.Done(); s.consumerLoop(c) }()
	WriteJSON(w, http.StatusOK, CreateConsumerReply{InstanceID: c.id, BaseURI: "/api/v1/data/consumers/" + group + "/instances/" + c.id})
}

// consumer finds r's instance: its group and id, created by r's user; it
// answers 404 and returns nil if there is none.
func (s *Server) consumer(w http.ResponseWriter, r *http.Request) *consumer {
	id, group := r.PathValue("instance"), r.PathValue("group")
	s.cons.mu.Lock()
	c := s.cons.byID[id]
	s.cons.mu.Unlock()
	if c == nil || c.group != group || c.user != userName(r) {
		WriteError(w, http.StatusNotFound, "no consumer instance "+quoteName(id)+" in group "+quoteName(group)+" (deleted, expired after http_consumer_timeout, or never created)")
		return nil
	}
	return c
}

// remove takes c out of the instances and closes it (it leaves its
// groups: the broker ends the memberships of a closed connection).
func (s *Server) removeConsumer(c *consumer) {
	s.cons.mu.Lock()
	if s.cons.byID[c.id] == c {
		delete(s.cons.byID, c.id)
	}
	s.cons.mu.Unlock()
	c.mu.Lock()
	if !c.closed {
		c.closed = true
		close(c.done)
		ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
		for _, t := range c.topics {
			c.d.one(ctx, protocol.AppendLeave(nil, c.group, t, c.id, 1))
		}
		cancel()
		c.d.Close()
	}
	c.mu.Unlock()
}

// consumerLoop heartbeats c's memberships and deletes it once idle for
// http_consumer_timeout or when the server closes.
func (s *Server) consumerLoop(c *consumer) {
	tk := time.NewTicker(consumerHeartbeat)
	defer tk.Stop()
	for {
		select {
		case <-c.done:
			return
		case <-s.done:
			s.removeConsumer(c)
			return
		case <-tk.C:
		}
		timeout := time.Duration(s.config().ConsumerTimeout) * time.Millisecond
		c.mu.Lock()
		idle := time.Since(c.lastUsed) > timeout
		if !idle && !c.closed {
			ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
			for _, t := range c.topics {
				c.heartbeat(ctx, t)
			}
			cancel()
		}
		c.mu.Unlock()
		if idle {
			s.logf("http: consumer instance %s of group %s expired (no request for %v)", c.id, quoteName(c.group), timeout)
			s.removeConsumer(c)
			return
		}
	}
}

// parseView reads a join or heartbeat reply: "<generation> <p1,p2,...>".
func parseView(body []byte) (int64, []int32, error) {
	g, ps, _ := strings.Cut(strings.TrimSpace(string(body)), " ")
	gen, err := strconv.ParseInt(g, 10, 64)
	if err != nil {
		return 0, nil, errors.New("bad group view " + quoteName(string(body)))
	}
	var parts []int32
	for _, f := range strings.Split(ps, ",") {
		if f == "" {
			continue
		}
		p, err := strconv.ParseInt(f, 10, 32)
		if err != nil {
			return 0, nil, errors.New("bad group view " + quoteName(string(body)))
		}
		parts = append(parts, int32(p))
	}
	return gen, parts, nil
}

// apply takes a new view of topic: partitions no longer owned are given
// up (their positions dropped: what was not committed is read again by
// the next owner), new ones start at their committed offset. Under c.mu.
func (c *consumer) apply(ctx context.Context, topic string, gen int64, parts []int32) error {
	for _, p := range c.owned[topic] {
		if !slices.Contains(parts, p) {
			delete(c.pos, tpKey{topic, p})
		}
	}
	var fresh []int32
	for _, p := range parts {
		if _, ok := c.pos[tpKey{topic, p}]; !ok {
			fresh = append(fresh, p)
		}
	}
	if len(fresh) > 0 {
		es := make([]protocol.OffsetEntry, len(fresh))
		for i, p := range fresh {
			es[i] = protocol.OffsetEntry{Topic: topic, Partition: p}
		}
		rep, err := c.d.one(ctx, protocol.AppendFetch(nil, c.group, es, 1))
		if err != nil {
			return err
		}
		if rep.Code != protocol.StatusOK {
			return &RequestError{Status: httpStatus(rep.Code), Msg: string(rep.Body)}
		}
		lines, err := protocol.ParseOffsetLines(rep.Body, true)
		if err != nil || len(lines) != len(fresh) {
			return &RequestError{Status: http.StatusBadGateway, Msg: "bad fetch reply " + quoteName(string(rep.Body))}
		}
		for i, l := range lines {
			off := l.Offset
			if off < 0 {
				off = 0 // earliest: the broker moves a get below its first offset (301)
				if c.latest {
					off = math.MaxInt64 // the broker answers 301 with the end
				}
			}
			c.pos[tpKey{topic, fresh[i]}] = off
		}
	}
	c.owned[topic], c.gens[topic] = parts, gen
	return nil
}

// join makes c a member of its group on topic. Under c.mu.
func (c *consumer) join(ctx context.Context, topic string) error {
	rep, err := c.d.one(ctx, protocol.AppendJoin(nil, c.group, topic, c.id, "default", 1))
	if err != nil {
		return err
	}
	if rep.Code != protocol.StatusOK {
		return &RequestError{Status: httpStatus(rep.Code), Msg: string(rep.Body)}
	}
	gen, parts, err := parseView(rep.Body)
	if err != nil {
		return err
	}
	if err := c.apply(ctx, topic, gen, parts); err != nil {
		return err
	}
	return c.ack(ctx, topic)
}

// ack heartbeats the view applied (the handover's acknowledgement) and
// applies a newer one if it came back. Under c.mu.
func (c *consumer) ack(ctx context.Context, topic string) error {
	for range 4 {
		gen := c.gens[topic]
		rep, err := c.d.one(ctx, protocol.AppendHeartbeat(nil, c.group, topic, c.id, gen, 1))
		if err != nil {
			return err
		}
		if rep.Code == protocol.StatusNotFound { // no longer a member here: join again
			return c.join(ctx, topic)
		}
		if rep.Code != protocol.StatusOK {
			return &RequestError{Status: httpStatus(rep.Code), Msg: string(rep.Body)}
		}
		ng, parts, err := parseView(rep.Body)
		if err != nil {
			return err
		}
		if ng == gen && slices.Equal(parts, c.owned[topic]) {
			return nil
		}
		if err := c.apply(ctx, topic, ng, parts); err != nil {
			return err
		}
	}
	return nil
}

// heartbeat is the loop's heartbeat of topic (errors logged nowhere: the
// next fetch or heartbeat tries again). Under c.mu.
func (c *consumer) heartbeat(ctx context.Context, topic string) { c.ack(ctx, topic) }

// handleDeleteConsumer is DELETE /api/v1/data/consumers/{group}/instances/{instance}.
func (s *Server) handleDeleteConsumer(w http.ResponseWriter, r *http.Request) {
	c := s.consumer(w, r)
	if c == nil {
		return
	}
	s.removeConsumer(c)
	w.WriteHeader(http.StatusNoContent)
}

// use marks c used now and locks it; false (answered 404) if it was
// deleted meanwhile.
func (c *consumer) use(w http.ResponseWriter) bool {
	c.mu.Lock()
	if c.closed {
		c.mu.Unlock()
		WriteError(w, http.StatusNotFound, "consumer instance "+c.id+" was deleted")
		return false
	}
	c.lastUsed = time.Now()
	return true
}

// handleSubscribe is POST .../instances/{instance}/subscription: joins the
// group on each topic (a later subscription replaces it).
func (s *Server) handleSubscribe(w http.ResponseWriter, r *http.Request) {
	c := s.consumer(w, r)
	if c == nil {
		return
	}
	var req SubscribeRequest
	if !DecodeBody(w, r, &req) {
		return
	}
	if len(req.Topics) == 0 || len(req.Topics) > maxSubscribedTopics {
		WriteError(w, http.StatusBadRequest, "topics: 1 to "+strconv.Itoa(maxSubscribedTopics)+" topics are required")
		return
	}
	for _, t := range req.Topics {
		if err := wireToken("topic", t); err != nil {
			WriteError(w, http.StatusBadRequest, err.Error())
			return
		}
	}
	if !c.use(w) {
		return
	}
	defer c.mu.Unlock()
	ctx := r.Context()
	for _, t := range c.topics {
		if !slices.Contains(req.Topics, t) {
			c.d.one(ctx, protocol.AppendLeave(nil, c.group, t, c.id, 1))
			c.apply(ctx, t, 0, nil)
			delete(c.owned, t)
			delete(c.gens, t)
		}
	}
	var joined []string
	for _, t := range req.Topics {
		if slices.Contains(joined, t) {
			continue
		}
		if err := c.join(ctx, t); err != nil {
			c.topics = joined
			failed(w, err)
			return
		}
		joined = append(joined, t)
	}
	c.topics = joined
	w.WriteHeader(http.StatusNoContent)
}

// assignments are c's owned partitions, sorted. Under c.mu.
func (c *consumer) assignments() []TopicPartition {
	out := []TopicPartition{}
	for _, t := range c.topics {
		for _, p := range c.owned[t] {
			out = append(out, TopicPartition{Topic: t, Partition: p})
		}
	}
	return out
}

// handleAssignments is GET .../instances/{instance}/assignments.
func (s *Server) handleAssignments(w http.ResponseWriter, r *http.Request) {
	c := s.consumer(w, r)
	if c == nil || !c.use(w) {
		return
	}
	a := c.assignments()
	c.mu.Unlock()
	WriteJSON(w, http.StatusOK, AssignmentsReply{Partitions: a})
}

// handleConsumerRecords is GET .../instances/{instance}/records: the next
// records of the partitions the instance owns, up to max_bytes, waiting
// up to timeout_ms for some.
func (s *Server) handleConsumerRecords(w http.ResponseWriter, r *http.Request) {
	c := s.consumer(w, r)
	if c == nil {
		return
	}
	rp, ok := parseRead(w, r)
	if !ok {
		return
	}
	ctx := r.Context()
	until := time.Now().Add(rp.wait)
	poll := readPollMin
	for {
		if !c.use(w) {
			return
		}
		recs, err := c.fetchRound(ctx, rp.maxBytes)
		c.mu.Unlock()
		if err != nil {
			failed(w, err)
			return
		}
		if len(recs) > 0 || !time.Now().Before(until) {
			writeRecords(w, recs, -1, false)
			return
		}
		if !pollWait(ctx, min(poll, time.Until(until))) {
			writeRecords(w, nil, -1, false)
			return
		}
		poll = min(2*poll, readPollMax)
	}
}

// fetchRound gets each owned partition once, from the one after the last
// round's first, until maxBytes of records. Under c.mu.
func (c *consumer) fetchRound(ctx context.Context, maxBytes int32) ([]recJSON, error) {
	var all []TopicPartition
	for _, t := range c.topics {
		for _, p := range c.owned[t] {
			all = append(all, TopicPartition{Topic: t, Partition: p})
		}
	}
	var out []recJSON
	left := maxBytes
	for i := range all {
		if left <= 0 {
			break
		}
		tp := all[(c.next+i)%len(all)]
		k := tpKey{tp.Topic, tp.Partition}
		rp := readParams{topic: tp.Topic, group: c.group, format: c.format, part: tp.Partition, offset: c.pos[k], maxBytes: left}
		recs, next, _, err := readOnce(ctx, c.d, &rp)
		if err != nil {
			var re *RequestError
			if errors.As(err, &re) && re.Status == http.StatusRequestEntityTooLarge && len(out) > 0 {
				break // the rest next time
			}
			return nil, err
		}
		c.pos[k] = next
		for _, rec := range recs {
			left -= int32(len(rec.js))
		}
		out = append(out, recs...)
	}
	if len(all) > 0 {
		c.next = (c.next + 1) % len(all)
	}
	return out, nil
}

// handleCommit is POST .../instances/{instance}/offsets.
func (s *Server) handleCommit(w http.ResponseWriter, r *http.Request) {
	c := s.consumer(w, r)
	if c == nil {
		return
	}
	var req CommitRequest
	if r.ContentLength != 0 && !DecodeBody(w, r, &req) {
		return
	}
	for _, o := range req.Offsets {
		if err := wireToken("topic", o.Topic); err != nil || o.Offset < 0 || o.Partition < 0 {
			WriteError(w, http.StatusBadRequest, "offsets: each needs a topic, a partition and an offset >= 0")
			return
		}
	}
	if !c.use(w) {
		return
	}
	defer c.mu.Unlock()
	offs := req.Offsets
	if len(offs) == 0 {
		for _, tp := range c.assignments() {
			if off := c.pos[tpKey{tp.Topic, tp.Partition}]; off != math.MaxInt64 {
				offs = append(offs, CommitOffset{Topic: tp.Topic, Partition: tp.Partition, Offset: off})
			}
		}
	}
	if len(offs) == 0 {
		WriteJSON(w, http.StatusOK, CommitReply{Offsets: []CommitOffset{}})
		return
	}
	es := make([]protocol.OffsetEntry, len(offs))
	for i, o := range offs {
		es[i] = protocol.OffsetEntry{Topic: o.Topic, Partition: o.Partition, Offset: o.Offset, MsgID: -1}
	}
	rep, err := c.d.one(r.Context(), protocol.AppendCommit(nil, c.group, es, 1))
	if err != nil {
		failed(w, err)
		return
	}
	if rep.Code != protocol.StatusOK {
		WriteError(w, httpStatus(rep.Code), string(bytes.TrimSpace(rep.Body)))
		return
	}
	WriteJSON(w, http.StatusOK, CommitReply{Offsets: offs})
}
