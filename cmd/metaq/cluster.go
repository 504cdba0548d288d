package main

import (
	"context"
	"encoding/json"
	"fmt"
	"os"
	"sort"
	"strconv"
	"strings"
	"text/tabwriter"
	"time"

	"github.com/go-zookeeper/zk"

	"github.com/metaq-go/metaq/sdk/cluster"
)

// defaultZK is ZooKeeper's default client port on the local host.
const defaultZK = "127.0.0.1:2181"

func cmdCluster(e *env, args []string) error {
	fs := newFlagSet(e, "cluster", "cluster [--zk CONNECT] [--root /meta] [--json]", `
Show the cluster as the brokers registered it in ZooKeeper (MetaQ's layout):
each broker with its address (<root>/brokers/ids/<id>/master), and per topic
the brokers and their partition counts, from topics-pub (producers) and
topics-sub (consumers). --timeout bounds connecting and reading.`)
	zkc := fs.String("zk", "", "ZooKeeper connect string `host:port[,...]` (default "+defaultZK+", or $METAQ_ZK)")
	root := fs.String("root", cluster.DefaultRoot, "MetaQ's zkRoot")
	asJSON := fs.Bool("json", false, "print JSON")
	if err := parseFlags(fs, args); err != nil {
		return err
	}
	if fs.NArg() > 0 {
		return usagef("unexpected argument %q", fs.Arg(0))
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
	cl, err := readCluster(e.ctx, connect, *root, e.timeout)
	if err != nil {
		return err
	}
	if *asJSON {
		enc := json.NewEncoder(e.stdout)
		enc.SetIndent("", "  ")
		return enc.Encode(cl)
	}
	printCluster(e, cl)
	return nil
}

// readCluster connects, waits for a session and reads, all within timeout.
func readCluster(ctx context.Context, connect, root string, timeout time.Duration) (*cluster.Layout, error) {
	var servers []string
	for _, s := range strings.Split(connect, ",") {
		if s = strings.TrimSpace(s); s != "" {
			servers = append(servers, s)
		}
	}
	if len(servers) == 0 {
		return nil, usagef("empty --zk")
	}
	ctx, cancel := context.WithTimeout(ctx, timeout)
	defer cancel()
	c, events, err := zk.Connect(servers, max(timeout, 4*time.Second), zk.WithLogInfo(false), zk.WithLogger(nopLogger{}))
	if err != nil {
		return nil, err
	}
	defer c.Close()
	for c.State() != zk.StateHasSession {
		select {
		case <-ctx.Done():
			return nil, fmt.Errorf("cannot reach ZooKeeper at %s within %v", connect, timeout)
		case <-events:
		}
	}
	type res struct {
		cl  *cluster.Layout
		err error
	}
	ch := make(chan res, 1)
	go func() {
		cl, err := cluster.ReadLayout(c, root)
		ch <- res{cl, err}
	}()
	select {
	case r := <-ch:
		return r.cl, r.err
	case <-ctx.Done():
		return nil, fmt.Errorf("reading ZooKeeper at %s: %v", connect, ctx.Err())
	}
}

type nopLogger struct{}

func (nopLogger) Printf(string, ...any) {}

func printCluster(e *env, cl *cluster.Layout) {
	w := tabwriter.NewWriter(e.stdout, 0, 4, 2, ' ', 0)
	fmt.Fprintf(w, "brokers (%s/brokers/ids): %d\n", strings.TrimSuffix(cl.Root, "/"), len(cl.Brokers))
	if len(cl.Brokers) > 0 {
		fmt.Fprintln(w, "ID\tMASTER\tSLAVES")
	}
	for _, b := range cl.Brokers {
		master := b.Master
		if master == "" {
			master = "-"
		}
		var slaves []string
		for k, v := range b.Slaves {
			slaves = append(slaves, k+"="+v)
		}
		sort.Strings(slaves)
		s := strings.Join(slaves, ",")
		if s == "" {
			s = "-"
		}
		fmt.Fprintf(w, "%d\t%s\t%s\n", b.ID, master, s)
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
