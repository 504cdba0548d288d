package main

import (
	"context"
	"errors"
	"fmt"
	"net"

	"github.com/metaq-go/metaq/sdk/admin"
	"github.com/spf13/cobra"
	"github.com/spf13/pflag"
)

const topicHelp = `
Create, delete and alter topics live, through the broker's HTTP admin API
(docs/http.md). The broker persists the change in <data_dir>/topics.toml
and, in cluster mode, registers it in ZooKeeper.

The admin API is the one of the broker at --addr: the command asks that
broker (its stats line http_addr) where its HTTP listener is, so it never
acts on another broker, and fails if --addr does not answer or serves no
HTTP. --http host:port names the API directly instead. With --tls-ca (or
--tls-cert) the API is reached over HTTPS; --user (and its password) is
sent as HTTP basic auth, and changes need an admin user.
`

const topicCreateHelp = `
Create topic NAME with --partitions partitions (default: the broker's
num_partitions).

examples:
  metaq topic create orders --partitions 8
  metaq topic create orders --addr broker1:8123 --user admin --password-file pw
`

const topicDeleteHelp = `
Delete topic NAME and, unless --keep-data, its messages. Without --yes
it only says what it would do and exits 1. With --keep-data the
partition directories stay on disk (creating the topic again reopens them).

examples:
  metaq topic delete orders --yes
  metaq topic delete orders --yes --keep-data
`

const topicAlterHelp = `
Give topic NAME more partitions (--partitions N, more than it has; fewer
are refused). If producers partition by key, a key's partition changes
with the count, so ordering per key is not kept across the change: the
command prints that warning, as kafka-topics does.

examples:
  metaq topic alter orders --partitions 16
`

func cmdTopic(e *env) *cobra.Command {
	var httpAddr string
	c := parent(e, "topic", topicHelp,
		leaf(e, "topic create", "topic create NAME [--partitions N]", topicCreateHelp, func(fs *pflag.FlagSet) func([]string) error {
			parts := fs.Int("partitions", 0, "number of partitions (default: the broker's num_partitions)")
			return func(args []string) error {
				if len(args) != 1 {
					return usagef("topic create needs one NAME")
				}
				n := 0
				if fs.Changed("partitions") {
					if *parts < 1 {
						return usagef("--partitions must be positive, got %d", *parts)
					}
					n = *parts
				}
				var out admin.CreatedTopic
				if err := topicCall(e, httpAddr, func(ctx context.Context, adm *admin.Admin) (err error) {
					out, err = adm.CreateTopic(ctx, args[0], n)
					return err
				}); err != nil {
					return err
				}
				fmt.Fprintf(e.stdout, "created topic %s with %d partition(s)\n", out.Name, out.Partitions)
				return nil
			}
		}),
		leaf(e, "topic delete", "topic delete NAME [--yes] [--keep-data]", topicDeleteHelp, func(fs *pflag.FlagSet) func([]string) error {
			yes := fs.Bool("yes", false, "really delete (without it: say what would be deleted and exit 1)")
			keep := fs.Bool("keep-data", false, "keep the partitions' data on disk")
			return func(args []string) error {
				if len(args) != 1 {
					return usagef("topic delete needs one NAME")
				}
				what := "topic " + args[0] + " and all its messages"
				if *keep {
					what = "topic " + args[0] + " (its data stays on disk)"
				}
				if !*yes {
					fmt.Fprintf(e.stderr, "would delete %s; repeat with --yes to do it\n", what)
					return errSilent
				}
				if err := topicCall(e, httpAddr, func(ctx context.Context, adm *admin.Admin) error {
					return adm.DeleteTopic(ctx, args[0], !*keep)
				}); err != nil {
					return err
				}
				fmt.Fprintf(e.stdout, "deleted %s\n", what)
				return nil
			}
		}),
		leaf(e, "topic alter", "topic alter NAME --partitions N", topicAlterHelp, func(fs *pflag.FlagSet) func([]string) error {
			parts := fs.Int("partitions", 0, "the new number of partitions (more than the topic has)")
			return func(args []string) error {
				if len(args) != 1 {
					return usagef("topic alter needs one NAME")
				}
				if *parts < 1 {
					return usagef("topic alter needs --partitions N (positive)")
				}
				var out admin.AlteredTopic
				if err := topicCall(e, httpAddr, func(ctx context.Context, adm *admin.Admin) (err error) {
					out, err = adm.AddPartitions(ctx, args[0], *parts)
					return err
				}); err != nil {
					return err
				}
				if out.Warning != "" {
					fmt.Fprintf(e.stderr, "WARNING: %s\n", out.Warning)
				}
				if out.Old == out.New {
					fmt.Fprintf(e.stdout, "topic %s already has %d partition(s)\n", args[0], out.New)
				} else {
					fmt.Fprintf(e.stdout, "topic %s now has %d partition(s) (was %d)\n", args[0], out.New, out.Old)
				}
				return nil
			}
		}),
	)
	c.PersistentFlags().StringVar(&httpAddr, "http", "", "the broker's HTTP admin API `host:port` (default: the one the broker at --addr reports)")
	return c
}

// errSilent is a failure already explained on stderr (exit status 1).
var errSilent = errors.New("")

// topicAdmin returns an Admin whose topic calls go to the admin API of
// the broker at --addr (asked for it with its stats line http_addr, so
// that a topic command acts on the broker named and no other: a dead
// --addr is an error, and so is a broker with http_port = 0), or to
// --http when given.
func topicAdmin(e *env, httpAddr string) (*admin.Admin, error) {
	if err := e.sec.prepare(); err != nil {
		return nil, err
	}
	if httpAddr != "" {
		if _, _, err := net.SplitHostPort(httpAddr); err != nil {
			return nil, usagef("bad --http %q: %v", httpAddr, err)
		}
		adm, err := adminOf(e)
		if err != nil {
			return nil, err
		}
		adm.SetHTTPAddr(httpAddr)
		return adm, nil
	}
	adm, err := newAdmin(e)
	if err != nil {
		return nil, err
	}
	ctx, cancel := context.WithTimeout(e.ctx, e.timeout)
	defer cancel()
	h, err := adm.HTTPAddr(ctx, e.addr)
	if err != nil {
		adm.Close()
		return nil, err
	}
	adm.SetHTTPAddr(h)
	return adm, nil
}

// topicCall runs fn with an Admin of the topic commands (topicAdmin).
func topicCall(e *env, httpAddr string, fn func(ctx context.Context, adm *admin.Admin) error) error {
	adm, err := topicAdmin(e, httpAddr)
	if err != nil {
		return err
	}
	defer adm.Close()
	ctx, cancel := context.WithTimeout(e.ctx, e.timeout)
	defer cancel()
	return fn(ctx, adm)
}
