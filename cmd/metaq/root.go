package main

import (
	"fmt"
	"io"
	"log/slog"
	"net"
	"runtime"
	"strings"

	"github.com/spf13/cobra"
	"github.com/spf13/cobra/doc"
	"github.com/spf13/pflag"

	"github.com/metaq-go/metaq/internal/logx"
)

const rootHelp = `
metaq is the command-line client of metaq-go: produce and consume messages,
read the broker's statistics, list topics and groups, and run benchmarks.

Flags may come anywhere on the command line, before or after the command
and its arguments. Data is written to stdout, messages to stderr; the exit
status is 0 on success, 1 when the operation failed and 2 on a usage
error. See docs/cli.md.
`

// summaries are the one-line descriptions of the commands, by path.
var summaries = map[string]string{
	"produce":             "send one message per input line",
	"consume":             "print messages of a topic",
	"stats":               "print the broker's stats [item]",
	"topics":              "list topics with partitions, offsets and message counts",
	"topic":               "create, delete or alter a topic live (HTTP admin API)",
	"topic create":        "create a topic",
	"topic delete":        "delete a topic and its messages",
	"topic alter":         "give a topic more partitions",
	"plugins":             "list the broker's plugin processes",
	"cluster":             "show brokers and topics registered in ZooKeeper",
	"failover":            "hand a broker id over to its in-sync slave, losing nothing (maintenance)",
	"groups":              "list consumer groups with their topics and members",
	"group":               "describe a consumer group, or reset its offsets",
	"group describe":      "show a group's members, offsets and lag",
	"group reset-offsets": "move a group's committed offsets (a dry run unless --execute)",
	"bench":               "benchmarks: produce, consume, rtt, raw, durable, all",
	"bench produce":       "pipelined producers on raw connections",
	"bench consume":       "one consumer reading records from the page cache",
	"bench rtt":           "loopback TCP round trip and the broker's version RTT",
	"bench raw":           "raw-disk baseline: append + fdatasync",
	"bench durable":       "durable produce, synchronous put and restart benchmarks",
	"bench all":           "the whole benchmark matrix with same-run baselines",
	"version":             "print the client (and broker) version",
	"passwd":              "print the bcrypt hash of a password read on stdin",
	"tx":                  "list transactions; complete XA branches heuristically (admin)",
	"tx list":             "list open transactions and heuristic outcomes",
	"tx commit":           "commit an XA branch heuristically",
	"tx rollback":         "roll back an XA branch heuristically",
	"tail":                "ship log files to a topic, following them as tail -F does",
	"tx forget":           "forget a heuristically completed XA branch",
	"delayed":             "delayed messages: timer stats, cancel one",
	"delayed stats":       "print the broker's timer counters",
	"delayed cancel":      "cancel a delayed message before it is due",
	"dlq":                 "a consumer group's retry and dead-letter topics",
	"dlq list":            "list a group's retry and dead-letter topics with their counts",
	"dlq show":            "print a group's dead letters with their origin and last error",
	"dlq replay":          "send a group's pending dead letters back to its retry or origin topic",
	"dlq purge":           "mark a group's dead letters as handled (nothing is deleted)",
	"message":             "find messages by key or msgId",
	"message get":         "print the messages with a key, or the message with a msgId",
}

// versionString is the client's version as `metaq --version` prints it.
func versionString() string {
	return fmt.Sprintf("%s (%s %s/%s)", version, runtime.Version(), runtime.GOOS, runtime.GOARCH)
}

// newRootCmd builds the command tree, whose commands read and write
// through e. Cobra parses the flags, so they may come anywhere; a flag
// error is a usage error (exit status 2).
func newRootCmd(e *env) *cobra.Command {
	root := &cobra.Command{
		Use:           "metaq",
		Short:         "the command-line client of metaq-go",
		Long:          strings.TrimSpace(rootHelp),
		Version:       versionString(),
		SilenceErrors: true,
		SilenceUsage:  true,
		Args:          cobra.ArbitraryArgs,
		RunE:          func(c *cobra.Command, args []string) error { return unknownCommand(e, c, args) },

		SuggestionsMinimumDistance: 2,
	}
	root.SetIn(e.stdin)
	root.SetOut(e.stdout)
	root.SetErr(e.stderr)
	root.SetVersionTemplate("metaq {{.Version}}\n")
	root.SetFlagErrorFunc(func(c *cobra.Command, err error) error {
		// `metaq prodcue --topic x`: the flag is unknown only because the
		// command is; say so, with the closest commands.
		if c.HasSubCommands() {
			if w := firstWord(c, e.args); w != "" {
				return unknownCommand(e, c, []string{w})
			}
		}
		return &usageError{msg: err.Error()}
	})
	addGlobalFlags(root.PersistentFlags(), e)
	root.AddCommand(cmdProduce(e), cmdConsume(e), cmdStats(e), cmdTopics(e), cmdTopic(e), cmdMessage(e), cmdPlugins(e), cmdCluster(e), cmdFailover(e),
		cmdGroups(e), cmdGroup(e), cmdTx(e), cmdDelayed(e), cmdDLQ(e), cmdTail(e), cmdBench(e), cmdVersion(e), cmdPasswd(e), cmdGenMan(e))
	return root
}

// addGlobalFlags registers --addr, --timeout and the security flags,
// writing into e. They are persistent: every command has them.
func addGlobalFlags(fs *pflag.FlagSet, e *env) {
	fs.Func("addr", "broker `host:port` (default "+defaultAddr+", or $METAQ_ADDR)", func(s string) error {
		if _, _, err := net.SplitHostPort(s); err != nil {
			return fmt.Errorf("bad address %q: %v", s, err)
		}
		e.addr, e.addrSet = s, true
		return nil
	})
	fs.DurationVar(&e.timeout, "timeout", e.timeout, "per-request timeout (connect, send, stats)")
	e.sec.addFlags(fs)
	fs.Func("log-level", "log the client library's connection problems, retries and rebalances on stderr at `level` (debug, info, warn, error; default: none)", func(s string) error {
		if _, err := logx.ParseLevel(s); err != nil || s == "" {
			return fmt.Errorf("want debug, info, warn or error, got %q", s)
		}
		e.logLevel = s
		return nil
	})
	fs.Func("log-format", "format of --log-level's lines: `text` (default) or json", func(s string) error {
		if _, err := logx.NewHandler(io.Discard, s); err != nil {
			return err
		}
		e.logFormat = s
		return nil
	})
}

// logger is the SDK's logger: silent unless --log-level is given, else
// the broker's log format (internal/logx) on stderr.
func (e *env) logger() *slog.Logger {
	if e.logLevel == "" {
		return silentLogger
	}
	h, _ := logx.NewHandler(e.stderr, e.logFormat)
	lv, _ := logx.ParseLevel(e.logLevel)
	return slog.New(logx.Filter(h, lv))
}

// leaf makes the command name ("bench produce" for a subcommand of
// bench). usageLine is its synopsis, help its description. def declares
// the command's flags on fs and returns the function that runs it with
// the positional arguments.
func leaf(e *env, name, usageLine, help string, def func(fs *pflag.FlagSet) func(args []string) error) *cobra.Command {
	if i := strings.LastIndexByte(name, ' '); i >= 0 {
		usageLine = strings.TrimPrefix(usageLine, name[:i+1])
	}
	c := &cobra.Command{Use: usageLine, Short: summaries[name], Long: strings.TrimSpace(help)}
	run := def(c.Flags())
	c.RunE = func(_ *cobra.Command, args []string) error { return run(args) }
	return c
}

// parent makes a command that only groups subs, such as group and bench.
func parent(e *env, name, help string, subs ...*cobra.Command) *cobra.Command {
	c := &cobra.Command{Use: name, SuggestionsMinimumDistance: 2, Short: summaries[name], Long: strings.TrimSpace(help),
		Args: cobra.ArbitraryArgs,
		RunE: func(c *cobra.Command, args []string) error { return unknownCommand(e, c, args) }}
	c.AddCommand(subs...)
	return c
}

// unknownCommand is what a command with subcommands does when none is
// named: without arguments it prints its usage on stderr, otherwise it
// names the unknown command, with the closest ones ("did you mean").
// Both are usage errors.
func unknownCommand(e *env, c *cobra.Command, args []string) error {
	if len(args) == 0 {
		fmt.Fprint(e.stderr, c.UsageString())
		return errUsage
	}
	msg := fmt.Sprintf("unknown command %q", args[0])
	if s := c.SuggestionsFor(args[0]); len(s) > 0 {
		msg += "; did you mean " + strings.Join(s, " or ") + "?"
	}
	return usagef("%s (see `%s --help`)", msg, c.CommandPath())
}

// firstWord returns the first argument of args that is neither a flag nor
// a flag's value, when it names no subcommand of c: the word a mistyped
// command left behind. Flags are looked up in c's flag sets so that the
// value of --addr HOST:PORT is skipped.
func firstWord(c *cobra.Command, args []string) string {
	path := strings.Fields(c.CommandPath())[1:] // the words that led to c
	for i := 0; i < len(args); i++ {
		a := args[i]
		if a == "--" {
			return ""
		}
		if strings.HasPrefix(a, "-") {
			if strings.Contains(a, "=") {
				continue
			}
			name := strings.TrimLeft(a, "-")
			f := c.Flags().Lookup(name)
			if f == nil && len(name) == 1 {
				f = c.Flags().ShorthandLookup(name)
			}
			if f == nil {
				f = c.PersistentFlags().Lookup(name)
			}
			if f != nil && f.NoOptDefVal == "" {
				i++ // the flag's value
			}
			continue
		}
		if len(path) > 0 && a == path[0] {
			path = path[1:]
			continue
		}
		for _, sub := range c.Commands() {
			if sub.Name() == a || sub.HasAlias(a) {
				return ""
			}
		}
		return a
	}
	return ""
}

// cmdGenMan writes the man pages of the command tree: `make man`.
func cmdGenMan(e *env) *cobra.Command {
	return &cobra.Command{
		Use:    "gen-man <dir>",
		Short:  "write man pages of every command into dir",
		Hidden: true,
		Args:   cobra.ExactArgs(1),
		RunE: func(c *cobra.Command, args []string) error {
			h := &doc.GenManHeader{Title: "METAQ", Section: "1", Source: "metaq " + version}
			c.Root().DisableAutoGenTag = true
			return doc.GenManTree(c.Root(), h, args[0])
		},
	}
}
