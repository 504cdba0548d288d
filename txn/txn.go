// Package txn is the plugin kind of XA transaction coordinators, and the
// in-process transaction manager that drives them: MetaQ's XA transactions
// (reference §10) without a JTA container.
//
// Two halves:
//
//   - A Resource is one XA resource manager reached from this process: a
//     MySQL/MariaDB connection (txn/mysql), a metaq broker (XA over the
//     protocol: Start is the lazy BEGIN, then END, PREPARE,
//     COMMIT_TWO_PHASE, ROLLBACK, RECOVER), or anything else that speaks XA.
//     Resources live in the application's process: they hold its
//     connections, so they never cross a plugin boundary.
//   - A Coordinator is the durable half of the transaction manager: it
//     hands out global XIDs and keeps the decision log. It is the plugin
//     kind (plugins.KindCoordinator): builtin in process (txn/file, an
//     append log with CRC'd records and fsync) or a plugin binary over
//     gRPC (cmd/metaq-txn-mysql keeps its log in MySQL, so that several
//     instances of an application can recover each other's transactions).
//
// A Manager joins them: Begin asks the Coordinator for a new global XID,
// Global.Enlist starts one branch per Resource, Global.Commit ends and
// prepares every branch, logs the commit decision through the Coordinator
// (the commit point: it is durable before phase two starts), then commits
// every branch and forgets the decision. Manager.Recover settles in-doubt
// branches after a crash: each Resource's RECOVER list against the
// decision log, committing branches with a logged commit and rolling back
// the rest (presumed abort).
//
// Every global XID names its owner (ManagerOptions.Owner, one per
// application instance): the gtrid is "<owner>.<24 hex digits>". An
// instance recovers its own transactions by default, and another
// instance's only when told to (RecoverOptions.Owners), once that one is
// known to be dead.
package txn

import (
	"bytes"
	"context"
	"crypto/rand"
	"encoding/hex"
	"fmt"
	"strconv"
	"strings"
	"time"
)

// XA limits and the format id of global transactions made here.
const (
	// MaxGtridSize is the longest global transaction id, in bytes (XA's
	// MAXGTRIDSIZE; MySQL's limit too).
	MaxGtridSize = 64
	// MaxBqualSize is the longest branch qualifier, in bytes (XA's
	// MAXBQUALSIZE).
	MaxBqualSize = 64
	// MaxOwnerLen is the longest owner name, in bytes: the gtrid is the
	// owner, a dot and 24 hex digits.
	MaxOwnerLen = MaxGtridSize - 1 - 2*gtridRandom
	// MaxResourceNameLen is the longest Resource name, in bytes.
	MaxResourceNameLen = 64
	// FormatID is the XA format id of every global XID that NewGlobalXID
	// makes ("MQG1"). Recovery touches only XIDs of this format.
	FormatID int32 = 0x4d514731

	// gtridRandom is the number of random bytes in a gtrid.
	gtridRandom = 12
)

// XID is an XA transaction id: a global transaction (FormatID, Gtrid)
// and, for a branch of it, a branch qualifier (Bqual). The global XID of
// a transaction has an empty Bqual.
type XID struct {
	FormatID int32
	Gtrid    []byte
	Bqual    []byte
}

// NewGlobalXID returns a new global XID owned by owner: format FormatID,
// gtrid "<owner>.<24 random hex digits>", no bqual. Coordinators use it in
// Begin. The owner must pass ValidateOwner.
func NewGlobalXID(owner string) (XID, error) {
	if err := ValidateOwner(owner); err != nil {
		return XID{}, err
	}
	var r [gtridRandom]byte
	if _, err := rand.Read(r[:]); err != nil {
		return XID{}, fmt.Errorf("txn: random gtrid: %w", err)
	}
	g := make([]byte, 0, len(owner)+1+2*gtridRandom)
	g = append(g, owner...)
	g = append(g, '.')
	g = hex.AppendEncode(g, r[:])
	return XID{FormatID: FormatID, Gtrid: g}, nil
}

// ValidateOwner checks an owner name: 1 to MaxOwnerLen bytes of
// [A-Za-z0-9_.-]. It fails with ErrInvalid.
func ValidateOwner(owner string) error {
	if owner == "" || len(owner) > MaxOwnerLen || !nameChars(owner) {
		return fmt.Errorf("%w: owner %q: use 1 to %d characters from [A-Za-z0-9_.-]", ErrInvalid, owner, MaxOwnerLen)
	}
	return nil
}

// ValidateResourceName checks a Resource's name: 1 to MaxResourceNameLen
// bytes of [A-Za-z0-9_.-]. It fails with ErrInvalid.
func ValidateResourceName(name string) error {
	if name == "" || len(name) > MaxResourceNameLen || !nameChars(name) {
		return fmt.Errorf("%w: resource name %q: use 1 to %d characters from [A-Za-z0-9_.-]", ErrInvalid, name, MaxResourceNameLen)
	}
	return nil
}

func nameChars(s string) bool {
	for i := 0; i < len(s); i++ {
		c := s[i]
		if !(c >= 'a' && c <= 'z' || c >= 'A' && c <= 'Z' || c >= '0' && c <= '9' || c == '_' || c == '.' || c == '-') {
			return false
		}
	}
	return true
}

// Validate checks x's sizes: a gtrid of 1 to MaxGtridSize bytes, a bqual
// of at most MaxBqualSize, a format id other than -1 (XA's null XID). It
// fails with ErrInvalid.
func (x XID) Validate() error {
	switch {
	case x.FormatID == -1:
		return fmt.Errorf("%w: xid has the null format id -1", ErrInvalid)
	case len(x.Gtrid) == 0 || len(x.Gtrid) > MaxGtridSize:
		return fmt.Errorf("%w: xid gtrid is %d bytes (1 to %d)", ErrInvalid, len(x.Gtrid), MaxGtridSize)
	case len(x.Bqual) > MaxBqualSize:
		return fmt.Errorf("%w: xid bqual is %d bytes (at most %d)", ErrInvalid, len(x.Bqual), MaxBqualSize)
	}
	return nil
}

// IsZero reports whether x is the zero XID.
func (x XID) IsZero() bool { return x.FormatID == 0 && len(x.Gtrid) == 0 && len(x.Bqual) == 0 }

// Global returns x's global XID (x without its bqual).
func (x XID) Global() XID { return XID{FormatID: x.FormatID, Gtrid: bytes.Clone(x.Gtrid)} }

// Branch returns the branch of x's global transaction with qualifier bqual.
func (x XID) Branch(bqual []byte) XID {
	return XID{FormatID: x.FormatID, Gtrid: bytes.Clone(x.Gtrid), Bqual: bytes.Clone(bqual)}
}

// Equal reports whether x and y are the same XID.
func (x XID) Equal(y XID) bool {
	return x.FormatID == y.FormatID && bytes.Equal(x.Gtrid, y.Gtrid) && bytes.Equal(x.Bqual, y.Bqual)
}

// SameGlobal reports whether x and y are branches of one global transaction.
func (x XID) SameGlobal(y XID) bool {
	return x.FormatID == y.FormatID && bytes.Equal(x.Gtrid, y.Gtrid)
}

// Owner returns the owner named in a gtrid that NewGlobalXID made; ok is
// false for an XID of another format or shape (not ours: recovery leaves it
// alone).
func (x XID) Owner() (owner string, ok bool) {
	if x.FormatID != FormatID || len(x.Gtrid) < 2+2*gtridRandom {
		return "", false
	}
	dot := len(x.Gtrid) - 1 - 2*gtridRandom
	if x.Gtrid[dot] != '.' {
		return "", false
	}
	if _, err := hex.DecodeString(string(x.Gtrid[dot+1:])); err != nil {
		return "", false
	}
	o := string(x.Gtrid[:dot])
	if ValidateOwner(o) != nil {
		return "", false
	}
	return o, true
}

// String is "<formatId>:<hex gtrid>:<hex bqual>", the XID part of MetaQ's
// key (lowercase hex).
func (x XID) String() string {
	return strconv.FormatInt(int64(x.FormatID), 10) + ":" + hex.EncodeToString(x.Gtrid) + ":" + hex.EncodeToString(x.Bqual)
}

// gkey is x's global transaction as a map key.
func (x XID) gkey() string { return strconv.FormatInt(int64(x.FormatID), 10) + ":" + string(x.Gtrid) }

// Key is MetaQ's transaction key of the branch x for the producer
// qualifier q: "XID:<formatId>:<hex gtrid>:<hex bqual>:<q>" (reference
// §10). q may not be empty or contain ':' or whitespace.
func (x XID) Key(q string) (string, error) {
	if err := x.Validate(); err != nil {
		return "", err
	}
	if q == "" || strings.ContainsAny(q, ": \t\r\n\v\f") {
		return "", fmt.Errorf("%w: qualifier %q may not be empty or contain ':' or whitespace", ErrInvalid, q)
	}
	return "XID:" + x.String() + ":" + q, nil
}

// ParseKey parses MetaQ's XID transaction key
// "XID:<formatId>:<hex gtrid>:<hex bqual>:<qualifier>" (hex of either
// case). It fails with ErrInvalid.
func ParseKey(key string) (x XID, qualifier string, err error) {
	parts := strings.Split(key, ":")
	if len(parts) != 5 || parts[0] != "XID" {
		return XID{}, "", fmt.Errorf("%w: %q is not XID:<formatId>:<hex gtrid>:<hex bqual>:<qualifier>", ErrInvalid, key)
	}
	f, err := strconv.ParseInt(parts[1], 10, 32)
	if err != nil {
		return XID{}, "", fmt.Errorf("%w: xid key %q: format id: %v", ErrInvalid, key, err)
	}
	g, err := hex.DecodeString(parts[2])
	if err != nil {
		return XID{}, "", fmt.Errorf("%w: xid key %q: gtrid: %v", ErrInvalid, key, err)
	}
	b, err := hex.DecodeString(parts[3])
	if err != nil {
		return XID{}, "", fmt.Errorf("%w: xid key %q: bqual: %v", ErrInvalid, key, err)
	}
	x = XID{FormatID: int32(f), Gtrid: g, Bqual: b}
	if len(b) == 0 {
		x.Bqual = nil
	}
	if err := x.Validate(); err != nil {
		return XID{}, "", err
	}
	q := parts[4]
	if q == "" || strings.ContainsAny(q, " \t\r\n\v\f") {
		return XID{}, "", fmt.Errorf("%w: xid key %q: bad qualifier", ErrInvalid, key)
	}
	return x, q, nil
}

// Vote is a branch's answer to Prepare.
type Vote int

// The votes (XA's return codes of xa_prepare).
const (
	// VoteOK (XA_OK, 0): the branch is prepared and waits for phase two.
	VoteOK Vote = 0
	// VoteReadOnly (XA_RDONLY, 3): the branch changed nothing and is
	// already complete; it takes no part in phase two.
	VoteReadOnly Vote = 3
)

// Resource is one XA resource manager as this process reaches it. The
// Manager calls it for the branches it enlists and for recovery; a
// Resource is used by one global transaction at a time (Start to
// Commit/Rollback), as a MySQL connection is, and by Recover in between.
//
// Errors: a failure the resource manager reports as an XA code is an
// *XAError (errors.As); anything else (a dropped connection) is taken as
// XAER_RMFAIL. Commit and Rollback of an XID the resource manager no
// longer knows answer XAER_NOTA, which the Manager takes as "already
// complete" during recovery.
type Resource interface {
	// Name names the resource in the decision log; it must pass
	// ValidateResourceName and be the same after a restart, so that
	// recovery can tell which branches it has seen.
	Name() string
	// Start begins work on branch xid (XA START, or the broker's lazy
	// BEGIN with its first message).
	Start(ctx context.Context, xid XID) error
	// End ends work on branch xid (XA END), before Prepare or Rollback.
	End(ctx context.Context, xid XID) error
	// Prepare asks branch xid to prepare (XA PREPARE): VoteOK once it is
	// durably prepared, VoteReadOnly if it changed nothing (it is then
	// complete). An error (an XA_RB* code: it rolled back) means it will
	// not commit.
	Prepare(ctx context.Context, xid XID) (Vote, error)
	// Commit commits branch xid: prepared, or, with onePhase, ended and
	// not prepared (XA COMMIT [ONE PHASE], COMMIT_TWO_PHASE).
	Commit(ctx context.Context, xid XID, onePhase bool) error
	// Rollback rolls branch xid back, prepared or not (XA ROLLBACK).
	Rollback(ctx context.Context, xid XID) error
	// Recover lists the prepared branches the resource manager holds (XA
	// RECOVER), of every owner and format: the Manager keeps its own.
	Recover(ctx context.Context) ([]XID, error)
	// Forget discards a heuristically completed branch (XA FORGET).
	Forget(ctx context.Context, xid XID) error
}

// Branch is one prepared branch of a logged decision: which Resource
// (by Name) holds it, and its bqual.
type Branch struct {
	Resource string
	Bqual    []byte
}

// Decision is a global transaction's logged commit decision: the global
// XID (no bqual), its owner, and the branches phase two must commit.
type Decision struct {
	XID      XID
	Owner    string
	Branches []Branch
	// LoggedAt is when the coordinator logged it (set by the coordinator).
	LoggedAt time.Time
}

// Validate checks a decision before it is logged: a global XID of
// FormatID owned by d.Owner, 1 or more branches with valid names and
// bquals, no branch twice. It fails with ErrInvalid.
func (d *Decision) Validate() error {
	if err := d.XID.Validate(); err != nil {
		return err
	}
	if len(d.XID.Bqual) != 0 {
		return fmt.Errorf("%w: decision xid %s has a bqual (a decision is logged for the global xid)", ErrInvalid, d.XID)
	}
	if o, ok := d.XID.Owner(); !ok || o != d.Owner {
		return fmt.Errorf("%w: decision xid %s is not a global xid of owner %q", ErrInvalid, d.XID, d.Owner)
	}
	if len(d.Branches) == 0 {
		return fmt.Errorf("%w: decision %s has no branches", ErrInvalid, d.XID)
	}
	seen := make(map[string]bool, len(d.Branches))
	for _, b := range d.Branches {
		if err := ValidateResourceName(b.Resource); err != nil {
			return err
		}
		if len(b.Bqual) == 0 || len(b.Bqual) > MaxBqualSize {
			return fmt.Errorf("%w: decision %s: branch bqual is %d bytes (1 to %d)", ErrInvalid, d.XID, len(b.Bqual), MaxBqualSize)
		}
		if seen[string(b.Bqual)] {
			return fmt.Errorf("%w: decision %s: bqual %x twice", ErrInvalid, d.XID, b.Bqual)
		}
		seen[string(b.Bqual)] = true
	}
	return nil
}

// InitRequest configures a coordinator. Config holds the strings of its
// configuration (OpenOptions.Config), nothing else.
type InitRequest struct {
	Config map[string]string
}

// BeginRequest asks for a new global transaction of Owner.
type BeginRequest struct {
	Owner string
}

// BeginResponse carries the new global XID (made by NewGlobalXID).
type BeginResponse struct {
	XID XID
}

// CommitRequest logs Decision: its global transaction commits.
type CommitRequest struct {
	Decision Decision
}

// ForgetRequest drops the decisions of the global XIDs whose phase two is
// complete. Unknown XIDs are ignored.
type ForgetRequest struct {
	XIDs []XID
}

// RecoverRequest asks for the logged decisions of Owners (every owner when
// empty).
type RecoverRequest struct {
	Owners []string
}

// RecoverResponse lists logged, unforgotten decisions, oldest first.
type RecoverResponse struct {
	Decisions []Decision
}

// Coordinator is the durable half of a transaction manager: it hands out
// global XIDs and keeps the log of commit decisions. It is presumed-abort:
// only commits are logged, and a prepared branch whose global transaction
// has no logged commit is rolled back by recovery. So it has no Prepare or
// Rollback call; the per-phase calls are Begin, Commit (the commit point),
// Forget (phase two done) and Recover.
//
// Implementations are safe for concurrent use. Init is called once before
// anything else (and again, with the same config, after a remote plugin
// restarts); calls before it fail with ErrNotInitialized. Close is
// idempotent; calls after it fail with ErrClosed. Invalid requests fail
// with ErrInvalid. Every failure is returned: a coordinator never drops a
// decision silently.
type Coordinator interface {
	Init(ctx context.Context, req *InitRequest) error
	// Begin returns a new global XID of req.Owner. It need not log
	// anything (presumed abort).
	Begin(ctx context.Context, req *BeginRequest) (*BeginResponse, error)
	// Commit logs req.Decision durably: when it returns nil, the decision
	// survives a crash of this process (and, for a builtin, of the
	// machine's power). On error the decision may or may not be logged:
	// the transaction is in doubt until Recover.
	Commit(ctx context.Context, req *CommitRequest) error
	// Forget drops decisions whose phase two is complete. It need not be
	// durable: a forgotten decision that reappears after a crash finds no
	// prepared branch and is forgotten again.
	Forget(ctx context.Context, req *ForgetRequest) error
	// Recover lists the logged decisions not yet forgotten.
	Recover(ctx context.Context, req *RecoverRequest) (*RecoverResponse, error)
	Close() error
}
