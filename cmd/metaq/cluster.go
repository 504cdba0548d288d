package main

import (
	"context"
	"fmt"
	"os"
	"sort"
	"strconv"
	"strings"
	"sync"
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
topics-sub (consumers). Then the replication of each broker id, from the
stats of its master and slaves (docs/replication.md): per member its role,
failover role, epoch, in-sync state and, for a slave, its lag in bytes and
in ms. --timeout bounds connecting and reading.`, func(fs *pflag.FlagSet) func(args []string) error {
		zkc := fs.String("zk", "", "ZooKeeper connect string `host:port[,...]` (default "+defaultZK+", or $METAQ_ZK)")
		root := fs.String("root", cluster.DefaultRoot, "MetaQ's zkRoot")
		asJSON := fs.Bool("json", false, "print JSON")
		return func(args []string) error {
			if len(args) > 0 {
				return usagef("unexpected argument %q", args[0])
			}
			adm, _, err := zkFlagAdmin(e, *zkc, *root)
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
			repl := replicationOf(ctx, adm, cl)
			if *asJSON {
				return writeJSON(e.stdout, clusterJSON{Layout: cl, Replication: repl})
			}
			printCluster(e, cl, repl)
			return nil
		}
	})
}

// zkFlagAdmin is zkAdmin for the --zk and --root flags: an empty --zk
// means $METAQ_ZK, else defaultZK; the root must start with /. It also
// returns the connect string it used.
func zkFlagAdmin(e *env, zk, root string) (*admin.Admin, string, error) {
	connect := zk
	if connect == "" {
		connect = os.Getenv("METAQ_ZK")
	}
	if connect == "" {
		connect = defaultZK
	}
	if !strings.HasPrefix(root, "/") {
		return nil, connect, usagef("--root must start with /, got %q", root)
	}
	adm, err := zkAdmin(e, connect, root)
	return adm, connect, err
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
	cl, err := client.New(append(clientOpts(e), client.ZooKeeper(connect, root), client.ZooKeeperSessionTimeout(wait))...)
	if err != nil {
		return nil, fmt.Errorf("cannot reach ZooKeeper at %s within %v: %w", connect, wait, err)
	}
	return admin.New(cl), nil
}

// clusterJSON is `metaq cluster --json`: the layout's fields and the
// replication members.
type clusterJSON struct {
	*cluster.Layout
	Replication []replMember `json:"replication"`
}

// replMember is one registered member of a broker id (its master or a
// slave) as its `stats` describes it.
type replMember struct {
	ID     int    `json:"id"`
	Member string `json:"member"` // "master" or the slave node's name, "slave<N>"
	Addr   string `json:"addr"`
	// Slave is the member's `stats` slave line (false for a promoted
	// slave, which registered as master).
	Slave bool `json:"slave"`
	// Role is failover_role (master, slave, fenced) with failover = true,
	// else "master" or "slave".
	Role string `json:"role"`
	// Failover is whether the member runs with failover = true.
	Failover bool `json:"failover"`
	// Epoch is the failover epoch it reports (0: none).
	Epoch int64 `json:"epoch"`
	// Replication is the master's replication mode (async or sync).
	Replication string `json:"replication,omitempty"`
	// InSync is, for a master, the slave it names in sync
	// (failover_insync, "-" for none) or, without failover, its
	// sync_partitions_in_sync "in/total"; for a slave "yes" or "no" by
	// what its master says ("async" under an async master).
	InSync string `json:"in_sync"`
	// LagBytes and LagMs are a slave's slave_lag_bytes and slave_lag_ms.
	LagBytes *int64 `json:"lag_bytes,omitempty"`
	LagMs    *int64 `json:"lag_ms,omitempty"`
	// Connected is a slave's slave_connected.
	Connected *bool `json:"connected,omitempty"`
	// Error is why its stats could not be read ("" when they were).
	Error string `json:"error,omitempty"`
}

// replicationOf reads the stats of every registered master and slave of
// cl (concurrently, within ctx) and derives each one's replication state.
func replicationOf(ctx context.Context, adm *admin.Admin, cl *cluster.Layout) []replMember {
	var out []replMember
	for _, b := range cl.Brokers {
		if b.Master != "" {
			out = append(out, replMember{ID: b.ID, Member: "master", Addr: b.Master})
		}
		var names []string
		for k := range b.Slaves {
			names = append(names, k)
		}
		sort.Strings(names)
		for _, k := range names {
			out = append(out, replMember{ID: b.ID, Member: k, Addr: b.Slaves[k]})
		}
	}
	stats := make([]map[string]string, len(out))
	var wg sync.WaitGroup
	for i := range out {
		wg.Add(1)
		go func() {
			defer wg.Done()
			addr, _, ok := cluster.ParseURI(out[i].Addr)
			if !ok {
				out[i].Error = "bad URI"
				return
			}
			st, err := adm.Stats(ctx, addr, "")
			if err != nil {
				out[i].Error = err.Error()
				return
			}
			m := map[string]string{}
			for _, l := range st.Lines {
				m[l.Name] = l.Value
			}
			stats[i] = m
		}()
	}
	wg.Wait()
	// A master's view of its slaves, by broker id.
	masters := map[int]map[string]string{}
	for i, r := range out {
		if r.Member == "master" && stats[i] != nil {
			masters[r.ID] = stats[i]
		}
	}
	for i := range out {
		r, m := &out[i], stats[i]
		if m == nil {
			r.Role, r.InSync = "?", "?"
			continue
		}
		r.Slave = m["slave"] == "true"
		r.Epoch, _ = strconv.ParseInt(m["epoch"], 10, 64)
		r.Role, r.Failover = m["failover_role"], m["failover_role"] != ""
		if r.Role == "" {
			r.Role = map[bool]string{true: "slave", false: "master"}[r.Slave]
		}
		if _, ok := m["slave_lag_bytes"]; ok && r.Slave {
			lb, _ := strconv.ParseInt(m["slave_lag_bytes"], 10, 64)
			lm, _ := strconv.ParseInt(m["slave_lag_ms"], 10, 64)
			c := m["slave_connected"] == "true"
			r.LagBytes, r.LagMs, r.Connected = &lb, &lm, &c
		}
		if !r.Slave {
			r.Replication = m["replication"]
			switch {
			case m["failover_insync"] != "":
				r.InSync = m["failover_insync"]
			case m["sync_partitions_in_sync"] != "":
				r.InSync = m["sync_partitions_in_sync"]
			case r.Replication == "sync":
				r.InSync = "-"
			default:
				r.InSync = "async"
			}
			continue
		}
		r.InSync = slaveInSync(masters[r.ID], r, m)
	}
	return out
}

// slaveInSync says whether a slave is in sync by its master's stats:
// "yes" when the master names it in sync (failover_insync s<N>) or,
// without failover, links to it with every partition in sync; "async"
// under an async master; "?" when the master's stats are unknown.
func slaveInSync(master map[string]string, r *replMember, m map[string]string) string {
	if master == nil {
		return "?"
	}
	if master["replication"] != "sync" {
		return "async"
	}
	n, ok := strings.CutPrefix(r.Member, "slave")
	if !ok {
		return "?"
	}
	if v, ok := master["failover_insync"]; ok {
		return yesNo(v == "s"+n)
	}
	in, total, _ := strings.Cut(master["sync_partitions_in_sync"], "/")
	addr, _, _ := cluster.ParseURI(r.Addr)
	return yesNo(master["sync_slave"] == addr && in == total && total != "" && total != "0")
}

func printCluster(e *env, cl *cluster.Layout, repl []replMember) {
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
	if len(repl) > 0 {
		fmt.Fprintf(w, "\nreplication: %d members\n", len(repl))
		fmt.Fprintln(w, "ID\tMEMBER\tADDRESS\tSLAVE\tROLE\tEPOCH\tIN_SYNC\tLAG_BYTES\tLAG_MS")
	}
	for _, r := range repl {
		lagB, lagMs := "-", "-"
		if r.LagBytes != nil {
			lagB, lagMs = strconv.FormatInt(*r.LagBytes, 10), strconv.FormatInt(*r.LagMs, 10)
			if !*r.Connected {
				lagMs += " (not connected)"
			}
		}
		epoch := "-"
		if r.Failover {
			epoch = strconv.FormatInt(r.Epoch, 10)
		}
		slave := yesNo(r.Slave)
		if r.Error != "" {
			slave, lagMs = "?", "error: "+r.Error
		}
		fmt.Fprintf(w, "%d\t%s\t%s\t%s\t%s\t%s\t%s\t%s\t%s\n", r.ID, r.Member, r.Addr, slave, r.Role, epoch, r.InSync, lagB, lagMs)
	}
	w.Flush()
}

func yesNo(b bool) string {
	if b {
		return "yes"
	}
	return "no"
}
