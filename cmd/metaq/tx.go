package main

import (
	"context"
	"errors"
	"fmt"
	"strings"

	"github.com/metaq-go/metaq/sdk/admin"
	"github.com/metaq-go/metaq/sdk/client"
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
		cmdTxDecide(e, "tx commit", protocol.TxHeuristicCommit, (*admin.Admin).CommitHeuristically, "committed heuristically"),
		cmdTxDecide(e, "tx rollback", protocol.TxHeuristicRollback, (*admin.Admin).RollbackHeuristically, "rolled back heuristically"),
		cmdTxDecide(e, "tx forget", protocol.TxForget, (*admin.Admin).Forget, "forgotten"))
}

// txCall runs fn with an Admin of the broker at --addr. A refusal by the
// broker is an error "<what>: broker replied <code> <body>".
func txCall(e *env, what string, fn func(ctx context.Context, adm *admin.Admin) error) error {
	adm, err := newAdmin(e)
	if err != nil {
		return err
	}
	defer adm.Close()
	ctx, cancel := context.WithTimeout(e.ctx, e.timeout)
	defer cancel()
	err = fn(ctx, adm)
	var be *client.BrokerError
	if errors.As(err, &be) {
		return fmt.Errorf("%s: broker replied %d %s", what, be.Code, be.Msg)
	}
	return err
}

func cmdTxList(e *env) *cobra.Command {
	return leaf(e, "tx list", "tx list", txListHelp, func(fs *pflag.FlagSet) func(args []string) error {
		return func(args []string) error {
			if len(args) > 0 {
				return usagef("unexpected argument %q", args[0])
			}
			var st *admin.Stats
			if err := txCall(e, "stats transactions", func(ctx context.Context, adm *admin.Admin) (err error) {
				st, err = adm.Stats(ctx, e.addr, "transactions")
				return err
			}); err != nil {
				return err
			}
			body := strings.TrimPrefix(st.Raw, "STATS\r\n")
			body = strings.TrimSuffix(body, "END\r\n")
			_, err := fmt.Fprint(e.stdout, strings.ReplaceAll(body, "\r\n", "\n"))
			return err
		}
	})
}

func cmdTxDecide(e *env, name string, typ protocol.TxType,
	decide func(adm *admin.Admin, ctx context.Context, addr, key string) error, done string) *cobra.Command {
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
			if err := txCall(e, name+" "+key, func(ctx context.Context, adm *admin.Admin) error {
				return decide(adm, ctx, e.addr, key)
			}); err != nil {
				return err
			}
			_, err = fmt.Fprintf(e.stdout, "%s %s\n", key, done)
			return err
		}
	})
}
