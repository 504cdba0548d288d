package httpapi

import (
	"bytes"
	"context"
	"errors"
	"net/http"
	"net/url"
	"strconv"
	"strings"
	"time"

	"github.com/metaq-go/metaq/sdk/message"
	"github.com/metaq-go/metaq/sdk/protocol"
	"github.com/metaq-go/metaq/sdk/selector"
)

// Dead letters on this broker (issue 28, docs/retry.md): the dead-letter
// topics <group>.dlq of consumer groups (the Go SDK's RetryTopics), their
// depth past the replay position, and their replay. The names and headers
// are sdk/client's (RetryTopicOf, DeadLetterTopicOf, Header*) and the
// position group is sdk/admin's DLQPositionGroupOf, which this package may
// not import (sdk/client's tests import the broker): the same strings,
// and `metaq dlq replay` and this page move the same position.
//
// The replay runs on an in-process connection as the request's user
// (dataconn.go): gets of the dead-letter topic, puts to the origin (or
// retry) topic on this broker, and commits of the position through the
// broker's offset store, as the CLI's replay commits them.

const (
	dlqSuffix     = ".dlq"
	retrySuffix   = ".retry"
	dlqPosSuffix  = ".dlq-replay"
	hdrOrigin     = "metaq-origin-topic"
	hdrOriginPart = "metaq-origin-partition"
	hdrDelivery   = "metaq-delivery-count"
	hdrLastError  = "metaq-last-error"
	dlqMaxReplay  = 100000 // one request's replay at most
	dlqGetSize    = 1 << 20
	dlqReplayWait = 2 * time.Minute
)

// DLQPartition is one partition of a dead-letter topic here.
type DLQPartition struct {
	Partition int   `json:"partition"`
	Min       int64 `json:"min_offset"`
	Max       int64 `json:"max_offset"`
	Messages  int64 `json:"messages"`
	// Position is the replay and purge position (the committed offset of
	// the position group, else Min); Pending the messages from it to Max
	// (-1: unknown).
	Position int64 `json:"position"`
	Pending  int64 `json:"pending"`

	committed int64 // the position group's committed offset; -1: none
}

// DLQTopic is a group's dead-letter topic on this broker.
type DLQTopic struct {
	Group         string         `json:"group"`
	Topic         string         `json:"topic"`
	PositionGroup string         `json:"position_group"`
	Messages      int64          `json:"messages"`
	Pending       int64          `json:"pending"`
	Partitions    []DLQPartition `json:"partitions"`
	// Retry is the group's retry topic's message count here (-1: absent).
	Retry int64 `json:"retry_messages"`
}

// DLQReplayRequest is POST /api/v1/groups/{group}/dlq/replay's body.
type DLQReplayRequest struct {
	// To is "retry" (default: the group's retry topic, which only the
	// group consumes) or "origin".
	To string `json:"to"`
	// Limit is the most messages replayed (0: all pending, at most
	// 100000 per request).
	Limit  int  `json:"limit"`
	DryRun bool `json:"dry_run"`
}

// DLQReplayed is one dead letter a replay sent (or would send).
type DLQReplayed struct {
	Partition int    `json:"partition"`
	Offset    int64  `json:"offset"`
	MsgID     string `json:"msgId"`
	Origin    string `json:"origin"`
	To        string `json:"to"`
	LastError string `json:"last_error"`
}

// DLQReplayReply is the replay's answer.
type DLQReplayReply struct {
	Group    string        `json:"group"`
	Topic    string        `json:"topic"`
	To       string        `json:"to"`
	DryRun   bool          `json:"dry_run"`
	Pending  int64         `json:"pending"`
	Count    int           `json:"count"`
	Messages []DLQReplayed `json:"messages"`
}

// deadLetterTopics lists the dead-letter topics here that the request's
// user may see, with their positions (read through d).
func (s *Server) deadLetterTopics(ctx context.Context, r *http.Request, d *dataConn) ([]DLQTopic, error) {
	var out []DLQTopic
	for _, ti := range s.be.Topics(s.viewer(r)) {
		if !strings.HasSuffix(ti.Name, dlqSuffix) || len(ti.Name) == len(dlqSuffix) {
			continue
		}
		t, err := s.deadLetterTopic(ctx, d, strings.TrimSuffix(ti.Name, dlqSuffix))
		if err != nil {
			return out, err
		}
		out = append(out, t)
	}
	return out, nil
}

// deadLetterTopic reads group's dead-letter topic here and its position.
func (s *Server) deadLetterTopic(ctx context.Context, d *dataConn, group string) (DLQTopic, error) {
	t := DLQTopic{Group: group, Topic: group + dlqSuffix, PositionGroup: group + dlqPosSuffix, Retry: -1}
	ti, err := s.be.Topic(t.Topic)
	if err != nil {
		return t, &RequestError{Status: http.StatusNotFound, Msg: "no dead-letter topic " + quoteName(t.Topic) +
			" on this broker: group " + quoteName(group) + " has dead-lettered nothing here"}
	}
	if rt, err := s.be.Topic(group + retrySuffix); err == nil {
		t.Retry = rt.Messages
	}
	es := make([]protocol.OffsetEntry, len(ti.PartitionList))
	for i, p := range ti.PartitionList {
		es[i] = protocol.OffsetEntry{Topic: t.Topic, Partition: int32(p.Partition)}
	}
	var lines []protocol.OffsetEntry
	if len(es) > 0 {
		rep, err := d.one(ctx, protocol.AppendFetch(nil, t.PositionGroup, es, 1))
		if err != nil {
			return t, err
		}
		if rep.Code != protocol.StatusOK {
			return t, &RequestError{Status: httpStatus(rep.Code), Msg: string(bytes.TrimSpace(rep.Body))}
		}
		if lines, err = protocol.ParseOffsetLines(rep.Body, true); err != nil || len(lines) != len(es) {
			return t, &RequestError{Status: http.StatusBadGateway, Msg: "bad fetch reply " + quoteName(string(rep.Body))}
		}
	}
	for i, p := range ti.PartitionList {
		dp := DLQPartition{Partition: p.Partition, Min: p.MinOffset, Max: p.MaxOffset, Messages: p.Messages, Position: p.MinOffset,
			Pending: p.Messages, committed: max(lines[i].Offset, -1)}
		if c := lines[i].Offset; c > p.MinOffset {
			dp.Position = min(c, p.MaxOffset)
			dp.Pending = -1
			if n, ok := s.be.CountMessages(t.Topic, p.Partition, dp.Position); ok {
				dp.Pending = n
			}
		}
		t.Messages += dp.Messages
		if dp.Pending < 0 || t.Pending < 0 {
			t.Pending = -1
		} else {
			t.Pending += dp.Pending
		}
		t.Partitions = append(t.Partitions, dp)
	}
	return t, nil
}

// replayDeadLetters sends group's pending dead letters here to the
// group's retry topic (to "retry", the default) or their origin topic
// ("origin") on this broker, committing the position past each get's worth once sent; with
// dryRun it only reads the first few and counts. A replay that sends
// holds the group's replay lease here (dlqlease.go; 409 while another
// replay holds it) and checks before each send that the committed
// position is still the one it read (409 when another moved it).
// On an error, out.Count is how many were sent and committed before it.
func (s *Server) replayDeadLetters(ctx context.Context, r *http.Request, d *dataConn, group string, req DLQReplayRequest) (out DLQReplayReply, err error) {
	sent := 0
	defer func() {
		if err != nil && !req.DryRun {
			out.Count = sent
		}
	}()
	to := cmpOr(req.To, "retry")
	out = DLQReplayReply{Group: group, Topic: group + dlqSuffix, To: to, DryRun: req.DryRun, Messages: []DLQReplayed{}}
	if to != "origin" && to != "retry" {
		return out, &RequestError{Status: http.StatusBadRequest, Msg: "to " + quoteName(req.To) + ": want origin or retry"}
	}
	if req.Limit < 0 {
		return out, &RequestError{Status: http.StatusBadRequest, Msg: "limit must not be negative"}
	}
	limit := req.Limit
	if limit == 0 || limit > dlqMaxReplay {
		limit = dlqMaxReplay
	}
	t, err := s.deadLetterTopic(ctx, d, group)
	if err != nil {
		return out, err
	}
	var lease *dlqLease
	if !req.DryRun {
		if lease, err = s.leaseDLQ(ctx, User(r), r.RemoteAddr, t); err != nil {
			return out, err
		}
		defer lease.release()
		// The position as it is now that no other replay moves it.
		if t, err = s.deadLetterTopic(ctx, d, group); err != nil {
			return out, err
		}
	}
	out.Pending = t.Pending
	const sample = 5
	for _, p := range t.Partitions {
		off := p.Position
		committed := p.committed
		for off < p.Max && out.Count < limit {
			if req.DryRun && len(out.Messages) >= sample && t.Pending >= 0 {
				out.Count = int(min(t.Pending, int64(limit)))
				return out, nil
			}
			rep, err := d.one(ctx, protocol.AppendGet(nil, t.Topic, t.PositionGroup, int32(p.Partition), off, dlqGetSize, 1))
			if err != nil {
				return out, err
			}
			if rep.Op != protocol.OpValue {
				return out, &RequestError{Status: httpStatus(rep.Code), Msg: t.Topic + " partition " + strconv.Itoa(p.Partition) +
					" at " + strconv.FormatInt(off, 10) + ": " + string(bytes.TrimSpace(rep.Body))}
			}
			it := message.NewIterator(rep.Body, off, 0)
			next := off
			var wire []byte
			n := 0
			for out.Count < limit && it.Next() {
				rec := it.Record()
				if rec.Offset >= p.Max {
					break
				}
				m, err := rec.Message(t.Topic, int32(p.Partition))
				if err != nil {
					return out, &RequestError{Status: http.StatusBadGateway, Msg: err.Error()}
				}
				nm, origin, part, err := s.replayedMessage(&m, to, group)
				if err != nil {
					return out, err
				}
				if len(out.Messages) < sample {
					le, _ := m.Headers.String(hdrLastError)
					out.Messages = append(out.Messages, DLQReplayed{Partition: p.Partition, Offset: rec.Offset,
						MsgID: strconv.FormatInt(rec.ID, 10), Origin: origin, To: nm.Topic, LastError: le})
				}
				data := nm.AppendData(nil)
				n++
				wire = protocol.AppendPut(wire, nm.Topic, part, nm.Flag(), int64(message.Checksum(data)), int32(n), data)
				out.Count++
				next = rec.Offset + int64(rec.Size())
			}
			if err := it.Err(); err != nil {
				return out, &RequestError{Status: http.StatusBadGateway, Msg: err.Error()}
			}
			if next == off {
				if it.Consumed() > 0 {
					break
				}
				return out, &RequestError{Status: http.StatusRequestEntityTooLarge, Msg: "no whole record at offset " +
					strconv.FormatInt(off, 10) + " of " + t.Topic + " within " + strconv.Itoa(dlqGetSize) + " bytes"}
			}
			if !req.DryRun {
				if err := lease.err(); err != nil {
					return out, err
				}
				if err := checkDLQPosition(ctx, d, t, p, committed); err != nil {
					return out, err
				}
				if n > 0 {
					reps, err := d.do(ctx, wire, n)
					if err != nil {
						return out, err
					}
					for _, rp := range reps {
						if rp.Code != protocol.StatusOK {
							return out, &RequestError{Status: httpStatus(rp.Code), Msg: "replaying " + t.Topic + " partition " +
								strconv.Itoa(p.Partition) + " from " + strconv.FormatInt(off, 10) + " (the position stays there): " +
								string(bytes.TrimSpace(rp.Body))}
						}
					}
				}
				es := []protocol.OffsetEntry{{Topic: t.Topic, Partition: int32(p.Partition), Offset: next, MsgID: -1}}
				rep, err := d.one(ctx, protocol.AppendCommit(nil, t.PositionGroup, es, 1))
				if err != nil {
					return out, err
				}
				if rep.Code != protocol.StatusOK {
					return out, &RequestError{Status: httpStatus(rep.Code), Msg: "committing the replay position: " + string(bytes.TrimSpace(rep.Body))}
				}
				committed = next
				sent += n
			}
			off = next
		}
	}
	return out, nil
}

// replayedMessage is what dead letter m becomes (see sdk/admin's
// replayed), its origin topic and the partition it goes to here: the
// origin partition when the target has it, else its key's, else 0.
func (s *Server) replayedMessage(m *message.Message, to, group string) (*message.Message, string, int32, error) {
	origin, ok := m.Headers.String(hdrOrigin)
	if !ok || origin == "" {
		return nil, "", 0, &RequestError{Status: http.StatusConflict, Msg: "msgId " + strconv.FormatInt(m.ID, 10) + " at offset " +
			strconv.FormatInt(m.Offset, 10) + " of " + m.Topic + " has no " + hdrOrigin + " header: not a dead letter of RetryTopics (the position stays before it)"}
	}
	nm := &message.Message{Topic: origin, Body: m.Body, Attribute: m.Attribute, HasAttribute: m.HasAttribute,
		Key: m.Key, Tags: m.Tags, Timestamp: m.Timestamp}
	for _, h := range m.Headers {
		switch {
		case h.Key == hdrDelivery || h.Key == hdrLastError || h.Key == message.HeaderDeliverAt || h.Key == message.HeaderDelay:
			continue
		case to == "origin" && strings.HasPrefix(h.Key, "metaq-origin-"):
			continue
		}
		nm.Headers = append(nm.Headers, h)
	}
	if to == "retry" {
		nm.Topic = group + retrySuffix
	}
	nparts := s.be.Partitions(nm.Topic)
	if nparts == 0 {
		return nil, "", 0, &RequestError{Status: http.StatusConflict, Msg: "topic " + quoteName(nm.Topic) +
			" is not on this broker: replay with `metaq dlq replay --zk`, which sends to the topic wherever the cluster has it"}
	}
	part := int32(0)
	if op, ok, err := m.Headers.Int64(hdrOriginPart); to == "origin" && ok && err == nil && op >= 0 && op < int64(nparts) {
		part = int32(op)
	} else if m.Key != nil {
		part = int32(selector.KeyIndex(m.Key, nparts))
	}
	return nm, origin, part, nil
}

func cmpOr(s, def string) string {
	if s == "" {
		return def
	}
	return s
}

// apiDLQ is GET /api/v1/dlq: the dead-letter topics here.
func (s *Server) apiDLQ(w http.ResponseWriter, r *http.Request) {
	d, ok := s.dial(w, r)
	if !ok {
		return
	}
	defer d.Close()
	ts, err := s.deadLetterTopics(r.Context(), r, d)
	if err != nil {
		failed(w, err)
		return
	}
	if ts == nil {
		ts = []DLQTopic{}
	}
	WriteJSON(w, http.StatusOK, ts)
}

// apiDLQReplay is POST /api/v1/groups/{group}/dlq/replay.
func (s *Server) apiDLQReplay(w http.ResponseWriter, r *http.Request) {
	group := r.PathValue("group")
	if !s.checkGroup(w, r, group) {
		return
	}
	var req DLQReplayRequest
	if !DecodeBody(w, r, &req) {
		return
	}
	d, ok := s.dial(w, r)
	if !ok {
		return
	}
	defer d.Close()
	ctx, cancel := context.WithTimeout(r.Context(), dlqReplayWait)
	defer cancel()
	res, err := s.replayDeadLetters(ctx, r, d, group, req)
	if err != nil {
		if !req.DryRun && res.Count > 0 {
			s.be.AuditDLQReplay(ActorOf(r), group, res.To, res.Count)
		}
		failed(w, err)
		return
	}
	if !req.DryRun {
		s.be.AuditDLQReplay(ActorOf(r), group, res.To, res.Count)
	}
	WriteJSON(w, http.StatusOK, res)
}

// uiDLQ is the dead letters page.
func (s *Server) uiDLQ(w http.ResponseWriter, r *http.Request) {
	d, ok := s.dial(w, r)
	if !ok {
		return
	}
	defer d.Close()
	ts, err := s.deadLetterTopics(r.Context(), r, d)
	data := map[string]any{"Topics": ts}
	if err != nil {
		data["Err"] = err.Error()
	}
	flash := ""
	if q := r.URL.Query(); q.Get("replayed") != "" {
		flash = "Replayed " + q.Get("replayed") + " dead letters of " + q.Get("group") + " to " + q.Get("to") + "."
	}
	s.Render(w, r, http.StatusOK, "dlq", "Dead letters", "dlq", data, flash)
}

// uiDLQReplay is the dead letters page's replay form: a dry run shows
// what would be sent, "apply" sends.
func (s *Server) uiDLQReplay(w http.ResponseWriter, r *http.Request) {
	group, ok := s.GroupName(w, r)
	if !ok {
		return
	}
	req := DLQReplayRequest{To: r.PostForm.Get("to"), DryRun: r.PostForm.Get("action") != "apply"}
	if l := r.PostForm.Get("limit"); l != "" {
		n, err := strconv.Atoi(l)
		if err != nil || n < 0 {
			s.UIError(w, r, http.StatusBadRequest, "limit "+quoteName(l)+": want a count (0: all)")
			return
		}
		req.Limit = n
	}
	d, ok := s.dial(w, r)
	if !ok {
		return
	}
	defer d.Close()
	ctx, cancel := context.WithTimeout(r.Context(), dlqReplayWait)
	defer cancel()
	res, err := s.replayDeadLetters(ctx, r, d, group, req)
	if err != nil {
		if !req.DryRun && res.Count > 0 {
			s.be.AuditDLQReplay(ActorOf(r), group, res.To, res.Count)
		}
		var re *RequestError
		if errors.As(err, &re) {
			s.UIError(w, r, httpStatus(re.Status), re.Msg)
		} else {
			s.UIError(w, r, http.StatusBadGateway, err.Error())
		}
		return
	}
	if !req.DryRun {
		s.be.AuditDLQReplay(ActorOf(r), group, res.To, res.Count)
		http.Redirect(w, r, "/ui/dlq?replayed="+strconv.Itoa(res.Count)+"&group="+url.QueryEscape(group)+"&to="+url.QueryEscape(res.To), http.StatusSeeOther)
		return
	}
	s.Render(w, r, http.StatusOK, "dlqreplay", "Replay dead letters of "+group, "dlq", map[string]any{
		"Group": group, "Res": res, "Limit": req.Limit, "More": res.Count - len(res.Messages),
	}, "")
}

// DelayedBucket is one due-time bucket of the pending delayed messages.
type DelayedBucket struct {
	Label string `json:"label"`
	// UpTo is the bucket's upper bound from now (0: none).
	UpToSeconds int64 `json:"up_to_seconds"`
	Messages    int64 `json:"messages"`
}

// DelayedBuckets are the due-time bounds of the delayed page's buckets,
// from now: due within 1 minute (or overdue), 1-10 minutes, 10 minutes to
// 1 hour, 1 hour to 1 day, later.
var DelayedBuckets = []time.Duration{time.Minute, 10 * time.Minute, time.Hour, 24 * time.Hour}

// DelayedLabels name the buckets of DelayedBuckets, and the one after.
var DelayedLabels = []string{"< 1 min", "1–10 min", "10 min–1 h", "1 h–1 day", "> 1 day"}

// DelayedPage is the delayed page's data.
type DelayedPage struct {
	Pending int64           `json:"pending"`
	Buckets []DelayedBucket `json:"buckets"`
	// Counters are `stats delayed`'s lines.
	Counters [][2]string `json:"counters"`
	// Note says why the buckets are missing (a slave, no timer yet).
	Note string `json:"note,omitempty"`
}

// uiDelayed is the delayed messages page.
func (s *Server) uiDelayed(w http.ResponseWriter, r *http.Request) {
	ctx, cancel := context.WithTimeout(r.Context(), 2*time.Second)
	defer cancel()
	s.Render(w, r, http.StatusOK, "delayed", "Delayed messages", "delayed", s.be.DelayedPage(ctx), "")
}

// apiDelayed is GET /api/v1/delayed.
func (s *Server) apiDelayed(w http.ResponseWriter, r *http.Request) {
	ctx, cancel := context.WithTimeout(r.Context(), 2*time.Second)
	defer cancel()
	WriteJSON(w, http.StatusOK, s.be.DelayedPage(ctx))
}

// BucketsOf names counts (one per DelayedBuckets bound, and one after).
func BucketsOf(counts []int64) []DelayedBucket {
	out := make([]DelayedBucket, len(DelayedLabels))
	for i := range out {
		out[i].Label = DelayedLabels[i]
		if i < len(DelayedBuckets) {
			out[i].UpToSeconds = int64(DelayedBuckets[i] / time.Second)
		}
		if i < len(counts) {
			out[i].Messages = counts[i]
		}
	}
	return out
}

// DelayedSource is what the delayed page reads of the timer
// (timer.Service): the pending delayed messages, `stats delayed`' lines,
// and the counts by due time of each timer loop, bounded by ctx.
type DelayedSource interface {
	Pending() int64
	StatsLines(line func(string))
	DueCounts(ctx context.Context, now int64, bounds []int64) (total []int64, answered, asked int)
}

// BuildDelayedPage is the delayed page's data at now: src's pending
// messages by due-time bucket (DelayedBuckets) and its counters.
func BuildDelayedPage(ctx context.Context, src DelayedSource, now time.Time) DelayedPage {
	pg := DelayedPage{Pending: src.Pending()}
	src.StatsLines(func(l string) {
		k, v, _ := strings.Cut(l, " ")
		pg.Counters = append(pg.Counters, [2]string{k, v})
	})
	bounds := make([]int64, len(DelayedBuckets))
	for i, d := range DelayedBuckets {
		bounds[i] = d.Milliseconds()
	}
	total, answered, asked := src.DueCounts(ctx, now.UnixMilli(), bounds)
	pg.Buckets = BucketsOf(total)
	if answered < asked && pg.Pending > 0 {
		pg.Note = "Some timer partitions did not answer (not running here: a slave, or starting): their messages are not in the buckets."
	}
	return pg
}
