package main

import (
	"context"
	"fmt"
	"strings"
	"time"

	"github.com/spf13/cobra"
	"github.com/spf13/pflag"

	"github.com/metaq-go/metaq/sdk/cluster"
	"github.com/metaq-go/metaq/sdk/protocol"
)

func cmdFailover(e *env) *cobra.Command {
	return leaf(e, "failover", "failover --broker-id N [--zk CONNECT] [--root /meta] [--wait 1m]", `
Hand broker id N over from its master to its in-sync slave, losing nothing
(for maintenance; needs failover = true, docs/replication.md, "Switchover").
The master registered in <root>/brokers/ids/N/master is sent "stats
switchover" (admin with [auth]): it answers puts with a retriable 503 from
then on, waits until its in-sync slave has every message it stored, and
unregisters; the slave promotes itself with the next epoch, and the old
master rejoins it as a slave. Refused, changing nothing, when no slave is
in sync. --wait bounds the whole handover. With --tls-ca or --tls-cert it
dials the master's TLS listener (metaqs://), else its plaintext one; log in
with --user.`, func(fs *pflag.FlagSet) func(args []string) error {
		id := fs.Int("broker-id", -1, "the broker id to switch over")
		zkc := fs.String("zk", "", "ZooKeeper connect string `host:port[,...]` (default "+defaultZK+", or $METAQ_ZK)")
		root := fs.String("root", cluster.DefaultRoot, "MetaQ's zkRoot")
		wait := fs.Duration("wait", time.Minute, "how long the handover may take")
		return func(args []string) error {
			if len(args) > 0 {
				return usagef("unexpected argument %q", args[0])
			}
			if *id < 0 {
				return usagef("--broker-id N is required")
			}
			adm, connect, err := zkFlagAdmin(e, *zkc, *root)
			if err != nil {
				return err
			}
			defer adm.Close()
			ctx, cancel := context.WithTimeout(e.ctx, e.timeout)
			layout, err := adm.Layout(ctx)
			cancel()
			if err != nil {
				return err
			}
			if err := e.sec.prepare(); err != nil {
				return err
			}
			var info *cluster.BrokerInfo
			for i := range layout.Brokers {
				if layout.Brokers[i].ID == *id {
					info = &layout.Brokers[i]
				}
			}
			if info == nil || info.Broker() == (cluster.Broker{ID: *id}) {
				return fmt.Errorf("broker %d has no master registered in ZooKeeper %s%s (ids/%d/master)", *id, connect, *root, *id)
			}
			addr, err := failoverAddr(info.Broker(), e.sec.tlsOn())
			if err != nil {
				return fmt.Errorf("broker %d: %w", *id, err)
			}
			ctx, cancel = context.WithTimeout(e.ctx, *wait)
			defer cancel()
			rc, err := dialRaw(ctx, e.sec, addr)
			if err != nil {
				return fmt.Errorf("broker %d master %s: %w", *id, addr, err)
			}
			defer rc.Close()
			rc.nc.SetDeadline(time.Now().Add(*wait))
			fmt.Fprintf(e.stdout, "broker %d: asking master %s to hand over to its in-sync slave\n", *id, addr)
			code, body, err := rc.roundTrip(func(dst []byte, op int32) []byte { return protocol.AppendStats(dst, "switchover", op) })
			if err != nil {
				return fmt.Errorf("broker %d master %s: %w", *id, addr, err)
			}
			if code != protocol.StatusOK {
				return fmt.Errorf("broker %d master %s: %d %s", *id, addr, code, strings.ToValidUTF8(string(body), "?"))
			}
			fmt.Fprintf(e.stdout, "broker %d: %s\n", *id, strings.ToValidUTF8(string(body), "?"))
			return nil
		}
	})
}

// failoverAddr is the master's address to dial: its TLS listener with the
// TLS flags (--tls-ca, --tls-cert), else its plaintext one. A TLS-only
// master (metaqs://) without them is an error saying so.
func failoverAddr(b cluster.Broker, withTLS bool) (string, error) {
	switch {
	case withTLS && b.TLSAddr != "":
		return b.TLSAddr, nil
	case withTLS:
		return "", fmt.Errorf("its master %s serves no TLS (it registered no metaqs:// address): drop --tls-ca/--tls-cert", b.Addr)
	case b.Addr != "":
		return b.Addr, nil
	}
	return "", fmt.Errorf("its master %s is TLS-only (metaqs://): pass --tls-ca (and --user with --password-file or $%s with [auth])", b.TLSAddr, passwordEnv)
}
