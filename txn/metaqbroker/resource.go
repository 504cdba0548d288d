// Package metaqbroker is a metaq broker as a txn.Resource: XA over the
// protocol (reference §10). Start is MetaQ's lazy BEGIN (sent with the
// branch's first message), then END, PREPARE, COMMIT_TWO_PHASE (or
// COMMIT_ONE_PHASE), ROLLBACK, RECOVER and FORGET.
//
//	xb, _ := cl.XABroker(ctx, "transfer-done")      // a broker serving the topic
//	r, _ := metaqbroker.NewResource(xb, metaqbroker.Options{})
//	g, _ := manager.Begin(ctx)
//	g.Enlist(ctx, r)
//	r.Produce(ctx, &message.Message{Topic: "transfer-done", Body: b})
//	g.Commit(ctx)
//
// The broker keeps an XA branch when the connection that began it goes,
// and lists it, once prepared, in RECOVER: after the application dies,
// Manager.Recover completes it through any new connection. Give Recover a
// Resource for every broker the application's XA messages may go to
// (Client.XABrokers).
package metaqbroker

import (
	"context"
	"errors"
	"fmt"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/metaq-go/metaq/sdk/client"
	"github.com/metaq-go/metaq/sdk/message"
	"github.com/metaq-go/metaq/sdk/protocol"
	"github.com/metaq-go/metaq/txn"
)

// Options configure a Resource.
type Options struct {
	// Name names the resource in the decision log; it must stay the same
	// across restarts (txn.ValidateResourceName). Default
	// "metaq-broker-<broker id>", and "metaq-broker-<broker id>-<user>"
	// when the Client authenticates with SASLPlain (characters outside
	// [A-Za-z0-9_.-] become '_').
	//
	// With auth on, RECOVER lists only the branches of the connection's
	// user (every branch for an admin), so a Resource of another user is
	// no authority on a branch: Manager.Recover takes a branch that a
	// queried Resource of its Name does not list as complete, and forgets
	// the decision. Give the Resources of different users different Names
	// (the default does, for SASL PLAIN; set Name with a client
	// certificate's user) and recover with the user who began the
	// branches, or an admin.
	Name string
	// Qualifier is the unique qualifier of the branches' keys
	// (XID:<formatId>:<gtrid>:<bqual>:<qualifier>). Default
	// client.DefaultXAQualifier(), MetaQ's "XAMessageProducer-<hostname>".
	Qualifier string
	// Timeout makes the broker roll back a branch not prepared within it
	// (1 s to 60 s); default the broker's tx_default_timeout.
	Timeout time.Duration
}

// Resource is one broker's XA branches. Like a MySQL connection it is
// used by one global transaction at a time (Start to Commit or
// Rollback); Recover may run on it in between. It is safe for concurrent
// use.
type Resource struct {
	b       *client.XABroker
	name    string
	q       string
	timeout int

	mu   sync.Mutex
	cur  *branch
	keys map[string]string // XID String -> key, as RECOVER listed them
}

type branch struct {
	xid   txn.XID
	key   string
	begun bool // BEGIN sent (with the first message)
	ended bool
}

var _ txn.Resource = (*Resource)(nil)

// NewResource returns the Resource of broker b.
func NewResource(b *client.XABroker, opts Options) (*Resource, error) {
	if b == nil {
		return nil, fmt.Errorf("%w: metaqbroker: nil broker", txn.ErrInvalid)
	}
	r := &Resource{b: b, name: opts.Name, q: opts.Qualifier, keys: map[string]string{}}
	if r.name == "" {
		r.name = "metaq-broker-" + strconv.Itoa(b.ID())
		if u := b.User(); u != "" {
			r.name += "-" + strings.Map(func(c rune) rune {
				if c >= 'a' && c <= 'z' || c >= 'A' && c <= 'Z' || c >= '0' && c <= '9' || c == '_' || c == '.' || c == '-' {
					return c
				}
				return '_'
			}, u)
		}
	}
	if err := txn.ValidateResourceName(r.name); err != nil {
		return nil, err
	}
	if r.q == "" {
		r.q = client.DefaultXAQualifier()
	}
	if err := protocol.CheckQualifier([]byte(r.q)); err != nil {
		return nil, fmt.Errorf("%w: metaqbroker: qualifier %q %v", txn.ErrInvalid, r.q, err)
	}
	if opts.Timeout != 0 {
		if opts.Timeout < time.Second || opts.Timeout > 60*time.Second {
			return nil, fmt.Errorf("%w: metaqbroker: timeout %v: want 1s to 60s", txn.ErrInvalid, opts.Timeout)
		}
		r.timeout = int(opts.Timeout / time.Second)
	}
	return r, nil
}

// Name is the resource's name.
func (r *Resource) Name() string { return r.name }

// Broker returns the broker.
func (r *Resource) Broker() *client.XABroker { return r.b }

// xaErr converts the client's XA refusal to a *txn.XAError.
func xaErr(err error) error {
	var xe *client.XAError
	if errors.As(err, &xe) {
		return &txn.XAError{Code: txn.XACode(xe.Code), Msg: xe.Msg, Err: err}
	}
	return err
}

func proto(msg string) error { return &txn.XAError{Code: txn.XAErProto, Msg: msg} }

// Start begins work on branch xid. Nothing is sent: BEGIN goes with the
// first message (Produce), so a branch that produces nothing is
// read-only.
func (r *Resource) Start(_ context.Context, xid txn.XID) error {
	key, err := xid.Key(r.q)
	if err != nil {
		return err
	}
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.cur != nil && !r.cur.ended {
		return proto("metaqbroker: branch " + r.cur.key + " is still active on " + r.name)
	}
	r.cur = &branch{xid: xid, key: key}
	return nil
}

// Produce sends msgs in the started branch to partitions of the broker
// (client.XABroker.Produce), beginning the branch on the broker with the
// first of them. The results' Offset is -1: nothing is stored before
// the branch commits.
func (r *Resource) Produce(ctx context.Context, msgs ...*message.Message) ([]client.SendResult, error) {
	r.mu.Lock()
	defer r.mu.Unlock()
	b := r.cur
	if b == nil || b.ended {
		return nil, proto("metaqbroker: no active branch on " + r.name + ": Enlist the resource first")
	}
	if !b.begun {
		if _, err := r.b.Command(ctx, protocol.TxBegin, b.key, r.timeout); err != nil {
			return nil, xaErr(err)
		}
		b.begun = true
	}
	res, err := r.b.Produce(ctx, b.key, msgs...)
	return res, xaErr(err)
}

// current returns the started branch if it is xid.
func (r *Resource) current(xid txn.XID) *branch {
	if r.cur != nil && r.cur.xid.Equal(xid) {
		return r.cur
	}
	return nil
}

// End ends work on xid (END, which the broker does not answer).
func (r *Resource) End(ctx context.Context, xid txn.XID) error {
	r.mu.Lock()
	defer r.mu.Unlock()
	b := r.current(xid)
	if b == nil {
		return &txn.XAError{Code: txn.XAErNotA, Msg: "metaqbroker: branch " + xid.String() + " is not started on " + r.name}
	}
	b.ended = true
	if b.begun {
		if _, err := r.b.Command(ctx, protocol.TxEnd, b.key, 0); err != nil {
			return xaErr(err)
		}
	}
	return nil
}

// Prepare prepares xid: VoteReadOnly, with nothing sent, for a branch
// that produced nothing; else PREPARE (fsynced by the broker).
func (r *Resource) Prepare(ctx context.Context, xid txn.XID) (txn.Vote, error) {
	r.mu.Lock()
	defer r.mu.Unlock()
	b := r.current(xid)
	if b != nil && !b.begun {
		r.cur = nil
		return txn.VoteReadOnly, nil
	}
	key, err := r.keyLocked(xid)
	if err != nil {
		return 0, err
	}
	body, err := r.b.Command(ctx, protocol.TxPrepare, key, 0)
	if err != nil {
		return 0, xaErr(err)
	}
	switch strings.TrimSpace(body) {
	case "0":
		return txn.VoteOK, nil
	case "3":
		r.cur = nil
		return txn.VoteReadOnly, nil
	}
	return 0, fmt.Errorf("metaqbroker: PREPARE of %s answered %q", key, body)
}

// keyLocked is xid's key: the one RECOVER listed, else with the
// resource's qualifier.
func (r *Resource) keyLocked(xid txn.XID) (string, error) {
	if b := r.current(xid); b != nil {
		return b.key, nil
	}
	if k, ok := r.keys[xid.String()]; ok {
		return k, nil
	}
	return xid.Key(r.q)
}

// Commit commits xid: COMMIT_TWO_PHASE, or COMMIT_ONE_PHASE with
// onePhase.
func (r *Resource) Commit(ctx context.Context, xid txn.XID, onePhase bool) error {
	typ := protocol.TxCommitTwoPhase
	if onePhase {
		typ = protocol.TxCommitOnePhase
	}
	return r.complete(ctx, xid, typ)
}

// Rollback rolls xid back (ROLLBACK); a branch that never sent BEGIN has
// nothing to roll back.
func (r *Resource) Rollback(ctx context.Context, xid txn.XID) error {
	r.mu.Lock()
	if b := r.current(xid); b != nil && !b.begun {
		r.cur = nil
		r.mu.Unlock()
		return nil
	}
	r.mu.Unlock()
	return r.complete(ctx, xid, protocol.TxRollback)
}

func (r *Resource) complete(ctx context.Context, xid txn.XID, typ protocol.TxType) error {
	r.mu.Lock()
	defer r.mu.Unlock()
	key, err := r.keyLocked(xid)
	if err != nil {
		return err
	}
	if _, err := r.b.Command(ctx, typ, key, 0); err != nil {
		return xaErr(err)
	}
	if r.current(xid) != nil {
		r.cur = nil
	}
	delete(r.keys, xid.String())
	return nil
}

// Recover lists the broker's prepared (and heuristically completed)
// branches, of every qualifier (another host's instance may have made
// them); keys that are not XIDs are skipped.
func (r *Resource) Recover(ctx context.Context) ([]txn.XID, error) {
	body, err := r.b.Command(ctx, protocol.TxRecover, protocol.NullTxKey, 0)
	if err != nil {
		return nil, xaErr(err)
	}
	var out []txn.XID
	r.mu.Lock()
	defer r.mu.Unlock()
	for _, key := range strings.Split(body, "\r\n") {
		if key == "" {
			continue
		}
		x, _, err := txn.ParseKey(key)
		if err != nil {
			continue
		}
		r.keys[x.String()] = key
		out = append(out, x)
	}
	return out, nil
}

// Forget discards a heuristically completed branch (FORGET).
func (r *Resource) Forget(ctx context.Context, xid txn.XID) error {
	r.mu.Lock()
	defer r.mu.Unlock()
	key, err := r.keyLocked(xid)
	if err != nil {
		return err
	}
	if _, err := r.b.Command(ctx, protocol.TxForget, key, 0); err != nil {
		return xaErr(err)
	}
	delete(r.keys, xid.String())
	return nil
}
