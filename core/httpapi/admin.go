package httpapi

import (
	"context"
	"errors"
	"net/http"
	"strconv"
	"strings"
	"time"

	"github.com/metaq-go/metaq/conf"
	"github.com/metaq-go/metaq/core/security"
	"github.com/metaq-go/metaq/sdk/message"
)

// The JSON admin API (docs/http.md), under /api/v1/.

// KeyedOrderingWarning is the warning given when a topic gets more
// partitions, as kafka-topics gives it.
const KeyedOrderingWarning = "if messages are partitioned by key, the partition of a key changes with the partition count: " +
	"ordering per key is not kept across this change"

// OffsetCallTimeout bounds a request's calls to the offset store.
const OffsetCallTimeout = 10 * time.Second

// ResetNote is said with every reset.
const ResetNote = "consumers running in the group keep their in-memory positions: restart or rebalance them to pick up the new offsets"

// SkipTo is ApplyReset's to for a skip (audited as one).
const SkipTo = "latest (skip)"

// RequestError is a request refused with an HTTP status: the backend's
// refusals (no such topic, a bad request, the offset store failing) and
// the handlers' own. Msg is the reply's error text.
type RequestError struct {
	Status int
	Msg    string
}

func (e *RequestError) Error() string { return e.Msg }

// statusOf is err's HTTP status and text: a *RequestError's, else 500
// with err's text.
func statusOf(err error) (int, string) {
	var re *RequestError
	if errors.As(err, &re) {
		return re.Status, re.Msg
	}
	return http.StatusInternalServerError, err.Error()
}

// writeErr answers err (statusOf).
func writeErr(w http.ResponseWriter, err error) {
	code, msg := statusOf(err)
	WriteError(w, code, msg)
}

// Actor is who makes a change, for the audit log.
type Actor struct {
	// User is the user's name, "" with auth off.
	User string
	// Remote is the client's address.
	Remote string
	// Via is the door: "api" or "dashboard".
	Via string
}

// ActorOf is r's Actor: the dashboard for /ui/ paths, else the JSON API.
func ActorOf(r *http.Request) Actor {
	a := Actor{Remote: r.RemoteAddr, Via: "api"}
	if u := User(r); u != nil {
		a.User = u.Name
	}
	if strings.HasPrefix(r.URL.Path, "/ui/") {
		a.Via = "dashboard"
	}
	return a
}

// adminRoutes adds the admin API to the mux: user routes need an
// authenticated user, admin routes an admin (with [auth] enabled).
func (s *Server) adminRoutes(user, admin func(pattern string, h http.HandlerFunc)) {
	user("GET /api/v1/topics", s.apiTopics)
	user("GET /api/v1/topics/{name}", s.apiTopic)
	admin("POST /api/v1/topics", s.apiCreateTopic)
	admin("DELETE /api/v1/topics/{name}", s.apiDeleteTopic)
	admin("POST /api/v1/topics/{name}/partitions", s.apiAddPartitions)
	user("GET /api/v1/groups", s.apiGroups)
	user("GET /api/v1/groups/{group}", s.apiGroup)
	admin("POST /api/v1/groups/{group}/offsets", s.apiResetOffsets)
	admin("POST /api/v1/groups/{group}/skip", s.apiSkip)
	user("GET /api/v1/dlq", s.apiDLQ)
	admin("POST /api/v1/groups/{group}/dlq/replay", s.apiDLQReplay)
	user("GET /api/v1/delayed", s.apiDelayed)
	user("GET /api/v1/stats", s.apiStats)
	user("GET /api/v1/messages", s.apiFindMessages)
	user("GET /api/v1/cluster", s.apiCluster)
	admin("GET /api/v1/plugins", s.apiPlugins) // plugin names, pids and errors are configuration (security.Admin)
}

// TopicInfo is a topic in the API.
type TopicInfo struct {
	Name             string          `json:"name"`
	Partitions       int             `json:"partitions"`
	Messages         int64           `json:"messages"`
	SizeBytes        int64           `json:"size_bytes"`
	AcceptPublish    bool            `json:"accept_publish"`
	AcceptSubscribe  bool            `json:"accept_subscribe"`
	UnflushThreshold int             `json:"unflush_threshold"`
	DeletePolicy     string          `json:"delete_policy"`
	Source           string          `json:"source"` // server.toml, topics.toml or auto-created
	PartitionList    []PartitionInfo `json:"partition_list,omitempty"`
}

// PartitionInfo is one partition of a topic in the API.
type PartitionInfo struct {
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

func (s *Server) apiTopics(w http.ResponseWriter, r *http.Request) {
	out := s.be.Topics(s.viewer(r))
	if out == nil {
		out = []TopicInfo{}
	}
	WriteJSON(w, http.StatusOK, map[string]any{"topics": out})
}

// authzError answers security.Authorize's refusal: 403 with its text (a
// missing user cannot get here: needUser answered 401).
func authzError(w http.ResponseWriter, err error) {
	WriteError(w, http.StatusForbidden, err.Error())
}

func (s *Server) apiTopic(w http.ResponseWriter, r *http.Request) {
	name := r.PathValue("name")
	if err := s.viewer(r).Authorize(security.Describe, name); err != nil {
		authzError(w, err)
		return
	}
	t, err := s.be.Topic(name)
	if err != nil {
		writeErr(w, err)
		return
	}
	WriteJSON(w, http.StatusOK, t)
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

func (s *Server) apiCreateTopic(w http.ResponseWriter, r *http.Request) {
	var req createTopicRequest
	if !DecodeBody(w, r, &req) {
		return
	}
	if req.NumPartitions != nil && (*req.NumPartitions < 1 || *req.NumPartitions > conf.MaxPartitions) {
		WriteError(w, http.StatusBadRequest, "num_partitions must be 1.."+strconv.Itoa(conf.MaxPartitions)+", got "+strconv.Itoa(*req.NumPartitions))
		return
	}
	t := conf.Topic{Name: req.Name, NumPartitions: req.NumPartitions, UnflushThreshold: req.UnflushThreshold,
		UnflushInterval: req.UnflushInterval, DeletePolicy: req.DeletePolicy, AcceptPublish: req.AcceptPublish,
		AcceptSubscribe: req.AcceptSubscribe, Stat: req.Stat}
	if err := s.be.CreateTopic(ActorOf(r), t); err != nil {
		writeErr(w, err)
		return
	}
	if nt, err := s.be.Topic(req.Name); err != nil {
		writeErr(w, err)
	} else {
		WriteJSON(w, http.StatusCreated, nt)
	}
}

func (s *Server) apiDeleteTopic(w http.ResponseWriter, r *http.Request) {
	name := r.PathValue("name")
	deleteData := false
	switch v := r.URL.Query().Get("delete_data"); v {
	case "", "false", "0":
	case "true", "1":
		deleteData = true
	default:
		WriteError(w, http.StatusBadRequest, "delete_data must be true or false, got "+quoteName(v))
		return
	}
	if err := s.be.DeleteTopic(ActorOf(r), name, deleteData); err != nil {
		writeErr(w, err)
		return
	}
	WriteJSON(w, http.StatusOK, map[string]any{"deleted": name, "data_removed": deleteData})
}

type addPartitionsRequest struct {
	NumPartitions int `json:"num_partitions"`
}

func (s *Server) apiAddPartitions(w http.ResponseWriter, r *http.Request) {
	name := r.PathValue("name")
	var req addPartitionsRequest
	if !DecodeBody(w, r, &req) {
		return
	}
	if req.NumPartitions < 1 {
		WriteError(w, http.StatusBadRequest, "num_partitions must be given and positive")
		return
	}
	old, err := s.be.AddPartitions(ActorOf(r), name, req.NumPartitions)
	if err != nil {
		writeErr(w, err)
		return
	}
	out := map[string]any{"topic": name, "old_partitions": old, "partitions": req.NumPartitions}
	if req.NumPartitions != old {
		out["warning"] = KeyedOrderingWarning
	}
	WriteJSON(w, http.StatusOK, out)
}

// GroupPartition is one partition of a group describe.
type GroupPartition struct {
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

// GroupTopic is one topic of a group describe.
type GroupTopic struct {
	Topic                string           `json:"topic"`
	LagBytes             int64            `json:"lag_bytes"`
	LagMessages          int64            `json:"lag_messages"`
	LagMessagesEstimated bool             `json:"lag_messages_estimated,omitempty"`
	Partitions           []GroupPartition `json:"partitions"`
}

// GroupEntry is one group and topic known here.
type GroupEntry struct {
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

// groupListEntry is one entry of GET /api/v1/groups: a group and topic
// known here and, in cluster mode, ZooKeeper's members of the group
// subscribing the topic and its partitions with an owner node, as the
// groups page counts them (absent when ZooKeeper could not be read).
type groupListEntry struct {
	*GroupEntry
	ZKMembers *int `json:"zk_members,omitempty"`
	ZKOwned   *int `json:"zk_owned_partitions,omitempty"`
	// LagAll is the lag on all the brokers (the groups page's "lag, all
	// brokers": the lag here plus the known lag of the group's partitions
	// on the other brokers), ElsewhereUnknown the number of those whose
	// lag is unknown (cluster mode; absent when none is known).
	LagAll           *int64 `json:"lag_bytes_all_brokers,omitempty"`
	ElsewhereUnknown *int   `json:"elsewhere_lag_unknown,omitempty"`
}

func (s *Server) apiGroups(w http.ResponseWriter, r *http.Request) {
	pg := s.be.GroupsPage(s.viewer(r)) // in cluster mode merged with ZooKeeper's groups, as /ui/groups
	out := make([]groupListEntry, len(pg.Groups))
	for i, g := range pg.Groups {
		out[i].GroupEntry = g.GroupEntry
		if pg.ZooKeeper && pg.ZKErr == "" {
			out[i].ZKMembers, out[i].ZKOwned = &g.ZKMembers, &g.ZKOwners
		}
		if lag, ok := g.AllLag(); pg.Remote && ok {
			n := g.RemoteUnknown()
			out[i].LagAll, out[i].ElsewhereUnknown = &lag, &n
		}
	}
	res := map[string]any{"groups": out}
	if pg.ZKErr != "" {
		res["zookeeper_error"] = pg.ZKErr
	}
	if pg.RemoteErr != "" {
		res["elsewhere_error"] = pg.RemoteErr
	}
	WriteJSON(w, http.StatusOK, res)
}

// groupTopics returns the topics to describe for group: ?topic= (which
// needs subscribe on it: err is security.Authorize's refusal) or those
// the group committed here or is coordinated here for that the viewer
// may subscribe to.
func (s *Server) groupTopics(r *http.Request, group string) ([]string, error) {
	v := s.viewer(r)
	if t := r.URL.Query().Get("topic"); t != "" {
		if err := v.Authorize(security.Subscribe, t); err != nil {
			return nil, err
		}
		return []string{t}, nil
	}
	var out []string
	for _, t := range s.be.GroupTopics(group) {
		if v.Authorize(security.Subscribe, t) == nil {
			out = append(out, t)
		}
	}
	return out, nil
}

// checkGroup answers 400 for a malformed group name; with auth on a user
// needs the group's rights to see or change it (admins have them).
func (s *Server) checkGroup(w http.ResponseWriter, r *http.Request, group string) bool {
	if err := message.ValidateGroup(group); err != nil {
		WriteError(w, http.StatusBadRequest, "group "+quoteName(group)+": "+err.Error())
		return false
	}
	if err := s.viewer(r).Authorize(security.UseGroup, group); err != nil {
		authzError(w, err)
		return false
	}
	return true
}

func (s *Server) apiGroup(w http.ResponseWriter, r *http.Request) {
	group := r.PathValue("group")
	if !s.checkGroup(w, r, group) {
		return
	}
	topics, err := s.groupTopics(r, group)
	if err != nil {
		authzError(w, err)
		return
	}
	ctx, cancel := context.WithTimeout(r.Context(), OffsetCallTimeout)
	defer cancel()
	// As a group's page: in cluster mode without ?topic= the topics
	// ZooKeeper has for the group that are open here are described too,
	// and the partitions of its topics on other brokers are listed.
	p, err := s.be.GroupPage(ctx, s.viewer(r), group, topics, r.URL.Query().Get("topic") != "")
	if err != nil {
		writeErr(w, err)
		return
	}
	out := p.Topics
	if out == nil {
		out = []GroupTopic{}
	}
	res := map[string]any{"group": group, "lag_unit": "bytes", "topics": out}
	if p.ZooKeeper {
		remote := p.Remote
		if remote == nil {
			remote = []RemotePartition{}
		}
		res["elsewhere"] = remote
		if p.ZKErr != "" {
			res["zookeeper_error"] = p.ZKErr
		}
	}
	WriteJSON(w, http.StatusOK, res)
}

// ResetRequest is the body of POST /api/v1/groups/{group}/offsets.
type ResetRequest struct {
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

// ResetChange is one partition's committed offset moved.
type ResetChange struct {
	Partition int   `json:"partition"`
	From      int64 `json:"from"` // -1: nothing committed
	To        int64 `json:"to"`
}

// ResetPlan is what a reset changes (or would, in a dry run).
type ResetPlan struct {
	Topic   string
	Changes []ResetChange
}

func (s *Server) apiResetOffsets(w http.ResponseWriter, r *http.Request) {
	var req ResetRequest
	if !DecodeBody(w, r, &req) {
		return
	}
	s.resetOffsets(w, r, req)
}

// skipRequest is the body of POST /api/v1/groups/{group}/skip: move one
// partition's committed offset to its end (MetaQ's dashboard action).
type skipRequest struct {
	Topic     string `json:"topic"`
	Partition *int   `json:"partition"`
	DryRun    bool   `json:"dry_run"`
}

func (s *Server) apiSkip(w http.ResponseWriter, r *http.Request) {
	var req skipRequest
	if !DecodeBody(w, r, &req) {
		return
	}
	if req.Partition == nil {
		WriteError(w, http.StatusBadRequest, "partition is required (skip moves one partition to its end)")
		return
	}
	s.resetOffsets(w, r, ResetRequest{Topic: req.Topic, Partition: req.Partition, To: "latest", DryRun: req.DryRun, skip: true})
}

func (s *Server) resetOffsets(w http.ResponseWriter, r *http.Request, req ResetRequest) {
	group := r.PathValue("group")
	if !s.checkGroup(w, r, group) {
		return
	}
	ctx, cancel := context.WithTimeout(r.Context(), OffsetCallTimeout)
	defer cancel()
	plan, err := s.be.PlanReset(ctx, group, req)
	if err == nil && !req.DryRun {
		to := req.To
		if req.skip {
			to = SkipTo
		}
		err = s.be.ApplyReset(ctx, ActorOf(r), group, to, plan)
	}
	if err != nil {
		writeErr(w, err)
		return
	}
	WriteJSON(w, http.StatusOK, map[string]any{"group": group, "topic": plan.Topic, "dry_run": req.DryRun, "changes": plan.Changes, "note": ResetNote})
}

// Summary is GET /api/v1/stats: the broker's counters; Topics and
// TotalMessages count the topics the reader may see. Its fields are in
// the order of their JSON names.
type Summary struct {
	AuthFailures        int64   `json:"auth_failures"`
	AuthThrottled       int64   `json:"auth_throttled"`
	AuthTimeouts        int64   `json:"auth_timeouts"`
	BrokerID            int     `json:"broker_id"`
	BufferedBytes       int64   `json:"buffered_bytes"`
	CmdCommit           int64   `json:"cmd_commit"`
	CmdFetch            int64   `json:"cmd_fetch"`
	CmdGet              int64   `json:"cmd_get"`
	CmdOffset           int64   `json:"cmd_offset"`
	CmdPut              int64   `json:"cmd_put"`
	CommitFailed        int64   `json:"commit_failed"`
	ConfigChecksum      uint32  `json:"config_checksum"`
	Connections         int64   `json:"connections"`
	DiskFullRejects     int64   `json:"disk_full_rejects"`
	DiskUsedRatio       float64 `json:"disk_used_ratio"`
	GetMiss             int64   `json:"get_miss"`
	Goroutines          int     `json:"goroutines"`
	PID                 int     `json:"pid"`
	ProtocolErrors      int64   `json:"protocol_errors"`
	PutFailed           int64   `json:"put_failed"`
	RefusedConnections  int64   `json:"refused_connections"`
	TimedOutConnections int64   `json:"timed_out_connections"`
	Topics              int     `json:"topics"`
	TotalMessages       int64   `json:"total_messages"`
	TxCommit            int64   `json:"tx_commit"`
	TxRollback          int64   `json:"tx_rollback"`
	UnauthEvicted       int64   `json:"unauth_evicted"`
	UptimeSeconds       int64   `json:"uptime_seconds"`
	Version             string  `json:"version"`
}

// apiStats is the broker summary; topics and total_messages count the
// topics the user may see.
func (s *Server) apiStats(w http.ResponseWriter, r *http.Request) {
	WriteJSON(w, http.StatusOK, s.be.Summary(s.viewer(r)))
}

// ClusterInfo is GET /api/v1/cluster. Its fields are in the order of
// their JSON names; Addr and TLSAddr are set while serving,
// ZooKeeperRoot in cluster mode.
type ClusterInfo struct {
	Addr          *string `json:"addr,omitempty"`
	BrokerID      int     `json:"broker_id"`
	HTTPAddr      string  `json:"http_addr"`
	Mode          string  `json:"mode"` // local or cluster
	Registered    bool    `json:"registered"`
	Role          string  `json:"role"`
	Serving       bool    `json:"serving"`
	TLSAddr       *string `json:"tls_addr,omitempty"`
	ZooKeeperRoot *string `json:"zookeeper_root,omitempty"`
}

func (s *Server) apiCluster(w http.ResponseWriter, r *http.Request) {
	WriteJSON(w, http.StatusOK, s.be.Cluster())
}

// PluginInfo is one plugin process.
type PluginInfo struct {
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

func (s *Server) apiPlugins(w http.ResponseWriter, r *http.Request) {
	out := s.be.Plugins()
	if out == nil {
		out = []PluginInfo{}
	}
	WriteJSON(w, http.StatusOK, map[string]any{"plugins": out})
}
