package otelmetaq_test

import (
	"context"
	"errors"
	"fmt"
	"strconv"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/codes"
	"go.opentelemetry.io/otel/propagation"
	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	"go.opentelemetry.io/otel/sdk/trace/tracetest"
	"go.opentelemetry.io/otel/trace"

	"github.com/metaq-go/metaq/internal/brokertest"
	"github.com/metaq-go/metaq/sdk/client"
	"github.com/metaq-go/metaq/sdk/client/otelmetaq"
	"github.com/metaq-go/metaq/sdk/message"
)

func newRecorder(t *testing.T) (*tracetest.SpanRecorder, *sdktrace.TracerProvider) {
	sr := tracetest.NewSpanRecorder()
	tp := sdktrace.NewTracerProvider(sdktrace.WithSpanProcessor(sr))
	t.Cleanup(func() { _ = tp.Shutdown(context.Background()) })
	return sr, tp
}

func attrs(s sdktrace.ReadOnlySpan) map[attribute.Key]attribute.Value {
	m := map[attribute.Key]attribute.Value{}
	for _, kv := range s.Attributes() {
		m[kv.Key] = kv.Value
	}
	return m
}

func spansNamed(sr *tracetest.SpanRecorder, name string) []sdktrace.ReadOnlySpan {
	var out []sdktrace.ReadOnlySpan
	for _, s := range sr.Ended() {
		if s.Name() == name {
			out = append(out, s)
		}
	}
	return out
}

// consumeN runs cl.Consume with h until n messages were handled, and
// returns them in order.
func consumeN(t *testing.T, cl *client.Client, n int, h client.Handler) []*message.Message {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	var (
		mu  sync.Mutex
		got []*message.Message
	)
	err := cl.Consume(ctx, func(ctx context.Context, m *message.Message) error {
		err := h(ctx, m)
		mu.Lock()
		got = append(got, m)
		if len(got) == n {
			cancel()
		}
		mu.Unlock()
		return err
	})
	if err != nil && !errors.Is(err, context.Canceled) {
		require.NoError(t, err)
	}
	require.Len(t, got, n)
	return got
}

// TestProduceConsume: a real broker. Messages produced (ProduceSync and
// Produce) under a parent span carry a traceparent header; their publish
// spans are children of the parent with the conventions' attributes and
// the broker's id and partition; a wrapped handler runs each message in a
// process span whose parent is that message's publish span (same trace,
// remote parent), with the consumer group, and whose context reaches the
// handler. A message without trace headers gets a root process span.
func TestProduceConsume(t *testing.T) {
	b := brokertest.Start(t, brokertest.Topics("tr"), brokertest.Partitions(2))
	sr, tp := newRecorder(t)
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()

	pc, err := client.New(client.Brokers(b.Addr()))
	require.NoError(t, err)
	defer pc.Close(ctx)
	prod := otelmetaq.NewProducer(pc, otelmetaq.WithTracerProvider(tp))
	require.Same(t, pc, prod.Client())

	pctx, parent := tp.Tracer("test").Start(ctx, "parent")
	m1 := &message.Message{Topic: "tr", Body: []byte("one"), Key: []byte("k1"),
		Headers: message.Headers{{Key: "app", Value: []byte("x")}, {Key: "traceparent", Value: []byte("stale")}}}
	res, err := prod.ProduceSync(pctx, m1)
	require.NoError(t, err)
	done := make(chan client.SendResult, 1)
	m2 := &message.Message{Topic: "tr", Body: []byte("two!"), Key: []byte("k2")}
	prod.Produce(pctx, m2, func(r client.SendResult, err error) {
		require.NoError(t, err)
		done <- r
	})
	res = append(res, <-done)
	parent.End()
	tp2, err := client.New(client.Brokers(b.Addr()))
	require.NoError(t, err)
	defer tp2.Close(ctx)
	_, err = tp2.ProduceSync(ctx, &message.Message{Topic: "tr", Body: []byte("plain")})
	require.NoError(t, err)

	// The producer's message carries one traceparent, the app header kept.
	require.Equal(t, "app", m1.Headers[0].Key)
	tpv, _ := m1.Headers.String("traceparent")
	require.Regexp(t, `^00-[0-9a-f]{32}-[0-9a-f]{16}-01$`, tpv)
	require.Len(t, m1.Headers, 2)

	pubs := spansNamed(sr, "publish tr")
	require.Len(t, pubs, 2)
	pubByID := map[string]sdktrace.ReadOnlySpan{}
	for i, s := range pubs {
		require.Equal(t, trace.SpanKindProducer, s.SpanKind())
		require.Equal(t, parent.SpanContext().SpanID(), s.Parent().SpanID())
		require.Equal(t, parent.SpanContext().TraceID(), s.SpanContext().TraceID())
		a := attrs(s)
		require.Equal(t, "metaq", a["messaging.system"].AsString())
		require.Equal(t, "tr", a["messaging.destination.name"].AsString())
		require.Equal(t, "send", a["messaging.operation.type"].AsString())
		require.Equal(t, "publish", a["messaging.operation.name"].AsString())
		id := a["messaging.message.id"].AsString()
		require.NotEmpty(t, id, "span %d", i)
		pubByID[id] = s
		require.Equal(t, codes.Unset, s.Status().Code)
	}
	for i, r := range res {
		s := pubByID[strconv.FormatInt(r.ID, 10)]
		require.NotNil(t, s, "publish span of message %d", i)
		a := attrs(s)
		require.Equal(t, message.Partition{BrokerID: r.BrokerID, Partition: r.Partition}.String(),
			a["messaging.destination.partition.id"].AsString())
		require.Equal(t, int64(len([]*message.Message{m1, m2}[i].Body)), a["messaging.message.body.size"].AsInt64())
	}

	cc, err := client.New(client.Brokers(b.Addr()), client.ConsumeTopics("tr"), client.ConsumerGroup("g1"))
	require.NoError(t, err)
	defer cc.Close(ctx)
	var (
		mu      sync.Mutex
		handled = map[string]trace.SpanContext{}
	)
	h := otelmetaq.WrapHandler(func(ctx context.Context, m *message.Message) error {
		mu.Lock()
		handled[string(m.Body)] = trace.SpanContextFromContext(ctx)
		mu.Unlock()
		return nil
	}, otelmetaq.WithTracerProvider(tp), otelmetaq.WithConsumerGroup("g1"))
	got := consumeN(t, cc, 3, h)

	procs := spansNamed(sr, "process tr")
	require.Len(t, procs, 3)
	procByID := map[string]sdktrace.ReadOnlySpan{}
	for _, s := range procs {
		require.Equal(t, trace.SpanKindConsumer, s.SpanKind())
		a := attrs(s)
		require.Equal(t, "metaq", a["messaging.system"].AsString())
		require.Equal(t, "tr", a["messaging.destination.name"].AsString())
		require.Equal(t, "process", a["messaging.operation.type"].AsString())
		require.Equal(t, "g1", a["messaging.consumer.group.name"].AsString())
		procByID[a["messaging.message.id"].AsString()] = s
	}
	for _, m := range got {
		s := procByID[strconv.FormatInt(m.ID, 10)]
		require.NotNil(t, s, "process span of %q", m.Body)
		require.Equal(t, s.SpanContext(), handled[string(m.Body)], "the handler runs in the process span")
		require.Equal(t, message.Partition{BrokerID: m.BrokerID, Partition: m.Partition}.String(),
			attrs(s)["messaging.destination.partition.id"].AsString())
		if string(m.Body) == "plain" {
			require.False(t, s.Parent().IsValid(), "no trace headers: a root span")
			continue
		}
		pub := pubByID[strconv.FormatInt(m.ID, 10)]
		require.NotNil(t, pub)
		require.True(t, s.Parent().IsRemote())
		require.Equal(t, pub.SpanContext().SpanID(), s.Parent().SpanID(), "%q: parent is its publish span", m.Body)
		require.Equal(t, pub.SpanContext().TraceID(), s.SpanContext().TraceID())
		require.Equal(t, parent.SpanContext().TraceID(), s.SpanContext().TraceID())
	}
}

// TestHostileTraceHeaders: through a real broker and the Messages loop
// with StartProcess, a traceparent that is malformed, of an unknown
// layout, with zero ids, not UTF-8, null, or repeated (the last one
// counts) is ignored (a root span, or the valid last one's child), and a
// hostile tracestate next to a valid traceparent is dropped while the
// parent is kept. Nothing panics.
func TestHostileTraceHeaders(t *testing.T) {
	b := brokertest.Start(t, brokertest.Topics("ho"))
	sr, tp := newRecorder(t)
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()

	const valid = "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01"
	big := make([]byte, 30000)
	for i := range big {
		big[i] = 'a'
	}
	cases := []struct {
		name    string
		headers message.Headers
		parent  string // the parent span id expected, "" for a root span
	}{
		{"garbage", message.Headers{{Key: "traceparent", Value: []byte("garbage")}}, ""},
		{"empty", message.Headers{{Key: "traceparent", Value: []byte{}}}, ""},
		{"null", message.Headers{{Key: "traceparent"}}, ""},
		{"version ff", message.Headers{{Key: "traceparent", Value: []byte("ff-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01")}}, ""},
		{"zero trace id", message.Headers{{Key: "traceparent", Value: []byte("00-00000000000000000000000000000000-00f067aa0ba902b7-01")}}, ""},
		{"zero span id", message.Headers{{Key: "traceparent", Value: []byte("00-4bf92f3577b34da6a3ce929d0e0e4736-0000000000000000-01")}}, ""},
		{"upper case", message.Headers{{Key: "traceparent", Value: []byte("00-4BF92F3577B34DA6A3CE929D0E0E4736-00F067AA0BA902B7-01")}}, ""},
		{"trailing", message.Headers{{Key: "traceparent", Value: []byte(valid + "-extra")}}, ""},
		{"short", message.Headers{{Key: "traceparent", Value: []byte(valid[:40])}}, ""},
		{"not utf-8", message.Headers{{Key: "traceparent", Value: append([]byte(valid[:54]), 0xff)}}, ""},
		{"nul", message.Headers{{Key: "traceparent", Value: []byte(valid[:20] + "\x00" + valid[21:])}}, ""},
		{"huge", message.Headers{{Key: "traceparent", Value: big}}, ""},
		{"last wins", message.Headers{{Key: "traceparent", Value: []byte(valid)}, {Key: "traceparent", Value: []byte("junk")}}, ""},
		{"last valid", message.Headers{{Key: "traceparent", Value: []byte("junk")}, {Key: "traceparent", Value: []byte(valid)}}, "00f067aa0ba902b7"},
		{"bad tracestate", message.Headers{{Key: "traceparent", Value: []byte(valid)}, {Key: "tracestate", Value: []byte("=,\x01\xff,,a=b=c")}}, "00f067aa0ba902b7"},
	}
	pc, err := client.New(client.Brokers(b.Addr()))
	require.NoError(t, err)
	defer pc.Close(ctx)
	for i, c := range cases {
		_, err := pc.ProduceSync(ctx, &message.Message{Topic: "ho", Body: []byte(strconv.Itoa(i)), Headers: c.headers})
		require.NoError(t, err, c.name)
	}

	tr := otelmetaq.New(otelmetaq.WithTracerProvider(tp))
	cc, err := client.New(client.Brokers(b.Addr()), client.ConsumeTopics("ho"))
	require.NoError(t, err)
	defer cc.Close(ctx)
	n := 0
	ids := map[string]string{} // message id -> body (the case's index)
	for m, err := range cc.Messages(ctx) {
		require.NoError(t, err)
		ids[strconv.FormatInt(m.ID, 10)] = string(m.Body)
		mctx, end := tr.StartProcess(ctx, m)
		require.True(t, trace.SpanContextFromContext(mctx).IsValid())
		end(nil)
		if n++; n == len(cases) {
			break
		}
	}

	procs := spansNamed(sr, "process ho")
	require.Len(t, procs, len(cases))
	for _, s := range procs {
		i, err := strconv.Atoi(ids[attrs(s)["messaging.message.id"].AsString()])
		require.NoError(t, err)
		c := cases[i]
		if c.parent == "" {
			require.False(t, s.Parent().IsValid(), "%s: a root span", c.name)
			continue
		}
		require.Equal(t, c.parent, s.Parent().SpanID().String(), c.name)
		require.Equal(t, "4bf92f3577b34da6a3ce929d0e0e4736", s.SpanContext().TraceID().String(), c.name)
		require.Equal(t, "", s.Parent().TraceState().String(), c.name)
	}
}

// TestErrorRecorded: a handler's error is recorded on its process span
// (status Error, an exception event, error.type); a send that fails ends
// its publish span with the error, and an explicit propagator is used for
// both sides. A spooled message's publish span says so, without an id.
func TestErrorRecorded(t *testing.T) {
	sr, tp := newRecorder(t)
	prop := propagation.NewCompositeTextMapPropagator(propagation.TraceContext{}, propagation.Baggage{})
	tr := otelmetaq.New(otelmetaq.WithTracerProvider(tp), otelmetaq.WithPropagator(prop),
		otelmetaq.WithAttributes(attribute.String("app", "t")))
	require.Equal(t, prop, tr.Propagator())

	m := &message.Message{Topic: "e", Body: []byte("x")}
	_, end := tr.StartPublish(context.Background(), m)
	end(client.SendResult{}, client.ErrTimeout)
	_, ok := m.Headers.Get("traceparent")
	require.True(t, ok)

	m.ID, m.Partition = 42, 3
	boom := errors.New("boom")
	err := tr.WrapHandler(func(context.Context, *message.Message) error { return boom })(context.Background(), m)
	require.ErrorIs(t, err, boom)

	sp := &message.Message{Topic: "e", Body: []byte("s")}
	_, end = tr.StartPublish(context.Background(), sp)
	end(client.SendResult{Topic: "e", Partition: -1, Offset: -1, ID: -1, BrokerID: -1, Spooled: true}, nil)

	spans := sr.Ended()
	require.Len(t, spans, 3)
	pub, proc, spooled := spans[0], spans[1], spans[2]
	require.True(t, attrs(spooled)["messaging.metaq.spooled"].AsBool())
	require.NotContains(t, attrs(spooled), attribute.Key("messaging.message.id"), "a spooled message has no id yet")
	require.Equal(t, codes.Unset, spooled.Status().Code)
	require.Equal(t, "publish e", pub.Name())
	require.Equal(t, codes.Error, pub.Status().Code)
	require.NotContains(t, attrs(pub), attribute.Key("messaging.message.id"))
	require.Equal(t, "t", attrs(pub)["app"].AsString())

	require.Equal(t, "process e", proc.Name())
	require.Equal(t, pub.SpanContext().SpanID(), proc.Parent().SpanID())
	require.Equal(t, codes.Error, proc.Status().Code)
	require.Equal(t, "boom", proc.Status().Description)
	require.Equal(t, "42", attrs(proc)["messaging.message.id"].AsString())
	require.Equal(t, "0-3", attrs(proc)["messaging.destination.partition.id"].AsString())
	require.Contains(t, attrs(proc), attribute.Key("error.type"))
	require.Len(t, proc.Events(), 1)
	require.Equal(t, "exception", proc.Events()[0].Name)
}

// TestBatchedAndTransaction: the trace headers travel in mput batches
// (Batching) and in a transaction's puts (StartPublish around
// Transaction.Produce): every consumed message's process span is the child
// of its own publish span.
func TestBatchedAndTransaction(t *testing.T) {
	b := brokertest.Start(t, brokertest.Topics("bt"), brokertest.Partitions(3))
	sr, tp := newRecorder(t)
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()

	pc, err := client.New(client.Brokers(b.Addr()), client.Batching(64, 1<<20, 5*time.Millisecond))
	require.NoError(t, err)
	defer pc.Close(ctx)
	prod := otelmetaq.NewProducer(pc, otelmetaq.WithTracerProvider(tp))
	const batched = 30
	msgs := make([]*message.Message, batched)
	for i := range msgs {
		msgs[i] = &message.Message{Topic: "bt", Body: fmt.Appendf(nil, "b-%d", i)}
	}
	_, err = prod.ProduceSync(ctx, msgs...)
	require.NoError(t, err)

	tx, err := pc.BeginTransaction(ctx)
	require.NoError(t, err)
	txm := []*message.Message{{Topic: "bt", Body: []byte("tx-0")}, {Topic: "bt", Body: []byte("tx-1")}}
	var ends []func(client.SendResult, error)
	for _, m := range txm {
		_, end := prod.StartPublish(ctx, m)
		ends = append(ends, end)
	}
	txres, err := tx.Produce(ctx, txm...)
	require.NoError(t, err)
	require.NoError(t, tx.Commit(ctx))
	for i, end := range ends {
		end(txres[i], nil)
	}

	pubByID := map[string]sdktrace.ReadOnlySpan{}
	for _, s := range spansNamed(sr, "publish bt") {
		pubByID[attrs(s)["messaging.message.id"].AsString()] = s
	}
	require.Len(t, pubByID, batched+len(txm))

	cc, err := client.New(client.Brokers(b.Addr()), client.ConsumeTopics("bt"))
	require.NoError(t, err)
	defer cc.Close(ctx)
	h := otelmetaq.WrapHandler(func(context.Context, *message.Message) error { return nil }, otelmetaq.WithTracerProvider(tp))
	got := consumeN(t, cc, batched+len(txm), h)
	procByID := map[string]sdktrace.ReadOnlySpan{}
	for _, s := range spansNamed(sr, "process bt") {
		procByID[attrs(s)["messaging.message.id"].AsString()] = s
	}
	for _, m := range got {
		id := strconv.FormatInt(m.ID, 10)
		pub, proc := pubByID[id], procByID[id]
		require.NotNil(t, pub, "publish span of %q", m.Body)
		require.NotNil(t, proc, "process span of %q", m.Body)
		require.Equal(t, pub.SpanContext().SpanID(), proc.Parent().SpanID(), "%q", m.Body)
		require.Equal(t, pub.SpanContext().TraceID(), proc.SpanContext().TraceID(), "%q", m.Body)
	}
}
