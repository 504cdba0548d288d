package main

import (
	"context"
	"fmt"
	"os"
	"sort"
	"strconv"
	"strings"
	"text/tabwriter"
	"time"
	"unicode"

	"github.com/spf13/cobra"
	"github.com/spf13/pflag"

	"github.com/metaq-go/metaq/internal/zkpath"
	"github.com/metaq-go/metaq/sdk/admin"
	"github.com/metaq-go/metaq/sdk/client"
	"github.com/metaq-go/metaq/sdk/cluster"
)

// defaultZK is ZooKeeper's default client port on the local host.
const defaultZK = "127.0.0.1:2181"

func cmdCluster(e *env) *cobra.Command {
	return leaf(e, "cluster", "cluster [--zk CONNECT] [--root /meta] [--json]", `
Show the cluster as the brokers registered it in ZooKeeper (MetaQ's layout):
each broker with its address (<root>/brokers/ids/<id>/master), and per topic
the brokers and their partition counts, from topics-pub (producers) and
topics-sub (consumers). --timeout bounds connecting and reading.`, func(fs *pflag.FlagSet) func(args []string) error {
		zkc := fs.String("zk", "", "ZooKeeper connect string `host:port[,...]` (default "+defaultZK+", or $METAQ_ZK)")
		root := fs.String("root", cluster.DefaultRoot, "MetaQ's zkRoot")
		asJSON := fs.Bool("json", false, "print JSON")
		return func(args []string) error {
			if len(args) > 0 {
				return usagef("unexpected argument %q", args[0])
			}
			connect := *zkc
			if connect == "" {
				connect = os.Getenv("METAQ_ZK")
			}
			if connect == "" {
				connect = defaultZK
			}
			if !strings.HasPrefix(*root, "/") {
				return usagef("--root must start with /, got %q", *root)
			}
			adm, err := zkAdmin(e, connect, *root)
			if err != nil {
				return err
			}
			defer adm.Close()
			ctx, cancel := context.WithTimeout(e.ctx, e.timeout)
			defer cancel()
			cl, err := adm.Layout(ctx)
			if err != nil {
				return err
			}
			if *asJSON {
				return writeJSON(e.stdout, cl)
			}
			printCluster(e, cl)
			return nil
		}
	})
}

// zkAdmin returns an Admin with ZooKeeper discovery at connect under
// root, its session opened within --timeout (4 s at least).
func zkAdmin(e *env, connect, root string) (*admin.Admin, error) {
	if strings.TrimFunc(connect, func(r rune) bool { return r == ',' || unicode.IsSpace(r) }) == "" {
		return nil, usagef("empty --zk")
	}
	if err := e.sec.prepare(); err != nil {
		return nil, err
	}
	wait := max(e.timeout, 4*time.Second)
	adm, err := admin.New(append(clientOpts(e), client.ZooKeeper(connect, root), client.ZooKeeperSessionTimeout(wait))...)
	if err != nil {
		return nil, fmt.Errorf("cannot reach ZooKeeper at %s within %v: %w", connect, wait, err)
	}
	return adm, nil
}

func printCluster(e *env, cl *cluster.Layout) {
	w := tabwriter.NewWriter(e.stdout, 0, 4, 2, ' ', 0)
	fmt.Fprintf(w, "brokers (%s): %d\n", zkpath.BrokerIDs(strings.TrimSuffix(cl.Root, "/")), len(cl.Brokers))
	// The MASTER_TLS column (ids/<id>/master_tls) only when a broker has one.
	withTLS := false
	for _, b := range cl.Brokers {
		withTLS = withTLS || b.MasterTLS != ""
	}
	if len(cl.Brokers) > 0 {
		if withTLS {
			fmt.Fprintln(w, "ID\tMASTER\tMASTER_TLS\tSLAVES")
		} else {
			fmt.Fprintln(w, "ID\tMASTER\tSLAVES")
		}
	}
	for _, b := range cl.Brokers {
		var slaves []string
		for k, v := range b.Slaves {
			slaves = append(slaves, k+"="+v)
		}
		sort.Strings(slaves)
		if withTLS {
			fmt.Fprintf(w, "%d\t%s\t%s\t%s\n", b.ID, orDash(b.Master), orDash(b.MasterTLS), orDash(strings.Join(slaves, ",")))
		} else {
			fmt.Fprintf(w, "%d\t%s\t%s\n", b.ID, orDash(b.Master), orDash(strings.Join(slaves, ",")))
		}
	}
	fmt.Fprintf(w, "\ntopics: %d\n", len(cl.Topics))
	if len(cl.Topics) > 0 {
		fmt.Fprintln(w, "TOPIC\tBROKER\tPARTITIONS\tPUBLISH\tSUBSCRIBE")
	}
	for _, t := range cl.Topics {
		for _, b := range t.Brokers {
			fmt.Fprintf(w, "%s\t%s\t%s\t%s\t%s\n", t.Name, b.Broker, strconv.Itoa(b.NumParts), yesNo(b.Publish), yesNo(b.Subscribe))
		}
	}
	w.Flush()
}

func yesNo(b bool) string {
	if b {
		return "yes"
	}
	return "no"
}
