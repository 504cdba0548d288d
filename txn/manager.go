package txn

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"slices"
	"strconv"
	"sync"
)

// ManagerOptions configure a Manager.
type ManagerOptions struct {
	// Owner names this application instance in every global XID it
	// begins (ValidateOwner). It must be unique among the instances that
	// share resource managers or a decision log, and the same after a
	// restart, so that Recover finds the instance's transactions.
	// Required.
	Owner string
}

// Manager is the transaction manager of one application instance: it
// begins global transactions, runs two-phase commit over their branches
// with a Coordinator's decision log, and recovers after crashes. It is
// safe for concurrent use; it does not close the Coordinator.
type Manager struct {
	c     Coordinator
	owner string

	mu         sync.Mutex
	active     map[string]int      // global key -> live Globals (Begin to completion)
	recovering int                 // Recover calls running
	finished   map[string]struct{} // globals completed while a Recover ran
}

// NewManager returns a Manager over c (a Coordinator that Open returned,
// or any initialised one).
func NewManager(c Coordinator, opts ManagerOptions) (*Manager, error) {
	if c == nil {
		return nil, fmt.Errorf("%w: nil coordinator", ErrInvalid)
	}
	if err := ValidateOwner(opts.Owner); err != nil {
		return nil, err
	}
	return &Manager{c: c, owner: opts.Owner, active: make(map[string]int)}, nil
}

// Owner returns the Manager's owner name.
func (m *Manager) Owner() string { return m.owner }

// Coordinator returns the Manager's coordinator.
func (m *Manager) Coordinator() Coordinator { return m.c }

func (m *Manager) hold(x XID) {
	m.mu.Lock()
	m.active[x.gkey()]++
	m.mu.Unlock()
}

func (m *Manager) release(x XID) {
	m.mu.Lock()
	k := x.gkey()
	if m.active[k]--; m.active[k] <= 0 {
		delete(m.active, k)
	}
	if m.recovering > 0 {
		m.finished[k] = struct{}{}
	}
	m.mu.Unlock()
}

// isActive reports whether x's global is in flight here, or completed
// while a Recover ran (its branches may still appear in a RECOVER list
// read before they completed).
func (m *Manager) isActive(x XID) bool {
	m.mu.Lock()
	defer m.mu.Unlock()
	k := x.gkey()
	_, done := m.finished[k]
	return m.active[k] > 0 || done
}

func (m *Manager) startRecover() {
	m.mu.Lock()
	if m.recovering == 0 {
		m.finished = make(map[string]struct{})
	}
	m.recovering++
	m.mu.Unlock()
}

func (m *Manager) endRecover() {
	m.mu.Lock()
	if m.recovering--; m.recovering == 0 {
		m.finished = nil
	}
	m.mu.Unlock()
}

// Begin starts a global transaction: a new global XID from the
// coordinator, owned by the Manager's owner.
func (m *Manager) Begin(ctx context.Context) (*Global, error) {
	resp, err := m.c.Begin(ctx, &BeginRequest{Owner: m.owner})
	if err != nil {
		return nil, fmt.Errorf("txn: begin: %w", err)
	}
	x := resp.XID
	if err := x.Validate(); err != nil {
		return nil, fmt.Errorf("txn: begin: coordinator returned a bad xid: %w", err)
	}
	if o, ok := x.Owner(); !ok || o != m.owner || len(x.Bqual) != 0 {
		return nil, fmt.Errorf("txn: begin: coordinator returned xid %s, not a global xid of owner %q", x, m.owner)
	}
	m.hold(x)
	return &Global{m: m, xid: x}, nil
}

// Global states.
const (
	globalActive = iota
	globalCompleting
	globalDone
)

// Global is one global transaction. Enlist its branches, do the work on
// each resource, then Commit or Rollback once. It is safe for concurrent
// use, but its calls are serialised.
type Global struct {
	m   *Manager
	xid XID

	mu       sync.Mutex
	state    int
	branches []*branch
}

type branch struct {
	r     Resource
	name  string
	xid   XID
	ended bool
}

// XID returns the global XID.
func (g *Global) XID() XID { return g.xid.Global() }

// Enlist starts a branch of the transaction on r (r.Start) and returns
// the branch's XID. Each resource (by Name) is enlisted at most once.
func (g *Global) Enlist(ctx context.Context, r Resource) (XID, error) {
	g.mu.Lock()
	defer g.mu.Unlock()
	if g.state != globalActive {
		return XID{}, ErrDone
	}
	name := r.Name()
	if err := ValidateResourceName(name); err != nil {
		return XID{}, err
	}
	for _, b := range g.branches {
		if b.name == name {
			return XID{}, fmt.Errorf("%w: resource %q is already enlisted in %s", ErrInvalid, name, g.xid)
		}
	}
	bx := g.xid.Branch([]byte(strconv.Itoa(len(g.branches) + 1)))
	if err := r.Start(ctx, bx); err != nil {
		return XID{}, fmt.Errorf("txn: start branch %s on %s: %w", bx, name, err)
	}
	g.branches = append(g.branches, &branch{r: r, name: name, xid: bx})
	return bx.Branch(bx.Bqual), nil
}

// Commit commits the transaction in two phases: it ends and prepares
// every branch; if one fails it rolls them all back and returns an error
// wrapping ErrRolledBack. Otherwise it logs the commit decision with the
// coordinator (the commit point) and commits every prepared branch, then
// forgets the decision. Branches that vote read-only take no part in
// phase two, and a transaction whose branches are all read-only logs
// nothing. Every branch goes through prepare, even a lone one, so that
// the outcome is always recoverable.
//
// Errors after the commit point wrap ErrIncomplete (committed; Recover
// finishes the branches not reached) or ErrHeuristic. If the decision
// could not be confirmed logged the error wraps ErrInDoubt and the
// branches stay prepared for Recover.
func (g *Global) Commit(ctx context.Context) error {
	bs, err := g.begin()
	if err != nil {
		return err
	}
	defer g.finish()
	for _, b := range bs {
		if err := b.r.End(ctx, b.xid); err != nil {
			return g.abort(ctx, bs, fmt.Errorf("end branch %s on %s: %w", b.xid, b.name, err))
		}
		b.ended = true
	}
	var prepared []*branch
	for _, b := range bs {
		v, err := b.r.Prepare(ctx, b.xid)
		if err != nil {
			return g.abort(ctx, bs, fmt.Errorf("prepare branch %s on %s: %w", b.xid, b.name, err))
		}
		switch v {
		case VoteOK:
			prepared = append(prepared, b)
		case VoteReadOnly:
		default:
			return g.abort(ctx, bs, fmt.Errorf("prepare branch %s on %s: unknown vote %d", b.xid, b.name, v))
		}
	}
	if len(prepared) == 0 {
		return nil
	}
	d := Decision{XID: g.xid.Global(), Owner: g.m.owner}
	for _, b := range prepared {
		d.Branches = append(d.Branches, Branch{Resource: b.name, Bqual: bytes.Clone(b.xid.Bqual)})
	}
	if err := g.m.c.Commit(ctx, &CommitRequest{Decision: d}); err != nil {
		if errors.Is(err, ErrInvalid) {
			// Refused before anything was written: nothing is logged.
			return g.abort(ctx, bs, fmt.Errorf("log decision: %w", err))
		}
		return fmt.Errorf("txn: %s: %w: log decision: %w", g.xid, ErrInDoubt, err)
	}
	var errs []error
	pending := false
	for _, b := range prepared {
		err := b.r.Commit(ctx, b.xid, false)
		switch o := phaseTwo(ctx, b, err, true); {
		case o.err == nil:
		case o.pending:
			pending = true
			errs = append(errs, o.err)
		default:
			errs = append(errs, o.err)
		}
	}
	if pending {
		return fmt.Errorf("txn: %s committed: %w: %w", g.xid, ErrIncomplete, errors.Join(errs...))
	}
	// Every branch is complete: the decision may go. A failed Forget is
	// harmless (Recover finds no branch and forgets it again).
	_ = g.m.c.Forget(ctx, &ForgetRequest{XIDs: []XID{d.XID}})
	if len(errs) > 0 {
		return fmt.Errorf("txn: %s committed: %w", g.xid, errors.Join(errs...))
	}
	return nil
}

// outcome is what became of one branch in phase two.
type outcome struct {
	err     error
	pending bool // not reached: recovery must retry it
}

// phaseTwo interprets the result of committing (commit) or rolling back
// branch b: XAER_NOTA counts as done when known is false (recovery, or a
// retried call), heuristic completions are forgotten at the resource and
// reported, anything else leaves the branch pending.
func phaseTwo(ctx context.Context, b *branch, err error, commit bool) outcome {
	if err == nil {
		return outcome{}
	}
	op := "rollback"
	if commit {
		op = "commit"
	}
	switch c := xaCode(err); {
	case c == XAHeurCom && commit, c == XAHeurRB && !commit:
		_ = b.r.Forget(ctx, b.xid)
		return outcome{}
	case c == XAHeurCom, c == XAHeurRB, c == XAHeurMix, c == XAHeurHaz:
		_ = b.r.Forget(ctx, b.xid)
		return outcome{err: fmt.Errorf("%w: %s branch %s on %s: %w", ErrHeuristic, op, b.xid, b.name, err)}
	case c == XAErNotA && !commit:
		return outcome{} // never started or already rolled back
	case c.IsRollback() && !commit:
		return outcome{}
	case c.IsRollback():
		return outcome{err: fmt.Errorf("%w: commit branch %s on %s: rolled back by the resource: %w", ErrHeuristic, b.xid, b.name, err)}
	}
	return outcome{err: fmt.Errorf("%s branch %s on %s: %w", op, b.xid, b.name, err), pending: true}
}

// begin moves the global to completing and returns its branches.
func (g *Global) begin() ([]*branch, error) {
	g.mu.Lock()
	defer g.mu.Unlock()
	if g.state != globalActive {
		return nil, ErrDone
	}
	g.state = globalCompleting
	return slices.Clone(g.branches), nil
}

func (g *Global) finish() {
	g.mu.Lock()
	g.state = globalDone
	g.mu.Unlock()
	g.m.release(g.xid)
}

// abort rolls back every branch after cause and returns the error
// Commit reports.
func (g *Global) abort(ctx context.Context, bs []*branch, cause error) error {
	if err := g.rollback(ctx, bs); err != nil {
		return fmt.Errorf("txn: %s: %w: %w (and rollback: %w)", g.xid, ErrRolledBack, cause, err)
	}
	return fmt.Errorf("txn: %s: %w: %w", g.xid, ErrRolledBack, cause)
}

func (g *Global) rollback(ctx context.Context, bs []*branch) error {
	var errs []error
	pending := false
	for _, b := range bs {
		if !b.ended {
			// A branch that cannot be ended (the connection is gone, or
			// the resource ended it on its own) may still roll back.
			_ = b.r.End(ctx, b.xid)
			b.ended = true
		}
		o := phaseTwo(ctx, b, b.r.Rollback(ctx, b.xid), false)
		if o.err != nil {
			errs = append(errs, o.err)
			pending = pending || o.pending
		}
	}
	if pending {
		return fmt.Errorf("%w: %w", ErrIncomplete, errors.Join(errs...))
	}
	return errors.Join(errs...)
}

// Rollback rolls back every branch. Branches it could not reach are left
// to their resource managers (which roll back unprepared work when the
// connection goes) and to Recover; the error then wraps ErrIncomplete.
func (g *Global) Rollback(ctx context.Context) error {
	bs, err := g.begin()
	if err != nil {
		return err
	}
	defer g.finish()
	if err := g.rollback(ctx, bs); err != nil {
		return fmt.Errorf("txn: rollback %s: %w", g.xid, err)
	}
	return nil
}

// RecoverOptions say what Recover settles.
type RecoverOptions struct {
	// Resources are asked for their prepared branches (RECOVER). Give
	// every resource the owners' transactions use: a decision is
	// forgotten only once each of its branches' resources has been
	// seen without it.
	Resources []Resource
	// Owners whose transactions to recover; default the Manager's own.
	// Name another instance's owner only once that instance is known to
	// be down: its transactions in flight would be rolled back.
	Owners []string
}

// RecoverResult says what Recover did.
type RecoverResult struct {
	// Committed and RolledBack are the branches completed now.
	Committed, RolledBack []XID
	// Forgotten are the global XIDs whose decisions were dropped (every
	// branch complete).
	Forgotten []XID
	// Pending are the branches that remain in doubt (a resource failed);
	// Recover returns an error then.
	Pending []XID
}

// Recover settles the in-doubt branches of the owners' transactions: it
// reads the coordinator's decisions and each resource's RECOVER list,
// commits the prepared branches of a logged commit and rolls back the
// others (presumed abort), then forgets decisions all of whose branches
// are complete. Transactions this Manager has in flight are left alone,
// so Recover may run at any time. Run it at start, before new work,
// and whenever Commit reported ErrInDoubt or ErrIncomplete.
//
// It goes on past failures and returns them joined, with the result of
// what it did.
func (m *Manager) Recover(ctx context.Context, opts RecoverOptions) (*RecoverResult, error) {
	owners := opts.Owners
	if len(owners) == 0 {
		owners = []string{m.owner}
	}
	for _, o := range owners {
		if err := ValidateOwner(o); err != nil {
			return nil, err
		}
	}
	names := map[string]bool{}
	for _, r := range opts.Resources {
		n := r.Name()
		if err := ValidateResourceName(n); err != nil {
			return nil, err
		}
		if names[n] {
			return nil, fmt.Errorf("%w: resource %q given twice", ErrInvalid, n)
		}
		names[n] = true
	}
	m.startRecover()
	defer m.endRecover()
	resp, err := m.c.Recover(ctx, &RecoverRequest{Owners: owners})
	if err != nil {
		return nil, fmt.Errorf("txn: recover: read decisions: %w", err)
	}
	decided := make(map[string]*Decision, len(resp.Decisions))
	for i := range resp.Decisions {
		d := &resp.Decisions[i]
		decided[d.XID.gkey()] = d
	}
	ours := func(x XID) bool {
		o, ok := x.Owner()
		return ok && slices.Contains(owners, o) && !m.isActive(x)
	}

	res := &RecoverResult{}
	var errs []error
	queried := map[string]bool{}   // resources whose RECOVER answered
	completed := map[string]bool{} // branch XIDs completed now (String)
	failed := map[string]bool{}    // branch XIDs that stay in doubt
	for _, r := range opts.Resources {
		xids, err := r.Recover(ctx)
		if err != nil {
			errs = append(errs, fmt.Errorf("recover %s: %w", r.Name(), err))
			continue
		}
		queried[r.Name()] = true
		for _, x := range xids {
			if !ours(x) || completed[x.String()] || failed[x.String()] {
				continue
			}
			b := &branch{r: r, name: r.Name(), xid: x}
			_, commit := decided[x.Global().gkey()]
			var o outcome
			if commit {
				err = r.Commit(ctx, x, false)
			} else {
				err = r.Rollback(ctx, x)
			}
			if xaCode(err) == XAErNotA {
				// Listed by RECOVER yet unknown: the branch is attached to
				// a session the server still thinks alive, or another
				// process completed it meanwhile. Look again next time.
				o = outcome{err: fmt.Errorf("%s branch %s on %s: %w", map[bool]string{true: "commit", false: "rollback"}[commit], x, r.Name(), err), pending: true}
			} else {
				o = phaseTwo(ctx, b, err, commit)
			}
			switch {
			case o.pending:
				failed[x.String()] = true
				res.Pending = append(res.Pending, x)
			case commit:
				completed[x.String()] = true
				res.Committed = append(res.Committed, x)
			default:
				completed[x.String()] = true
				res.RolledBack = append(res.RolledBack, x)
			}
			if o.err != nil {
				errs = append(errs, o.err)
			}
		}
	}
	var forget []XID
	for _, d := range resp.Decisions {
		if m.isActive(d.XID) {
			continue
		}
		done := true
		for _, b := range d.Branches {
			bx := d.XID.Branch(b.Bqual).String()
			if failed[bx] || (!completed[bx] && !queried[b.Resource]) {
				done = false
				break
			}
		}
		if done {
			forget = append(forget, d.XID)
		}
	}
	if len(forget) > 0 {
		if err := m.c.Forget(ctx, &ForgetRequest{XIDs: forget}); err != nil {
			errs = append(errs, fmt.Errorf("forget decisions: %w", err))
		} else {
			res.Forgotten = forget
		}
	}
	if len(errs) > 0 {
		return res, fmt.Errorf("txn: recover: %w", errors.Join(errs...))
	}
	return res, nil
}
