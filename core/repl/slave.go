package repl

import (
	"bufio"
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"log/slog"
	"math"
	"net"
	"sort"
	"strconv"
	"sync"
	"sync/atomic"
	"time"

	"github.com/metaq-go/metaq/conf"
	"github.com/metaq-go/metaq/core/store"
	"github.com/metaq-go/metaq/internal/logx"
	"github.com/metaq-go/metaq/sdk/message"
	"github.com/metaq-go/metaq/sdk/protocol"
)

// Async replication, the slave side (MetaQ's metaslave, reference §9).
//
// A broker started with slave_id N >= 0 is slave N of master broker_id. It
// registers ids/<id>/slave<N> and its topics as <id>-s<N> (core/registry),
// watches ids/<id>/master, and pulls every partition of every topic the
// master lists in topics-sub over one connection: each round pipelines, for
// every partition, an `offset ... MaxInt64` (the master's end, for the lag)
// and a `get` from the slave's own end, appends what came back with the
// master's msgId, flag and payload (so slave offsets equal master offsets),
// waits until those appends are durable (one journal round covers them
// all), and starts the next round at once if anything came, else after an
// idle wait that doubles from 1 ms up to slave_max_delay/4. No owners, no
// balancing, nothing is committed: the local end is the position.
//
// An empty local partition starts from the master's min (Log.Rebase
// moves it there when the master has deleted its head). A partition whose
// master min has passed the slave's end (the slave was away longer than
// the master's retention) cannot be filled: it is logged and left alone.
// An append that does not land at the master's offset (which would mean
// the copies diverged) stops that partition, loudly.

const (
	// slaveFetchSize is MetaQ's slave fetch size; a partition whose next
	// record is larger gets doubled fetches up to slaveFetchMax.
	slaveFetchSize = 1 << 20
	slaveFetchMax  = 64 << 20
	// slaveTopicsEvery is how often the master's topic list is read again.
	slaveTopicsEvery = 2 * time.Second
	// DialTimeout bounds a connect to the master; slaveIOTimeout one
	// round's replies.
	DialTimeout    = 2 * time.Second
	slaveIOTimeout = 10 * time.Second
	// slaveRetry is the wait before reconnecting after a failed pull.
	slaveRetry = 200 * time.Millisecond
)

// Slave is a slave broker's replication state.
type Slave struct {
	host     SlaveHost
	fo       SlaveFailover
	ext      SlaveExtension
	cfg      Config
	logf     func(format string, args ...any)
	errorf   func(format string, args ...any)
	id       int
	group    string
	maxIdle  time.Duration
	parts    map[string][]*replPart // by topic; owned by run
	warned   map[string]string      // topic -> last logged problem
	lastTops time.Time

	// logs are the per-partition append states shared by the puller and
	// the sync handler (core/repl/slavesync.go), by log.
	logsMu sync.Mutex
	logs   map[*store.Log]*SlaveLog

	master    atomic.Pointer[string] // address being pulled from, nil when none
	connected atomic.Bool
	lagBytes  atomic.Int64
	lagMs     atomic.Int64
	records   atomic.Int64 // records copied since start
	syncs     atomic.Int64 // syncs appended (core/repl/slavesync.go)
	syncDups  atomic.Int64 // syncs the puller had copied already
	refetched atomic.Int64 // bytes the puller fetched that syncs had stored already
	rounds    atomic.Int64 // pull rounds made
}

// replPart is one partition being copied.
type replPart struct {
	topic string
	p     int32
	l     *store.Log
	next  int64 // local end: the master offset of the next record to copy
	fetch int32
	// stalled is why the partition is not copied any more ("" when it is).
	stalled string
	// seen are master ends this slave has not copied up to yet, with when
	// they were first seen (oldest first, at most maxSeen): lag_ms is the
	// age of the oldest.
	seen []seenEnd
	lag  int64
}

// SlaveHost is what the slave needs of the broker: Host, and opening or
// creating a topic the master has.
type SlaveHost interface {
	Host
	// OpenTopic opens topic name (creating it if the broker may) and
	// returns its partition count.
	OpenTopic(name string) (int, error)
}

// SlaveFailover is failover's side of the slave's loop (failover = true).
type SlaveFailover interface {
	// Elect runs an election when no master is registered; true if this
	// member now holds the epoch (the loop ends).
	Elect() bool
	// LearnEpoch reads the epoch (a master is registered).
	LearnEpoch()
	// Rejoin checks this copy against the holder at addr before pulling.
	Rejoin(addr string, tlsMaster bool) error
}

// SlaveExtension is what another component registers on the slave:
// transactions end the branches held prepared whose batches the puller
// copies.
type SlaveExtension interface {
	// Pulled is called with records the puller is about to append,
	// under their partition's SlaveLog lock.
	Pulled(entries []store.Entry)
}

// NewSlave returns a slave's replication state: slave id of broker
// cfg.BrokerID (a failover master rejoining as a slave passes
// failover_slave_id).
func NewSlave(cfg Config, id int, host SlaveHost, log *slog.Logger) *Slave {
	return &Slave{
		host:    host,
		cfg:     cfg,
		logf:    logx.Printf(log, slog.LevelInfo),
		errorf:  logx.Printf(log, slog.LevelError),
		id:      id,
		group:   cfg.SlaveGroup,
		maxIdle: max(cfg.SlaveMaxDelay/4, time.Millisecond),
		parts:   map[string][]*replPart{},
		warned:  map[string]string{},
		logs:    map[*store.Log]*SlaveLog{},
	}
}

// SetFailover sets failover's side of the loop.
func (s *Slave) SetFailover(f SlaveFailover) { s.fo = f }

// Register sets the extension (one; transactions).
func (s *Slave) Register(e SlaveExtension) { s.ext = e }

// ID is this slave's id.
func (s *Slave) ID() int { return s.id }

// SlaveLog serialises the appends of one partition of a slave: the
// puller's and those of sync from a sync master. lastID is the id of the
// last record appended (queued) to it; both skip records at or below it,
// which the other has appended already (ids rise with offsets).
type SlaveLog struct {
	mu     sync.Mutex
	lastID int64
	// end is where the next append lands (the master's offset of the
	// next record): the puller skips what lies below it, which a sync or
	// a txsync appended already, and a txsync's batches must start at it
	// (core/tx, AppendAt). Transaction batches keep the ids their puts were
	// answered with, below later puts' ids: lastID is the highest id
	// appended, and only single syncs of puts (whose ids rise with their
	// offsets) are told apart by it. A delayed message's delivery keeps
	// the id of its acceptance, below lastID too: pulledOld holds the ids
	// of the deliveries the puller appended (at most maxPulledOld, pulledQ
	// in the order noted, oldest evicted first), so that such a sync is a
	// dup only when the puller copied it.
	end       int64
	pulledOld map[int64]struct{}
	pulledQ   []int64
	// log is the partition's log. stale says a sync's append failed once
	// queued (ENOSPC: the store then puts the appends queued behind it
	// where it would have gone): end and lastID counted it, so Lock sets
	// them to the log's own once its appends in flight are done; until
	// then the puller took the master's copy of that message for one the
	// sync appended and skipped it, and the copies diverged. sw is the
	// waiter of the syncs of the connection that synced last (under mu).
	log   *store.Log
	stale atomic.Bool
	sw    *syncWaiter

	// dmu (after mu, and alone in store completions) guards pulling, the
	// puller's appends queued and not completed yet, and dups, the syncs
	// whose message one of those appends holds: their replies wait until
	// it is durable (pulled), since the master acknowledges the put on
	// the strength of them. dupErr is a failure among those appends.
	dmu     sync.Mutex
	pulling int
	dups    []PullWaiter
	dupErr  error
}

// PullWaiter is a sync whose message one of the puller's appends in
// flight holds: it is answered once that append is durable.
type PullWaiter interface{ PulledDone(err error) }

// BeginPull counts one of the puller's appends in flight; Pulled ends
// it.
func (sl *SlaveLog) BeginPull() {
	sl.dmu.Lock()
	sl.pulling++
	sl.dmu.Unlock()
}

// Pulled is the end of one of the puller's appends (err its failure):
// once none is in flight, the syncs waiting for them are answered, 200 if
// all of them succeeded.
func (sl *SlaveLog) Pulled(err error) {
	sl.dmu.Lock()
	sl.pulling--
	if err != nil && len(sl.dups) > 0 {
		sl.dupErr = err
	}
	var dups []PullWaiter
	if sl.pulling == 0 {
		dups, sl.dups = sl.dups, nil
		err, sl.dupErr = sl.dupErr, nil
	}
	sl.dmu.Unlock()
	for _, d := range dups {
		d.PulledDone(err)
	}
}

// LogState returns l's SlaveLog.
func (s *Slave) LogState(l *store.Log) *SlaveLog {
	s.logsMu.Lock()
	defer s.logsMu.Unlock()
	sl := s.logs[l]
	if sl == nil {
		sl = &SlaveLog{lastID: l.LastID(), end: l.MaxOffset(), log: l}
		s.logs[l] = sl
	}
	return sl
}

// run pulls from whichever master is registered until the broker closes.
// It reads ids/<id>/master again only when its watch fires (the master
// changed or went, or the session had an event); meanwhile a failed pull
// is retried against the same address with a backoff.
func (s *Slave) Run() {
	h := s.host
	reg := h.Registry()
	brokerID := s.cfg.BrokerID
	waiting := false
	lastErr := ""
	for !h.Closed() {
		addr, tlsMaster, ok, watch, err := reg.Master()
		if err != nil {
			if msg := err.Error(); msg != lastErr {
				s.logf("slave %d: reading ids/%d/master: %v; retrying", s.id, brokerID, err)
				lastErr = msg
			}
			s.sleep(slaveRetry)
			continue
		}
		lastErr = ""
		if !ok && s.fo != nil && s.fo.Elect() { // failover: promoted
			return
		}
		if !ok {
			if !waiting {
				s.logf("slave %d of broker %d: no master registered; waiting for ids/%d/master", s.id, brokerID, brokerID)
				waiting = true
			}
			s.master.Store(nil)
			poll := 5 * time.Second // a watch lost with a session
			if s.fo != nil {
				poll = 200 * time.Millisecond // the epoch node may name this slave in sync meanwhile
			}
			select {
			case <-watch:
			case <-h.Done():
				return
			case <-time.After(poll):
			}
			continue
		}
		waiting = false
		if s.fo != nil {
			s.fo.LearnEpoch()                                    // failover: syncs of older epochs are refused
			if err := s.fo.Rejoin(addr, tlsMaster); err != nil { // rejoin: cut a divergent tail first
				if msg := "rejoin: " + err.Error(); msg != lastErr {
					s.logf("slave %d: checking this copy against the holder at %s: %v; retrying", s.id, addr, err)
					lastErr = msg
				}
				s.sleep(slaveRetry)
				continue
			}
		}
		s.master.Store(&addr)
		fired := make(chan struct{})
		go func() {
			select {
			case <-watch:
			case <-h.Done():
			}
			close(fired)
		}()
		s.pullUntil(addr, tlsMaster, fired)
	}
}

// pullUntil pulls from addr, retrying with a backoff, until fired is
// closed (the master node changed) or the broker closes.
func (s *Slave) pullUntil(addr string, tlsMaster bool, fired <-chan struct{}) {
	wait := slaveRetry
	last := ""
	for {
		ctx, cancel := context.WithCancel(context.Background())
		go func() {
			select {
			case <-fired:
			case <-ctx.Done():
			}
			cancel()
		}()
		began := time.Now()
		err := s.pull(ctx, addr, tlsMaster)
		stopped := ctx.Err() != nil
		cancel()
		s.connected.Store(false)
		if stopped || s.host.Closed() {
			return
		}
		if err != nil {
			if msg := err.Error(); msg != last {
				s.logf("slave %d: pulling from master %s: %v; retrying", s.id, addr, err)
				last = msg
			}
		}
		if time.Since(began) > 5*time.Second {
			wait = slaveRetry // it was pulling: a new failure
		}
		select {
		case <-fired:
			return
		case <-time.After(wait):
		}
		wait = min(2*wait, 2*time.Second)
	}
}

// sleep waits d or until the broker closes.
func (s *Slave) sleep(d time.Duration) {
	select {
	case <-time.After(d):
	case <-s.host.Done():
	}
}

// pull copies from the master at addr (TLS-only when tlsMaster) until
// ctx is done or the connection fails.
func (s *Slave) pull(ctx context.Context, addr string, tlsMaster bool) error {
	nc, err := s.host.Dial(ctx, addr, tlsMaster, DialTimeout) // dial.go
	if err != nil {
		return err
	}
	defer nc.Close()
	stop := context.AfterFunc(ctx, func() { nc.Close() })
	defer stop()
	s.logf("slave %d of broker %d: pulling from master %s", s.id, s.cfg.BrokerID, addr)
	s.connected.Store(true)
	w := bufio.NewWriterSize(nc, 64<<10)
	dec := protocol.NewDecoder(nc, protocol.Limits{MaxBody: slaveFetchMax + 1<<20})
	defer dec.Release()
	rc := &RoundConn{nc: nc, w: w, dec: dec}
	s.lastTops = time.Time{}
	idle := time.Duration(0)
	for ctx.Err() == nil {
		if time.Since(s.lastTops) >= slaveTopicsEvery {
			s.refreshTopics(rc)
			s.lastTops = time.Now()
		}
		got, err := s.round(rc)
		if err != nil {
			if ctx.Err() != nil {
				return nil
			}
			return err
		}
		s.rounds.Add(1)
		if got {
			idle = 0
			continue
		}
		idle = min(max(2*idle, time.Millisecond), s.maxIdle)
		select {
		case <-time.After(idle):
		case <-ctx.Done():
		}
	}
	return nil
}

// RoundConn is the connection to the master.
type RoundConn struct {
	// timeout bounds a round's replies; 0 means slaveIOTimeout.
	timeout time.Duration
	nc      net.Conn
	w       *bufio.Writer
	dec     *protocol.Decoder
	buf     []byte
	req     protocol.Request
}

// send queues one request.
func (rc *RoundConn) send(b []byte) {
	rc.w.Write(b)
}

// flush sends what is queued and sets the deadline of the replies.
func (rc *RoundConn) flush() error {
	d := rc.timeout
	if d <= 0 {
		d = slaveIOTimeout
	}
	rc.nc.SetDeadline(time.Now().Add(d))
	return rc.w.Flush()
}

// next decodes the next reply; its body is valid until the next call.
func (rc *RoundConn) next() (*protocol.Request, error) {
	rc.req = protocol.Request{}
	if err := rc.dec.Decode(&rc.req); err != nil {
		return nil, err
	}
	if rc.req.Op != protocol.OpResult && rc.req.Op != protocol.OpValue {
		return nil, fmt.Errorf("unexpected %s frame from the master", rc.req.Op)
	}
	return &rc.req, nil
}

// roundTrip sends one request and returns its reply.
func (rc *RoundConn) roundTrip(b []byte) (*protocol.Request, error) {
	rc.send(b)
	if err := rc.flush(); err != nil {
		return nil, err
	}
	return rc.next()
}

// refreshTopics reads the master's topics and opens (or auto-creates)
// each locally; a topic the slave cannot hold is logged once.
func (s *Slave) refreshTopics(rc *RoundConn) {
	tops, err := s.host.Registry().MasterTopics()
	if err != nil {
		s.logf("slave %d: reading the master's topics: %v", s.id, err)
		return
	}
	names := make([]string, 0, len(tops))
	for n := range tops {
		names = append(names, n)
	}
	sort.Strings(names)
	// The timer topic (delayed messages, docs/delayed.md) is not
	// registered: it is copied last, once the master has one
	// (masterHasTimer), with this broker's timer_partitions (the master's
	// must be the same); a failure to start it is logged, not an end of
	// the round.
	if _, ok := tops[conf.TimerTopic]; !ok {
		names = append(names, conf.TimerTopic)
	}
	for _, name := range names {
		n := tops[name]
		if ps, ok := s.parts[name]; ok && len(ps) == n {
			continue
		}
		if name == conf.TimerTopic {
			if _, ok := s.parts[name]; ok || !s.masterHasTimer(rc) {
				continue
			}
		}
		have, err := s.host.OpenTopic(name)
		if err != nil {
			s.warn(name, fmt.Sprintf("not replicated: %v (configure it in the slave's server.toml, or set auto_create_topics)", err))
			continue
		}
		if name == conf.TimerTopic {
			// The master's timer_partitions must be this broker's: it
			// answers for partition have-1 (masterHasTimer asked 0) and
			// refuses partition have.
			if have < 1 || !s.masterHasTimerPart(rc, have-1) || s.masterHasTimerPart(rc, have) {
				s.warn(name, fmt.Sprintf("not replicated: the master's timer_partitions differ from this slave's %d (give the slave the same timer_partitions)", have))
				continue
			}
			n = have
		}
		if have != n {
			s.warn(name, fmt.Sprintf("not replicated: the master has %d partitions, this slave %d (give the slave the same num_partitions)", n, have))
			continue
		}
		ps := make([]*replPart, n)
		for p := range ps {
			l, err := s.host.Log(name, p)
			if err != nil {
				s.warn(name, fmt.Sprintf("not replicated: %v", err))
				return
			}
			rp := &replPart{topic: name, p: int32(p), l: l, fetch: slaveFetchSize}
			if err := s.startPart(rc, rp); err != nil {
				if name == conf.TimerTopic && !errors.Is(err, net.ErrClosed) {
					s.warn(name, fmt.Sprintf("not replicated: partition %d: %v", p, err))
					return
				}
				s.logf("slave %d: %s-%d: %v", s.id, name, p, err)
				return // the connection is probably gone; the next round says
			}
			ps[p] = rp
		}
		s.parts[name] = ps
		delete(s.warned, name)
		s.logf("slave %d: replicating topic %s (%d partitions)", s.id, name, n)
	}
}

// masterHasTimer reports whether the master holds a timer log (it has
// taken delayed messages): its offset of the timer topic's partition 0
// is answered.
func (s *Slave) masterHasTimer(rc *RoundConn) bool {
	return s.masterHasTimerPart(rc, 0)
}

// masterHasTimerPart reports whether the master answers an offset
// request for partition p of its timer topic.
func (s *Slave) masterHasTimerPart(rc *RoundConn, p int) bool {
	r, err := rc.roundTrip(protocol.AppendOffset(rc.buf[:0], conf.TimerTopic, s.group, int32(p), 0, 0))
	return err == nil && r.Code == protocol.StatusOK
}

func (s *Slave) warn(topic, msg string) {
	if s.warned[topic] == msg {
		return
	}
	s.warned[topic] = msg
	s.logf("slave %d: topic %s %s", s.id, topic, msg)
}

// startPart sets where copying partition rp starts: its local end, or for
// an empty partition the master's min offset.
func (s *Slave) startPart(rc *RoundConn, rp *replPart) error {
	l := rp.l
	if l.MaxOffset() == l.MinOffset() && l.MessageCount() == 0 {
		r, err := rc.roundTrip(protocol.AppendOffset(rc.buf[:0], rp.topic, s.group, rp.p, 0, 0))
		if err != nil {
			return err
		}
		if r.Code != protocol.StatusOK {
			return fmt.Errorf("master's min offset: %d %s", r.Code, protocol.Printable(r.Body))
		}
		min, ok := protocol.ParseInt64(r.Body)
		if !ok || min < 0 {
			return fmt.Errorf("master's min offset: bad reply %q", protocol.Printable(r.Body))
		}
		if min != l.MinOffset() {
			if err := l.Rebase(min); err != nil {
				return err
			}
			s.logf("slave %d: %s-%d is empty; starting at the master's min offset %d", s.id, rp.topic, rp.p, min)
		}
	}
	rp.next = l.MaxOffset()
	return nil
}

// forgetFailed: a puller append to rp failed (ENOSPC, a failed log,
// closing) and left nothing behind, so the slave's state of its log goes
// back to what the log holds: the records are copied again, and a sync of
// one of them is not taken for one the puller copied; noted are the
// deliveries among them (PulledAppended noted them as copied), whose syncs
// are then appended, not answered as copied.
func (s *Slave) forgetFailed(rp *replPart, noted []int64) {
	sl := s.LogState(rp.l)
	sl.mu.Lock()
	sl.lastID = rp.l.LastID()
	sl.end = rp.l.MaxOffset()
	for _, id := range noted {
		delete(sl.pulledOld, id) // pulledQ keeps it: a no-op when evicted
	}
	sl.mu.Unlock()
}

// abandonRound waits for a round's appends when the round ends early (the
// connection failed, a bad reply) and forgets the failed ones as the
// round's end would: else the slave's state would count their records
// as present.
func (s *Slave) abandonRound(live []*replPart, wg *roundWaiter) {
	wg.wait()
	for i, rp := range live {
		if res := &wg.res[i]; res.n > 0 && res.err != nil {
			s.forgetFailed(rp, res.noted)
		}
	}
}

// round asks every partition's end and next records of the master,
// appends what came and waits for the appends. got reports whether any
// record was copied.
func (s *Slave) round(rc *RoundConn) (got bool, err error) {
	var live []*replPart
	tops := make([]string, 0, len(s.parts))
	for t := range s.parts {
		tops = append(tops, t)
	}
	sort.Strings(tops)
	for _, t := range tops {
		for _, rp := range s.parts[t] {
			if rp.stalled == "" {
				live = append(live, rp)
			}
		}
	}
	if len(live) == 0 {
		return false, nil
	}
	for i, rp := range live {
		if end := rp.l.MaxOffset(); end > rp.next {
			// A sync master's syncs (core/repl/slavesync.go) appended these, at
			// the master's offsets: do not fetch them again.
			rp.next = end
		}
		rc.buf = protocol.AppendOffset(rc.buf[:0], rp.topic, s.group, rp.p, math.MaxInt64, int32(2*i))
		rc.send(rc.buf)
		rc.buf = protocol.AppendGet(rc.buf[:0], rp.topic, s.group, rp.p, rp.next, rp.fetch, int32(2*i+1))
		rc.send(rc.buf)
	}
	if err := rc.flush(); err != nil {
		return false, err
	}
	ends := make([]int64, len(live))
	for i := range ends {
		ends[i] = -1
	}
	wg := &roundWaiter{res: make([]roundResult, len(live))}
	var entries []store.Entry
	for range 2 * len(live) {
		r, err := rc.next()
		if err != nil {
			s.abandonRound(live, wg)
			return false, err
		}
		i := int(r.Opaque / 2)
		if r.Opaque < 0 || i >= len(live) {
			s.abandonRound(live, wg)
			return false, fmt.Errorf("reply with unknown opaque %d", r.Opaque)
		}
		rp := live[i]
		if r.Opaque%2 == 0 { // offset: the master's end
			if v, ok := protocol.ParseInt64(r.Body); ok && r.Code == protocol.StatusOK {
				ends[i] = v
			}
			continue
		}
		entries, err = s.apply(rp, r, entries[:0], wg, i)
		if err != nil {
			s.abandonRound(live, wg)
			return false, err
		}
	}
	wg.wait()
	now := time.Now()
	var lagB, lagMs int64
	for i, rp := range live {
		res := &wg.res[i]
		if res.n == 0 && res.bytes > 0 {
			rp.next += res.bytes // records a sync had appended already
			s.refetched.Add(res.bytes)
		}
		if res.n > 0 {
			if res.err != nil { // ENOSPC, a failed log, closing: retried next round
				s.forgetFailed(rp, res.noted)
				key := rp.topic + "#" + strconv.Itoa(int(rp.p))
				if msg := "append: " + res.err.Error(); s.warned[key] != msg {
					s.warned[key] = msg
					s.logf("slave %d: %s-%d: %s; retrying", s.id, rp.topic, rp.p, msg)
				}
				continue
			}
			if want := rp.next + res.skipped; res.off != want {
				rp.stalled = fmt.Sprintf("records landed at offset %d, the master's is %d", res.off, want)
				s.errorf("slave %d: %s-%d: ERROR: copying stopped: %s (the copies diverged)", s.id, rp.topic, rp.p, rp.stalled)
				continue
			}
			rp.next += res.bytes
			s.refetched.Add(res.skipped)
			s.records.Add(int64(res.n))
			got = true
		}
		rp.lag = 0
		if ends[i] > rp.next {
			rp.lag = ends[i] - rp.next
		}
		if lag := rp.noteEnd(ends[i], now); lag > 0 {
			lagMs = max(lagMs, lag.Milliseconds())
		}
		lagB += rp.lag
	}
	s.lagBytes.Store(lagB)
	s.lagMs.Store(lagMs)
	return got, nil
}

// apply handles partition rp's get reply r: it appends the whole records
// of a value (with entries as scratch), or handles the result code.
func (s *Slave) apply(rp *replPart, r *protocol.Request, entries []store.Entry, wg *roundWaiter, i int) ([]store.Entry, error) {
	switch {
	case r.Op == protocol.OpValue:
	case r.Code == protocol.StatusNotFound: // no new data
		return entries, nil
	case r.Code == protocol.StatusMoved:
		to, ok := protocol.ParseInt64(r.Body)
		switch {
		case !ok:
			return entries, fmt.Errorf("%s-%d: bad 301 body %q", rp.topic, rp.p, protocol.Printable(r.Body))
		case rp.l.MessageCount() == 0 && rp.l.MaxOffset() == rp.l.MinOffset() && to > rp.next:
			if err := rp.l.Rebase(to); err != nil {
				rp.stalled = err.Error()
			} else {
				sl := s.LogState(rp.l)
				sl.mu.Lock()
				sl.end = to
				sl.mu.Unlock()
				rp.next = to
				s.logf("slave %d: %s-%d: the master's min moved to %d; empty here, starting there", s.id, rp.topic, rp.p, to)
			}
		default:
			rp.stalled = fmt.Sprintf("the master's min offset %d is past this slave's end %d (the master deleted records the slave never copied); move the partition directory away to copy it afresh", to, rp.next)
			s.errorf("slave %d: %s-%d: ERROR: copying stopped: %s", s.id, rp.topic, rp.p, rp.stalled)
		}
		return entries, nil
	default:
		key := rp.topic + "#" + strconv.Itoa(int(rp.p))
		msg := fmt.Sprintf("get from the master: %d %s", r.Code, protocol.Printable(r.Body))
		if s.warned[key] != msg {
			s.warned[key] = msg
			s.logf("slave %d: %s-%d: %s", s.id, rp.topic, rp.p, msg)
		}
		return entries, nil
	}
	body := r.Body
	used, skipped := 0, 0
	sl := s.LogState(rp.l)
	sl.Lock()
	defer sl.mu.Unlock()
	for used < len(body) {
		rec, n, err := message.ParseRecord(body[used:], s.cfg.MaxMessageSize)
		if errors.Is(err, message.ErrShortRecord) {
			break
		}
		if err != nil {
			// A damaged record at the master, or one over this slave's
			// max_message_size: do not copy it; the next round asks again
			// (the master may repair it, or say corrupt). Logged once.
			msg := fmt.Sprintf("record at %d from the master: %v", rp.next+int64(used), err)
			if l := int32(binary.BigEndian.Uint32(body[used:])); s.cfg.MaxMessageSize > 0 && int64(l) > int64(s.cfg.MaxMessageSize) {
				msg += fmt.Sprintf(" (over this slave's max_message_size %d: give the slave at least the master's)", s.cfg.MaxMessageSize)
			}
			if key := rp.topic + "#" + strconv.Itoa(int(rp.p)); s.warned[key] != msg {
				s.warned[key] = msg
				s.logf("slave %d: %s-%d: %s", s.id, rp.topic, rp.p, msg)
			}
			break
		}
		if rec.ID == 0 {
			return entries, fmt.Errorf("%s-%d: record at %d from the master has message id 0", rp.topic, rp.p, rp.next+int64(used))
		}
		if rp.next+int64(used) < sl.end {
			if len(entries) > 0 {
				return entries, fmt.Errorf("%s-%d: record at %d from the master is below this slave's end %d", rp.topic, rp.p, rp.next+int64(used), sl.end)
			}
			skipped += n // appended already, by a sync or txsync from the master
		} else {
			entries = append(entries, store.Entry{ID: rec.ID, Flag: rec.Flag, CRC: rec.CRC, Data: rec.Data})
		}
		used += n
	}
	res := &wg.res[i]
	if len(entries) == 0 {
		if used == 0 && len(body) >= int(rp.fetch) && rp.fetch < slaveFetchMax {
			rp.fetch *= 2 // a record larger than the fetch
		}
		res.bytes = int64(used) // all there already
		return entries, nil
	}
	res.n, res.bytes, res.skipped = len(entries), int64(used), int64(skipped)
	if s.ext != nil {
		s.ext.Pulled(entries) // transactions: branches held prepared end
	}
	wg.add()
	res.sl = sl
	sl.BeginPull()
	if err := rp.l.Append(entries, wg, uint64(i)); err != nil {
		sl.Pulled(err)
		wg.done()
		res.err = err
	} else {
		res.noted = sl.pulledAppended(entries, res.noted[:0])
	}
	clear(entries) // Append copied the data
	return entries, nil
}

// roundResult is one partition's append in a round.
type roundResult struct {
	n       int
	bytes   int64
	skipped int64 // leading bytes the slave had already
	off     int64
	err     error
	sl      *SlaveLog // the partition's state, told when the append ends
	noted   []int64   // the deliveries appended, noted as copied (forgetFailed)
}

// roundWaiter collects a round's appends (a store.Waiter).
type roundWaiter struct {
	wg  sync.WaitGroup
	res []roundResult
}

func (w *roundWaiter) add()  { w.wg.Add(1) }
func (w *roundWaiter) done() { w.wg.Done() }
func (w *roundWaiter) wait() { w.wg.Wait() }

func (w *roundWaiter) AppendDone(token uint64, _ int64, firstOffset int64, err error) {
	r := &w.res[token]
	r.off, r.err = firstOffset, err
	if r.sl != nil {
		r.sl.Pulled(err)
	}
	w.wg.Done()
}

// seenEnd is a master end observed at a time.
type seenEnd struct {
	end int64
	at  time.Time
}

// maxSeen bounds replPart.seen.
const maxSeen = 64

// noteEnd records the master's end (-1: unknown) seen at now, drops the
// ends the slave has copied up to, and returns how long ago the master
// first had data the slave still lacks (0 if none).
func (rp *replPart) noteEnd(end int64, now time.Time) time.Duration {
	if n := len(rp.seen); end > rp.next && (n == 0 || end > rp.seen[n-1].end) {
		if n == maxSeen {
			rp.seen[n-1] = seenEnd{end, rp.seen[n-1].at} // keep the oldest times
		} else {
			rp.seen = append(rp.seen, seenEnd{end, now})
		}
	}
	k := 0
	for k < len(rp.seen) && rp.seen[k].end <= rp.next {
		k++
	}
	rp.seen = append(rp.seen[:0], rp.seen[k:]...)
	if len(rp.seen) == 0 {
		return 0
	}
	return now.Sub(rp.seen[0].at)
}

// SlaveStatus is a slave's replication state, for stats and metrics.
type SlaveStatus struct {
	ID int
	// Master is the address pulled from ("" when none).
	Master    string
	Connected bool
	// LagBytes and LagMs as of the last pull round.
	LagBytes, LagMs int64
	// Copied messages pulled, Syncs stored from a sync master,
	// SyncDups syncs the puller had copied already, Refetched bytes
	// the puller fetched that syncs had stored already.
	Copied, Syncs, SyncDups, Refetched int64
}

// Status returns the slave's state now.
func (s *Slave) Status() SlaveStatus {
	st := SlaveStatus{ID: s.id, Connected: s.connected.Load(), LagBytes: s.lagBytes.Load(), LagMs: s.lagMs.Load(),
		Copied: s.records.Load(), Syncs: s.syncs.Load(), SyncDups: s.syncDups.Load(), Refetched: s.refetched.Load()}
	if p := s.master.Load(); p != nil {
		st.Master = *p
	}
	return st
}

// entriesSize is the bytes entries take in a partition.
func entriesSize(entries []store.Entry) int64 {
	var n int64
	for i := range entries {
		n += int64(message.HeaderSize + len(entries[i].Data))
	}
	return n
}

// Lock takes sl's lock: it serialises the partition's appends (the
// puller's, syncs', txsyncs').
// If a sync's append failed since (stale), the append state is first set
// to the log's, once no append of it is in flight (every append of the
// slave's to the log is made under this lock).
func (sl *SlaveLog) Lock() {
	sl.mu.Lock()
	if sl.stale.Load() && sl.log != nil {
		if end, err := sl.log.Settle(); err == nil {
			sl.stale.Store(false)
			sl.lastID, sl.end = sl.log.LastID(), end
		}
	}
}

// Unlock releases it.
func (sl *SlaveLog) Unlock() { sl.mu.Unlock() }

// maxPulledOld bounds SlaveLog.pulledOld: past it the oldest ids go
// first (a delivery's sync follows the puller's copy within a round
// trip; what stays longer is a delivery copied while no sync came, at a
// join, which no sync will take).
const maxPulledOld = 4096

// PulledAppended records entries, which the puller appended, in the
// append state (under the lock): the end, the last id, and the ids of
// the delayed messages' deliveries among them, whose syncs are then dups
// (TakePulledOld). Every delivery is noted, not only one below the last
// id as it was: once appended its id is at or below the last id however
// high it was (the puller raises the last id to it), so its sync, still
// in flight, is told apart only by the note; a delivery to a partition
// with no put since the message was accepted, or the first of a copied
// batch, was appended a second time. A transaction's batches, below the
// last id too, come in txsyncs, which skip by offset.
func (sl *SlaveLog) PulledAppended(entries []store.Entry) { sl.pulledAppended(entries, nil) }

// pulledAppended is PulledAppended, returning noted with the ids of the
// deliveries noted appended.
func (sl *SlaveLog) pulledAppended(entries []store.Entry, noted []int64) []int64 {
	for _, e := range entries {
		if isDelivery(e) {
			sl.notePulledOld(e.ID)
			noted = append(noted, e.ID)
		}
		sl.lastID = max(sl.lastID, e.ID)
	}
	sl.end += entriesSize(entries)
	return noted
}

// notePulledOld records id, a delivery the puller appended (under the
// lock), evicting the oldest past maxPulledOld.
func (sl *SlaveLog) notePulledOld(id int64) {
	if sl.pulledOld == nil {
		sl.pulledOld = map[int64]struct{}{}
	}
	if _, ok := sl.pulledOld[id]; ok {
		return
	}
	for len(sl.pulledOld) >= maxPulledOld && len(sl.pulledQ) > 0 {
		old := sl.pulledQ[0]
		sl.pulledQ = sl.pulledQ[1:]
		delete(sl.pulledOld, old) // a no-op for an id taken already
	}
	if len(sl.pulledQ) >= 2*maxPulledOld { // mostly taken ids: compact
		q := make([]int64, 0, len(sl.pulledOld)+1)
		for _, x := range sl.pulledQ {
			if _, ok := sl.pulledOld[x]; ok {
				q = append(q, x)
			}
		}
		sl.pulledQ = q
	}
	sl.pulledOld[id] = struct{}{}
	sl.pulledQ = append(sl.pulledQ, id)
}

// TakePulledOld reports whether the puller appended id, a delivery, and
// forgets it (under the lock).
func (sl *SlaveLog) TakePulledOld(id int64) bool {
	_, ok := sl.pulledOld[id]
	delete(sl.pulledOld, id)
	return ok
}

// LastID is the highest id appended (under the lock).
func (sl *SlaveLog) LastID() int64 { return sl.lastID }

// End is where the next append lands (under the lock).
func (sl *SlaveLog) End() int64 { return sl.end }

// Appended records entries appended at End (under the lock).
func (sl *SlaveLog) Appended(entries []store.Entry) {
	sl.end += entriesSize(entries)
	for _, e := range entries {
		sl.lastID = max(sl.lastID, e.ID)
	}
}

// Reset sets the append state to l's own (under the lock), after l was
// cut or settled.
func (sl *SlaveLog) Reset(lastID, end int64) { sl.lastID, sl.end = lastID, end }

// WaitPulled queues w, a sync whose message the puller appended, if one
// of the puller's appends is still in flight (under the lock): w is told
// once none is. false: none is, answer it now.
func (sl *SlaveLog) WaitPulled(w PullWaiter) bool {
	sl.dmu.Lock()
	defer sl.dmu.Unlock()
	if sl.pulling == 0 {
		return false
	}
	sl.dups = append(sl.dups, w)
	return true
}

// Present reports how many of a batch's entries, starting at the master's
// offset off, this slave has already (the puller may have copied them);
// an error when its end is before off (a gap) or inside a record. The
// caller holds the lock.
func (sl *SlaveLog) Present(off int64, entries []store.Entry) (int, error) {
	have := sl.end - off
	if have < 0 {
		return 0, fmt.Errorf("the slave's end %d is before the batch's offset %d (a gap)", sl.end, off)
	}
	k := 0
	for ; k < len(entries) && have > 0; k++ {
		have -= int64(message.HeaderSize + len(entries[k].Data))
	}
	if have < 0 {
		return 0, fmt.Errorf("the slave's end %d is inside the batch at %d (the copies diverged)", sl.end, off)
	}
	return k, nil
}

// AppendAt appends the entries of a replicated batch (a transaction's,
// shipped by the sync master) that the puller has not copied yet, at the
// master's offset off, under l's SlaveLog lock: false if it had them all.
// (It implements tx.SlaveLogs.)
func (s *Slave) AppendAt(l *store.Log, off int64, entries []store.Entry, w store.Waiter, token uint64) (bool, error) {
	sl := s.LogState(l)
	sl.Lock()
	defer sl.mu.Unlock()
	skip, err := sl.Present(off, entries)
	if err != nil || skip == len(entries) {
		return false, err
	}
	rest := entries[skip:]
	if err := l.Append(rest, &atWaiter{sl: sl, w: w}, token); err != nil {
		return false, err
	}
	sl.Appended(rest)
	s.syncs.Add(int64(len(rest)))
	return true, nil
}

// atWaiter is the store.Waiter of an AppendAt: a failed append (once
// queued) marks the partition's append state stale, as a sync's does
// (syncWaiter), before w is told.
type atWaiter struct {
	sl *SlaveLog
	w  store.Waiter
}

func (a *atWaiter) AppendDone(token uint64, firstID, firstOffset int64, err error) {
	if err != nil {
		a.sl.stale.Store(true)
	}
	if a.w != nil {
		a.w.AppendDone(token, firstID, firstOffset, err)
	}
}

// CountSyncs counts n messages stored from a sync master; CountSyncDup a
// sync the puller had copied already.
func (s *Slave) CountSyncs(n int) { s.syncs.Add(int64(n)) }

// CountSyncDup counts a sync the puller had copied already.
func (s *Slave) CountSyncDup() { s.syncDups.Add(1) }

// ClearMaster forgets the master pulled from (promoted or demoted).
func (s *Slave) ClearMaster() { s.master.Store(nil) }

// Barrier waits for the appends of syncs under way (each partition's lock
// taken and released): a promoted slave refuses syncs from then on.
func (s *Slave) Barrier() {
	s.logsMu.Lock()
	defer s.logsMu.Unlock()
	for _, sl := range s.logs {
		sl.mu.Lock()
		//lint:ignore SA2001 a barrier: the lock is taken to wait for the append holding it
		sl.mu.Unlock()
	}
}

// ResetLogStates sets every partition's append state (the last id and
// the end the puller and the syncs skip below) to its log's, once the
// log's appends in flight are done. A member that held an epoch appended
// its puts to the logs directly, past the states it last had as a slave:
// with a stale end, the puller would append again records a sync from
// the new holder had just stored (they lie at or past that end), and the
// copies would diverge. It also makes the puller read its positions again
// from the logs. The caller is the slave's loop (failover's Rejoin).
func (s *Slave) ResetLogStates() error {
	for _, name := range s.host.Topics() {
		n, err := s.host.Partitions(name)
		if err != nil {
			continue // deleted meanwhile
		}
		for p := range n {
			l, err := s.host.Log(name, p)
			if err != nil {
				continue
			}
			sl := s.LogState(l)
			sl.mu.Lock()
			end, err := l.Settle()
			if err == nil {
				sl.lastID, sl.end = l.LastID(), end
			}
			sl.mu.Unlock()
			if err != nil {
				return fmt.Errorf("partition %s-%d: %w", name, p, err)
			}
		}
	}
	s.parts = map[string][]*replPart{}
	return nil
}

// NewRoundConn wraps nc, a replication connection, for request and reply
// rounds whose replies wait at most timeout (0: 10 s).
func NewRoundConn(nc net.Conn, timeout time.Duration) *RoundConn {
	return &RoundConn{timeout: timeout, nc: nc, w: bufio.NewWriter(nc), dec: protocol.NewDecoder(nc, protocol.Limits{})}
}

// Close closes the connection.
func (rc *RoundConn) Close() {
	rc.nc.Close()
	rc.dec.Release()
}

// RoundTrip sends one request and returns its reply (valid until the
// next call).
func (rc *RoundConn) RoundTrip(b []byte) (*protocol.Request, error) { return rc.roundTrip(b) }

// SlaveEnd asks the slave its end of partition p of topic (an offset
// request for MaxInt64).
func (rc *RoundConn) SlaveEnd(topic string, p int32) (int64, error) {
	r, err := rc.roundTrip(protocol.AppendOffset(rc.buf[:0], topic, "meta-sync-join", p, math.MaxInt64, 1))
	if err != nil {
		return 0, err
	}
	if r.Code != protocol.StatusOK {
		return 0, fmt.Errorf("the slave's end: %d %s", r.Code, protocol.Printable(r.Body))
	}
	have, _ := protocol.ParseInt64(r.Body)
	return have, nil
}
