package httpapi

// The broker's component values as the HTTP API and /metrics show them:
// core/groups' admin answers and committed offsets, core/store's
// journals and core/diskwatch's disks.

import (
	"errors"
	"net/http"
	"path/filepath"
	"time"

	"github.com/metaq-go/metaq/conf"
	"github.com/metaq-go/metaq/core/diskwatch"
	"github.com/metaq-go/metaq/core/groups"
	"github.com/metaq-go/metaq/core/partition"
	"github.com/metaq-go/metaq/core/store"
	"github.com/metaq-go/metaq/core/topicadmin"
	"github.com/metaq-go/metaq/plugins/host"
)

// GroupEntries is groups.Admin.List's entries as the API lists them.
func GroupEntries(es []*groups.Entry) []*GroupEntry {
	out := make([]*GroupEntry, len(es))
	for i, e := range es {
		ge := GroupEntry(*e)
		out[i] = &ge
	}
	return out
}

// GroupTopics is groups.Admin.Describe's answer as the API describes it.
func GroupTopics(ts []groups.TopicLag) []GroupTopic {
	out := make([]GroupTopic, len(ts))
	for i, t := range ts {
		out[i] = GroupTopic{Topic: t.Topic, LagBytes: t.LagBytes, LagMessages: t.LagMessages,
			LagMessagesEstimated: t.LagMessagesEstimated, Partitions: make([]GroupPartition, len(t.Partitions))}
		for j, p := range t.Partitions {
			out[i].Partitions[j] = GroupPartition(p)
		}
	}
	return out
}

// ResetPlanOf is groups.Admin.PlanReset's changes on topic as a plan.
func ResetPlanOf(topic string, cs []groups.ResetChange) *ResetPlan {
	plan := &ResetPlan{Topic: topic}
	for _, c := range cs {
		plan.Changes = append(plan.Changes, ResetChange(c))
	}
	return plan
}

// GroupRefusal is the HTTP refusal of a groups.Admin error: 400 for a
// malformed request, 404 for an unknown topic, else 502 for the offset
// store named offsets.
func GroupRefusal(err error, offsets string) error {
	var ge *groups.Error
	switch {
	case errors.As(err, &ge):
		return &RequestError{Status: http.StatusBadRequest, Msg: ge.Msg}
	case errors.Is(err, partition.ErrNoTopic):
		return &RequestError{Status: http.StatusNotFound, Msg: err.Error()}
	}
	return OffsetStoreError(err, offsets)
}

// OffsetStoreError is the HTTP refusal of a failure of the offset store
// named offsets.
func OffsetStoreError(err error, offsets string) error {
	return &RequestError{Status: http.StatusBadGateway, Msg: "offset store " + offsets + ": " + groups.Reason(err)}
}

// LagsNow is each group's lag in bytes on a topic now (by group and
// topic), from the committed offsets snap, on the topics parts gives the
// partitions of (nil: not open).
func LagsNow(snap []groups.CommittedGroup, parts func(topic string) []*store.Log) map[[2]string]int64 {
	out := map[[2]string]int64{}
	for _, g := range snap {
		ls := parts(g.Topic)
		if ls == nil {
			continue
		}
		var lag int64
		for p, off := range g.Offsets {
			if off >= 0 && p < len(ls) {
				lag += max(ls[p].MaxOffset()-off, 0)
			}
		}
		out[[2]string{g.Group, g.Topic}] = lag
	}
	return out
}

// AddGroupLags sets st.Lags (AddLags) from the committed offsets snap,
// counting messages in logs (by topic) with groups.LagMessages.
func (st *Status) AddGroupLags(snap []groups.CommittedGroup, logs map[string][]*store.Log) {
	committed := make([]Committed, len(snap))
	for i, g := range snap {
		committed[i] = Committed(g)
	}
	st.AddLags(committed, func(topic string, p int, ps PartitionStatus, off int64) int64 {
		n, _ := groups.LagMessages(logs[topic][p], groups.PartSize{Min: ps.MinOffset, Max: ps.MaxOffset, Msgs: ps.Messages}, off)
		return n
	})
}

// JournalStatuses is js's journals at a scrape; a journal never
// checkpointed counts its checkpoint age from start.
func JournalStatuses(js store.JournalSet, start time.Time) []JournalStatus {
	var out []JournalStatus
	for d, j := range js { // any order: the registry sorts the series
		s := j.Stats()
		at := s.LastCheckpoint
		if at.IsZero() {
			at = start
		}
		age := time.Since(at).Seconds()
		if s.UpToDate {
			age = 0 // idle: nothing written since the last checkpoint, which makes no new one
		}
		out = append(out, JournalStatus{Dir: d, Rounds: s.Rounds, Fsyncs: s.Fsyncs, Bytes: s.Bytes,
			Checkpoints: s.Checkpoints, Syncfs: s.Syncfs, Led: s.Led, Behind: s.Behind, CheckpointAge: age, Failed: j.Err() != nil})
	}
	return out
}

// SetJournals sets st.JournalDir and st.JournalErr from a failed journal
// of js, if any.
func (st *ReadyState) SetJournals(js store.JournalSet) {
	for dir, j := range js {
		if err := j.Err(); err != nil {
			st.JournalDir, st.JournalErr = dir, err.Error()
			return
		}
	}
}

// DiskStatuses is w's disks at a scrape (those measured without error).
func DiskStatuses(w *diskwatch.Watch) []DiskStatus {
	var out []DiskStatus
	for _, dd := range w.List() {
		u := dd.Last()
		if u == nil || u.Err != nil {
			continue
		}
		out = append(out, DiskStatus{Dir: filepath.Clean(dd.Dir()), Used: u.UsedBytes, Free: u.FreeBytes,
			Ratio: u.Space, Full: dd.Full()})
	}
	return out
}

// LogReader is a partition's log as the messages page reads it: store's
// errors as PartitionReader gives them.
type LogReader struct{ *store.Log }

// Read reads from offset, at most max bytes.
func (l LogReader) Read(offset int64, max int) (RecordView, error) {
	v, err := l.Log.Read(offset, max)
	return logView{v}, logReadErr(err)
}

type logView struct{ store.View }

func (v logView) ReadAll(dst []byte) ([]byte, error) {
	b, err := v.View.ReadAll(dst)
	return b, logReadErr(err)
}

func logReadErr(err error) error {
	var oor *store.OffsetOutOfRangeError
	switch {
	case errors.Is(err, store.ErrNoData):
		return ErrNoMessages
	case errors.As(err, &oor):
		return &RequestError{Status: http.StatusRequestedRangeNotSatisfiable, Msg: err.Error()}
	case errors.Is(err, store.ErrClosed):
		return &GoneError{Err: err}
	}
	return err
}

// TopicRefusal is a topic change's error (core/topicadmin) with its HTTP
// status; closed is the broker's error once it is closing (503).
func TopicRefusal(err, closed error) error {
	code := http.StatusInternalServerError
	switch {
	case errors.Is(err, topicadmin.ErrExists):
		code = http.StatusConflict
	case errors.Is(err, partition.ErrNoTopic):
		code = http.StatusNotFound
	case errors.Is(err, topicadmin.ErrInvalid):
		code = http.StatusBadRequest
	case errors.Is(err, closed):
		code = http.StatusServiceUnavailable
	}
	return &RequestError{Status: code, Msg: err.Error()}
}

// PluginInfos is the plugin processes' state (plugins/host) as the API
// lists them.
func PluginInfos(is []host.Info) []PluginInfo {
	var out []PluginInfo
	for _, i := range is {
		out = append(out, PluginInfo{Kind: string(i.Kind), Name: i.Name, Version: i.Version, PID: i.PID, State: i.State,
			Restarts: i.Restarts, Calls: i.Calls, Errors: i.Errors, Generation: i.Generation, LastError: i.LastError})
	}
	return out
}

// ClusterInfoOf is the broker's place in its cluster under cfg, without
// its client addresses (set while serving).
func ClusterInfoOf(cfg *conf.Config, httpAddr string, registered, serving bool) ClusterInfo {
	c := ClusterInfo{BrokerID: cfg.BrokerID, Mode: "local", Role: "master", // slaves come with replication (issue 11)
		HTTPAddr: httpAddr, Registered: registered, Serving: serving}
	if cfg.ZooKeeper.Enabled() {
		// zookeeper.connect is secret (it may carry credentials): only
		// the root is shown.
		root := cfg.ZooKeeper.Root
		c.Mode, c.ZooKeeperRoot = "cluster", &root
	}
	return c
}
