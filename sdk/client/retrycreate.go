package client

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net"
	"net/http"
	"strings"
	"time"
)

// Retry and dead-letter topics are created on demand (issue 28): when a
// Client with RetryTopics starts consuming and a broker that hosts its
// topics lacks <group>.retry or <group>.dlq, the Client creates them there
// through the broker's HTTP admin API (docs/http.md), with its own
// credentials (SASLPlain; the API needs an admin user when [auth] is on).
// The retry topic gets as many partitions as the group's topic has on that
// broker (the most of its topics), at most MaxRetryPartitions, so that
// the retry load spreads over the members as the topic's does; the
// dead-letter topic gets one (operators read it, it is not consumed).

// retryCreateTimeout bounds ensureRetryTopics (a ZooKeeper view that
// never gets ready, a broker that does not answer).
const retryCreateTimeout = 30 * time.Second

// MaxRetryPartitions bounds the partitions of a retry topic the Client
// creates.
const MaxRetryPartitions = 8

// retryTopicParts is how many partitions a created retry topic gets when
// the group's topics have topicParts on the broker.
func retryTopicParts(topicParts int) int { return min(max(topicParts, 1), MaxRetryPartitions) }

// ensureRetryTopics creates the retry and dead-letter topics on every
// broker that hosts the Client's topics and lacks them. It returns an
// error naming the broker, the topic and what to do when one cannot be
// created.
func (c *Client) ensureRetryTopics(ctx context.Context) error {
	r := c.retrier
	if r == nil {
		return nil
	}
	ctx, cancel := context.WithTimeout(ctx, retryCreateTimeout)
	defer cancel()
	hosts, err := c.retryHosts(ctx)
	if err != nil {
		return fmt.Errorf("metaq: RetryTopics: finding the brokers of %s: %w", strings.Join(c.cfg.topics, ","), err)
	}
	for addr, parts := range hosts {
		if err := c.ensureTopicsOn(ctx, addr, parts, r); err != nil {
			return fmt.Errorf("metaq: RetryTopics: %w (create %s and %s with `metaq topic create`, or choose another Reject policy)",
				err, r.retryTopic, r.dlqTopic)
		}
	}
	return nil
}

// retryHosts maps the address of each broker that hosts one of the
// Client's topics (every broker given with Brokers in direct mode) to the
// most partitions one of those topics has there.
func (c *Client) retryHosts(ctx context.Context) (map[string]int, error) {
	hosts := map[string]int{}
	if c.zk == nil {
		for _, a := range c.cfg.brokers {
			hosts[a] = 0
		}
		return hosts, nil
	}
	for _, t := range c.cfg.topics {
		if t == c.retrier.retryTopic {
			continue
		}
		v := c.zk.WatchSubscribe(t)
		if err := v.Wait(ctx); err != nil {
			return nil, err
		}
		snap := v.Snapshot()
		per := map[int]int{}
		for _, p := range snap.Partitions {
			per[p.BrokerID]++
		}
		for id, n := range per {
			if a := snap.Addrs[id]; a != "" {
				hosts[a] = max(hosts[a], n)
			}
		}
	}
	return hosts, nil
}

// ensureTopicsOn creates r's topics on the broker at addr when it does not
// list them; topicParts is the most partitions the Client's topics have
// there (0: not known, asked).
func (c *Client) ensureTopicsOn(ctx context.Context, addr string, topicParts int, r *retrier) error {
	cn, err := c.rawConn(addr)
	if err != nil {
		return err
	}
	sctx, cancel := context.WithTimeout(ctx, cn.opts.requestTimeout)
	infos, err := statsTopics(sctx, cn)
	cancel()
	if err != nil {
		var be *BrokerError
		var ae *AuthError
		if errors.As(err, &be) || errors.As(err, &ae) {
			return fmt.Errorf("listing the topics of the broker at %s: %w", addr, err)
		}
		// Not reached (down, restarting): its consumers wait for it as
		// for any broker; the topics are not created there by this start.
		c.cfg.logger.Warn("metaq: RetryTopics: a broker not reached is skipped; its retry and dead-letter topics are not checked",
			"broker", addr, "err", err)
		return nil
	}
	have := map[string]bool{}
	for _, ti := range infos {
		have[ti.Name] = true
		for _, t := range c.cfg.topics {
			if t == ti.Name && t != r.retryTopic {
				topicParts = max(topicParts, ti.Partitions)
			}
		}
	}
	var api string
	for _, w := range []struct {
		name  string
		parts int
	}{{r.retryTopic, retryTopicParts(topicParts)}, {r.dlqTopic, 1}} {
		if have[w.name] {
			continue
		}
		if api == "" {
			if api, err = brokerHTTPAddr(ctx, cn, addr); err != nil {
				return fmt.Errorf("creating %s on the broker at %s: %w", w.name, addr, err)
			}
		}
		body, _ := json.Marshal(map[string]any{"name": w.name, "num_partitions": w.parts})
		resp, reply, err := c.AdminHTTP(ctx, api, http.MethodPost, "/api/v1/topics", body)
		switch {
		case err != nil:
			return fmt.Errorf("creating %s on the broker at %s: %w", w.name, addr, err)
		case resp.StatusCode == http.StatusConflict:
			// Another member created it meanwhile.
		case resp.StatusCode >= 400:
			var m struct {
				Error string `json:"error"`
			}
			_ = json.Unmarshal(reply, &m)
			return fmt.Errorf("creating %s on the broker at %s: the admin API answered %s: %s", w.name, addr, resp.Status, m.Error)
		default:
			c.cfg.logger.Info("metaq: created a topic for RetryTopics", "topic", w.name, "partitions", w.parts, "broker", addr)
		}
	}
	return nil
}

// brokerHTTPAddr is where the broker at addr serves its admin API (the
// http_addr of its stats; a listener on every address is reached at
// addr's host).
func brokerHTTPAddr(ctx context.Context, cn *conn, addr string) (string, error) {
	body, err := stats(ctx, cn, "")
	if err != nil {
		return "", err
	}
	h := ""
	for _, l := range statsLines(body) {
		if v, ok := strings.CutPrefix(l, "http_addr "); ok {
			h = strings.TrimSpace(v)
		}
	}
	host, _, err := net.SplitHostPort(addr)
	if err != nil {
		return "", err
	}
	switch h {
	case "":
		return "", errors.New("the broker reports no admin API address (http_addr)")
	case "-":
		return "", errors.New("the broker serves no admin API (http_port = 0)")
	}
	hh, p, err := net.SplitHostPort(h)
	if err != nil {
		return "", fmt.Errorf("bad http_addr %q", h)
	}
	if ip := net.ParseIP(hh); hh == "" || ip != nil && ip.IsUnspecified() {
		hh = host
	}
	return net.JoinHostPort(hh, p), nil
}
