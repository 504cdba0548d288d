package tx

import "github.com/metaq-go/metaq/sdk/protocol"

// Command is a transaction command as the client sent it (but RECOVER,
// Manager.Recover, and END, which MetaQ ignores).
type Command struct {
	Type protocol.TxType
	// Key is the transaction's key (protocol.TxID.String()); XA says
	// whether it names an XA branch or a local transaction.
	Key string
	XA  bool
	// Session and Timeout (seconds) are BEGIN's.
	Session string
	Timeout int64
}

// Do runs cmd on s's connection. It is answered through s's Peer.TxDone
// with opaque, now or once the operation completes (a commit), but for a
// BEGIN of a local transaction on a connection that is closing.
func (m *Manager) Do(s *Session, cmd Command, opaque int32) {
	key := cmd.Key
	if cmd.XA {
		switch cmd.Type {
		case protocol.TxBegin:
			s.peer.TxDone(opaque, "", m.BeginXA(s, key, cmd.Session, cmd.Timeout))
		case protocol.TxForget:
			s.peer.TxDone(opaque, "", m.Forget(key))
		case protocol.TxPrepare:
			body, err := m.Prepare(s, key)
			s.peer.TxDone(opaque, body, err)
		case protocol.TxCommitOnePhase:
			m.CommitXA(s, key, OnePhase, opaque)
		case protocol.TxCommitTwoPhase:
			m.CommitXA(s, key, TwoPhase, opaque)
		case protocol.TxHeuristicCommit:
			m.CommitXA(s, key, HeuristicCommit, opaque)
		case protocol.TxRollback, protocol.TxHeuristicRollback:
			s.peer.TxDone(opaque, "", m.RollbackXA(s, key, cmd.Type == protocol.TxHeuristicRollback))
		default:
			s.peer.TxDone(opaque, "", malformed("unexpected transaction type "+cmd.Type.String()))
		}
		return
	}
	switch cmd.Type {
	case protocol.TxBegin:
		if closed, err := m.BeginLocal(s, key, cmd.Session, cmd.Timeout); !closed {
			s.peer.TxDone(opaque, "", err)
		}
	case protocol.TxPrepare:
		s.peer.TxDone(opaque, "", xaErr(protocol.XAErRMErr, "transaction "+key+" is local: it cannot be prepared"))
	case protocol.TxCommitOnePhase, protocol.TxCommitTwoPhase:
		// As in MetaQ, a local transaction commits in one phase whichever
		// type the client sends.
		m.CommitLocal(s, key, opaque)
	case protocol.TxRollback:
		s.peer.TxDone(opaque, "", m.RollbackLocal(s, key))
	case protocol.TxForget, protocol.TxHeuristicCommit, protocol.TxHeuristicRollback:
		s.peer.TxDone(opaque, "", plainErr("transaction "+key+" is local: "+cmd.Type.String()+" applies to XA transactions"))
	default:
		s.peer.TxDone(opaque, "", malformed("unexpected transaction type "+cmd.Type.String()))
	}
}
