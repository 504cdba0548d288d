package broker

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"os"
	"runtime"
	"slices"
	"sort"
	"strconv"
	"strings"
	"time"

	"github.com/metaq-go/metaq/conf"
	"github.com/metaq-go/metaq/core/groups"
	"github.com/metaq-go/metaq/core/partition"
	"github.com/metaq-go/metaq/core/security"
	"github.com/metaq-go/metaq/sdk/message"
)

// The JSON admin API (docs/http.md), under /api/v1/.

// KeyedOrderingWarning is the warning given when a topic gets more
// partitions, as kafka-topics gives it.
const KeyedOrderingWarning = "if messages are partitioned by key, the partition of a key changes with the partition count: " +
	"ordering per key is not kept across this change"

// adminRoutes adds the admin API to the mux: user routes need an
// authenticated user, admin routes an admin (with [auth] enabled).
func (b *Broker) adminRoutes(user, admin func(pattern string, h http.HandlerFunc)) {
	user("GET /api/v1/topics", b.apiTopics)
	user("GET /api/v1/topics/{name}", b.apiTopic)
	admin("POST /api/v1/topics", b.apiCreateTopic)
	admin("DELETE /api/v1/topics/{name}", b.apiDeleteTopic)
	admin("POST /api/v1/topics/{name}/partitions", b.apiAddPartitions)
	user("GET /api/v1/groups", b.apiGroups)
	user("GET /api/v1/groups/{group}", b.apiGroup)
	admin("POST /api/v1/groups/{group}/offsets", b.apiResetOffsets)
	admin("POST /api/v1/groups/{group}/skip", b.apiSkip)
	user("GET /api/v1/stats", b.apiStats)
	user("GET /api/v1/cluster", b.apiCluster)
	admin("GET /api/v1/plugins", b.apiPlugins) // plugin names, pids and errors are configuration (security.Admin)
}

// topicJSON is a topic in the API.
type topicJSON struct {
	Name             string          `json:"name"`
	Partitions       int             `json:"partitions"`
	Messages         int64           `json:"messages"`
	SizeBytes        int64           `json:"size_bytes"`
	AcceptPublish    bool            `json:"accept_publish"`
	AcceptSubscribe  bool            `json:"accept_subscribe"`
	UnflushThreshold int             `json:"unflush_threshold"`
	DeletePolicy     string          `json:"delete_policy"`
	Source           string          `json:"source"` // server.toml, topics.toml or auto-created
	PartitionList    []partitionJSON `json:"partition_list,omitempty"`
}

type partitionJSON struct {
	Partition   int   `json:"partition"`
	MinOffset   int64 `json:"min_offset"`
	MaxOffset   int64 `json:"max_offset"`
	Messages    int64 `json:"messages"`
	MessagesIn  int64 `json:"messages_in"`
	BytesIn     int64 `json:"bytes_in"`
	MessagesOut int64 `json:"messages_out"`
	BytesOut    int64 `json:"bytes_out"`
	GetRequests int64 `json:"get_requests"`
}

func (b *Broker) topicSource(name string) string {
	b.adminMu.Lock()
	defer b.adminMu.Unlock()
	if slices.ContainsFunc(b.topicsFile.Topics, func(t conf.Topic) bool { return t.Name == name }) {
		return conf.TopicsFileName
	}
	if slices.ContainsFunc(b.serverTopics, func(t conf.Topic) bool { return t.Name == name }) {
		return "server.toml"
	}
	return "auto-created"
}

func (b *Broker) topicJSON(t *topic, parts bool) topicJSON {
	j := topicJSON{Name: t.name, Partitions: len(t.parts), AcceptPublish: t.conf().AcceptPublish,
		AcceptSubscribe: t.conf().AcceptSubscribe, UnflushThreshold: t.conf().UnflushThreshold,
		DeletePolicy: t.conf().DeletePolicy, Source: b.topicSource(t.name)}
	for p, l := range t.parts {
		j.Messages += l.MessageCount()
		j.SizeBytes += l.SizeBytes()
		if parts {
			pc := &t.pc[p]
			j.PartitionList = append(j.PartitionList, partitionJSON{Partition: p, MinOffset: l.MinOffset(), MaxOffset: l.MaxOffset(),
				Messages: l.MessageCount(), MessagesIn: pc.msgsIn.Load(), BytesIn: pc.bytesIn.Load(),
				MessagesOut: pc.msgsOut.Load(), BytesOut: pc.bytesOut.Load(), GetRequests: pc.gets.Load()})
		}
	}
	return j
}

func (b *Broker) apiTopics(w http.ResponseWriter, r *http.Request) {
	out := []topicJSON{}
	for _, t := range b.visibleTopics(b.httpViewer(r)) {
		out = append(out, b.topicJSON(t, false))
	}
	writeJSON(w, http.StatusOK, map[string]any{"topics": out})
}

// openTopicNamed returns an open topic or answers 404.
func (b *Broker) openTopicNamed(w http.ResponseWriter, name string) *topic {
	b.mu.RLock()
	t := b.topics[name]
	b.mu.RUnlock()
	if t == nil {
		writeError(w, http.StatusNotFound, "no such topic: "+quoteName(name))
	}
	return t
}

// authzError answers security.Authorize's refusal: 403 with its text (a
// missing user cannot get here: needUser answered 401).
func authzError(w http.ResponseWriter, err error) {
	writeError(w, http.StatusForbidden, err.Error())
}

func (b *Broker) apiTopic(w http.ResponseWriter, r *http.Request) {
	name := r.PathValue("name")
	if err := b.httpViewer(r).authorize(security.Describe, name); err != nil {
		authzError(w, err)
		return
	}
	if t := b.openTopicNamed(w, name); t != nil {
		b.countOut() // messages_out (msgsout.go)
		writeJSON(w, http.StatusOK, b.topicJSON(t, true))
	}
}

// createTopicRequest is the body of POST /api/v1/topics; unset fields
// take server.toml's top-level values.
type createTopicRequest struct {
	Name             string  `json:"name"`
	NumPartitions    *int    `json:"num_partitions"`
	UnflushThreshold *int    `json:"unflush_threshold"`
	UnflushInterval  *int    `json:"unflush_interval"`
	DeletePolicy     *string `json:"delete_policy"`
	AcceptPublish    *bool   `json:"accept_publish"`
	AcceptSubscribe  *bool   `json:"accept_subscribe"`
	Stat             *bool   `json:"stat"`
}

// topicErr answers a topic change's error with its HTTP code.
func topicErr(w http.ResponseWriter, err error) {
	switch {
	case errors.Is(err, errTopicExists):
		writeError(w, http.StatusConflict, err.Error())
	case errors.Is(err, partition.ErrNoTopic):
		writeError(w, http.StatusNotFound, err.Error())
	case errors.Is(err, errTopicInvalid):
		writeError(w, http.StatusBadRequest, err.Error())
	case errors.Is(err, errBrokerClosed):
		writeError(w, http.StatusServiceUnavailable, err.Error())
	default:
		writeError(w, http.StatusInternalServerError, err.Error())
	}
}

func (b *Broker) apiCreateTopic(w http.ResponseWriter, r *http.Request) {
	var req createTopicRequest
	if !decodeBody(w, r, &req) {
		return
	}
	if req.NumPartitions != nil && (*req.NumPartitions < 1 || *req.NumPartitions > conf.MaxPartitions) {
		writeError(w, http.StatusBadRequest, "num_partitions must be 1.."+strconv.Itoa(conf.MaxPartitions)+", got "+strconv.Itoa(*req.NumPartitions))
		return
	}
	t := conf.Topic{Name: req.Name, NumPartitions: req.NumPartitions, UnflushThreshold: req.UnflushThreshold,
		UnflushInterval: req.UnflushInterval, DeletePolicy: req.DeletePolicy, AcceptPublish: req.AcceptPublish,
		AcceptSubscribe: req.AcceptSubscribe, Stat: req.Stat}
	if err := b.CreateTopic(t); err != nil {
		topicErr(w, err)
		return
	}
	b.auditCreate(r, req.Name)
	if nt := b.openTopicNamed(w, req.Name); nt != nil {
		writeJSON(w, http.StatusCreated, b.topicJSON(nt, true))
	}
}

func (b *Broker) apiDeleteTopic(w http.ResponseWriter, r *http.Request) {
	name := r.PathValue("name")
	deleteData := false
	switch v := r.URL.Query().Get("delete_data"); v {
	case "", "false", "0":
	case "true", "1":
		deleteData = true
	default:
		writeError(w, http.StatusBadRequest, "delete_data must be true or false, got "+quoteName(v))
		return
	}
	if err := b.DeleteTopic(name, deleteData); err != nil {
		topicErr(w, err)
		return
	}
	b.httpAudit(r, auditTopicDelete, "topic", name, "delete_data", deleteData)
	writeJSON(w, http.StatusOK, map[string]any{"deleted": name, "data_removed": deleteData})
}

type addPartitionsRequest struct {
	NumPartitions int `json:"num_partitions"`
}

func (b *Broker) apiAddPartitions(w http.ResponseWriter, r *http.Request) {
	name := r.PathValue("name")
	var req addPartitionsRequest
	if !decodeBody(w, r, &req) {
		return
	}
	if req.NumPartitions < 1 {
		writeError(w, http.StatusBadRequest, "num_partitions must be given and positive")
		return
	}
	old, err := b.AddPartitions(name, req.NumPartitions)
	if err != nil {
		topicErr(w, err)
		return
	}
	b.auditAlter(r, name, old, req.NumPartitions)
	out := map[string]any{"topic": name, "old_partitions": old, "partitions": req.NumPartitions}
	if req.NumPartitions != old {
		out["warning"] = KeyedOrderingWarning
	}
	writeJSON(w, http.StatusOK, out)
}

// groupPartitionJSON is one partition of a group describe.
type groupPartitionJSON struct {
	Partition int   `json:"partition"`
	Committed int64 `json:"committed_offset"` // -1: none
	MinOffset int64 `json:"min_offset"`
	MaxOffset int64 `json:"max_offset"`
	// LagBytes is max_offset - committed_offset; absent when nothing is
	// committed (lag unknown).
	LagBytes *int64 `json:"lag_bytes,omitempty"`
	// LagMessages is the number of messages from committed_offset to
	// max_offset, counted with the partition's record-count index; while
	// that does not cover them yet (after a restart, until the background
	// scrub has indexed the old segments) it is estimated from the mean
	// record size and LagMessagesEstimated is set. Absent like LagBytes.
	LagMessages          *int64 `json:"lag_messages,omitempty"`
	LagMessagesEstimated bool   `json:"lag_messages_estimated,omitempty"`
	Owner                string `json:"owner,omitempty"` // member holding it (local mode groups)
	// Source is where committed_offset comes from: "offset_store" (the
	// broker's), "zookeeper" (the consumers' ZooKeeper offsets, when the
	// offset store has none), "" when unknown.
	Source string `json:"source,omitempty"`
}

type groupTopicJSON struct {
	Topic                string               `json:"topic"`
	LagBytes             int64                `json:"lag_bytes"`
	LagMessages          int64                `json:"lag_messages"`
	LagMessagesEstimated bool                 `json:"lag_messages_estimated,omitempty"`
	Partitions           []groupPartitionJSON `json:"partitions"`
}

// groupEntry is one group and topic known here.
type groupEntry struct {
	Group string `json:"group"`
	Topic string `json:"topic"`
	// Committed: offsets committed through this broker (since it started,
	// or before, kept in committed-offsets.json).
	Committed bool `json:"committed_here"`
	// InZooKeeper: offsets read from ZooKeeper (cluster mode).
	InZooKeeper bool `json:"in_zookeeper"`
	Coordinated bool `json:"coordinated_here"`
	Members     int  `json:"members,omitempty"`
	// LagKnown: some committed offset is known, so lag can be given.
	LagKnown bool `json:"lag_known"`
	// Note says why the lag is unknown.
	Note string `json:"note,omitempty"`
}

// Notes of groupEntry.
const (
	noteOffsetsElsewhere = "its consumers own partitions (ZooKeeper owner nodes) but keep their offsets neither in ZooKeeper nor through this broker " +
		"(a client-side MySQL or file offset store): lag unknown"
	noteNoCommit = "no offsets committed through this broker yet: lag unknown"
)

// groupList returns the groups known here: those that committed offsets
// through this broker (now or before a restart), those whose offsets or
// owners are in ZooKeeper, and those it coordinates, sorted by group and
// topic.
func (b *Broker) groupList() []*groupEntry { return b.groupListFor(viewer{}) }

// groupListFor is groupList with the groups and topics v may see: the
// group's right and subscribe on the topic (authz.go).
func (b *Broker) groupListFor(v viewer) []*groupEntry {
	m := map[groupTopic]*groupEntry{}
	for k, src := range b.committed.sources() {
		if !b.topicOpen(k.topic) || !v.groupTopic(k.group, k.topic) { // restored for a topic deleted since; not the viewer's
			continue
		}
		e := &groupEntry{Group: k.group, Topic: k.topic, Committed: src.Here, InZooKeeper: src.ZooKeeper, LagKnown: src.Here || src.ZooKeeper}
		switch {
		case e.LagKnown:
		case src.Err != "":
			e.Note = src.Err + ": lag unknown"
		default:
			e.Note = noteOffsetsElsewhere
		}
		m[k] = e
	}
	for _, g := range b.groups.Groups() {
		if !v.groupTopic(g.Group, g.Topic) {
			continue
		}
		e := m[groupTopic{g.Group, g.Topic}]
		if e == nil {
			e = &groupEntry{Group: g.Group, Topic: g.Topic, Note: noteNoCommit}
			m[groupTopic{g.Group, g.Topic}] = e
		}
		e.Coordinated, e.Members = true, g.Members
	}
	out := []*groupEntry{}
	for _, e := range m {
		out = append(out, e)
	}
	sort.Slice(out, func(i, j int) bool {
		if out[i].Group != out[j].Group {
			return out[i].Group < out[j].Group
		}
		return out[i].Topic < out[j].Topic
	})
	return out
}

func (b *Broker) apiGroups(w http.ResponseWriter, r *http.Request) {
	writeJSON(w, http.StatusOK, map[string]any{"groups": b.groupListFor(b.httpViewer(r))})
}

// groupTopics returns the topics to describe for group: ?topic= (which
// needs subscribe on it: err is security.Authorize's refusal) or those
// the group committed here or is coordinated here for that the viewer
// may subscribe to.
func (b *Broker) groupTopics(r *http.Request, group string) ([]string, error) {
	v := b.httpViewer(r)
	if t := r.URL.Query().Get("topic"); t != "" {
		if err := v.authorize(security.Subscribe, t); err != nil {
			return nil, err
		}
		return []string{t}, nil
	}
	var out []string
	for _, t := range b.knownGroupTopics(group) {
		if v.authorize(security.Subscribe, t) == nil {
			out = append(out, t)
		}
	}
	return out, nil
}

// knownGroupTopics are the topics group committed here or is coordinated
// here for, sorted.
func (b *Broker) knownGroupTopics(group string) []string {
	seen := map[string]bool{}
	for k := range b.committed.sources() {
		if k.group == group && b.topicOpen(k.topic) {
			seen[k.topic] = true
		}
	}
	for _, g := range b.groups.Groups() {
		if g.Group == group {
			seen[g.Topic] = true
		}
	}
	out := make([]string, 0, len(seen))
	for t := range seen {
		out = append(out, t)
	}
	sort.Strings(out)
	return out
}

// topicOpen says whether topic is open here.
func (b *Broker) topicOpen(topic string) bool {
	b.mu.RLock()
	defer b.mu.RUnlock()
	return b.topics[topic] != nil
}

// checkGroup answers 400 for a malformed group name; with auth on a user
// needs the group's rights to see or change it (admins have them).
func (b *Broker) checkGroup(w http.ResponseWriter, r *http.Request, group string) bool {
	if err := message.ValidateGroup(group); err != nil {
		writeError(w, http.StatusBadRequest, "group "+quoteName(group)+": "+err.Error())
		return false
	}
	if err := b.httpViewer(r).authorize(security.UseGroup, group); err != nil {
		authzError(w, err)
		return false
	}
	return true
}

// loadCommitted reads group's committed offsets of every partition of t
// from the offset store.
func (b *Broker) loadCommitted(ctx context.Context, group string, t *topic) ([]int64, error) {
	ps := make([]message.Position, len(t.parts))
	for p := range t.parts {
		ps[p] = message.Position{Topic: t.name, Partition: message.Partition{BrokerID: b.config().BrokerID, Partition: int32(p)}}
	}
	res, err := b.offsets.store.Load(ctx, group, ps)
	if err != nil {
		return nil, err
	}
	out := make([]int64, len(t.parts))
	for i := range out {
		out[i] = -1
	}
	for _, x := range res {
		if p := int(x.Partition.Partition); p >= 0 && p < len(out) {
			out[p] = x.Offset
		}
	}
	return out, nil
}

// describeGroup reads group's committed offsets of topics from the offset
// store, with each partition's offsets, lag and owner. An unknown topic is
// partition.ErrNoTopic (wrapped with its name); an offset store failure is returned
// as it is.
func (b *Broker) describeGroup(ctx context.Context, group string, topics []string) ([]groupTopicJSON, error) {
	owners := b.groups.GroupOwners(group)
	out := []groupTopicJSON{}
	for _, name := range topics {
		b.mu.RLock()
		t := b.topics[name]
		b.mu.RUnlock()
		if t == nil {
			return nil, fmt.Errorf("%w: %s", partition.ErrNoTopic, quoteName(name))
		}
		committed, err := b.loadCommitted(ctx, group, t)
		if err != nil {
			return nil, err
		}
		zk := b.committed.zkOffsets(group, name)
		gt := groupTopicJSON{Topic: name, Partitions: []groupPartitionJSON{}}
		for p, l := range t.parts {
			gp := groupPartitionJSON{Partition: p, Committed: committed[p], MinOffset: l.MinOffset(), MaxOffset: l.MaxOffset(),
				Owner: owners[groups.TopicPartition{Topic: name, Partition: p}]}
			switch {
			case committed[p] >= 0:
				gp.Source = "offset_store"
			case p < len(zk) && zk[p] >= 0: // the consumers commit to ZooKeeper themselves
				committed[p], gp.Committed, gp.Source = zk[p], zk[p], "zookeeper"
			}
			if committed[p] >= 0 {
				lag := max(gp.MaxOffset-committed[p], 0)
				gp.LagBytes = &lag
				gt.LagBytes += lag
				n, exact := lagMessages(l, partSize{min: gp.MinOffset, max: gp.MaxOffset, msgs: l.MessageCount()}, committed[p])
				gp.LagMessages, gp.LagMessagesEstimated = &n, !exact
				gt.LagMessages += n
				gt.LagMessagesEstimated = gt.LagMessagesEstimated || !exact
			}
			gt.Partitions = append(gt.Partitions, gp)
		}
		out = append(out, gt)
	}
	return out, nil
}

func (b *Broker) apiGroup(w http.ResponseWriter, r *http.Request) {
	group := r.PathValue("group")
	if !b.checkGroup(w, r, group) {
		return
	}
	topics, err := b.groupTopics(r, group)
	if err != nil {
		authzError(w, err)
		return
	}
	ctx, cancel := context.WithTimeout(r.Context(), offsetCallTimeout)
	defer cancel()
	out, err := b.describeGroup(ctx, group, topics)
	switch {
	case errors.Is(err, partition.ErrNoTopic):
		writeError(w, http.StatusNotFound, "no such topic: "+strings.TrimPrefix(err.Error(), partition.ErrNoTopic.Error()+": "))
		return
	case err != nil:
		writeError(w, http.StatusBadGateway, "offset store "+b.offsets.name+": "+offsetErrText(err))
		return
	}
	writeJSON(w, http.StatusOK, map[string]any{"group": group, "lag_unit": "bytes", "topics": out})
}

// resetRequest is the body of POST /api/v1/groups/{group}/offsets.
type resetRequest struct {
	Topic string `json:"topic"`
	// Partition is one partition; absent means every partition.
	Partition *int `json:"partition"`
	// To is "earliest" (min offset), "latest" (max offset: skip
	// everything) or "offset" (Offset, which must be a record boundary a
	// consumer had, between min and max offset).
	To     string `json:"to"`
	Offset *int64 `json:"offset"`
	// DryRun reports what would change and changes nothing.
	DryRun bool `json:"dry_run"`
	skip   bool // POST .../skip: audited as a skip
}

type resetChange struct {
	Partition int   `json:"partition"`
	From      int64 `json:"from"` // -1: nothing committed
	To        int64 `json:"to"`
}

func (b *Broker) apiResetOffsets(w http.ResponseWriter, r *http.Request) {
	var req resetRequest
	if !decodeBody(w, r, &req) {
		return
	}
	b.resetOffsets(w, r, req)
}

// skipRequest is the body of POST /api/v1/groups/{group}/skip: move one
// partition's committed offset to its end (MetaQ's dashboard action).
type skipRequest struct {
	Topic     string `json:"topic"`
	Partition *int   `json:"partition"`
	DryRun    bool   `json:"dry_run"`
}

func (b *Broker) apiSkip(w http.ResponseWriter, r *http.Request) {
	var req skipRequest
	if !decodeBody(w, r, &req) {
		return
	}
	if req.Partition == nil {
		writeError(w, http.StatusBadRequest, "partition is required (skip moves one partition to its end)")
		return
	}
	b.resetOffsets(w, r, resetRequest{Topic: req.Topic, Partition: req.Partition, To: "latest", DryRun: req.DryRun, skip: true})
}

// resetPlan is what a reset changes (or would, in a dry run).
type resetPlan struct {
	topic   *topic
	changes []resetChange
	ps      []message.Position
}

// resetError is a reset refused: Code is the HTTP status.
type resetError struct {
	Code int
	Msg  string
}

func (e *resetError) Error() string { return e.Msg }

// planReset checks req against topic and offsets and returns the changes
// it makes; it writes nothing. Errors are *resetError.
func (b *Broker) planReset(ctx context.Context, group string, req resetRequest) (*resetPlan, error) {
	bad := func(msg string) error { return &resetError{http.StatusBadRequest, msg} }
	if req.Topic == "" {
		return nil, bad("topic is required")
	}
	b.mu.RLock()
	t := b.topics[req.Topic]
	b.mu.RUnlock()
	if t == nil {
		return nil, &resetError{http.StatusNotFound, "no such topic: " + quoteName(req.Topic)}
	}
	parts := make([]int, 0, len(t.parts))
	if req.Partition != nil {
		if p := *req.Partition; p < 0 || p >= len(t.parts) {
			return nil, bad("partition " + strconv.Itoa(p) + " out of range for topic " + t.name + " (0.." + strconv.Itoa(len(t.parts)-1) + ")")
		}
		parts = append(parts, *req.Partition)
	} else {
		for p := range t.parts {
			parts = append(parts, p)
		}
	}
	switch req.To {
	case "earliest", "latest":
		if req.Offset != nil {
			return nil, bad("offset is only for to = \"offset\"")
		}
	case "offset":
		if req.Offset == nil {
			return nil, bad("to = \"offset\" needs offset")
		}
	default:
		return nil, bad(`to must be "earliest", "latest" or "offset", got ` + quoteName(req.To))
	}
	committed, err := b.loadCommitted(ctx, group, t)
	if err != nil {
		return nil, &resetError{http.StatusBadGateway, "offset store " + b.offsets.name + ": " + offsetErrText(err)}
	}
	plan := &resetPlan{topic: t}
	for _, p := range parts {
		l := t.parts[p]
		var to int64
		switch req.To {
		case "earliest":
			to = l.MinOffset()
		case "latest":
			to = l.MaxOffset()
		case "offset":
			to = *req.Offset
			if to < l.MinOffset() || to > l.MaxOffset() {
				return nil, bad("offset " + strconv.FormatInt(to, 10) + " is outside partition " + strconv.Itoa(p) +
					"'s offsets " + strconv.FormatInt(l.MinOffset(), 10) + ".." + strconv.FormatInt(l.MaxOffset(), 10))
			}
		}
		plan.changes = append(plan.changes, resetChange{Partition: p, From: committed[p], To: to})
		plan.ps = append(plan.ps, message.Position{Topic: t.name, Partition: message.Partition{BrokerID: b.config().BrokerID, Partition: int32(p)}, Offset: to, MsgID: -1})
	}
	return plan, nil
}

// applyReset writes plan through the offset store, for r (audited as a
// reset, or a skip when to is "latest (skip)").
func (b *Broker) applyReset(ctx context.Context, r *http.Request, group, to string, plan *resetPlan) error {
	if err := b.offsets.store.Commit(ctx, group, plan.ps); err != nil {
		return &resetError{http.StatusBadGateway, "offset store " + b.offsets.name + ": " + offsetErrText(err)}
	}
	b.committed.record(group, plan.ps)
	action := auditOffsetReset
	if to == skipTo {
		action = auditOffsetSkip
	}
	b.httpAudit(r, action, "group", group, "topic", plan.topic.name, "to", to, "partitions", len(plan.ps), "offsets", auditChanges(plan.changes))
	return nil
}

// skipTo is applyReset's to for a skip.
const skipTo = "latest (skip)"

// auditCreate audits a topic created for r.
func (b *Broker) auditCreate(r *http.Request, name string) {
	tc, _ := b.topicConfig(name)
	b.httpAudit(r, auditTopicCreate, "topic", name, "partitions", tc.NumPartitions)
}

// auditAlter audits a topic's partitions changed for r (nothing when the
// count stayed).
func (b *Broker) auditAlter(r *http.Request, name string, old, n int) {
	if n != old {
		b.httpAudit(r, auditTopicAlter, "topic", name, "partitions_before", old, "partitions", n)
	}
}

// resetNote is said with every reset.
const resetNote = "consumers running in the group keep their in-memory positions: restart or rebalance them to pick up the new offsets"

func (b *Broker) resetOffsets(w http.ResponseWriter, r *http.Request, req resetRequest) {
	group := r.PathValue("group")
	if !b.checkGroup(w, r, group) {
		return
	}
	ctx, cancel := context.WithTimeout(r.Context(), offsetCallTimeout)
	defer cancel()
	plan, err := b.planReset(ctx, group, req)
	if err == nil && !req.DryRun {
		to := req.To
		if req.skip {
			to = skipTo
		}
		err = b.applyReset(ctx, r, group, to, plan)
	}
	if err != nil {
		var re *resetError
		if errors.As(err, &re) {
			writeError(w, re.Code, re.Msg)
		} else {
			writeError(w, http.StatusInternalServerError, err.Error())
		}
		return
	}
	writeJSON(w, http.StatusOK, map[string]any{"group": group, "topic": plan.topic.name, "dry_run": req.DryRun, "changes": plan.changes, "note": resetNote})
}

// apiStats is the broker summary; topics and total_messages count the
// topics the user may see.
func (b *Broker) apiStats(w http.ResponseWriter, r *http.Request) {
	var msgs int64
	topics := b.visibleTopics(b.httpViewer(r))
	for _, t := range topics {
		for _, l := range t.parts {
			msgs += l.MessageCount()
		}
	}
	writeJSON(w, http.StatusOK, map[string]any{
		"pid":                   os.Getpid(),
		"broker_id":             b.config().BrokerID,
		"version":               Version,
		"uptime_seconds":        int64(time.Since(b.start) / time.Second),
		"connections":           b.stats.connections.Load(),
		"goroutines":            runtime.NumGoroutine(),
		"cmd_put":               b.stats.cmdPut.Load(),
		"cmd_get":               b.stats.cmdGet.Load(),
		"cmd_offset":            b.stats.cmdOffset.Load(),
		"cmd_commit":            b.offsets.commits.Load(),
		"cmd_fetch":             b.offsets.fetches.Load(),
		"get_miss":              b.stats.getMiss.Load(),
		"put_failed":            b.stats.putFailed.Load(),
		"commit_failed":         b.offsets.commitFailed.Load(),
		"protocol_errors":       b.stats.protocolErrors.Load(),
		"refused_connections":   b.stats.refusedConns.Load(),
		"timed_out_connections": b.stats.timedOutConns.Load(),
		"auth_failures":         b.stats.authFailures.Load(),
		"auth_throttled":        b.stats.authThrottled.Load(),
		"unauth_evicted":        b.unauth.evicted.Load(),
		"auth_timeouts":         b.unauth.timeouts.Load(),
		"disk_full_rejects":     b.disks.rejects.Load(),
		"disk_used_ratio":       b.disks.maxUsed(),
		"buffered_bytes":        b.budget.used.Load(),
		"tx_commit":             b.txm.Counts().Commits,
		"tx_rollback":           b.txm.Counts().Rollbacks,
		"topics":                len(topics),
		"total_messages":        msgs,
		"config_checksum":       b.configChecksum(),
	})
}

func (b *Broker) apiCluster(w http.ResponseWriter, r *http.Request) {
	mode := "local"
	if b.config().ZooKeeper.Enabled() {
		mode = "cluster"
	}
	out := map[string]any{
		"broker_id":  b.config().BrokerID,
		"mode":       mode,
		"role":       "master", // slaves come with replication (issue 11)
		"http_addr":  b.HTTPAddr(),
		"registered": b.Registered(),
		"serving":    b.serving.Load(),
	}
	if b.serving.Load() { // ln and tlsLn are set
		out["addr"], out["tls_addr"] = b.Addr(), b.TLSAddr()
	}
	if mode == "cluster" {
		// zookeeper.connect is secret (it may carry credentials): only
		// the root is shown.
		out["zookeeper_root"] = b.config().ZooKeeper.Root
	}
	writeJSON(w, http.StatusOK, out)
}

func (b *Broker) apiPlugins(w http.ResponseWriter, r *http.Request) {
	type p struct {
		Kind       string `json:"kind"`
		Name       string `json:"name"`
		Version    int    `json:"version"`
		PID        int    `json:"pid"`
		State      string `json:"state"`
		Restarts   int64  `json:"restarts"`
		Calls      int64  `json:"calls"`
		Errors     int64  `json:"errors"`
		Generation uint64 `json:"generation"`
		LastError  string `json:"last_error,omitempty"`
	}
	out := []p{}
	if b.plugins != nil {
		for _, i := range b.plugins.List() {
			out = append(out, p{string(i.Kind), i.Name, i.Version, i.PID, i.State, i.Restarts, i.Calls, i.Errors, i.Generation, i.LastError})
		}
	}
	writeJSON(w, http.StatusOK, map[string]any{"plugins": out})
}
