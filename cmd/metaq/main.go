// Command metaq is the command-line client of metaq-go: produce and consume
// messages, read the broker's statistics, list topics and run benchmarks.
//
//	metaq [--addr HOST:PORT] [--timeout D] <command> [flags]
//
// Data goes to stdout, messages and errors to stderr; the exit status is
// non-zero on failure (1 = the operation failed, 2 = bad usage). See
// docs/cli.md, or `metaq help`.
package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"net"
	"os"
	"os/signal"
	"runtime"
	"strings"
	"syscall"
	"time"
)

// version is the CLI's version.
const version = "0.1.0"

// defaultAddr is MetaQ's default broker port on the local host.
const defaultAddr = "127.0.0.1:8123"

// usageError is a command-line error: exit status 2. An empty msg means
// the flag package already printed the problem.
type usageError struct{ msg string }

func (u *usageError) Error() string { return u.msg }

var errUsage = &usageError{}

func main() {
	if os.Getenv(echoServerEnv) == "1" {
		os.Exit(echoServerMain())
	}
	os.Exit(run(os.Args[1:], os.Stdin, os.Stdout, os.Stderr))
}

// env is what every command receives.
type env struct {
	addr     string
	addrSet  bool // --addr or METAQ_ADDR was given
	timeout  time.Duration
	stdin    io.Reader
	stdout   io.Writer
	stderr   io.Writer
	ctx      context.Context // cancelled on SIGINT/SIGTERM
	progName string
}

type command struct {
	name    string
	summary string
	run     func(e *env, args []string) error
}

var commands []command

func init() {
	commands = []command{
		{"produce", "send one message per input line", cmdProduce},
		{"consume", "print messages of a topic", cmdConsume},
		{"stats", "print the broker's stats [item]", cmdStats},
		{"topics", "list topics with partitions, offsets and message counts", cmdTopics},
		{"plugins", "list the broker's plugin processes", cmdPlugins},
		{"cluster", "show brokers and topics registered in ZooKeeper", cmdCluster},
		{"groups", "list consumer groups with their topics and members", cmdGroups},
		{"group", "describe a consumer group, or reset its offsets", cmdGroup},
		{"bench", "benchmarks: produce, consume, rtt, raw, all", cmdBench},
		{"version", "print the client (and broker) version", cmdVersion},
		{"help", "show help for a command", cmdHelp},
	}
}

func run(args []string, stdin io.Reader, stdout, stderr io.Writer) int {
	e := &env{addr: defaultAddr, timeout: 5 * time.Second, stdin: stdin, stdout: stdout, stderr: stderr, progName: "metaq"}
	if v := os.Getenv("METAQ_ADDR"); v != "" {
		e.addr, e.addrSet = v, true
	}
	fs := flag.NewFlagSet("metaq", flag.ContinueOnError)
	fs.SetOutput(stderr)
	fs.Usage = func() { usage(stderr) }
	addGlobalFlags(fs, e)
	if err := fs.Parse(args); err != nil {
		if errors.Is(err, flag.ErrHelp) {
			return 0
		}
		return 2
	}
	rest := fs.Args()
	if len(rest) == 0 {
		usage(stderr)
		return 2
	}
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	e.ctx = ctx
	for _, c := range commands {
		if c.name == rest[0] {
			err := c.run(e, rest[1:])
			switch {
			case err == nil:
				return 0
			case errors.Is(err, flag.ErrHelp):
				return 0
			}
			var ue *usageError
			if errors.As(err, &ue) {
				if ue.msg != "" {
					fmt.Fprintf(stderr, "metaq %s: %s\n", c.name, ue.msg)
				}
				return 2
			}
			fmt.Fprintf(stderr, "metaq %s: %v\n", c.name, err)
			return 1
		}
	}
	fmt.Fprintf(stderr, "metaq: unknown command %q (see `metaq help`)\n", rest[0])
	return 2
}

// addGlobalFlags registers --addr and --timeout on fs, writing into e. Every
// command's flag set has them too, so they may come before or after the
// command name.
func addGlobalFlags(fs *flag.FlagSet, e *env) {
	fs.Func("addr", "broker `host:port` (default "+defaultAddr+", or $METAQ_ADDR)", func(s string) error {
		if _, _, err := net.SplitHostPort(s); err != nil {
			return fmt.Errorf("bad address %q: %v", s, err)
		}
		e.addr, e.addrSet = s, true
		return nil
	})
	fs.DurationVar(&e.timeout, "timeout", e.timeout, "per-request timeout (connect, send, stats)")
}

// newFlagSet returns a command's flag set with the global flags.
func newFlagSet(e *env, name, usageLine, help string) *flag.FlagSet {
	fs := flag.NewFlagSet("metaq "+name, flag.ContinueOnError)
	fs.SetOutput(e.stderr)
	fs.Usage = func() {
		fmt.Fprintf(e.stderr, "usage: metaq %s\n\n%s\n\nflags:\n", usageLine, strings.TrimSpace(help))
		fs.PrintDefaults()
	}
	addGlobalFlags(fs, e)
	return fs
}

// parseFlags parses args and maps parse errors to errUsage.
func parseFlags(fs *flag.FlagSet, args []string) error {
	if err := fs.Parse(args); err != nil {
		if errors.Is(err, flag.ErrHelp) {
			return err
		}
		return errUsage
	}
	return nil
}

func usagef(format string, a ...any) error {
	return &usageError{msg: fmt.Sprintf(format, a...)}
}

// checkBroker dials the broker once so that a broker that is down is
// reported at once instead of after the SDK's redial backoff.
func checkBroker(e *env) error { return checkBrokerAt(e, e.addr) }

// checkBrokerAt is checkBroker for the broker at addr.
func checkBrokerAt(e *env, addr string) error {
	d := net.Dialer{Timeout: min(e.timeout, 3*time.Second)}
	c, err := d.DialContext(e.ctx, "tcp", addr)
	if err != nil {
		return fmt.Errorf("cannot reach the broker at %s: %w", addr, err)
	}
	return c.Close()
}

func usage(w io.Writer) {
	fmt.Fprintf(w, `metaq is the command-line client of metaq-go.

usage: metaq [--addr HOST:PORT] [--timeout D] <command> [flags]

commands:
`)
	for _, c := range commands {
		fmt.Fprintf(w, "  %-8s %s\n", c.name, c.summary)
	}
	fmt.Fprintf(w, `
global flags (also accepted after the command):
  --addr HOST:PORT   broker address (default %s, or $METAQ_ADDR)
  --timeout D        per-request timeout (default 5s)

Run "metaq help <command>" or "metaq <command> --help" for a command's flags.
Data is written to stdout, messages to stderr; the exit status is 0 on
success, 1 when the operation failed and 2 on a usage error.
`, defaultAddr)
}

func cmdHelp(e *env, args []string) error {
	if len(args) == 0 {
		usage(e.stdout)
		return nil
	}
	for _, c := range commands {
		if c.name == args[0] && c.name != "help" {
			return c.run(&env{addr: e.addr, timeout: e.timeout, stdin: e.stdin, stdout: e.stdout, stderr: e.stdout, ctx: e.ctx},
				append(args[1:], "--help"))
		}
	}
	return usagef("no help for %q", args[0])
}

func cmdVersion(e *env, args []string) error {
	fs := newFlagSet(e, "version", "version", "Print the client version, then the broker's if it answers within --timeout.")
	if err := parseFlags(fs, args); err != nil {
		return err
	}
	fmt.Fprintf(e.stdout, "metaq %s (%s %s/%s)\n", version, runtime.Version(), runtime.GOOS, runtime.GOARCH)
	ctx, cancel := context.WithTimeout(e.ctx, min(e.timeout, 2*time.Second))
	defer cancel()
	v, err := brokerVersion(ctx, e.addr)
	if err != nil {
		fmt.Fprintf(e.stderr, "broker %s: %v\n", e.addr, err)
		return nil
	}
	fmt.Fprintf(e.stdout, "broker %s %s\n", e.addr, v)
	return nil
}

// brokerVersion runs the `version` command on a fresh connection (the SDK
// has no call for it).
func brokerVersion(ctx context.Context, addr string) (string, error) {
	rc, err := dialRaw(ctx, addr)
	if err != nil {
		return "", err
	}
	defer rc.Close()
	if dl, ok := ctx.Deadline(); ok {
		rc.nc.SetDeadline(dl)
	}
	code, body, err := rc.roundTrip(func(dst []byte, op int32) []byte { return appendVersion(dst, op) })
	if err != nil {
		return "", err
	}
	if code != 200 {
		return "", fmt.Errorf("broker replied %d: %s", code, body)
	}
	return string(body), nil
}
