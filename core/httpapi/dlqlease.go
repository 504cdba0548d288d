package httpapi

import (
	"context"
	"net/http"
	"strconv"
	"sync"
	"time"

	"github.com/metaq-go/metaq/conf"
	"github.com/metaq-go/metaq/internal/dlqlease"
	"github.com/metaq-go/metaq/sdk/protocol"
)

// One replay of a group's dead letters at a time (sdk/admin's
// dlqlease.go, which this package may not import: the same names): a
// replay that sends holds the position group <group>.dlq-replay on this
// broker's group coordinator as the consumer id dlqReplayMember, on a
// data connection of its own that heartbeats every second. A consumer id
// is a member on one connection only: another replay's join (the CLI's or
// this API's) is refused with 409 until the holder leaves, its
// connection closes, or it misses the coordinator's session timeout.

const (
	dlqReplayMember  = dlqlease.Member
	dlqLeaseInterval = dlqlease.Heartbeat
	// errReplayRunning is sdk/admin's ErrReplayRunning's text.
	errReplayRunning = dlqlease.Running
)

// dlqLease is a held lease of a group's replay position here.
type dlqLease struct {
	d     *dataConn
	group string
	topic string
	stop  chan struct{}
	done  chan struct{}

	mu   sync.Mutex
	lost error // why the lease ended early
}

// leaseDLQ takes t's replay lease here as u, or fails: 409 when another
// replay holds it.
func (s *Server) leaseDLQ(ctx context.Context, u *conf.User, remote string, t DLQTopic) (*dlqLease, error) {
	nc, err := s.be.DataConn(u, remote)
	if err != nil {
		return nil, &RequestError{Status: http.StatusServiceUnavailable, Msg: "broker unavailable: " + err.Error()}
	}
	l := &dlqLease{d: &dataConn{nc: nc, dec: protocol.NewDecoder(nc, protocol.Limits{MaxLine: 4096, MaxBody: 64 << 10})},
		group: t.PositionGroup, topic: t.Topic, stop: make(chan struct{}), done: make(chan struct{})}
	rep, err := l.d.one(ctx, protocol.AppendJoin(nil, l.group, l.topic, dlqReplayMember, "default", 1))
	if err == nil && rep.Code != protocol.StatusOK {
		msg := string(rep.Body)
		if rep.Code == protocol.StatusConflict {
			msg = errReplayRunning + ": " + l.group + " is held on this broker by another replay or purge (" +
				dlqReplayMember + "); wait for it to end, or for 3 s after it died"
		}
		err = &RequestError{Status: httpStatus(rep.Code), Msg: msg}
	}
	var gen int64
	if err == nil {
		gen, _, err = protocol.ParseGroupView(rep.Body)
	}
	if err != nil {
		l.d.Close()
		return nil, err
	}
	go l.heartbeat(gen)
	return l, nil
}

// heartbeat keeps the membership until release (then it leaves).
func (l *dlqLease) heartbeat(gen int64) {
	defer close(l.done)
	tk := time.NewTicker(dlqLeaseInterval)
	defer tk.Stop()
	ctx := context.Background()
	for {
		select {
		case <-l.stop:
			_, _ = l.d.one(ctx, protocol.AppendLeave(nil, l.group, l.topic, dlqReplayMember, 1))
			return
		case <-tk.C:
		}
		rep, err := l.d.one(ctx, protocol.AppendHeartbeat(nil, l.group, l.topic, dlqReplayMember, gen, 1))
		if err == nil && rep.Code != protocol.StatusOK {
			err = &RequestError{Status: httpStatus(rep.Code), Msg: string(rep.Body)}
		}
		if err == nil {
			gen, _, err = protocol.ParseGroupView(rep.Body)
		}
		if err != nil {
			l.mu.Lock()
			l.lost = &RequestError{Status: http.StatusConflict, Msg: errReplayRunning + ": the replay lost its lease " + l.group +
				" (" + err.Error() + ") and stopped; what it sent is committed"}
			l.mu.Unlock()
			return
		}
	}
}

// err is why the lease ended, nil while it holds.
func (l *dlqLease) err() error {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.lost
}

// release leaves and closes the lease's connection.
func (l *dlqLease) release() {
	close(l.stop)
	<-l.done
	l.d.Close()
}

// checkDLQPosition fails (409) when the committed replay position of t's
// partition p is no longer want: another replay or a purge moved it.
func checkDLQPosition(ctx context.Context, d *dataConn, t DLQTopic, p DLQPartition, want int64) error {
	es := []protocol.OffsetEntry{{Topic: t.Topic, Partition: int32(p.Partition)}}
	rep, err := d.one(ctx, protocol.AppendFetch(nil, t.PositionGroup, es, 1))
	if err != nil {
		return err
	}
	if rep.Code != protocol.StatusOK {
		return &RequestError{Status: httpStatus(rep.Code), Msg: "reading the replay position: " + string(rep.Body)}
	}
	lines, err := protocol.ParseOffsetLines(rep.Body, true)
	if err != nil || len(lines) != 1 {
		return &RequestError{Status: http.StatusBadGateway, Msg: "bad fetch reply " + quoteName(string(rep.Body))}
	}
	if got := max(lines[0].Offset, -1); got != want {
		return &RequestError{Status: http.StatusConflict, Msg: errReplayRunning + ": the position of " + t.Topic + " partition " +
			strconv.Itoa(p.Partition) + " moved from " + strconv.FormatInt(want, 10) + " to " + strconv.FormatInt(got, 10) +
			"; stopped before sending more"}
	}
	return nil
}
