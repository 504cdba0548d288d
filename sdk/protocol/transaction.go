package protocol

import (
	"bytes"
	"encoding/hex"
	"errors"
	"strconv"
	"strings"
	"unicode/utf8"
)

// TxType is the type of a transaction command (reference §10), spelled on
// the wire as MetaQ's TransactionType enum constant.
type TxType uint8

// The transaction command types.
const (
	TxUnknown TxType = iota
	TxBegin
	TxEnd
	TxPrepare
	TxCommitOnePhase
	TxCommitTwoPhase
	TxRollback
	TxForget
	TxRecover
	// TxHeuristicCommit and TxHeuristicRollback are metaq-go's admin
	// commands for what MetaQ does over JMX (commit/
	// rollbackTransactionHeuristically): complete an XA branch without
	// its coordinator. A later commit or rollback from the coordinator
	// fails with XA_HEURCOM, XA_HEURRB or XA_HEURHAZ until FORGET.
	TxHeuristicCommit
	TxHeuristicRollback
)

var txTypeNames = [...]string{"UNKNOWN", "BEGIN", "END", "PREPARE", "COMMIT_ONE_PHASE", "COMMIT_TWO_PHASE", "ROLLBACK", "FORGET", "RECOVER",
	"HEURISTIC_COMMIT", "HEURISTIC_ROLLBACK"}

// String is the type's name on the wire.
func (t TxType) String() string {
	if int(t) < len(txTypeNames) {
		return txTypeNames[t]
	}
	return "TxType(" + strconv.Itoa(int(t)) + ")"
}

// ParseTxType parses a type's wire name (exact, upper case as in MetaQ).
func ParseTxType(b []byte) (TxType, bool) {
	for i := TxBegin; int(i) < len(txTypeNames); i++ {
		if string(b) == txTypeNames[i] {
			return i, true
		}
	}
	return TxUnknown, false
}

// XA result and error codes (javax.transaction.xa.XAException), as carried
// by a PREPARE reply and by `XAException:code=<n>,msg=<m>` error bodies.
const (
	XAOK         = 0   // prepared
	XARdOnly     = 3   // prepared, but read-only: nothing to commit
	XAHeurMix    = 5   // heuristically committed in part
	XAHeurRB     = 6   // heuristically rolled back
	XAHeurCom    = 7   // heuristically committed
	XAHeurHaz    = 8   // heuristically completed, outcome unknown
	XARBRollback = 100 // rolled back (for an unspecified reason)
	XARBTimeout  = 106 // rolled back: the transaction took too long
	XAErRMErr    = -3  // resource manager error
	XAErNotA     = -4  // unknown XID
	XAErInval    = -5  // invalid arguments
	XAErProto    = -6  // called in an improper context
	XAErRMFail   = -7  // resource manager unavailable
	XAErDupID    = -8  // XID already exists
)

// NullTxKey is the transaction key of a RECOVER command.
const NullTxKey = "null"

// MaxXIDPart is the longest global transaction id or branch qualifier in
// bytes (javax.transaction.xa.Xid.MAXGTRIDSIZE and MAXBQUALSIZE).
const MaxXIDPart = 64

// TxID is a parsed transaction key: a local transaction's
// `TX:<sessionId>:<n>` or an XA branch's
// `XID:<formatId>:<hex gtrid>:<hex bqual>:<uniqueQualifier>`.
// Two keys name the same transaction exactly when their String forms are
// equal.
type TxID struct {
	// XA is true for an XID key.
	XA bool
	// Local: the producer session and the transaction's number in it.
	Session string
	Seq     int64
	// XA: the XID and the producer's unique qualifier.
	FormatID  int32
	Gtrid     []byte
	Bqual     []byte
	Qualifier string
}

// String is the canonical key: hex in lower case, numbers without leading
// zeros.
func (id TxID) String() string { return string(id.Append(nil)) }

// Append appends the canonical key to dst.
func (id TxID) Append(dst []byte) []byte {
	if !id.XA {
		dst = append(dst, "TX:"...)
		dst = append(dst, id.Session...)
		dst = append(dst, ':')
		return strconv.AppendInt(dst, id.Seq, 10)
	}
	dst = append(dst, "XID:"...)
	dst = strconv.AppendInt(dst, int64(id.FormatID), 10)
	dst = append(dst, ':')
	dst = hex.AppendEncode(dst, id.Gtrid)
	dst = append(dst, ':')
	dst = hex.AppendEncode(dst, id.Bqual)
	dst = append(dst, ':')
	return append(dst, id.Qualifier...)
}

// ParseTxKey parses a transaction key. A local key's session is everything
// between "TX:" and the last ':' (so an IPv6 address in it is kept); an XA
// key has exactly five ':'-separated fields.
func ParseTxKey(b []byte) (TxID, error) {
	switch {
	case bytes.HasPrefix(b, []byte("TX:")):
		rest := b[3:]
		i := bytes.LastIndexByte(rest, ':')
		if i < 0 {
			return TxID{}, errors.New("transaction key " + Printable(b) + ": want TX:<sessionId>:<n>")
		}
		sess := rest[:i]
		if err := checkKeyPart(sess, true); err != nil {
			return TxID{}, errors.New("transaction key " + Printable(b) + ": session id " + err.Error())
		}
		n, ok := parseInt(rest[i+1:], 64)
		if !ok {
			return TxID{}, errors.New("transaction key " + Printable(b) + ": bad number " + Printable(rest[i+1:]))
		}
		return TxID{Session: string(sess), Seq: n}, nil
	case bytes.HasPrefix(b, []byte("XID:")):
		f := bytes.Split(b, []byte(":"))
		if len(f) != 5 {
			return TxID{}, errors.New("transaction key " + Printable(b) + ": want XID:<formatId>:<hex gtrid>:<hex bqual>:<qualifier>")
		}
		fid, ok := parseInt(f[1], 32)
		if !ok {
			return TxID{}, errors.New("transaction key " + Printable(b) + ": bad format id")
		}
		g, err1 := decodeXIDPart(f[2])
		q, err2 := decodeXIDPart(f[3])
		if err1 != nil || err2 != nil {
			return TxID{}, errors.New("transaction key " + Printable(b) + ": gtrid and bqual must be even-length hex of at most " +
				strconv.Itoa(MaxXIDPart) + " bytes")
		}
		if err := checkKeyPart(f[4], false); err != nil {
			return TxID{}, errors.New("transaction key " + Printable(b) + ": qualifier " + err.Error())
		}
		return TxID{XA: true, FormatID: int32(fid), Gtrid: g, Bqual: q, Qualifier: string(f[4])}, nil
	}
	return TxID{}, errors.New("transaction key " + Printable(b) + ": want TX:<sessionId>:<n> or XID:<formatId>:<gtrid>:<bqual>:<qualifier>")
}

func decodeXIDPart(b []byte) ([]byte, error) {
	if len(b) > 2*MaxXIDPart {
		return nil, errors.New("too long")
	}
	out := make([]byte, hex.DecodedLen(len(b)))
	if _, err := hex.Decode(out, b); err != nil {
		return nil, err
	}
	return out, nil
}

// CheckQualifier reports whether q can be an XA unique qualifier: non-empty
// valid UTF-8 with no ':', whitespace or control character.
func CheckQualifier(q []byte) error { return checkKeyPart(q, false) }

// checkKeyPart checks a session id (colons allowed) or a qualifier.
func checkKeyPart(b []byte, colons bool) error {
	if len(b) == 0 {
		return errors.New("is empty")
	}
	if !utf8.Valid(b) {
		return errors.New("is not valid UTF-8")
	}
	for _, r := range string(b) {
		if r <= ' ' || r == 0x7f || (r >= 0x80 && r <= 0x9f) || r == 0x85 || r == 0xa0 || r == 0x2028 || r == 0x2029 ||
			(r == ':' && !colons) {
			return errors.New("has a forbidden character " + strconv.QuoteRune(r))
		}
	}
	return nil
}

// decodeTransaction decodes
// `transaction <txKey> <sessionId> <TYPE> [<timeout>] [<qualifier>] <opaque>`
// (no body, so every error keeps the framing). With 6 tokens the 5th is the
// timeout if it is all digits, else the qualifier, as in MetaQ.
func (d *Decoder) decodeTransaction(req *Request, t [][]byte) error {
	req.Op = OpTransaction
	if len(t) < 5 || len(t) > 7 {
		return d.bad(OpTransaction, "transaction: want 5 to 7 tokens, got "+strconv.Itoa(len(t)))
	}
	v, ok := parseInt(t[len(t)-1], 32)
	if !ok {
		return d.bad(OpTransaction, "transaction: bad opaque "+Printable(t[len(t)-1]))
	}
	req.Opaque = int32(v)
	req.TxKey, req.TxSession = t[1], t[2]
	typ, ok := ParseTxType(t[3])
	if !ok {
		return d.bad(OpTransaction, "transaction: unknown type "+Printable(t[3]))
	}
	req.TxType = typ
	switch len(t) {
	case 6:
		if allDigits(t[4]) {
			req.TxTimeout, ok = parseInt(t[4], 32)
			if !ok {
				return d.bad(OpTransaction, "transaction: bad timeout "+Printable(t[4]))
			}
		} else {
			req.TxQualifier = t[4]
		}
	case 7:
		req.TxTimeout, ok = parseInt(t[4], 32)
		if !ok {
			return d.bad(OpTransaction, "transaction: bad timeout "+Printable(t[4]))
		}
		req.TxQualifier = t[5]
	}
	if len(req.TxSession) == 0 {
		return d.bad(OpTransaction, "transaction: empty session id")
	}
	if req.TxQualifier != nil {
		if err := CheckQualifier(req.TxQualifier); err != nil {
			return d.bad(OpTransaction, "transaction: qualifier "+Printable(req.TxQualifier)+" "+err.Error())
		}
	}
	if typ == TxRecover && string(req.TxKey) == NullTxKey {
		return nil
	}
	if _, err := ParseTxKey(req.TxKey); err != nil {
		return d.bad(OpTransaction, "transaction: "+err.Error())
	}
	return nil
}

func allDigits(b []byte) bool {
	if len(b) == 0 {
		return false
	}
	for _, c := range b {
		if c < '0' || c > '9' {
			return false
		}
	}
	return true
}

// AppendTransaction appends a transaction command. The timeout (seconds) is
// sent when positive and the qualifier when not empty; key is NullTxKey for
// RECOVER.
func AppendTransaction(dst []byte, key, session string, typ TxType, timeout int, qualifier string, opaque int32) []byte {
	dst = append(dst, "transaction "...)
	dst = append(dst, key...)
	dst = append(dst, ' ')
	dst = append(dst, session...)
	dst = append(dst, ' ')
	dst = append(dst, typ.String()...)
	if timeout > 0 {
		dst = appendSpaceInt(dst, int64(timeout))
	}
	if qualifier != "" {
		dst = append(dst, ' ')
		dst = append(dst, qualifier...)
	}
	dst = appendSpaceInt(dst, int64(opaque))
	return append(dst, '\r', '\n')
}

// AppendTxPutHeader appends the header line of an 8-token transactional put
// (its body follows).
func AppendTxPutHeader(dst []byte, topic string, partition int32, dataLen int, flag int32, checksum int64, txKey string, opaque int32) []byte {
	dst = append(dst, "put "...)
	dst = append(dst, topic...)
	dst = appendSpaceInt(dst, int64(partition))
	dst = appendSpaceInt(dst, int64(dataLen))
	dst = appendSpaceInt(dst, int64(flag))
	dst = appendSpaceInt(dst, checksum)
	dst = append(dst, ' ')
	dst = append(dst, txKey...)
	dst = appendSpaceInt(dst, int64(opaque))
	return append(dst, '\r', '\n')
}

// xaPrefix starts the body of a 500 reply carrying an XA error code.
const xaPrefix = "XAException:code="

// XAErrorBody is the body of a 500 reply for an XA error:
// `XAException:code=<n>,msg=<m>`. Line breaks in msg become spaces.
func XAErrorBody(code int, msg string) string {
	msg = strings.NewReplacer("\r", " ", "\n", " ").Replace(msg)
	return xaPrefix + strconv.Itoa(code) + ",msg=" + msg
}

// ParseXAError parses an XAErrorBody; ok is false for any other body.
func ParseXAError(body []byte) (code int, msg string, ok bool) {
	rest, found := bytes.CutPrefix(body, []byte(xaPrefix))
	if !found {
		return 0, "", false
	}
	num, m, found := bytes.Cut(rest, []byte(",msg="))
	if !found {
		return 0, "", false
	}
	c, okN := parseInt(num, 32)
	if !okN {
		return 0, "", false
	}
	return int(c), string(m), true
}
