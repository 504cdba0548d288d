package admin

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"time"

	"github.com/metaq-go/metaq/internal/dlqlease"
	"github.com/metaq-go/metaq/sdk/client"
	"github.com/metaq-go/metaq/sdk/protocol"
)

// One replay (or purge) of a group's dead letters at a time: the replay
// holds a lease on the position group while it runs. The lease is a
// membership of the broker's group coordinator: the consumer id
// DLQReplayMember joins the group DLQPositionGroupOf(group) for the
// dead-letter topic on every broker that holds a partition of it. A
// consumer id is a member on one connection only, so a second replay's
// join is refused (409) until the first leaves, its connection closes, or
// it misses the coordinator's session timeout (3 s; the holder
// heartbeats every second). The dashboard's replay joins the same way on
// its broker. Besides, before it sends a batch, a replay checks that the
// committed position is still the one it read (a compare before the
// commit): it stops when another one moved it.

// DLQReplayMember is the consumer id a replay or purge of dead letters
// holds the position group with (see ReplayDeadLetters).
const DLQReplayMember = dlqlease.Member

// ErrReplayRunning: another replay or purge of the group's dead letters
// holds the replay position, or moved it during this one.
var ErrReplayRunning = errors.New(dlqlease.Running)

// replayHeartbeat is how often a lease holder heartbeats: a third of the
// coordinator's default session timeout.
const replayHeartbeat = dlqlease.Heartbeat

// replayLease is a held lease; ctx ends when it is lost.
type replayLease struct {
	ctx    context.Context
	cancel context.CancelCauseFunc
	done   chan struct{}
	a      *Admin
	group  string
	topic  string
	addrs  map[int]string // broker id -> address, the brokers joined
	ids    []int
	gens   map[int]int64
	local  string // the in-process guard's key
}

// leaseReplay takes the lease of dl's position group on every broker
// holding a partition of dl.Topic; ErrReplayRunning when another replay
// holds it. The lease's context derives from ctx and ends, its cause an
// error, when a heartbeat fails.
func (a *Admin) leaseReplay(ctx context.Context, dl *DeadLetters) (*replayLease, error) {
	l := &replayLease{a: a, group: dl.PositionGroup, topic: dl.Topic, addrs: map[int]string{}, gens: map[int]int64{},
		local: dl.PositionGroup, done: make(chan struct{})}
	for _, p := range dl.Partitions {
		if _, ok := l.addrs[p.BrokerID]; !ok {
			l.addrs[p.BrokerID] = p.addr
			l.ids = append(l.ids, p.BrokerID)
		}
	}
	slices.Sort(l.ids)
	a.mu.Lock()
	if a.leases[l.local] {
		a.mu.Unlock()
		return nil, fmt.Errorf("%w: this process replays or purges %s already", ErrReplayRunning, dl.Topic)
	}
	if a.leases == nil {
		a.leases = map[string]bool{}
	}
	a.leases[l.local] = true
	a.mu.Unlock()
	for _, id := range l.ids {
		body, err := a.roundTrip(ctx, l.addrs[id], func(dst []byte, op int32) []byte {
			return protocol.AppendJoin(dst, l.group, l.topic, DLQReplayMember, "default", op)
		})
		if err == nil {
			l.gens[id], _, err = protocol.ParseGroupView(body)
		}
		if err != nil {
			l.leave()
			var be *client.BrokerError
			if errors.As(err, &be) && be.Code == protocol.StatusConflict {
				return nil, fmt.Errorf("%w: %s is held on broker %d by another replay or purge (%s joined as %s); "+
					"wait for it to end, or for 3 s after it died", ErrReplayRunning, l.group, id, l.group, DLQReplayMember)
			}
			return nil, fmt.Errorf("taking the replay lease %s on broker %d: %w", l.group, id, err)
		}
	}
	l.ctx, l.cancel = context.WithCancelCause(ctx)
	go l.heartbeat()
	return l, nil
}

// heartbeat keeps the memberships alive until the lease is released; a
// failed heartbeat ends the lease's context.
func (l *replayLease) heartbeat() {
	defer close(l.done)
	t := time.NewTicker(replayHeartbeat)
	defer t.Stop()
	for {
		select {
		case <-l.ctx.Done():
			return
		case <-t.C:
		}
		for _, id := range l.ids {
			body, err := l.a.roundTrip(l.ctx, l.addrs[id], func(dst []byte, op int32) []byte {
				return protocol.AppendHeartbeat(dst, l.group, l.topic, DLQReplayMember, l.gens[id], op)
			})
			if err == nil {
				l.gens[id], _, err = protocol.ParseGroupView(body)
			}
			if err != nil {
				if l.ctx.Err() == nil {
					l.cancel(fmt.Errorf("%w: the replay lost its lease %s on broker %d (%v) and stopped; what it "+
						"sent is committed", ErrReplayRunning, l.group, id, err))
				}
				return
			}
		}
	}
}

// err is why the lease ended, nil while it holds.
func (l *replayLease) err() error {
	if l.ctx.Err() == nil {
		return nil
	}
	return context.Cause(l.ctx)
}

// release leaves the position group on every broker joined.
func (l *replayLease) release() {
	if l.cancel != nil {
		l.cancel(context.Canceled)
		<-l.done
	}
	l.leave()
}

func (l *replayLease) leave() {
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	for _, id := range l.ids {
		if _, ok := l.gens[id]; !ok {
			continue
		}
		_, _ = l.a.roundTrip(ctx, l.addrs[id], func(dst []byte, op int32) []byte {
			return protocol.AppendLeave(dst, l.group, l.topic, DLQReplayMember, op)
		})
	}
	l.a.mu.Lock()
	delete(l.a.leases, l.local)
	l.a.mu.Unlock()
}

// checkPosition fails with ErrReplayRunning when the committed position of
// dl's partition p is no longer want (another replay or a purge moved it).
func (a *Admin) checkPosition(ctx context.Context, dl *DeadLetters, p DeadLetterPartition, want int64) error {
	req := []protocol.OffsetEntry{{Topic: dl.Topic, Partition: p.Partition}}
	body, err := a.roundTrip(ctx, p.addr, func(dst []byte, op int32) []byte { return protocol.AppendFetch(dst, dl.PositionGroup, req, op) })
	if err != nil {
		return fmt.Errorf("reading the replay position of %s partition %d of broker %d: %w", dl.Topic, p.Partition, p.BrokerID, err)
	}
	lines, err := protocol.ParseOffsetLines(body, true)
	if err != nil || len(lines) != 1 {
		return fmt.Errorf("reading the replay position of %s partition %d of broker %d: bad reply %q", dl.Topic, p.Partition, p.BrokerID, body)
	}
	if got := max(lines[0].Offset, -1); got != want {
		return fmt.Errorf("%w: the position of %s partition %d of broker %d moved from %d to %d; stopped before sending more",
			ErrReplayRunning, dl.Topic, p.Partition, p.BrokerID, want, got)
	}
	return nil
}
