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
	var cl *cluster.Layout
	err := withZK(e, connect, func(c *zk.Conn) (err error) {
		cl, err = cluster.ReadLayout(c, *root)
		return err
	})
	if err != nil {
		return err
	}
	if *asJSON {
		return writeJSON(e.stdout, cl)
	}
	printCluster(e, cl)
	return nil
}

// withZK opens a ZooKeeper session at connect and runs fn on it, all within
// e.timeout.
func withZK(e *env, connect string, fn func(c *zk.Conn) error) error {
	if strings.TrimFunc(connect, func(r rune) bool { return r == ',' || unicode.IsSpace(r) }) == "" {
		return usagef("empty --zk")
	}
	ctx, cancel := context.WithTimeout(e.ctx, e.timeout)
	defer cancel()
	cl, err := cluster.Open(ctx, cluster.Options{Connect: connect, SessionTimeout: max(e.timeout, 4*time.Second)})
	if err != nil {
		if ctx.Err() != nil {
			return fmt.Errorf("cannot reach ZooKeeper at %s within %v", connect, e.timeout)
		}
		return err
	}
	defer cl.Close()
	ch := make(chan error, 1)
	go func() { ch <- fn(cl.Conn()) }()
	select {
	case err := <-ch:
		return err
	case <-ctx.Done():
		return fmt.Errorf("reading ZooKeeper at %s: %v", connect, ctx.Err())
	}
}

func printCluster(e *env, cl *cluster.Layout) {
	w := tabwriter.NewWriter(e.stdout, 0, 4, 2, ' ', 0)
	fmt.Fprintf(w, "brokers (%s/brokers/ids): %d\n", strings.TrimSuffix(cl.Root, "/"), len(cl.Brokers))
	if len(cl.Brokers) > 0 {
		fmt.Fprintln(w, "ID\tMASTER\tSLAVES")
	}
	for _, b := range cl.Brokers {
		var slaves []string
		for k, v := range b.Slaves {
			slaves = append(slaves, k+"="+v)
		}
		sort.Strings(slaves)
		fmt.Fprintf(w, "%d\t%s\t%s\n", b.ID, orDash(b.Master), orDash(strings.Join(slaves, ",")))
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
