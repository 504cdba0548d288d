package main

import (
	"context"
	"fmt"
	"strings"

	"github.com/metaq-go/metaq/sdk/protocol"
	"github.com/spf13/cobra"
	"github.com/spf13/pflag"
)

const txHelp = `
Administer the broker's transactions (admin rights with auth on): list the
open ones and the heuristically completed XA branches, or complete an XA
branch without its coordinator (MetaQ's JMX heuristics).

After "tx commit" or "tx rollback" the coordinator's own commit or
rollback of that XID fails with XA_HEURCOM (7), XA_HEURRB (6) or, if the
heuristic commit failed, XA_HEURHAZ (8); RECOVER still lists it until
"tx forget". The outcome survives broker restarts.
`

const txListHelp = `
Print the broker's "stats transactions": a line "open <n> buffered_bytes
<n>", one line per open transaction (key, type, state, session, messages,
bytes, age_ms, timeout_s), then "heuristic <n>" and one line per
heuristically completed XA branch.

example:
  metaq tx list --addr 127.0.0.1:8123
`

func cmdTx(e *env) *cobra.Command {
	return parent(e, "tx", txHelp, cmdTxList(e),
		cmdTxDecide(e, "tx commit", protocol.TxHeuristicCommit, "committed heuristically"),
		cmdTxDecide(e, "tx rollback", protocol.TxHeuristicRollback, "rolled back heuristically"),
		cmdTxDecide(e, "tx forget", protocol.TxForget, "forgotten"))
}

// txRoundTrip sends one request to the broker at --addr and returns the
// reply's code and body.
func txRoundTrip(e *env, encode func(dst []byte, op int32) []byte) (int, string, error) {
	if err := checkBroker(e); err != nil {
		return 0, "", err
	}
	ctx, cancel := context.WithTimeout(e.ctx, e.timeout)
	defer cancel()
	rc, err := dialRaw(ctx, e.sec, e.addr)
	if err != nil {
		return 0, "", err
	}
	defer rc.Close()
	stop := context.AfterFunc(ctx, func() { rc.Close() })
	defer stop()
	code, body, err := rc.roundTrip(encode)
	return code, string(body), err
}

func cmdTxList(e *env) *cobra.Command {
	return leaf(e, "tx list", "tx list", txListHelp, func(fs *pflag.FlagSet) func(args []string) error {
		return func(args []string) error {
			if len(args) > 0 {
				return usagef("unexpected argument %q", args[0])
			}
			code, body, err := txRoundTrip(e, func(d []byte, op int32) []byte { return protocol.AppendStats(d, "transactions", op) })
			if err != nil {
				return err
			}
			if code != protocol.StatusOK {
				return fmt.Errorf("stats transactions: broker replied %d %s", code, body)
			}
			body = strings.TrimPrefix(body, "STATS\r\n")
			body = strings.TrimSuffix(body, "END\r\n")
			_, err = fmt.Fprint(e.stdout, strings.ReplaceAll(body, "\r\n", "\n"))
			return err
		}
	})
}

func cmdTxDecide(e *env, name string, typ protocol.TxType, done string) *cobra.Command {
	help := fmt.Sprintf("Send %s for the XA branch <key> (XID:<formatId>:<hex gtrid>:<hex bqual>:<qualifier>).\n\nexample:\n  metaq %s 'XID:1:0a0b:01:XAMessageProducer-host'", typ, name)
	return leaf(e, name, name+" <key>", help, func(fs *pflag.FlagSet) func(args []string) error {
		return func(args []string) error {
			if len(args) != 1 {
				return usagef("want one transaction key, got %d arguments", len(args))
			}
			id, err := protocol.ParseTxKey([]byte(args[0]))
			if err != nil {
				return usagef("%v", err)
			}
			if !id.XA {
				return usagef("%s applies to XA branches (XID:...), not to local transaction %s", name, args[0])
			}
			key := id.String()
			code, body, err := txRoundTrip(e, func(d []byte, op int32) []byte {
				return protocol.AppendTransaction(d, key, "metaq-cli", typ, 0, "", op)
			})
			if err != nil {
				return err
			}
			if code != protocol.StatusOK {
				return fmt.Errorf("%s %s: broker replied %d %s", name, key, code, body)
			}
			_, err = fmt.Fprintf(e.stdout, "%s %s\n", key, done)
			return err
		}
	})
}
