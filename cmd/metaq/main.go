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
	"fmt"
	"io"
	"os"
	"os/signal"
	"runtime"
	"syscall"
	"time"

	"github.com/metaq-go/metaq/sdk/client"
	"github.com/spf13/cobra"
	"github.com/spf13/pflag"
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
	// sec is the TLS and SASL PLAIN of every broker connection (the
	// --tls-*, --user and --password-file flags).
	sec *security
	// logLevel and logFormat are --log-level and --log-format: the SDK's
	// log on stderr ("" = none).
	logLevel, logFormat string
	// args are the command line's arguments, for the "did you mean" of a
	// mistyped command followed by its flags.
	args []string
}

func run(args []string, stdin io.Reader, stdout, stderr io.Writer) int {
	e := &env{addr: defaultAddr, timeout: 5 * time.Second, stdin: stdin, stdout: stdout, stderr: stderr, progName: "metaq",
		sec: &security{}, args: args}
	if v := os.Getenv("METAQ_ADDR"); v != "" {
		e.addr, e.addrSet = v, true
	}
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	e.ctx = ctx
	root := newRootCmd(e)
	root.SetArgs(args)
	cmd, err := root.ExecuteC()
	if err == nil {
		return 0
	}
	name := cmd.CommandPath()
	var ue *usageError
	if errors.As(err, &ue) {
		if ue.msg != "" {
			fmt.Fprintf(stderr, "%s: %s\n", name, ue.msg)
		}
		return 2
	}
	if errors.Is(err, errSilent) {
		return 1 // already explained on stderr
	}
	fmt.Fprintf(stderr, "%s: %v\n", name, err)
	return 1
}

// checkBroker dials the broker once (with TLS and auth as the flags say)
// so that a broker that is down, or a refused password, is reported at
// once instead of after the SDK's redial backoff.
func checkBroker(e *env) error { return checkBrokerAt(e, e.addr) }

// checkBrokerAt is checkBroker for the broker at addr.
func checkBrokerAt(e *env, addr string) error {
	if err := e.sec.prepare(); err != nil {
		return err
	}
	ctx, cancel := context.WithTimeout(e.ctx, e.timeout)
	defer cancel()
	c, err := e.sec.dial(ctx, addr)
	if err != nil {
		var ae *client.AuthError
		if errors.As(err, &ae) {
			return err
		}
		return fmt.Errorf("cannot reach the broker at %s: %w", addr, err)
	}
	return c.Close()
}

// jsonVersion is `metaq version --json`.
type jsonVersion struct {
	Version string `json:"version"`
	Go      string `json:"go"`
	OS      string `json:"os"`
	Arch    string `json:"arch"`
	// BrokerAddr and BrokerVersion are the broker's, or BrokerError why
	// it did not answer.
	BrokerAddr    string `json:"broker_addr"`
	BrokerVersion string `json:"broker_version,omitempty"`
	BrokerError   string `json:"broker_error,omitempty"`
}

func cmdVersion(e *env) *cobra.Command {
	return leaf(e, "version", "version [--json]", "Print the client version, then the broker's if it answers within --timeout.", func(fs *pflag.FlagSet) func(args []string) error {
		asJSON := fs.Bool("json", false, "print JSON")
		return func(args []string) error {
			if len(args) > 0 {
				return usagef("unexpected argument %q", args[0])
			}
			ctx, cancel := context.WithTimeout(e.ctx, min(e.timeout, 2*time.Second))
			defer cancel()
			if *asJSON {
				j := jsonVersion{Version: version, Go: runtime.Version(), OS: runtime.GOOS, Arch: runtime.GOARCH, BrokerAddr: e.addr}
				if v, err := brokerVersion(ctx, e.sec, e.addr); err != nil {
					j.BrokerError = err.Error()
				} else {
					j.BrokerVersion = v
				}
				return writeJSON(e.stdout, j)
			}
			fmt.Fprintf(e.stdout, "metaq %s (%s %s/%s)\n", version, runtime.Version(), runtime.GOOS, runtime.GOARCH)
			v, err := brokerVersion(ctx, e.sec, e.addr)
			if err != nil {
				fmt.Fprintf(e.stderr, "broker %s: %v\n", e.addr, err)
				return nil
			}
			fmt.Fprintf(e.stdout, "broker %s %s\n", e.addr, v)
			return nil
		}
	})
}

// brokerVersion runs the `version` command on a fresh connection (the SDK
// has no call for it).
func brokerVersion(ctx context.Context, sec *security, addr string) (string, error) {
	rc, err := dialRaw(ctx, sec, addr)
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

func usagef(format string, a ...any) error {
	return &usageError{msg: fmt.Sprintf(format, a...)}
}
