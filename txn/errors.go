package txn

import (
	"context"
	"errors"
	"fmt"

	"github.com/metaq-go/metaq/internal/pluginrpc"
	"github.com/metaq-go/metaq/plugins"
	"google.golang.org/grpc/codes"
)

// The sentinels of the package. ErrBadConfig, ErrNotInitialized,
// ErrClosed and ErrInvalid cross the plugin boundary: grpc_server maps
// them to gRPC status codes with an ErrorInfo reason and grpc_client maps
// them back, so callers use errors.Is on either side.
var (
	// ErrBadConfig means Init was given a configuration the coordinator
	// rejects.
	ErrBadConfig = errors.New("txn: bad config")
	// ErrNotInitialized is returned by coordinator calls before Init.
	ErrNotInitialized = errors.New("txn: coordinator not initialized")
	// ErrClosed is returned by calls after Close.
	ErrClosed = errors.New("txn: closed")
	// ErrInvalid means a malformed request: a bad XID, owner, resource
	// name or decision.
	ErrInvalid = errors.New("txn: invalid request")
	// ErrUnknownCoordinator means OpenOptions.Name names neither a builtin
	// nor a plugin.
	ErrUnknownCoordinator = errors.New("txn: unknown coordinator")

	// ErrRolledBack means Global.Commit rolled the transaction back (a
	// branch failed to end or prepare); the error wraps the cause too.
	ErrRolledBack = errors.New("txn: transaction rolled back")
	// ErrInDoubt means Global.Commit could not confirm that the commit
	// decision was logged: the branches stay prepared, and the outcome is
	// whatever Manager.Recover finds in the decision log (commit if the
	// decision is there, rollback if not).
	ErrInDoubt = errors.New("txn: transaction in doubt")
	// ErrIncomplete means the transaction's outcome is decided but some
	// branches were not reached in phase two (or, after Rollback, could
	// not be rolled back); Manager.Recover completes them. After
	// Global.Commit it means committed.
	ErrIncomplete = errors.New("txn: transaction decided, branches pending")
	// ErrHeuristic means a resource manager completed a branch on its own
	// (XA_HEURRB, XA_HEURMIX, XA_HEURHAZ) against the decision; the error
	// wraps the *XAError.
	ErrHeuristic = errors.New("txn: heuristic outcome")
	// ErrDone means the global transaction was already committed or rolled
	// back.
	ErrDone = errors.New("txn: transaction already completed")
)

// XACode is an XA return code (the X/Open XA specification's values,
// which MetaQ's XAException carries as code=<n>).
type XACode int

// The XA codes.
const (
	XAOK          XACode = 0   // XA_OK
	XARDOnly      XACode = 3   // XA_RDONLY: read-only branch, complete
	XARetry       XACode = 4   // XA_RETRY
	XAHeurMix     XACode = 5   // XA_HEURMIX: partly committed, partly rolled back
	XAHeurRB      XACode = 6   // XA_HEURRB: heuristically rolled back
	XAHeurCom     XACode = 7   // XA_HEURCOM: heuristically committed
	XAHeurHaz     XACode = 8   // XA_HEURHAZ: may have been heuristically completed
	XANoMigrate   XACode = 9   // XA_NOMIGRATE
	XARBRollback  XACode = 100 // XA_RBROLLBACK: rolled back, unspecified reason
	XARBCommFail  XACode = 101 // XA_RBCOMMFAIL
	XARBDeadlock  XACode = 102 // XA_RBDEADLOCK
	XARBIntegrity XACode = 103 // XA_RBINTEGRITY
	XARBOther     XACode = 104 // XA_RBOTHER
	XARBProto     XACode = 105 // XA_RBPROTO
	XARBTimeout   XACode = 106 // XA_RBTIMEOUT
	XARBTransient XACode = 107 // XA_RBTRANSIENT
	XAErAsync     XACode = -2  // XAER_ASYNC
	XAErRMErr     XACode = -3  // XAER_RMERR: resource manager error
	XAErNotA      XACode = -4  // XAER_NOTA: unknown XID
	XAErInval     XACode = -5  // XAER_INVAL: invalid arguments
	XAErProto     XACode = -6  // XAER_PROTO: call out of order
	XAErRMFail    XACode = -7  // XAER_RMFAIL: resource manager unavailable
	XAErDupID     XACode = -8  // XAER_DUPID: the XID exists already
	XAErOutside   XACode = -9  // XAER_OUTSIDE: working outside the transaction
)

// IsRollback reports whether c is one of the XA_RB* codes: the branch was
// rolled back.
func (c XACode) IsRollback() bool { return c >= XARBRollback && c <= XARBTransient }

// XAError is a failure a resource manager reported with an XA code.
type XAError struct {
	Code XACode
	Msg  string
	// Err is the underlying error (a driver error), if any.
	Err error
}

// Error is "XAException:code=<n>,msg=<m>", MetaQ's form.
func (e *XAError) Error() string {
	return fmt.Sprintf("XAException:code=%d,msg=%s", int(e.Code), e.Msg)
}

// Unwrap returns the underlying error.
func (e *XAError) Unwrap() error { return e.Err }

// xaCode returns err's XA code: that of an *XAError in its chain, else
// XAER_RMFAIL (the resource manager could not be reached).
func xaCode(err error) XACode {
	var xe *XAError
	if errors.As(err, &xe) {
		return xe.Code
	}
	return XAErRMFail
}

// statusCodes is how the sentinels cross the plugin boundary
// (internal/pluginrpc): each with a gRPC code and an ErrorInfo reason,
// which the host maps back, so no error text is ever matched; context
// errors as Canceled or DeadlineExceeded; anything else as Internal. The
// last entry only reads an Unavailable without a reason back.
var statusCodes = pluginrpc.Codes{
	Domain: "metaq.txn",
	Table: []pluginrpc.Code{
		{Err: ErrClosed, Code: codes.FailedPrecondition, Reason: "CLOSED"},
		{Err: ErrNotInitialized, Code: codes.FailedPrecondition, Reason: "NOT_INITIALIZED"},
		{Err: ErrBadConfig, Code: codes.InvalidArgument, Reason: "BAD_CONFIG"},
		{Err: ErrInvalid, Code: codes.InvalidArgument, Reason: "INVALID"},
		{Err: plugins.ErrUnavailable, Code: codes.Unavailable, Reason: "UNAVAILABLE"},
		{Err: context.DeadlineExceeded, Code: codes.DeadlineExceeded},
		{Err: context.Canceled, Code: codes.Canceled},
		{Err: plugins.ErrUnavailable, Code: codes.Unavailable},
	},
}
