package client

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"maps"
	"os"
	"slices"
	"strings"
	"sync"
	"time"

	"github.com/metaq-go/metaq/sdk/balance"
	"github.com/metaq-go/metaq/sdk/protocol"
)

// Group membership in local mode: a consumer created withGroup and
// withGroupMembership, without withPartitions, joins its group at the broker (`join`), which shares the
// topic's partitions among the members with the group's balance strategy.
// The consumer heartbeats every withHeartbeatInterval; each reply is its
// view, the partitions it owns now. A partition that leaves the view is
// stopped and its position committed before the next heartbeat, which
// acknowledges the view so that the broker can hand the partition to its
// new owner; a partition that enters the view is fetched from the group's
// committed offset. Close (or the end of Consume) stops every partition,
// commits, and leaves the group. The membership lives as long as the
// connection: when it breaks, the consumer stops fetching and joins again.

// DefaultHeartbeatInterval is how often a group member heartbeats.
const DefaultHeartbeatInterval = time.Second

var errGroupMessages = errors.New("metaq: Messages does not support group membership yet; use Consume or withPartitions")

// withHeartbeatInterval sets how often a group member heartbeats, which
// bounds how fast it learns of rebalances. Default 1 s; the broker removes
// a member silent for its group session timeout (default 3 s).
func withHeartbeatInterval(d time.Duration) consOption {
	return consumerOpt(func(c *consumerConfig) {
		if d > 0 {
			c.heartbeat = d
		}
	})
}

// withBalanceStrategy sets the group's balance strategy by name,
// balance.NameDefault (the default) or balance.NameConsist. Every member
// of a group must use the same one.
func withBalanceStrategy(name string) consOption {
	return consumerOpt(func(c *consumerConfig) { c.strategy = strings.ToLower(name) })
}

// withConsumerID sets this member's id in its group. Default
// `<hostname>-<pid>-<random>`. Ids order the members for balancing.
func withConsumerID(id string) consOption {
	return consumerOpt(func(c *consumerConfig) { c.consumerID, c.consumerIDSet = id, true })
}

func (cfg *consumerConfig) checkGroup() error {
	if _, err := balance.ByName(cfg.strategy); err != nil {
		return fmt.Errorf("metaq: %w", err)
	}
	if cfg.consumerID == "" {
		cfg.consumerID = defaultConsumerID()
	}
	if !validToken(cfg.consumerID) {
		return fmt.Errorf("metaq: bad consumer id %q", cfg.consumerID)
	}
	return nil
}

func defaultConsumerID() string {
	host, _ := os.Hostname()
	host = strings.Map(func(r rune) rune {
		if r <= ' ' || r > '~' || r == ',' {
			return '_'
		}
		return r
	}, host)
	if host == "" {
		host = "consumer"
	}
	var b [4]byte
	_, _ = rand.Read(b[:])
	return fmt.Sprintf("%s-%d-%s", host, os.Getpid(), hex.EncodeToString(b[:]))
}

// withGroupMembership makes the consumer a member of its group (withGroup)
// coordinated by the broker: the group shares the topic's partitions among
// its members instead of each consumer reading them all. Ignored with
// withPartitions (an explicit assignment). Only Consume supports it.
//
// It is opt-in for now because consumers that set withGroup alone read
// every partition today and existing code relies on that.
func withGroupMembership() consOption {
	return consumerOpt(func(c *consumerConfig) { c.membership = true })
}

// groupMode reports whether the broker assigns this consumer's partitions.
func (c *brokerConsumer) groupMode() bool {
	return c.cfg.groupSet && c.cfg.membership && len(c.cfg.partitions) == 0
}

// ConsumerID returns this consumer's member id in its group.
func (c *brokerConsumer) ConsumerID() string { return c.cfg.consumerID }

// consumeGroup is Consume for a group member.
func (c *brokerConsumer) consumeGroup(ctx context.Context, h Handler) error {
	gm := &groupMember{h: h, commitTimeout: c.cn.opts.requestTimeout, commitAttempts: 3}
	return c.runDynamic(ctx, h, gm, gm.run, func() {
		if !gm.joined {
			return
		}
		lctx, lcancel := context.WithTimeout(context.Background(), c.cn.opts.requestTimeout)
		defer lcancel()
		if call, lerr := c.cn.roundTrip(lctx, func(dst []byte, op int32) []byte {
			return protocol.AppendLeave(dst, c.cfg.group, c.topic, c.cfg.consumerID, op)
		}); lerr == nil {
			putCall(call)
		}
	})
}

// runDynamic runs a consumer whose partitions change while it runs (a
// group member, or a clusterConsumer's per-broker consumer): it sets up
// the run, the recovery replay (to h) and the commit loop, lets drive
// start and stop partitions through gm (whose handler is gm.h) until it
// returns, then stops and commits every partition and calls done.
func (c *brokerConsumer) runDynamic(ctx context.Context, h Handler, gm *groupMember,
	drive func(context.Context) error, done func()) error {
	return c.runWith(ctx, h, func(rctx context.Context, rej rejecter, _ *sync.WaitGroup) error {
		gm.c, gm.rej, gm.errCh, gm.running = c, rej, make(chan error, 1), make(map[int32]*runningPart)
		return drive(rctx)
	}, func() {
		gm.releaseAll()
		if done != nil {
			done()
		}
	})
}

type runningPart struct {
	ps     *partState
	cancel context.CancelFunc
	wg     sync.WaitGroup
}

// groupMember runs one Consume of a group member: membership, heartbeats
// and the per-partition goroutines. Only its run goroutine uses it.
type groupMember struct {
	c       *brokerConsumer
	h       Handler
	rej     rejecter
	errCh   chan error
	running map[int32]*runningPart
	joined  bool
	gen     int64
	// commitTimeout and commitAttempts bound the commit before releasing
	// partitions.
	commitTimeout  time.Duration
	commitAttempts int
	// conflictSince is when joins started to get 409 (our id still
	// registered on an old connection); zero otherwise.
	conflictSince time.Time
	w             *wire // the connection the membership is tied to
}

// run joins, heartbeats and applies views until ctx ends or a partition
// fails for good.
func (g *groupMember) run(ctx context.Context) error {
	c := g.c
	hb := c.cfg.heartbeat
	for {
		var dead <-chan struct{}
		if g.joined {
			dead = g.w.dead
		}
		if !g.joined {
			if err := g.join(ctx); err != nil {
				var fatal *joinRefused
				if errors.As(err, &fatal) {
					return err
				}
				if ctx.Err() == nil {
					c.cfg.logger.Warn("metaq: join group failed; retrying", "group", c.cfg.group, "topic", c.topic, "err", err)
				}
			} else {
				continue
			}
		}
		t := time.NewTimer(hb)
		select {
		case <-ctx.Done():
			t.Stop()
			return nil
		case err := <-g.errCh:
			t.Stop()
			return err
		case <-dead:
			// The connection broke: the broker dropped the membership.
			t.Stop()
			if c.onLost != nil {
				c.onLost()
			}
			g.releaseAll()
			g.joined = false
			continue
		case <-t.C:
		}
		if !g.joined {
			continue
		}
		for again := true; again && ctx.Err() == nil; {
			again = g.heartbeat(ctx)
		}
	}
}

// joinConflictGrace is how long a join keeps retrying 409 (this member id
// still registered on another connection) before giving up: longer than
// the broker's default group session timeout.
const joinConflictGrace = 10 * time.Second

// joinRefused is a join the broker refused for good (400 or 500).
type joinRefused struct{ err error }

func (e *joinRefused) Error() string { return e.err.Error() }
func (e *joinRefused) Unwrap() error { return e.err }

func (g *groupMember) join(ctx context.Context) error {
	c := g.c
	call, err := c.cn.roundTrip(ctx, func(dst []byte, op int32) []byte {
		return protocol.AppendJoin(dst, c.cfg.group, c.topic, c.cfg.consumerID, c.cfg.strategy, op)
	})
	if err != nil {
		return err
	}
	defer putCall(call)
	if call.code != protocol.StatusOK {
		err := fmt.Errorf("metaq: join group %s for %s: %w", c.cfg.group, c.topic, resultError(call.code, call.body))
		switch call.code {
		case protocol.StatusBadRequest, protocol.StatusInternalError:
			return &joinRefused{err}
		case protocol.StatusConflict:
			// Our previous connection's membership is usually about to go
			// (connection close or session timeout); a second live
			// consumer with our id is not, and must not run.
			now := time.Now()
			if g.conflictSince.IsZero() {
				g.conflictSince = now
			} else if now.Sub(g.conflictSince) > joinConflictGrace {
				return &joinRefused{err}
			}
		}
		return err
	}
	g.conflictSince = time.Time{}
	gen, view, err := protocol.ParseGroupView(call.body)
	if err != nil {
		return err
	}
	g.w = c.cn.live()
	if g.w == nil {
		return errors.New("metaq: connection lost right after join")
	}
	g.joined, g.gen = true, gen
	g.apply(ctx, view)
	return nil
}

// heartbeat sends one heartbeat and applies the view it gets; true means
// the view revoked partitions and the acknowledgement should go right away.
func (g *groupMember) heartbeat(ctx context.Context) bool {
	c := g.c
	call, err := c.cn.roundTrip(ctx, func(dst []byte, op int32) []byte {
		return protocol.AppendHeartbeat(dst, c.cfg.group, c.topic, c.cfg.consumerID, g.gen, op)
	})
	if err != nil {
		if ctx.Err() == nil {
			c.cfg.logger.Warn("metaq: group heartbeat failed", "group", c.cfg.group, "err", err)
		}
		return false
	}
	defer putCall(call)
	switch call.code {
	case protocol.StatusOK:
	case protocol.StatusNotFound:
		// The broker dropped us (timeout): stop everything, join again.
		if c.onLost != nil {
			c.onLost()
		}
		g.releaseAll()
		g.joined = false
		return false
	default:
		c.cfg.logger.Warn("metaq: group heartbeat refused", "group", c.cfg.group,
			"err", resultError(call.code, call.body))
		return false
	}
	gen, view, err := protocol.ParseGroupView(call.body)
	if err != nil {
		c.cfg.logger.Warn("metaq: bad heartbeat reply", "err", err)
		return false
	}
	g.gen = gen
	return g.apply(ctx, view) > 0
}

// apply makes the running partitions equal to view: it stops and commits
// the ones that left it, then starts the new ones from their committed
// offsets. It returns how many partitions it stopped.
func (g *groupMember) apply(ctx context.Context, view []int32) int {
	var gone []int32
	for p := range g.running {
		if _, ok := slices.BinarySearch(view, p); !ok {
			gone = append(gone, p)
		}
	}
	g.stop(gone)
	var added []int32
	for _, p := range view {
		if g.running[p] == nil {
			added = append(added, p)
		}
	}
	if len(added) > 0 && ctx.Err() == nil {
		g.start(ctx, added)
	}
	return len(gone)
}

func (g *groupMember) releaseAll() {
	g.stop(slices.Collect(maps.Keys(g.running)))
}

// stop ends the goroutines of ps, commits their positions and forgets them.
func (g *groupMember) stop(ps []int32) {
	if len(ps) == 0 {
		return
	}
	c := g.c
	for _, p := range ps {
		g.running[p].cancel()
	}
	for _, p := range ps {
		g.running[p].wg.Wait()
		if c.onOwn != nil {
			c.onOwn(p, false)
		}
	}
	var err error
	for attempt := 0; attempt < g.commitAttempts; attempt++ {
		cctx, cancel := context.WithTimeout(context.Background(), g.commitTimeout)
		err = c.commit(cctx)
		cancel()
		if err == nil {
			break
		}
	}
	if err != nil {
		c.cfg.logger.Error("metaq: commit before releasing partitions failed; their new owner redelivers",
			"group", c.cfg.group, "topic", c.topic, "partitions", ps, "err", err)
	}
	c.mu.Lock()
	for _, p := range ps {
		delete(g.running, p)
		delete(c.byID, p)
	}
	// A new slice: commit iterates the old one without c.mu.
	c.parts = slices.DeleteFunc(slices.Clone(c.parts), func(x *partState) bool { return slices.Contains(ps, x.p) })
	c.mu.Unlock()
}

// start begins fetching ps from their committed offsets; partitions whose
// offset cannot be loaded now are tried again at the next view.
func (g *groupMember) start(ctx context.Context, ps []int32) {
	c := g.c
	stored, err := c.loadStored(ctx, ps)
	if err != nil {
		c.cfg.logger.Warn("metaq: load offsets of assigned partitions failed; retrying", "err", err)
		return
	}
	for _, p := range ps {
		off, unaligned, err := c.startOffset(ctx, p, stored)
		if err != nil {
			c.cfg.logger.Warn("metaq: start offset failed; retrying", "partition", p, "err", err)
			continue
		}
		st := c.newPartState(p, off, unaligned)
		c.mu.Lock()
		c.parts = append(c.parts, st)
		c.byID[p] = st
		c.mu.Unlock()
		pctx, cancel := context.WithCancel(ctx)
		rp := &runningPart{ps: st, cancel: cancel}
		g.running[p] = rp
		if c.onOwn != nil {
			c.onOwn(p, true)
		}
		c.runPartition(pctx, st, g.h, g.rej, g.errCh, &rp.wg)
	}
}
