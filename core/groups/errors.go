package groups

// Kind classifies a refused group request; the protocol layer maps each
// kind to its status line.
type Kind uint8

const (
	// Invalid is a malformed request: a bad id, an unknown strategy, a
	// strategy other than the group's, or a connection already closed.
	Invalid Kind = iota + 1
	// Limit is a join over max_group_members or
	// max_memberships_per_connection.
	Limit
	// Conflict is a join with a consumer id that is already a member of
	// the group on another connection.
	Conflict
	// NotMember is a heartbeat from a consumer that is not (or no longer)
	// a member of the group on this connection.
	NotMember
)

// Error is a refused group request: its kind and the reason, the whole
// body of the reply.
type Error struct {
	Kind Kind
	Msg  string
}

func (e *Error) Error() string { return e.Msg }
