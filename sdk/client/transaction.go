package client

import (
	"context"
	"errors"
	"fmt"
	"net"
	"strconv"
	"sync"
	"sync/atomic"
	"time"

	"github.com/metaq-go/metaq/sdk/message"
	"github.com/metaq-go/metaq/sdk/protocol"
)

// The errors of transactions.
var (
	// ErrTransactionRolledBack means the transaction did not commit: it
	// was rolled back (by Commit after a failure, by the broker when the
	// transaction's connection was lost, or at its timeout). The error
	// wraps the cause too.
	ErrTransactionRolledBack = errors.New("metaq: transaction rolled back")
	// ErrTransactionInDoubt means Commit was sent but its outcome is not
	// known: the connection was lost or the reply did not come in time,
	// or the broker failed the commit after recording it (it completes
	// the commit when it restarts). Read the topic to find out.
	ErrTransactionInDoubt = errors.New("metaq: transaction outcome unknown")
	// ErrTransactionDone is returned by calls on a transaction that was
	// already committed or rolled back.
	ErrTransactionDone = errors.New("metaq: transaction already completed")
	// ErrTransactionBroker means a message of a local transaction has no
	// partition on the transaction's broker: a local transaction is
	// pinned to the broker of its first message.
	ErrTransactionBroker = errors.New("metaq: topic has no partition on the transaction's broker")
)

// TxOption configures a transaction (see BeginTransaction).
type TxOption func(*txConfig)

type txConfig struct {
	timeout int // seconds; 0: the broker's tx_default_timeout
	err     error
}

// TxTimeout makes the broker roll the transaction back unless it is
// committed within d of its first message (whole seconds, 1 s to 60 s,
// MetaQ's cap). Default: the broker's tx_default_timeout (60 s unless
// configured).
func TxTimeout(d time.Duration) TxOption {
	return func(c *txConfig) {
		if d < time.Second || d > 60*time.Second {
			c.err = fmt.Errorf("metaq: TxTimeout %v: want 1s to 60s", d)
			return
		}
		c.timeout = int(d / time.Second)
	}
}

// txSessions numbers the transaction sessions of the process (MetaQ's
// producer sequence).
var txSessions atomic.Int64

// txSession is a Client's transaction session: the sessionId of MetaQ's
// keys, "<localIP>-<startMillis>-<seq>", and the number of its last
// transaction.
type txSession struct {
	once sync.Once
	id   string
	n    atomic.Int64
}

// next returns the session id and the key of a new transaction.
func (s *txSession) next() (session, key string) {
	s.once.Do(func() {
		s.id = localIP() + "-" + strconv.FormatInt(time.Now().UnixMilli(), 10) + "-" + strconv.FormatInt(txSessions.Add(1), 10)
	})
	return s.id, "TX:" + s.id + ":" + strconv.FormatInt(s.n.Add(1), 10)
}

// localIP is the first non-loopback address of the host's interfaces
// (IPv4 first), else 127.0.0.1: MetaQ's RemotingUtils.getLocalHost.
func localIP() string {
	addrs, err := net.InterfaceAddrs()
	if err != nil {
		return "127.0.0.1"
	}
	var v6 string
	for _, a := range addrs {
		n, ok := a.(*net.IPNet)
		if !ok || n.IP.IsLoopback() || n.IP.IsLinkLocalUnicast() {
			continue
		}
		if ip4 := n.IP.To4(); ip4 != nil {
			return ip4.String()
		}
		if v6 == "" {
			v6 = n.IP.String()
		}
	}
	if v6 != "" {
		return v6
	}
	return "127.0.0.1"
}

// Transaction states.
const (
	txOpen         = iota
	txRollbackOnly // a failure: Commit rolls back
	txLost         // the connection went: the broker rolled it back
	txFinished
)

// Transaction is a local transaction (MetaQ's, reference §10): the
// messages produced in it are stored, and seen by consumers, only when
// Commit succeeds, all of them; Rollback, or a failure, drops them all.
//
// A local transaction is pinned to one broker and one connection: the
// broker that the Selector picks for its first message, in direct and
// ZooKeeper modes alike, and the Client's connection to that broker at
// that moment. Every later message goes to a partition of that broker
// (the Selector chooses among them; a topic with none fails with
// ErrTransactionBroker), and the transaction lives in the connection's
// session on the broker: if the connection is lost, the broker rolls the
// transaction back and it fails with ErrTransactionRolledBack (no redial
// can bring it back). For messages to several brokers in one transaction,
// use XA (package txn).
//
// As in MetaQ, BEGIN is sent with the first message, so a transaction
// that produces nothing costs nothing. A Transaction is safe for
// concurrent use; its calls are serialised.
type Transaction struct {
	cl      *Client
	cp      *clusterProducer
	key     string
	session string
	cfg     txConfig

	mu       sync.Mutex
	state    int
	cause    error // why it is rollback-only or lost
	w        *wire // the pinned connection; nil before the first message
	addr     string
	brokerID int
	n        int // messages accepted
}

// BeginTransaction starts a local transaction (see Transaction). Nothing
// is sent before its first Produce.
func (c *Client) BeginTransaction(ctx context.Context, opts ...TxOption) (*Transaction, error) {
	var cfg txConfig
	for _, o := range opts {
		if o == nil {
			return nil, errors.New("metaq: nil TxOption")
		}
		o(&cfg)
	}
	if cfg.err != nil {
		return nil, cfg.err
	}
	if err := ctx.Err(); err != nil {
		return nil, err
	}
	cp, _, err := c.producer()
	if err != nil {
		return nil, err
	}
	session, key := c.txs.next()
	return &Transaction{cl: c, cp: cp, key: key, session: session, cfg: cfg, brokerID: -1}, nil
}

// Key returns the transaction's key on the wire, TX:<sessionId>:<n>, as
// `metaq tx list` and the broker's log show it.
func (t *Transaction) Key() string { return t.key }

// BrokerID returns the id of the transaction's broker, -1 before its first
// message.
func (t *Transaction) BrokerID() int {
	t.mu.Lock()
	defer t.mu.Unlock()
	return t.brokerID
}

// Produce sends msgs in the transaction and waits for the broker to
// accept each one. The results carry each message's topic, partition,
// broker id and its final message id (the commit keeps it), with Offset
// -1: nothing is stored before Commit. The whole call is bounded by ctx
// and ProduceTimeout.
//
// Nothing is sent when a message is invalid or has no partition on the
// transaction's broker (ErrTransactionBroker); the transaction stays
// open. Any other failure (a refused put, a timeout, a lost connection)
// makes it rollback-only: Commit then rolls it back and fails.
func (t *Transaction) Produce(ctx context.Context, msgs ...*message.Message) ([]SendResult, error) {
	t.mu.Lock()
	defer t.mu.Unlock()
	if err := t.usable(); err != nil {
		return nil, err
	}
	if len(msgs) == 0 {
		return nil, nil
	}
	for i, m := range msgs {
		unbind(m) // a transaction is stored once by its commit: no producer sequence
		if err := checkMessage(ctx, m, t.cp.cfg.maxMessageSize); err != nil {
			return nil, fmt.Errorf("message %d: %w", i, err)
		}
	}
	ctx, cancel := context.WithTimeout(ctx, t.cp.cfg.sendTimeout)
	defer cancel()
	parts := make([]message.Partition, len(msgs))
	addr, brokerID := t.addr, t.brokerID
	for i, m := range msgs {
		p, a, err := t.choose(ctx, m, brokerID)
		if err != nil {
			err = fmt.Errorf("metaq: transaction %s: message %d: %w", t.key, i, err)
			if errors.Is(err, ErrForbidden) {
				t.fail(err) // as a refused put: the transaction rolls back
			}
			return nil, err
		}
		if brokerID < 0 {
			addr, brokerID = a, p.BrokerID
		}
		parts[i] = p
	}
	begin := t.w == nil
	if begin {
		bp, err := t.cp.broker(addr)
		if err != nil {
			return nil, err
		}
		w, err := bp.cn.get(ctx)
		if err != nil {
			return nil, fmt.Errorf("metaq: transaction %s: connect to broker %d at %s: %w", t.key, brokerID, addr, err)
		}
		t.w, t.addr, t.brokerID = w, addr, brokerID
	}
	// BEGIN and the puts are pipelined: the broker handles a connection's
	// requests in order.
	type pending struct {
		c   *call
		err error
	}
	calls := make([]pending, 0, len(msgs)+1)
	send := func(encode func([]byte, int32) []byte) {
		c := getCall()
		if err := t.w.send(c, encode); err != nil {
			putCall(c)
			calls = append(calls, pending{err: err})
			return
		}
		calls = append(calls, pending{c: c})
	}
	if begin {
		send(func(dst []byte, op int32) []byte {
			return protocol.AppendTransaction(dst, t.key, t.session, protocol.TxBegin, t.cfg.timeout, "", op)
		})
	}
	for i, m := range msgs {
		crc := int64(dataChecksum(m))
		part := parts[i].Partition
		send(func(dst []byte, op int32) []byte {
			dst = protocol.AppendTxPutHeader(dst, m.Topic, part, m.DataLen(), m.Flag(), crc, t.key, op)
			return m.AppendData(dst)
		})
	}
	var first error
	results := make([]SendResult, len(msgs))
	for i, pc := range calls {
		err := pc.err
		c := pc.c
		if c != nil {
			err = t.wait(ctx, c)
		}
		j := i
		if begin {
			j--
		}
		if err == nil {
			if j < 0 {
				if c.code != protocol.StatusOK {
					err = fmt.Errorf("begin: %w", resultError(c.code, c.body))
				}
			} else {
				m := msgs[j]
				var res SendResult
				if res, err = putResult(m, parts[j].Partition, c); err == nil {
					m.Offset = -1
					res.BrokerID, res.Offset = t.brokerID, -1
					results[j] = res
					t.n++
				}
			}
		}
		if c != nil {
			putCall(c)
		}
		if err != nil && first == nil {
			if j >= 0 {
				err = fmt.Errorf("message %d: %w", j, err)
			}
			first = err
		}
	}
	if first != nil {
		t.fail(first)
		return results, fmt.Errorf("metaq: transaction %s: %w", t.key, first)
	}
	return results, nil
}

// choose picks m's partition: the Selector's choice among every partition
// of its topic for the first message (brokerID < 0), else among the
// partitions of brokerID.
func (t *Transaction) choose(ctx context.Context, m *message.Message, brokerID int) (message.Partition, string, error) {
	v := t.cp.view(m.Topic)
	if err := v.Wait(ctx); err != nil {
		return message.Partition{}, "", fmt.Errorf("read partitions of %s %s: %w", m.Topic, t.cp.src.where(), err)
	}
	snap := v.Snapshot()
	ps := snap.Partitions
	if len(ps) == 0 {
		if err := viewDenied(v); err != nil {
			return message.Partition{}, "", err
		}
	}
	if brokerID >= 0 {
		ps = nil
		for _, p := range snap.Partitions {
			if p.BrokerID == brokerID {
				ps = append(ps, p)
			}
		}
		if len(ps) == 0 {
			return message.Partition{}, "", fmt.Errorf("%w: %s lists no partition of %s on broker %d (%s)",
				ErrTransactionBroker, t.cp.src.where(), m.Topic, brokerID, t.addr)
		}
	}
	if len(ps) == 0 {
		return message.Partition{}, "", fmt.Errorf("%w: %s has no partitions %s", ErrNoPartitions, m.Topic, t.cp.src.where())
	}
	i, err := t.cp.choose(ctx, m, ps)
	if err != nil {
		return message.Partition{}, "", err
	}
	p := ps[i]
	addr := snap.Addrs[p.BrokerID]
	if addr == "" {
		return message.Partition{}, "", fmt.Errorf("%w: no address for broker %d", ErrNoPartitions, p.BrokerID)
	}
	return p, addr, nil
}

// wait waits for c's reply on the pinned wire, bounded by ctx.
func (t *Transaction) wait(ctx context.Context, c *call) error {
	select {
	case <-c.done:
	case <-ctx.Done():
		if t.w.forget(c) {
			if errors.Is(ctx.Err(), context.DeadlineExceeded) {
				return fmt.Errorf("%w: %w", ErrTimeout, ctx.Err())
			}
			return ctx.Err()
		}
		<-c.done
	}
	return c.err
}

// usable reports why the transaction takes no more messages.
func (t *Transaction) usable() error {
	switch t.state {
	case txFinished:
		return ErrTransactionDone
	case txRollbackOnly, txLost:
		return fmt.Errorf("metaq: transaction %s is rollback-only: %w", t.key, t.cause)
	}
	if t.w != nil && t.w.broken() {
		t.state, t.cause = txLost, t.w.err
		return fmt.Errorf("metaq: transaction %s: %w: its connection to %s is gone: %w", t.key, ErrTransactionRolledBack, t.addr, t.w.err)
	}
	return nil
}

// fail makes the transaction rollback-only after err.
func (t *Transaction) fail(err error) {
	if t.state == txOpen {
		t.state, t.cause = txRollbackOnly, err
	}
}

// roundTrip sends one transaction command on the pinned wire and waits
// for its reply, bounded by ctx and the request timeout.
func (t *Transaction) roundTrip(ctx context.Context, typ protocol.TxType) (*call, error) {
	ctx, cancel := context.WithTimeout(ctx, t.cl.cfg.conn.requestTimeout)
	defer cancel()
	return t.w.roundTripBuf(ctx, nil, func(dst []byte, op int32) []byte {
		return protocol.AppendTransaction(dst, t.key, t.session, typ, 0, "", op)
	})
}

// Commit commits the transaction: the broker appends each partition's
// messages as one batch, in put order, and answers once they are stored
// (durable in group-commit mode). A transaction with no message commits
// nothing. If Produce failed before, Commit rolls back and returns an
// error wrapping ErrTransactionRolledBack; an error wrapping
// ErrTransactionInDoubt leaves the outcome unknown. The Transaction is
// over afterwards, whatever the result.
func (t *Transaction) Commit(ctx context.Context) error {
	t.mu.Lock()
	defer t.mu.Unlock()
	if t.state == txFinished {
		return ErrTransactionDone
	}
	if t.w == nil {
		t.state = txFinished
		return nil
	}
	if err := t.usable(); err != nil {
		cause := t.cause
		_ = t.rollbackLocked(ctx)
		return fmt.Errorf("metaq: transaction %s: %w: %w", t.key, ErrTransactionRolledBack, cause)
	}
	t.state = txFinished
	c, err := t.roundTrip(ctx, protocol.TxCommitOnePhase)
	if err != nil {
		return fmt.Errorf("metaq: commit of transaction %s (%d messages) on broker %d: %w: %w", t.key, t.n, t.brokerID, ErrTransactionInDoubt, err)
	}
	code, body := c.code, string(c.body)
	putCall(c)
	if code == protocol.StatusOK {
		return nil
	}
	berr := resultError(code, []byte(body))
	// Refused before the commit was recorded (the broker still holds
	// the transaction), or failed after (the broker no longer does, and
	// completes the commit at restart): a rollback tells which.
	if rc, err := t.roundTrip(ctx, protocol.TxRollback); err == nil {
		ok := rc.code == protocol.StatusOK
		putCall(rc)
		if ok {
			return fmt.Errorf("metaq: commit of transaction %s on broker %d: %w: %w", t.key, t.brokerID, ErrTransactionRolledBack, berr)
		}
	}
	return fmt.Errorf("metaq: commit of transaction %s on broker %d: %w: %w", t.key, t.brokerID, ErrTransactionInDoubt, berr)
}

// Rollback rolls the transaction back: nothing of it is stored. A
// transaction whose connection is gone was rolled back by the broker, so
// Rollback returns nil then. Calls after Commit or Rollback return
// ErrTransactionDone.
func (t *Transaction) Rollback(ctx context.Context) error {
	t.mu.Lock()
	defer t.mu.Unlock()
	if t.state == txFinished {
		return ErrTransactionDone
	}
	return t.rollbackLocked(ctx)
}

func (t *Transaction) rollbackLocked(ctx context.Context) error {
	t.state = txFinished
	if t.w == nil || t.w.broken() {
		return nil // nothing begun, or the broker rolled it back on close
	}
	c, err := t.roundTrip(ctx, protocol.TxRollback)
	if err != nil {
		if errors.Is(err, ErrConnectionLost) || errors.Is(err, ErrClosed) {
			return nil
		}
		// No COMMIT was sent on the connection: the broker rolls the
		// transaction back when the connection closes or at its timeout.
		return fmt.Errorf("metaq: rollback of transaction %s on broker %d not confirmed (it cannot commit: the broker drops it at its timeout): %w", t.key, t.brokerID, err)
	}
	code, body := c.code, c.body
	defer putCall(c)
	if code != protocol.StatusOK {
		// The broker does not hold it (rolled back at its timeout).
		t.cl.cfg.logger.Debug("metaq: rollback of a transaction the broker no longer holds", "key", t.key, "reply", string(body))
	}
	return nil
}
