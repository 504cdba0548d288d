package client

import (
	"context"
	"errors"
	"fmt"
	"maps"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/metaq-go/metaq/internal/backoff"
	"github.com/metaq-go/metaq/sdk/cluster"
	"github.com/metaq-go/metaq/sdk/message"
	"github.com/metaq-go/metaq/sdk/protocol"
)

// viewSource lists the partitions producers send to: ZooKeeper's
// topics-pub nodes (zkSource) or the brokers given to Brokers, asked
// directly (directSource).
type viewSource interface {
	watchPublish(topic string) topicView
	// where says where partitions are listed, for errors ("in ZooKeeper").
	where() string
	close() error
}

// topicView is one topic's publish partitions with their brokers'
// addresses, as *cluster.TopicView gives them.
type topicView interface {
	// Wait waits for the first reading.
	Wait(ctx context.Context) error
	Snapshot() *cluster.Snapshot
	Partitions() []message.Partition
	// Ready is closed after the first reading.
	Ready() <-chan struct{}
	// Changes receives a value after a change (coalesced).
	Changes() <-chan struct{}
}

// zkSource is the partitions ZooKeeper lists; own says whether closing
// the source closes the session.
type zkSource struct {
	cl  *cluster.Cluster
	own bool
}

func (z zkSource) watchPublish(topic string) topicView { return z.cl.WatchPublish(topic) }

func (z zkSource) where() string { return "in ZooKeeper" }

func (z zkSource) close() error {
	if z.own {
		return z.cl.Close()
	}
	return nil
}

// directRefresh is how often a directSource asks its brokers again, so
// that partitions added to a topic are used with no restart.
const directRefresh = 30 * time.Second

// directSource is the partitions the brokers given to Brokers report in
// `stats` (broker_id) and `stats topics`. A broker that cannot be reached
// keeps the partitions it last reported, so that sends fail over from it
// as from a broker ZooKeeper still lists.
type directSource struct {
	addrs   []string
	conns   []*conn
	timeout time.Duration

	mu     sync.Mutex
	closed bool
	views  map[string]*directView
	done   chan struct{}
	wg     sync.WaitGroup
}

func newDirectSource(addrs []string, opts connOptions, timeout time.Duration) *directSource {
	d := &directSource{addrs: addrs, timeout: timeout, views: make(map[string]*directView), done: make(chan struct{})}
	for _, a := range addrs {
		d.conns = append(d.conns, newConn(a, opts))
	}
	return d
}

func (d *directSource) where() string {
	return "on the brokers " + strings.Join(d.addrs, ", ")
}

func (d *directSource) watchPublish(topic string) topicView {
	d.mu.Lock()
	defer d.mu.Unlock()
	if v, ok := d.views[topic]; ok {
		return v
	}
	v := &directView{src: d, topic: topic, ready: make(chan struct{}), changes: make(chan struct{}, 1),
		kick: make(chan struct{}, 1), last: make(map[int]brokerReading)}
	v.snap.Store(&cluster.Snapshot{Addrs: map[int]string{}, Brokers: map[int]cluster.Broker{}})
	d.views[topic] = v
	if !d.closed {
		d.wg.Add(1)
		go v.run()
	}
	return v
}

func (d *directSource) close() error {
	d.mu.Lock()
	if d.closed {
		d.mu.Unlock()
		return nil
	}
	d.closed = true
	close(d.done)
	d.mu.Unlock()
	d.wg.Wait()
	for _, cn := range d.conns {
		cn.close()
	}
	return nil
}

// brokerReading is what one broker reported for a topic.
type brokerReading struct {
	id    int
	parts int
	// denied is the broker's 403 to `stats <topic>` when it does not list
	// the topic: with [auth] a broker lists a topic only to users who may
	// publish or subscribe to it, and refuses to describe it to others.
	denied error
}

// directView is one topic's partitions on a directSource's brokers.
type directView struct {
	src     *directSource
	topic   string
	ready   chan struct{}
	changes chan struct{}
	kick    chan struct{} // ask again now (a send found the reading stale)
	snap    atomic.Pointer[cluster.Snapshot]
	last    map[int]brokerReading // by index in src.addrs; run's
	err     atomic.Pointer[error] // the last reading's failure, for Wait
	// denied is a broker's refusal to describe the topic when no broker
	// lists it (brokerReading.denied), nil otherwise.
	denied atomic.Pointer[error]
	// complete: every broker answered the last reading.
	complete atomic.Bool
}

func (v *directView) Ready() <-chan struct{}          { return v.ready }
func (v *directView) Changes() <-chan struct{}        { return v.changes }
func (v *directView) Snapshot() *cluster.Snapshot     { return v.snap.Load() }
func (v *directView) Partitions() []message.Partition { return slices.Clone(v.snap.Load().Partitions) }

// unknownTopic reports whether every broker answered the last reading
// and none lists the topic: it does not exist there (a ZooKeeper view
// cannot tell that from brokers that are all away).
func (v *directView) unknownTopic() bool {
	select {
	case <-v.ready:
	default:
		return false
	}
	return v.complete.Load() && len(v.snap.Load().Partitions) == 0
}

// deniedErr is the broker's refusal to describe the topic (a 403: the
// user may neither publish nor subscribe to it) when no broker lists it.
func (v *directView) deniedErr() error {
	if e := v.denied.Load(); e != nil {
		return *e
	}
	return nil
}

// Wait waits for the first complete reading. When no broker could be
// asked yet it returns the last failure once ctx is done.
func (v *directView) Wait(ctx context.Context) error {
	select {
	case <-v.ready:
		return nil
	case <-ctx.Done():
		if e := v.err.Load(); e != nil {
			return fmt.Errorf("%w (last failure: %w)", ctx.Err(), *e)
		}
		return ctx.Err()
	}
}

func (v *directView) run() {
	defer v.src.wg.Done()
	failures := 0
	for {
		wait := directRefresh
		if err := v.read(); err != nil {
			v.err.Store(&err)
			failures++
			wait = backoff.Policy{Min: 50 * time.Millisecond, Max: 2 * time.Second, Jitter: redialJitter}.Delay(failures)
		} else {
			failures = 0
		}
		t := time.NewTimer(wait)
		select {
		case <-t.C:
		case <-v.kick:
			t.Stop()
		case <-v.src.done:
			t.Stop()
			return
		}
	}
}

// read asks every broker once. It fails only if no broker answered and
// none ever did.
func (v *directView) read() error {
	d := v.src
	var firstErr error
	for i, cn := range d.conns {
		ctx, cancel := context.WithTimeout(context.Background(), d.timeout)
		r, err := readBroker(ctx, cn, v.topic)
		cancel()
		if err != nil {
			if firstErr == nil {
				firstErr = fmt.Errorf("%s: %w", d.addrs[i], err)
			}
			continue // keep what it reported last
		}
		v.last[i] = r
	}
	if len(v.last) == 0 {
		return firstErr
	}
	snap := &cluster.Snapshot{Addrs: map[int]string{}, Brokers: map[int]cluster.Broker{}}
	for i, r := range v.last {
		if prev, dup := snap.Addrs[r.id]; dup {
			err := fmt.Errorf("metaq: brokers %s and %s both have broker_id %d", prev, d.addrs[i], r.id)
			v.err.Store(&err)
			continue
		}
		snap.Addrs[r.id] = d.addrs[i]
		snap.Brokers[r.id] = cluster.Broker{ID: r.id, Addr: d.addrs[i]}
		for p := range r.parts {
			snap.Partitions = append(snap.Partitions, message.Partition{BrokerID: r.id, Partition: int32(p)})
		}
	}
	slices.SortFunc(snap.Partitions, message.Partition.Compare)
	var denied *error
	if len(snap.Partitions) == 0 {
		for _, r := range v.last {
			if r.denied != nil {
				denied = &r.denied
				break
			}
		}
	}
	v.denied.Store(denied)
	v.complete.Store(firstErr == nil)
	old := v.snap.Load()
	if !slices.Equal(old.Partitions, snap.Partitions) || !maps.Equal(old.Addrs, snap.Addrs) {
		v.snap.Store(snap)
		select {
		case v.changes <- struct{}{}:
		default:
		}
	}
	select {
	case <-v.ready:
	default:
		close(v.ready)
	}
	return nil
}

// askBrokerID asks a broker its id (`stats`: broker_id).
func askBrokerID(ctx context.Context, cn *conn) (int, error) {
	body, err := stats(ctx, cn, "")
	if err != nil {
		return 0, err
	}
	for _, l := range statsLines(body) {
		if v, ok := strings.CutPrefix(l, "broker_id "); ok {
			id, err := strconv.Atoi(strings.TrimSpace(v))
			if err != nil || id < 0 {
				return 0, fmt.Errorf("metaq: bad broker_id in stats: %q", protocol.Printable([]byte(v)))
			}
			return id, nil
		}
	}
	return 0, fmt.Errorf("metaq: stats lists no broker_id")
}

// readBroker asks one broker for its id and topic's partition count (0
// when it does not list the topic).
func readBroker(ctx context.Context, cn *conn, topic string) (brokerReading, error) {
	id, err := askBrokerID(ctx, cn)
	if err != nil {
		return brokerReading{}, err
	}
	r := brokerReading{id: id}
	infos, err := statsTopics(ctx, cn)
	if err != nil {
		return brokerReading{}, err
	}
	for _, ti := range infos {
		if ti.Name == topic {
			r.parts = ti.Partitions
		}
	}
	if r.parts == 0 {
		if r.denied, err = unlisted(ctx, cn, topic); err != nil {
			return brokerReading{}, err
		}
	}
	return r, nil
}

// unlisted asks the broker about a topic its `stats topics` does not
// list: with [auth] a broker lists a topic only to users who may publish
// or subscribe to it and answers `stats <topic>` 403 to the others.
// denied is that 403 (matching ErrForbidden, with the broker's text); err
// is a failure to ask.
func unlisted(ctx context.Context, cn *conn, topic string) (denied, err error) {
	if strings.ContainsAny(topic, " \r\n") {
		return nil, nil
	}
	_, err = stats(ctx, cn, topic)
	var be *BrokerError
	switch {
	case err == nil:
		return nil, nil
	case errors.Is(err, ErrForbidden):
		return err, nil
	case errors.As(err, &be): // another answer: the topic is just not there
		return nil, nil
	}
	return nil, err
}

// viewDenied is v's refusal to describe its topic (directView.deniedErr),
// nil for a view that has none (ZooKeeper's).
func viewDenied(v topicView) error {
	if d, ok := v.(interface{ deniedErr() error }); ok {
		return d.deniedErr()
	}
	return nil
}
