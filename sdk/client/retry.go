package client

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"slices"
	"strings"
	"sync/atomic"
	"time"

	"github.com/metaq-go/metaq/conf"
	"github.com/metaq-go/metaq/sdk/message"
)

// Retry topics and dead letters (issue 28, docs/retry.md). A message whose
// handler failed on every in-process attempt (HandlerRetries) is produced,
// as a delayed message, to its group's retry topic, <group>.retry, which
// every member of the group consumes alongside its topics; the handler
// sees it again as it was first (topic, partition, offset, id, key, body,
// headers) plus a delivery count header. A message delivered
// MaxDeliveries times goes to the group's dead-letter topic,
// <group>.dlq, with headers that keep where it came from and the last
// error.

// Headers a retried or dead-lettered message carries.
const (
	// HeaderDeliveryCount is how many times the group has delivered the
	// message: absent (1) on the first delivery, 2 on the first from the
	// retry topic, and so on. The handler sees it on redeliveries.
	HeaderDeliveryCount = "metaq-delivery-count"
	// HeaderOriginTopic, HeaderOriginPartition, HeaderOriginOffset and
	// HeaderOriginID are the topic, partition, offset and id the message
	// had when it was first delivered.
	HeaderOriginTopic     = "metaq-origin-topic"
	HeaderOriginPartition = "metaq-origin-partition"
	HeaderOriginOffset    = "metaq-origin-offset"
	HeaderOriginID        = "metaq-origin-id"
	// HeaderLastError is the text of the handler's last error (at most
	// MaxLastErrorLen bytes).
	HeaderLastError = "metaq-last-error"
)

// MaxLastErrorLen bounds HeaderLastError's value.
const MaxLastErrorLen = 1024

// DefaultMaxDeliveries is how many times a group delivers a message
// before it goes to the dead-letter topic (RocketMQ's 16).
const DefaultMaxDeliveries = 16

// DefaultRetryBackoff is the pause before each redelivery from the retry
// topic: the n-th redelivery waits DefaultRetryBackoff[n-1], the last
// entry for any beyond (RocketMQ's delay levels 3 to 18: 10 s up to 2 h).
var DefaultRetryBackoff = []time.Duration{
	10 * time.Second, 30 * time.Second,
	time.Minute, 2 * time.Minute, 3 * time.Minute, 4 * time.Minute, 5 * time.Minute,
	6 * time.Minute, 7 * time.Minute, 8 * time.Minute, 9 * time.Minute, 10 * time.Minute,
	20 * time.Minute, 30 * time.Minute, time.Hour, 2 * time.Hour,
}

// RetryTopicOf and DeadLetterTopicOf name a group's retry and dead-letter
// topics. Topic names allow only [A-Za-z0-9_.-] (RocketMQ's %RETRY% and
// %DLQ% prefixes are not valid names), so they are suffixes.
func RetryTopicOf(group string) string { return group + ".retry" }

// DeadLetterTopicOf names a group's dead-letter topic (see RetryTopicOf).
func DeadLetterTopicOf(group string) string { return group + ".dlq" }

// RetryOptions configures RetryTopics; zero fields take the defaults.
type RetryOptions struct {
	// Backoff is the pause before each redelivery (DefaultRetryBackoff).
	Backoff []time.Duration
	// MaxDeliveries is how many deliveries a message gets before it goes
	// to the dead-letter topic (DefaultMaxDeliveries); 1 sends every
	// rejected message straight there.
	MaxDeliveries int
}

type retryTopics struct{ o RetryOptions }

func (retryTopics) Reject(context.Context, *message.Message, error) error {
	return errors.New("metaq: RetryTopics works only as a consuming Client's Reject policy")
}

// RetryTopics is the Reject policy that sends a rejected message to its
// group's retry topic, to be delivered again after a backoff, and after
// MaxDeliveries deliveries to the group's dead-letter topic
// (docs/retry.md). It needs a Client with a Group; the Client consumes
// the retry topic too. Consume creates either topic on a broker of the
// group's topics that lacks it, through the broker's admin API with the
// Client's credentials (retrycreate.go: the retry topic with the topic's
// partitions up to MaxRetryPartitions, the dead-letter topic with one);
// when it cannot, Consume fails saying so.
func RetryTopics(o RetryOptions) RejectPolicy { return retryTopics{o: o} }

// delayedSender sends a message to be delivered at (not before) at.
type delayedSender interface {
	sendAt(ctx context.Context, m *message.Message, at time.Time) error
}

// retrier is a group's RetryTopics policy at work.
type retrier struct {
	group, retryTopic, dlqTopic string
	backoff                     []time.Duration
	max                         int
	send                        delayedSender
	now                         func() time.Time
	logger                      *slog.Logger
	// dropping: the default policy could not create its topics, so it
	// drops as Drop() does (Client.Consume).
	dropping atomic.Bool
}

func newRetrier(group string, o RetryOptions, send delayedSender, logger *slog.Logger) (*retrier, error) {
	r := &retrier{group: group, retryTopic: RetryTopicOf(group), dlqTopic: DeadLetterTopicOf(group),
		backoff: o.Backoff, max: o.MaxDeliveries, send: send, now: time.Now, logger: logger}
	if len(r.backoff) == 0 {
		r.backoff = DefaultRetryBackoff
	}
	if r.max == 0 {
		r.max = DefaultMaxDeliveries
	}
	switch {
	case r.max < 0:
		return nil, fmt.Errorf("metaq: RetryTopics: MaxDeliveries %d < 0", r.max)
	case slices.ContainsFunc(r.backoff, func(d time.Duration) bool { return d < 0 }):
		return nil, errors.New("metaq: RetryTopics: a negative backoff")
	case !conf.ValidTopicName(r.retryTopic) || !conf.ValidTopicName(r.dlqTopic):
		return nil, fmt.Errorf("metaq: RetryTopics: group %q does not make valid retry and dead-letter topic names (%s)",
			group, conf.TopicNameRule)
	}
	return r, nil
}

// delay is the pause before delivery n+1 of a message delivered n times.
func (r *retrier) delay(n int) time.Duration {
	return r.backoff[min(max(n, 1), len(r.backoff))-1]
}

// view turns a message read from the retry topic into the message as it
// was first delivered (topic, partition, offset and id from the origin
// headers, which it removes from a copy of the headers), keeping
// HeaderDeliveryCount. Other messages are left alone; a second call
// changes nothing. Callers pass a copy of the fetched message: the
// consumer goes on with the fetched one's id.
func (r *retrier) view(m *message.Message) {
	if m.Topic != r.retryTopic {
		return
	}
	topic, ok := m.Headers.String(HeaderOriginTopic)
	if !ok {
		return // not one of ours: handled as a message of the retry topic
	}
	p, _, _ := m.Headers.Int64(HeaderOriginPartition)
	off, _, _ := m.Headers.Int64(HeaderOriginOffset)
	id, _, _ := m.Headers.Int64(HeaderOriginID)
	m.Topic, m.Partition, m.Offset, m.ID, m.BrokerID = topic, int32(p), off, id, 0
	m.Headers = slices.DeleteFunc(slices.Clone(m.Headers), func(h message.Header) bool {
		switch h.Key {
		case HeaderOriginTopic, HeaderOriginPartition, HeaderOriginOffset, HeaderOriginID,
			HeaderLastError, message.HeaderDeliverAt, message.HeaderDelay:
			return true
		}
		return false
	})
}

// deliveries returns how many times m (seen through view) was delivered.
func deliveries(m *message.Message) int {
	n, ok, err := m.Headers.Int64(HeaderDeliveryCount)
	if !ok || err != nil || n < 1 {
		return 1
	}
	return int(min(n, 1<<30))
}

// next builds what a rejected m (seen through view) becomes: the message
// for the retry topic and its delivery time, or (dead) the message for the
// dead-letter topic.
func (r *retrier) next(m *message.Message, herr error, now time.Time) (out *message.Message, at time.Time, dead bool) {
	return r.nextAfter(m, herr, now, -1)
}

// nextAfter is next with the redelivery after delay (< 0: the backoff
// schedule's).
func (r *retrier) nextAfter(m *message.Message, herr error, now time.Time, delay time.Duration) (out *message.Message, at time.Time, dead bool) {
	n := deliveries(m)
	dead = n >= r.max
	out = &message.Message{Topic: r.retryTopic, Body: m.Body, Attribute: m.Attribute, HasAttribute: m.HasAttribute,
		Key: m.Key, Tags: m.Tags, Timestamp: m.Timestamp}
	if dead {
		out.Topic = r.dlqTopic
	}
	for _, h := range m.Headers {
		switch h.Key {
		case HeaderDeliveryCount, HeaderOriginTopic, HeaderOriginPartition, HeaderOriginOffset, HeaderOriginID,
			HeaderLastError, message.HeaderDeliverAt, message.HeaderDelay:
			continue
		}
		out.Headers = append(out.Headers, h)
	}
	out.Headers.Add(HeaderOriginTopic, m.Topic)
	out.Headers.AddInt64(HeaderOriginPartition, int64(m.Partition))
	out.Headers.AddInt64(HeaderOriginOffset, m.Offset)
	out.Headers.AddInt64(HeaderOriginID, m.ID)
	msg := ""
	if herr != nil {
		msg = herr.Error()
	}
	if len(msg) > MaxLastErrorLen {
		msg = strings.ToValidUTF8(msg[:MaxLastErrorLen], "")
	}
	out.Headers.Add(HeaderLastError, msg)
	if dead {
		out.Headers.AddInt64(HeaderDeliveryCount, int64(n))
		return out, time.Time{}, true
	}
	out.Headers.AddInt64(HeaderDeliveryCount, int64(n+1))
	if delay < 0 {
		delay = r.delay(n)
	}
	at = now.Add(delay)
	out.DeliverAt = at // held by the broker's timer (docs/delayed.md)
	return out, at, false
}

// reject is the consumers' reject function: it sends m on and returns nil
// once the retry or dead-letter topic has it.
func (r *retrier) reject(ctx context.Context, fetched *message.Message, herr error) error {
	if r.dropping.Load() {
		r.logger.Error("metaq: message rejected after retries and dropped", "topic", fetched.Topic,
			"partition", fetched.Partition, "offset", fetched.Offset, "id", fetched.ID, "err", herr)
		return nil
	}
	v := *fetched
	m := &v
	r.view(m)
	out, at, dead := r.next(m, herr, r.now())
	if err := r.send.sendAt(ctx, out, at); err != nil {
		return fmt.Errorf("metaq: sending a rejected message to %s: %w", out.Topic, err)
	}
	if dead {
		r.logger.Warn("metaq: message rejected on its last delivery; sent to the dead-letter topic", "topic", m.Topic,
			"partition", m.Partition, "offset", m.Offset, "id", m.ID, "deliveries", deliveries(m), "dlq", r.dlqTopic, "err", herr)
	}
	return nil
}

// Reject makes retrier a RejectPolicy for the consumers of its Client.
func (r *retrier) Reject(ctx context.Context, m *message.Message, err error) error {
	return r.reject(ctx, m, err)
}

// clientSender sends through a Client's producer; m carries its delivery
// time in DeliverAt already (next).
type clientSender struct{ c *Client }

func (s clientSender) sendAt(ctx context.Context, m *message.Message, _ time.Time) error {
	_, err := s.c.ProduceSync(ctx, m)
	return err
}

// wrap makes h see retry-topic messages as they first were.
func (r *retrier) wrap(h Handler) Handler {
	return func(ctx context.Context, m *message.Message) error {
		if m.Topic != r.retryTopic {
			return h(ctx, m)
		}
		v := *m
		r.view(&v)
		return h(ctx, &v)
	}
}
