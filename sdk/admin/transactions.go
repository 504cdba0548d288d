package admin

import (
	"context"
	"fmt"
	"strconv"
	"strings"
	"time"

	"github.com/metaq-go/metaq/sdk/protocol"
)

// Transactions is a broker's `stats transactions`: its open transactions
// and the XA branches it completed heuristically.
type Transactions struct {
	// Raw is the reply as sent (STATS, the lines, END).
	Raw string `json:"-"`
	// BufferedBytes is what the open transactions hold in memory.
	BufferedBytes int64 `json:"buffered_bytes"`
	// Open are the open transactions, oldest first.
	Open []Transaction `json:"open"`
	// Heuristic are the heuristically completed XA branches, by key;
	// their State is heuristic_commit, heuristic_rollback or
	// heuristic_hazard.
	Heuristic []Transaction `json:"heuristic"`
}

// Transaction is one line of `stats transactions`.
type Transaction struct {
	// Key is the transaction key (TX:... or XID:...).
	Key string `json:"key"`
	// Type is "local" or "xa".
	Type  string `json:"type"`
	State string `json:"state"`
	// The rest is reported for open transactions only.
	Session  string        `json:"session,omitempty"`
	Messages int           `json:"messages,omitempty"`
	Bytes    int64         `json:"bytes,omitempty"`
	Age      time.Duration `json:"age,omitempty"`
	Timeout  time.Duration `json:"timeout,omitempty"`
}

// Transactions reads `stats transactions` of the broker at addr (admin
// rights with auth on).
func (a *Admin) Transactions(ctx context.Context, addr string) (*Transactions, error) {
	st, err := a.Stats(ctx, addr, "transactions")
	if err != nil {
		return nil, err
	}
	return ParseTransactions(st.Raw)
}

// ParseTransactions parses `stats transactions`: "open <n> buffered_bytes
// <n>", a line per open transaction ("<key> type <t> state <s> session
// <s> messages <n> bytes <n> age_ms <n> timeout_s <n>"), "heuristic <n>"
// and a line per heuristic branch ("<key> type xa state <s>"). Unknown
// keys are ignored.
func ParseTransactions(body string) (*Transactions, error) {
	out := &Transactions{Raw: body, Open: []Transaction{}, Heuristic: []Transaction{}}
	list := &out.Open
	for _, line := range statsBodyLines(body) {
		f := strings.Fields(line)
		switch {
		case len(f) == 0:
			continue
		case f[0] == "open":
			if len(f) >= 4 && f[2] == "buffered_bytes" {
				n, err := strconv.ParseInt(f[3], 10, 64)
				if err != nil {
					return nil, fmt.Errorf("stats transactions line %q: bad buffered_bytes", line)
				}
				out.BufferedBytes = n
			}
			continue
		case f[0] == "heuristic":
			list = &out.Heuristic
			continue
		case len(f)%2 != 1:
			return nil, fmt.Errorf("unexpected stats transactions line %q", line)
		}
		t := Transaction{Key: f[0]}
		for i := 1; i+1 < len(f); i += 2 {
			k, v := f[i], f[i+1]
			var err error
			var n int64
			switch k {
			case "type":
				t.Type = v
			case "state":
				t.State = v
			case "session":
				t.Session = v
			case "messages":
				t.Messages, err = strconv.Atoi(v)
			case "bytes":
				t.Bytes, err = strconv.ParseInt(v, 10, 64)
			case "age_ms":
				n, err = strconv.ParseInt(v, 10, 64)
				t.Age = time.Duration(n) * time.Millisecond
			case "timeout_s":
				n, err = strconv.ParseInt(v, 10, 64)
				t.Timeout = time.Duration(n) * time.Second
			}
			if err != nil {
				return nil, fmt.Errorf("stats transactions line %q: bad %s", line, k)
			}
		}
		*list = append(*list, t)
	}
	return out, nil
}

// PreparedTransactions lists the XA branches of the broker at addr that
// are prepared or heuristically completed (XA RECOVER), by key.
func (a *Admin) PreparedTransactions(ctx context.Context, addr string) ([]string, error) {
	body, err := a.roundTrip(ctx, addr, func(dst []byte, op int32) []byte {
		return protocol.AppendTransaction(dst, protocol.NullTxKey, adminSession, protocol.TxRecover, 0, "", op)
	})
	if err != nil {
		return nil, err
	}
	keys := []string{}
	for _, k := range strings.Split(string(body), "\r\n") {
		if k != "" {
			keys = append(keys, k)
		}
	}
	return keys, nil
}

// CommitHeuristically commits the prepared XA branch key
// (XID:<formatId>:<hex gtrid>:<hex bqual>:<qualifier>) on the broker at
// addr without its coordinator, as MetaQ's JMX heuristics do. The
// coordinator's own commit or rollback of it then fails with XA_HEURCOM
// (or XA_HEURHAZ), and RECOVER lists it until Forget.
func (a *Admin) CommitHeuristically(ctx context.Context, addr, key string) error {
	return a.decide(ctx, addr, key, protocol.TxHeuristicCommit)
}

// RollbackHeuristically rolls back the XA branch key on the broker at
// addr without its coordinator (see CommitHeuristically; XA_HEURRB).
func (a *Admin) RollbackHeuristically(ctx context.Context, addr, key string) error {
	return a.decide(ctx, addr, key, protocol.TxHeuristicRollback)
}

// Forget discards the heuristic outcome of the XA branch key on the broker
// at addr.
func (a *Admin) Forget(ctx context.Context, addr, key string) error {
	return a.decide(ctx, addr, key, protocol.TxForget)
}

// decide sends one XA command for key. A refusal is the broker's
// *client.BrokerError.
func (a *Admin) decide(ctx context.Context, addr, key string, typ protocol.TxType) error {
	id, err := protocol.ParseTxKey([]byte(key))
	if err != nil {
		return err
	}
	if !id.XA {
		return fmt.Errorf("admin: %s applies to XA branches (XID:...), not to local transaction %s", typ, key)
	}
	k := id.String()
	_, err = a.roundTrip(ctx, addr, func(dst []byte, op int32) []byte {
		return protocol.AppendTransaction(dst, k, adminSession, typ, 0, "", op)
	})
	return err
}

// adminSession is the session id of the Admin's transaction commands.
const adminSession = "metaq-cli"
