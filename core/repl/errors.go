package repl

// Kind says what a replication refusal or failure is about; core/broker
// maps it to a status line (core/broker/repl.go).
type Kind int

const (
	// Disconnected: no slave is in sync to replicate to ("Slave is
	// disconnected ...").
	Disconnected Kind = iota + 1
	// SlaveFailed: the slave failed, or did not answer, a shipped sync.
	SlaveFailed
	// Fenced: a failover member that does not hold the epoch (or its
	// lease) acknowledges nothing.
	Fenced
	// Busy: a put refused while the member is between roles (taking the
	// epoch, switching over); retry in a moment.
	Busy
	// Refused: a replication request this member does not take now
	// (sync, sync-epoch, epoch-start, switchover).
	Refused
	// Invalid: a malformed replication request.
	Invalid
	// NotStored: a sync this slave could not store (a checksum that
	// does not match, a failed append).
	NotStored
)

// Error is a replication refusal or failure. Msg is the text the client
// sees, exactly.
type Error struct {
	Kind Kind
	Msg  string
}

func (e *Error) Error() string { return e.Msg }

func errorf(k Kind, msg string) *Error { return &Error{Kind: k, Msg: msg} }
