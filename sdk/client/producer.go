package client

import (
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"hash/crc32"
	"log/slog"
	"sync"
	"time"

	"github.com/metaq-go/metaq/sdk/message"
	"github.com/metaq-go/metaq/sdk/protocol"
	"github.com/metaq-go/metaq/sdk/selector"
)

// Producing defaults.
const (
	// DefaultSendTimeout is the default ProduceTimeout (MetaQ's 3000 ms).
	DefaultSendTimeout = 3 * time.Second
	// DefaultMaxInFlight is the default MaxBufferedMessages: how many
	// messages may be unacknowledged at once before Produce waits.
	DefaultMaxInFlight = 1024
	// defaultBatchBytes is the mput body limit used when withBatching is given
	// maxBytes <= 0. The broker refuses bodies over its max transfer size
	// (2 MiB by default).
	defaultBatchBytes = 512 << 10
)

type producerConfig struct {
	conn           connOptions
	logger         *slog.Logger
	selector       selector.Selector
	sendTimeout    time.Duration
	maxInFlight    int
	batch          batchConfig
	partitions     map[string]int
	maxMessageSize int
	// Cluster mode (openClusterProducer).
	zk      zkConfig
	noRetry bool // withRetryOnFailure(false)
	// idempotent: withIdempotence(true), a Client's default; messages
	// carry a producer id and sequence (idem.go).
	idempotent bool
	// grace, if set, is every retry's grace instead of graceFor's (tests).
	grace time.Duration
	// pausesOnly makes a waiting idempotent retry resend at its pauses
	// only, not also when its turn comes (idemProgress.wait): the pacing
	// before the wake-up, for a test of the grace over a slow chain.
	pausesOnly bool
	// holes, if set, is where a brokerProducer records its idempotent
	// producers' holes (withHoles).
	holes *idemHoles
}

// withSelector sets the partition selector. Default selector.HashByKey():
// a message with a key goes to the partition its key hashes to, one
// without is sent round robin (selector.RoundRobin's order).
func withSelector(s selector.Selector) prodOption {
	return producerOpt(func(c *producerConfig) {
		if s != nil {
			c.selector = s
		}
	})
}

// withSendTimeout bounds each send from the moment it is written until the
// broker's reply (the caller's context can shorten it). Default 3 s.
func withSendTimeout(d time.Duration) prodOption {
	return producerOpt(func(c *producerConfig) {
		if d > 0 {
			c.sendTimeout = d
		}
	})
}

// withMaxInFlight bounds the messages sent or buffered but not yet
// acknowledged; beyond it Send and SendAsync block (respecting their
// context). Default 1024, or 8 batches when batching is on.
func withMaxInFlight(n int) prodOption {
	return producerOpt(func(c *producerConfig) {
		if n > 0 {
			c.maxInFlight = n
		}
	})
}

// withBatching accumulates messages for the same topic-partition and sends
// them as one mput when maxMessages (at most protocol.MaxMPutCount) or
// maxBytes of message data are reached, or linger after the first message
// of the batch. maxBytes must stay below the broker's max transfer size
// (default 2 MiB); <= 0 means defaultBatchBytes. A message over maxBytes is
// sent on its own with put, after its partition's batched messages (which
// it flushes). Sync Send waits for its batch, so with batching a lone Send
// takes up to linger.
func withBatching(maxMessages, maxBytes int, linger time.Duration) prodOption {
	return producerOpt(func(c *producerConfig) {
		if maxMessages <= 0 || maxMessages > protocol.MaxMPutCount {
			maxMessages = protocol.MaxMPutCount
		}
		if maxBytes <= 0 {
			maxBytes = defaultBatchBytes
		}
		c.batch = batchConfig{enabled: true, maxMessages: maxMessages, maxBytes: maxBytes, linger: max(linger, 0)}
	})
}

// withMaxMessageSize sets the largest put body the producer accepts
// (payload plus attribute). Default message.DefaultMaxMessageSize (2 MiB).
func withMaxMessageSize(n int) prodOption {
	return producerOpt(func(c *producerConfig) {
		if n > 0 {
			c.maxMessageSize = n
		}
	})
}

// SendResult is what the broker assigned to a stored message.
type SendResult struct {
	Topic     string
	Partition int32
	// Offset is the byte offset of the record's start in the partition.
	Offset int64
	// ID is the broker-assigned message id.
	ID int64
	// BrokerID is the id of the broker that stored the message (in direct
	// mode the broker_id its `stats` reports).
	BrokerID int
	// Spooled is true when a Client with Spool wrote the message, fsynced,
	// to its spool instead of a broker: it has no broker offset yet
	// (Partition, Offset, ID and BrokerID are -1) and is resent later,
	// at least once (see Spool).
	Spooled bool
	// OffsetUnknown is true when the idempotent producer's retry found
	// the message stored already, by a put whose offsets the broker no
	// longer holds (docs/protocol.md, "Idempotent producer"): it is
	// stored once, and Offset and ID are -1.
	OffsetUnknown bool
}

// brokerProducer sends messages to one broker. It is safe for concurrent use; all
// sends share one pipelined connection.
type brokerProducer struct {
	cfg producerConfig
	cn  *conn
	sem chan struct{}
	cbs *callbackQueue
	acc *accumulator // nil without batching

	mu     sync.RWMutex // guards closed against inflight.Add
	closed bool
	// inflight counts messages from acceptance to completion (callback run).
	inflight  sync.WaitGroup
	closeOnce sync.Once
	closeErr  error

	pmu   sync.RWMutex
	parts map[string]int

	// smu guards seqs: the idempotent producer's id and next sequence per
	// partition (idem.go); dseqs: those of its delayed messages.
	smu   sync.Mutex
	seqs  map[tpKey]*seqState
	dseqs map[tpKey]*seqState
	// holes holds, per producer id given up (renew), the lowest sequence
	// bound again under a new id (idem.go, pastHole): cfg.holes, shared
	// by a clusterProducer's brokers, else this producer's own.
	holes *idemHoles
}

// newProducerConfig applies opts to the defaults; maxInFlight stays 0
// unless set (its default depends on the producer).
func newProducerConfig(opts []prodOption) producerConfig {
	cfg := producerConfig{conn: defaultConnOptions(), logger: slog.Default(), selector: selector.HashByKey(),
		sendTimeout: DefaultSendTimeout, maxMessageSize: message.DefaultMaxMessageSize}
	for _, o := range opts {
		o.applyProducer(&cfg)
	}
	return cfg
}

// newBrokerProducer returns a producer for the broker at addr ("host:port"). It
// connects lazily, on the first send.
func newBrokerProducer(addr string, opts ...prodOption) (*brokerProducer, error) {
	if err := checkAddr(addr); err != nil {
		return nil, err
	}
	cfg := newProducerConfig(opts)
	if cfg.maxInFlight == 0 {
		cfg.maxInFlight = DefaultMaxInFlight
		if cfg.batch.enabled {
			cfg.maxInFlight = max(DefaultMaxInFlight, 8*cfg.batch.maxMessages)
		}
	}
	p := &brokerProducer{cfg: cfg, cn: newConn(addr, cfg.conn), sem: make(chan struct{}, cfg.maxInFlight),
		cbs: newCallbackQueue(), parts: make(map[string]int), holes: cfg.holes}
	if p.holes == nil {
		p.holes = new(idemHoles)
	}
	for t, n := range cfg.partitions {
		p.parts[t] = n
	}
	if cfg.batch.enabled {
		p.acc = newAccumulator(p)
	}
	return p, nil
}

// checkMessage rejects a message without a topic, over maxSize bytes or
// whose properties break a limit (message.CheckProperties), and a ctx that
// is done already.
func checkMessage(ctx context.Context, m *message.Message, maxSize int) error {
	if m == nil || m.Topic == "" {
		return fmt.Errorf("%w: no topic", ErrInvalidMessage)
	}
	if n := m.DataLen(); n > maxSize {
		return fmt.Errorf("%w: %d bytes exceeds the maximum message size %d", ErrInvalidMessage, n, maxSize)
	}
	if err := m.CheckProperties(); err != nil {
		return fmt.Errorf("%w: %w", ErrInvalidMessage, err)
	}
	return ctx.Err()
}

// begin admits one message: it waits for an in-flight slot.
func (p *brokerProducer) begin(ctx context.Context, m *message.Message) error {
	return p.beginMsg(ctx, m, false)
}

// beginMsg is begin; checked skips the message check (the caller made it).
func (p *brokerProducer) beginMsg(ctx context.Context, m *message.Message, checked bool) error {
	if !checked {
		if err := checkMessage(ctx, m, p.cfg.maxMessageSize); err != nil {
			return err
		}
	}
	select {
	case p.sem <- struct{}{}:
	default:
		select {
		case p.sem <- struct{}{}:
		case <-ctx.Done():
			return ctx.Err()
		}
	}
	p.mu.RLock()
	if p.closed {
		p.mu.RUnlock()
		<-p.sem
		return ErrClosed
	}
	p.inflight.Add(1)
	p.mu.RUnlock()
	return nil
}

func (p *brokerProducer) end() {
	<-p.sem
	p.inflight.Done()
}

// Send sends m and waits for the broker to store it. On success m's ID,
// Partition and Offset are set too. An error wrapping ErrTimeout or
// ErrConnectionLost leaves it unknown whether m was stored. With batching,
// a message whose ctx ends while it waits in a batch is still sent. m must
// not be modified until Send returns (or SendAsync's callback runs).
func (p *brokerProducer) Send(ctx context.Context, m *message.Message) (SendResult, error) {
	unbind(m) // a new send (idem.go)
	if err := p.begin(ctx, m); err != nil {
		return SendResult{}, err
	}
	part, err := p.selectPartition(ctx, m)
	if err != nil {
		p.end()
		return SendResult{}, err
	}
	if p.acc != nil && m.DataLen() <= p.cfg.batch.maxBytes && !m.Delayed() { // a delayed message goes in a put of its own
		// The batch completes pm (and releases its slot) even if we stop
		// waiting for it.
		pm := &pendingMsg{msg: m, part: part, done: make(chan struct{})}
		p.acc.add(pm)
		select {
		case <-pm.done:
			return pm.res, pm.err
		case <-ctx.Done():
			return SendResult{}, ctx.Err()
		}
	}
	defer p.end()
	ctx, cancel := context.WithTimeout(ctx, p.cfg.sendTimeout)
	defer cancel()
	res, err := p.put(ctx, m, part)
	if isPartitionError(err) {
		// The topic shrank or was misread: nothing was stored, so relearn
		// the partition count and try once more.
		p.forgetTopic(m.Topic)
		unbind(m) // nothing stored: bound afresh
		if part, err2 := p.selectPartition(ctx, m); err2 == nil {
			res, err = p.put(ctx, m, part)
		}
	}
	return res, err
}

// sendTo sends m to partition part, bounded by ctx alone: a
// clusterProducer's attempt on this broker.
func (p *brokerProducer) sendTo(ctx context.Context, m *message.Message, part int32) (SendResult, error) {
	if err := p.begin(ctx, m); err != nil {
		return SendResult{}, err
	}
	defer p.end()
	return p.put(ctx, m, part)
}

// sendPart is sendTo through the batch accumulator when batching is on
// and m fits a batch: a clusterProducer's attempt.
func (p *brokerProducer) sendPart(ctx context.Context, m *message.Message, part int32) (SendResult, error) {
	for try := 0; ; try++ {
		res, err := p.sendPartOnce(ctx, m, part)
		if try < outOfOrderResends && renewable(err) {
			p.renew(m, part) // nothing stored: bound again, under a new producer id
			continue
		}
		return res, err
	}
}

// outOfOrderResends is how many times a message the broker refused as
// out of order or of an unknown producer, at its first attempt (nothing
// stored: idem.go), is bound again and resent.
const outOfOrderResends = 3

func (p *brokerProducer) sendPartOnce(ctx context.Context, m *message.Message, part int32) (SendResult, error) {
	if p.acc == nil || m.DataLen() > p.cfg.batch.maxBytes || m.ProducerID != 0 || m.Delayed() {
		// A bound message (an idempotent retry) goes alone: the broker
		// judges a put by its sequences, and a batch of new messages
		// must not straddle one already stored.
		return p.sendTo(ctx, m, part)
	}
	if err := p.begin(ctx, m); err != nil {
		return SendResult{}, err
	}
	// The batch completes pm and releases its slot even if we stop waiting.
	pm := &pendingMsg{msg: m, part: part, done: make(chan struct{})}
	p.acc.add(pm)
	select {
	case <-pm.done:
		return pm.res, pm.err
	case <-ctx.Done():
		return SendResult{}, ctx.Err()
	}
}

// sendAsyncPart sends m to partition part without waiting, batched when
// batching is on and m fits (checked: the caller checked m); done runs once with the outcome on the
// connection's goroutine (it must not block): a clusterProducer's fast
// path.
func (p *brokerProducer) sendAsyncPart(ctx context.Context, deadline time.Time, m *message.Message, part int32, checked bool, done func(SendResult, error)) {
	if err := p.beginMsg(ctx, m, checked); err != nil {
		done(SendResult{}, err)
		return
	}
	if p.acc != nil && m.DataLen() <= p.cfg.batch.maxBytes && !m.Delayed() { // a delayed message goes in a put of its own
		p.acc.add(&pendingMsg{msg: m, part: part, direct: done})
		return
	}
	p.afterBatches(m.Topic, part)
	p.cn.sendAsync(ctx, deadline, p.putEncoder(m, part, p.checksum(m)), func(c *call) {
		res, err := putResult(m, part, c)
		putCall(c)
		p.end()
		done(res, err)
	})
}

// afterBatches is called before m goes to partition part with put, past
// the batches (a message over the batch byte limit): it sends the
// partition's batched messages first, so that m does not overtake them.
func (p *brokerProducer) afterBatches(topic string, part int32) {
	if p.acc != nil {
		p.acc.flushKey(tpKey{topic, part})
	}
}

func (p *brokerProducer) put(ctx context.Context, m *message.Message, part int32) (SendResult, error) {
	p.afterBatches(m.Topic, part)
	for try := 0; ; try++ {
		retry := p.kept(m, part)
		past := retry && p.pastHole(m)
		c, err := p.cn.roundTrip(ctx, p.putEncoder(m, part, p.checksum(m)))
		if err != nil {
			return SendResult{}, err
		}
		res, err := putResult(m, part, c)
		putCall(c)
		err = retryOutcome(err, retry, past)
		if try < outOfOrderResends && renewable(err) {
			p.renew(m, part) // nothing stored: bound again, under a new producer id
			continue
		}
		return res, err
	}
}

// putResult parses a put or mput reply for its first message, sent to
// partition part.
func putResult(m *message.Message, part int32, c *call) (SendResult, error) {
	if c.err != nil {
		return SendResult{}, c.err
	}
	if c.code != protocol.StatusOK {
		err := resultError(c.code, c.body)
		if sendCause(err) == protocol.CauseDuplicateSequence {
			return storedUnknown(m, part), nil
		}
		return SendResult{}, err
	}
	id, part, off, _, err := protocol.ParsePutResult(c.body)
	if err != nil {
		return SendResult{}, err
	}
	m.ID, m.Partition, m.Offset = id, part, off
	return SendResult{Topic: m.Topic, Partition: part, Offset: off, ID: id}, nil
}

// SendAsync sends m without waiting; cb runs exactly once with the outcome,
// on the producer's callback goroutine, in completion order. Callbacks
// should be quick: the next one waits. If no in-flight slot frees up before
// ctx is done, cb gets ctx's error. ctx bounds the send like Send's does.
func (p *brokerProducer) SendAsync(ctx context.Context, m *message.Message, cb func(SendResult, error)) {
	if cb == nil {
		cb = func(SendResult, error) {}
	}
	unbind(m) // a new send (idem.go)
	if err := p.begin(ctx, m); err != nil {
		p.cbs.push(cb, SendResult{}, err, nil)
		return
	}
	part, err := p.selectPartition(ctx, m)
	if err != nil {
		p.cbs.push(cb, SendResult{}, err, p.end)
		return
	}
	if p.acc != nil && m.DataLen() <= p.cfg.batch.maxBytes && !m.Delayed() { // a delayed message goes in a put of its own
		p.acc.add(&pendingMsg{msg: m, part: part, cb: cb})
		return
	}
	p.afterBatches(m.Topic, part)
	p.cn.sendAsync(ctx, time.Now().Add(p.cfg.sendTimeout), p.putEncoder(m, part, p.checksum(m)), func(c *call) {
		res, err := putResult(m, part, c)
		putCall(c)
		if isPartitionError(err) {
			p.forgetTopic(m.Topic)
		}
		p.cbs.push(cb, res, err, p.end)
	})
}

// Flush sends every batched message now and waits until all messages
// accepted so far are acknowledged, or ctx is done.
func (p *brokerProducer) Flush(ctx context.Context) error {
	if p.acc != nil {
		p.acc.flushAll()
	}
	done := make(chan struct{})
	go func() {
		// Waiting on the slots rather than the WaitGroup keeps Flush
		// usable while other goroutines keep sending.
		for i := 0; i < cap(p.sem); i++ {
			p.sem <- struct{}{}
		}
		for i := 0; i < cap(p.sem); i++ {
			<-p.sem
		}
		close(done)
	}()
	select {
	case <-done:
		return nil
	case <-ctx.Done():
		return ctx.Err()
	}
}

// Close stops accepting messages, sends any batched ones, waits for the
// messages in flight until ctx is done, then closes the connection; sends
// still in flight then fail with ErrClosed. All callbacks have run when
// Close returns. Close is idempotent; later calls return the first result.
func (p *brokerProducer) Close(ctx context.Context) error {
	p.closeOnce.Do(func() {
		p.mu.Lock()
		p.closed = true
		p.mu.Unlock()
		if p.acc != nil {
			p.acc.close()
		}
		done := make(chan struct{})
		go func() { p.inflight.Wait(); close(done) }()
		select {
		case <-done:
		case <-ctx.Done():
			p.closeErr = fmt.Errorf("metaq: producer close: %w", ctx.Err())
		}
		p.cn.close()
		<-done
		p.cbs.close()
	})
	return p.closeErr
}

// SendBatch sends msgs and waits until the broker has answered for all of
// them, or ctx is done. It asks the selector once per topic in msgs
// (SelectBatch, when the selector has it), then sends the messages bound
// for one partition together, in order, as mput requests within the batch
// limits (withBatching's, else protocol.MaxMPutCount and
// defaultBatchBytes); a message over the byte limit goes alone with put.
// It does not wait for withBatching's linger.
//
// Nothing is sent when a message is invalid or the selector fails. The
// results are in the order of msgs; on success each message's ID,
// Partition and Offset are set too. If some messages fail, err wraps the
// first failure and the results of the stored messages are still filled
// in (a failed message's result is the zero SendResult). As with Send, an
// error wrapping ErrTimeout or ErrConnectionLost leaves it unknown whether
// a message was stored, and when ctx ends first, sending continues in the
// background. msgs must not be modified until SendBatch returns.
func (p *brokerProducer) SendBatch(ctx context.Context, msgs []*message.Message) ([]SendResult, error) {
	if len(msgs) == 0 {
		return nil, nil
	}
	for _, m := range msgs {
		unbind(m) // a new send (idem.go)
	}
	for i, m := range msgs {
		if m == nil || m.Topic == "" {
			return nil, fmt.Errorf("%w: message %d: no topic", ErrInvalidMessage, i)
		}
		if n := m.DataLen(); n > p.cfg.maxMessageSize {
			return nil, fmt.Errorf("%w: message %d: %d bytes exceeds the maximum message size %d", ErrInvalidMessage, i, n, p.cfg.maxMessageSize)
		}
		if err := m.CheckProperties(); err != nil {
			return nil, fmt.Errorf("%w: message %d: %w", ErrInvalidMessage, i, err)
		}
	}
	if err := ctx.Err(); err != nil {
		return nil, err
	}
	p.mu.RLock()
	closed := p.closed
	p.mu.RUnlock()
	if closed {
		return nil, ErrClosed
	}
	parts, err := p.selectAll(ctx, msgs)
	if err != nil {
		return nil, err
	}
	chunks, pms := p.chunk(msgs, parts)
	var admitErr error
	for _, b := range chunks {
		if admitErr == nil {
			admitErr = p.admit(ctx, b)
			if admitErr == nil {
				p.sendChunk(b)
			}
		}
		if admitErr != nil {
			for _, pm := range b.msgs {
				pm.err = admitErr
				close(pm.done)
			}
		}
	}
	results := make([]SendResult, len(msgs))
	var first error
	failed := 0
	for i, pm := range pms {
		select {
		case <-pm.done:
		case <-ctx.Done():
			return results, ctx.Err()
		}
		if pm.err != nil {
			failed++
			if first == nil {
				first = pm.err
			}
			continue
		}
		results[i] = pm.res
	}
	if first != nil {
		return results, fmt.Errorf("metaq: %d of %d messages not sent: %w", failed, len(msgs), first)
	}
	return results, nil
}

// chunk groups msgs by topic-partition, in order, into mput-sized batches;
// a message over the byte limit gets a batch of its own (bytes < 0: sent
// with put). pms[i] is the pending message of msgs[i].
func (p *brokerProducer) chunk(msgs []*message.Message, parts []int32) (out []*batch, pms []*pendingMsg) {
	maxCount, maxBytes := protocol.MaxMPutCount, defaultBatchBytes
	if p.cfg.batch.enabled {
		maxCount, maxBytes = p.cfg.batch.maxMessages, p.cfg.batch.maxBytes
	}
	// A chunk takes its in-flight slots before it is sent: never more than
	// there are.
	maxCount = max(1, min(maxCount, cap(p.sem)))
	pms = make([]*pendingMsg, len(msgs))
	open := make(map[tpKey]*batch)
	for i, m := range msgs {
		// Checksummed here without idempotence; with it, when sent, after
		// binding (which changes the data).
		pm := &pendingMsg{msg: m, part: parts[i], crc: uint32(p.checksum(m)), done: make(chan struct{})}
		pms[i] = pm
		key := tpKey{m.Topic, parts[i]}
		size := protocol.MPutEntryHeader + m.DataLen()
		if size > maxBytes || m.Delayed() { // a delayed message goes in a put of its own
			// Later messages of this partition go after it.
			delete(open, key)
			out = append(out, &batch{key: key, msgs: []*pendingMsg{pm}, bytes: -1})
			continue
		}
		b := open[key]
		if b != nil && b.bytes+size > maxBytes {
			b = nil
		}
		if b == nil {
			b = &batch{key: key}
			open[key] = b
			out = append(out, b)
		}
		b.msgs = append(b.msgs, pm)
		b.bytes += size
		if len(b.msgs) >= maxCount {
			delete(open, key)
		}
	}
	return out, pms
}

// admit takes an in-flight slot for every message of b, or none.
func (p *brokerProducer) admit(ctx context.Context, b *batch) error {
	for i, pm := range b.msgs {
		if err := p.begin(ctx, pm.msg); err != nil {
			for range i {
				p.end()
			}
			return err
		}
	}
	return nil
}

// sendChunk sends an admitted chunk, after the batched messages of its
// partition; each message's done closes (and its slot is released) when
// the broker answers.
func (p *brokerProducer) sendChunk(b *batch) {
	if b.bytes >= 0 {
		if p.acc != nil {
			p.acc.sendAfter(b)
		} else {
			(&accumulator{p: p}).send(b) // send and complete use only a.p
		}
		return
	}
	pm := b.msgs[0]
	m := pm.msg
	p.afterBatches(m.Topic, pm.part)
	p.cn.sendAsync(context.Background(), time.Now().Add(p.cfg.sendTimeout), p.putEncoder(m, pm.part, int64(pm.crc)), func(c *call) {
		pm.res, pm.err = putResult(m, pm.part, c)
		putCall(c)
		if isPartitionError(pm.err) {
			p.forgetTopic(m.Topic)
		}
		close(pm.done)
		p.end()
	})
}

// Partitions returns the number of partitions of topic, asking the broker
// the first time.
func (p *brokerProducer) Partitions(ctx context.Context, topic string) (int, error) {
	return p.partitionCount(ctx, topic)
}

func (p *brokerProducer) partitionCount(ctx context.Context, topic string) (int, error) {
	p.pmu.RLock()
	n, ok := p.parts[topic]
	p.pmu.RUnlock()
	if ok {
		return n, nil
	}
	ctx, cancel := context.WithTimeout(ctx, p.cfg.sendTimeout)
	defer cancel()
	infos, err := statsTopics(ctx, p.cn)
	if err != nil {
		return 0, fmt.Errorf("metaq: learn partitions of %s: %w", topic, err)
	}
	p.pmu.Lock()
	for _, ti := range infos {
		if _, fixed := p.cfg.partitions[ti.Name]; !fixed && ti.Partitions > 0 {
			p.parts[ti.Name] = ti.Partitions
		}
	}
	n, ok = p.parts[topic]
	p.pmu.Unlock()
	if ok {
		return n, nil
	}
	if denied, _ := unlisted(ctx, p.cn, topic); denied != nil {
		return 0, fmt.Errorf("metaq: learn partitions of %s: %w", topic, denied)
	}
	return 0, fmt.Errorf("%w: %q is not listed by the broker at %s", ErrUnknownTopic, topic, p.cn.addr)
}

func (p *brokerProducer) forgetTopic(topic string) {
	if _, fixed := p.cfg.partitions[topic]; fixed {
		return
	}
	p.pmu.Lock()
	delete(p.parts, topic)
	p.pmu.Unlock()
}

// isPartitionError reports a reply whose cause is a partition out of
// range (the partition count is stale).
func isPartitionError(err error) bool {
	var be *BrokerError
	return errors.As(err, &be) && be.Cause == protocol.CausePartitionOutOfRange
}

var crcTable = crc32.MakeTable(crc32.IEEE)

// checksum is m's checksum for a put encoder, or 0 when the encoder
// computes it after binding m (idempotence on: binding changes the data).
func (p *brokerProducer) checksum(m *message.Message) int64 {
	if p.cfg.idempotent {
		return 0
	}
	return int64(dataChecksum(m))
}

// dataChecksum is message.Checksum(m.AppendData(nil)) without building the data.
func dataChecksum(m *message.Message) uint32 {
	if !m.HasAttribute && !m.HasProperties() {
		return message.Checksum(m.Body)
	}
	var c uint32
	if m.HasAttribute {
		var n [4]byte
		binary.BigEndian.PutUint32(n[:], uint32(len(m.Attribute)))
		c = crc32.Update(0, crcTable, n[:])
		c = crc32.Update(c, crcTable, []byte(m.Attribute))
	}
	if m.HasProperties() {
		var buf [256]byte
		c = crc32.Update(c, crcTable, m.AppendProperties(buf[:0]))
	}
	c = crc32.Update(c, crcTable, m.Body)
	return c & 0x7FFFFFFF
}

// callbackQueue runs async callbacks in order on one goroutine, so that the
// connection's reader never runs user code.
type callbackQueue struct {
	mu     sync.Mutex
	q      []callbackItem
	wake   chan struct{}
	closed bool
	done   chan struct{}
}

type callbackItem struct {
	cb    func(SendResult, error)
	res   SendResult
	err   error
	after func()
}

func newCallbackQueue() *callbackQueue {
	q := &callbackQueue{wake: make(chan struct{}, 1), done: make(chan struct{})}
	go q.run()
	return q
}

func (q *callbackQueue) push(cb func(SendResult, error), res SendResult, err error, after func()) {
	q.mu.Lock()
	if q.closed {
		q.mu.Unlock()
		cb(res, err)
		if after != nil {
			after()
		}
		return
	}
	q.q = append(q.q, callbackItem{cb, res, err, after})
	q.mu.Unlock()
	select {
	case q.wake <- struct{}{}:
	default:
	}
}

func (q *callbackQueue) run() {
	defer close(q.done)
	var batch []callbackItem
	for {
		q.mu.Lock()
		batch, q.q = q.q, batch[:0]
		closed := q.closed
		q.mu.Unlock()
		for i := range batch {
			it := &batch[i]
			it.cb(it.res, it.err)
			if it.after != nil {
				it.after()
			}
			*it = callbackItem{}
		}
		if len(batch) == 0 {
			if closed {
				return
			}
			<-q.wake
		}
	}
}

// close runs the remaining callbacks and stops the goroutine.
func (q *callbackQueue) close() {
	q.mu.Lock()
	q.closed = true
	q.mu.Unlock()
	select {
	case q.wake <- struct{}{}:
	default:
	}
	<-q.done
}
