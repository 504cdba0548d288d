package main

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/url"
	"strconv"

	"github.com/spf13/cobra"
	"github.com/spf13/pflag"
)

// defaultHTTPPort is the broker's default http_port.
const defaultHTTPPort = "8120"

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
				req := map[string]any{"name": args[0]}
				if fs.Changed("partitions") {
					if *parts < 1 {
						return usagef("--partitions must be positive, got %d", *parts)
					}
					req["num_partitions"] = *parts
				}
				var out struct {
					Name       string `json:"name"`
					Partitions int    `json:"partitions"`
				}
				if err := adminCall(e, httpAddr, http.MethodPost, "/api/v1/topics", req, &out); err != nil {
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
				path := "/api/v1/topics/" + url.PathEscape(args[0]) + "?delete_data=" + strconv.FormatBool(!*keep)
				if err := adminCall(e, httpAddr, http.MethodDelete, path, nil, nil); err != nil {
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
				var out struct {
					Old     int    `json:"old_partitions"`
					New     int    `json:"partitions"`
					Warning string `json:"warning"`
				}
				path := "/api/v1/topics/" + url.PathEscape(args[0]) + "/partitions"
				if err := adminCall(e, httpAddr, http.MethodPost, path, map[string]any{"num_partitions": *parts}, &out); err != nil {
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

// brokerHTTPAddr asks the broker at --addr where its admin API is (the
// http_addr line of its stats), so that an admin command acts on the
// broker named and no other: a dead --addr is an error, and so is a
// broker with http_port = 0. A listener bound to every address
// (0.0.0.0, ::) is reached at --addr's host.
func brokerHTTPAddr(e *env) (string, error) {
	adm, err := newAdmin(e)
	if err != nil {
		return "", err
	}
	defer adm.Close()
	ctx, cancel := context.WithTimeout(e.ctx, e.timeout)
	defer cancel()
	st, err := adm.Stats(ctx, e.addr, "")
	if err != nil {
		return "", fmt.Errorf("asking the broker at %s for its admin API address: %w", e.addr, err)
	}
	host, _, err := net.SplitHostPort(e.addr)
	if err != nil {
		return "", usagef("bad --addr %q: %v", e.addr, err)
	}
	a, ok := st.Value("http_addr")
	switch {
	case !ok: // a broker from before http_addr: its default port
		return net.JoinHostPort(host, defaultHTTPPort), nil
	case a == "-":
		return "", fmt.Errorf("the broker at %s serves no admin API (http_port = 0 in its server.toml)", e.addr)
	}
	h, p, err := net.SplitHostPort(a)
	if err != nil {
		return "", fmt.Errorf("the broker at %s gave a bad http_addr %q", e.addr, a)
	}
	if ip := net.ParseIP(h); h == "" || ip != nil && ip.IsUnspecified() {
		h = host
	}
	return net.JoinHostPort(h, p), nil
}

// adminBase returns the admin API's base URL and client.
func adminBase(e *env, httpAddr string) (string, *http.Client, error) {
	if err := e.sec.prepare(); err != nil {
		return "", nil, err
	}
	if httpAddr == "" {
		a, err := brokerHTTPAddr(e)
		if err != nil {
			return "", nil, err
		}
		httpAddr = a
	} else if _, _, err := net.SplitHostPort(httpAddr); err != nil {
		return "", nil, usagef("bad --http %q: %v", httpAddr, err)
	}
	tr := &http.Transport{}
	scheme := "http"
	if e.sec.tls != nil {
		scheme = "https"
		tr.TLSClientConfig = e.sec.tls.Clone()
	}
	return scheme + "://" + httpAddr, &http.Client{Transport: tr, Timeout: e.timeout}, nil
}

// adminCall sends one admin API request with body (JSON, nil for none)
// and decodes the reply into out (nil: ignored). A reply of 400 or more
// is an error carrying the API's message.
func adminCall(e *env, httpAddr, method, path string, body, out any) error {
	base, hc, err := adminBase(e, httpAddr)
	if err != nil {
		return err
	}
	var rd io.Reader
	if body != nil {
		b, err := json.Marshal(body)
		if err != nil {
			return err
		}
		rd = bytes.NewReader(b)
	}
	ctx, cancel := context.WithTimeout(e.ctx, e.timeout)
	defer cancel()
	req, err := http.NewRequestWithContext(ctx, method, base+path, rd)
	if err != nil {
		return err
	}
	if body != nil {
		req.Header.Set("Content-Type", "application/json")
	}
	if e.sec.user != "" {
		req.SetBasicAuth(e.sec.user, e.sec.password)
	}
	resp, err := hc.Do(req)
	if err != nil {
		return fmt.Errorf("admin API at %s: %w", base, err)
	}
	defer resp.Body.Close()
	data, err := io.ReadAll(io.LimitReader(resp.Body, 8<<20))
	if err != nil {
		return fmt.Errorf("admin API at %s: %w", base, err)
	}
	if resp.StatusCode >= 400 {
		var ae struct {
			Error string `json:"error"`
		}
		if json.Unmarshal(data, &ae) == nil && ae.Error != "" {
			return fmt.Errorf("%s %s: %d: %s", method, path, resp.StatusCode, ae.Error)
		}
		return fmt.Errorf("%s %s: %s", method, path, resp.Status)
	}
	if out != nil {
		if err := json.Unmarshal(data, out); err != nil {
			return fmt.Errorf("admin API reply: %w", err)
		}
	}
	return nil
}
