// Package otelmetaq traces metaq-go messages with OpenTelemetry, as the otel
// instrumentations of Kafka clients do (franz-go's kotel, otelsarama).
//
// A Producer (or Tracer.StartPublish) starts a "publish <topic>" span of kind
// Producer for each message, injects its context into the message's headers
// with the configured propagator (W3C traceparent and tracestate by default)
// and ends it with the send's outcome (the message id, partition). A wrapped
// Handler (or Tracer.StartProcess in a Messages loop) extracts that context
// and runs the handler in a "process <topic>" span of kind Consumer, its
// child, ended when the handler returns, with its error. Attributes follow
// OpenTelemetry's messaging semantic conventions (semconv v1.43.0).
//
// The core SDK (sdk/client, sdk/message) does not import otel: this package
// is optional and wraps it from outside.
package otelmetaq

import (
	"context"
	"strconv"

	"go.opentelemetry.io/otel"
	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/codes"
	"go.opentelemetry.io/otel/propagation"
	semconv "go.opentelemetry.io/otel/semconv/v1.43.0"
	"go.opentelemetry.io/otel/trace"

	"github.com/metaq-go/metaq/sdk/client"
	"github.com/metaq-go/metaq/sdk/message"
)

// ScopeName is the instrumentation scope of the spans.
const ScopeName = "github.com/metaq-go/metaq/sdk/client/otelmetaq"

// System is the messaging.system value of the spans. The conventions list
// no value for metaq; messaging.system is an open enum, so the system's
// own lower-case name is used, as for the systems they list.
const System = "metaq"

// Operation names (messaging.operation.name), also the span names' suffix.
const (
	OpPublish = "publish"
	OpProcess = "process"
)

// SpooledKey is set (true) on a publish span whose message a Client with
// Spool wrote to its spool instead of a broker (it has no id yet).
const SpooledKey = attribute.Key("messaging.metaq.spooled")

var systemAttr = semconv.MessagingSystemKey.String(System)

// Option configures a Tracer.
type Option interface{ apply(*config) }

type optFunc func(*config)

func (f optFunc) apply(c *config) { f(c) }

type config struct {
	tp    trace.TracerProvider
	prop  propagation.TextMapPropagator
	group string
	attrs []attribute.KeyValue
}

// WithTracerProvider sets the TracerProvider; by default the global one
// (otel.GetTracerProvider) when the Tracer is made.
func WithTracerProvider(tp trace.TracerProvider) Option {
	return optFunc(func(c *config) {
		if tp != nil {
			c.tp = tp
		}
	})
}

// WithPropagator sets the propagator that injects into and extracts from
// message headers; by default propagation.TraceContext (W3C traceparent
// and tracestate).
func WithPropagator(p propagation.TextMapPropagator) Option {
	return optFunc(func(c *config) {
		if p != nil {
			c.prop = p
		}
	})
}

// WithConsumerGroup sets messaging.consumer.group.name on process spans:
// the group the Client consumes in (client.ConsumerGroup).
func WithConsumerGroup(group string) Option {
	return optFunc(func(c *config) { c.group = group })
}

// WithAttributes adds attributes to every span.
func WithAttributes(kv ...attribute.KeyValue) Option {
	return optFunc(func(c *config) { c.attrs = append(c.attrs, kv...) })
}

// Tracer starts the publish and process spans of messages. It is safe for
// concurrent use.
type Tracer struct {
	cfg    config
	tracer trace.Tracer
}

// New returns a Tracer configured by opts.
func New(opts ...Option) *Tracer {
	cfg := config{prop: propagation.TraceContext{}}
	for _, o := range opts {
		o.apply(&cfg)
	}
	if cfg.tp == nil {
		cfg.tp = otel.GetTracerProvider()
	}
	return &Tracer{cfg: cfg, tracer: cfg.tp.Tracer(ScopeName, trace.WithSchemaURL(semconv.SchemaURL))}
}

// Propagator returns the Tracer's propagator.
func (t *Tracer) Propagator() propagation.TextMapPropagator { return t.cfg.prop }

// StartPublish starts m's publish span, a child of ctx's span, and injects
// its context into m.Headers (replacing trace headers m had). Call end
// with the send's outcome, exactly once; it ends the span. The returned
// context carries the span.
func (t *Tracer) StartPublish(ctx context.Context, m *message.Message) (context.Context, func(client.SendResult, error)) {
	attrs := make([]attribute.KeyValue, 0, 5+len(t.cfg.attrs))
	attrs = append(attrs, systemAttr,
		semconv.MessagingDestinationName(m.Topic),
		semconv.MessagingOperationTypeSend,
		semconv.MessagingOperationName(OpPublish),
		semconv.MessagingMessageBodySize(len(m.Body)))
	attrs = append(attrs, t.cfg.attrs...)
	ctx, span := t.tracer.Start(ctx, OpPublish+" "+m.Topic,
		trace.WithSpanKind(trace.SpanKindProducer), trace.WithAttributes(attrs...))
	t.cfg.prop.Inject(ctx, NewHeadersCarrier(m))
	return ctx, func(res client.SendResult, err error) {
		switch {
		case err != nil:
			recordErr(span, err)
		case res.Spooled:
			span.SetAttributes(SpooledKey.Bool(true))
		default:
			span.SetAttributes(
				semconv.MessagingMessageID(strconv.FormatInt(res.ID, 10)),
				semconv.MessagingDestinationPartitionID(partitionID(res.BrokerID, res.Partition)))
		}
		span.End()
	}
}

// StartProcess extracts the producer's context from m's headers and starts
// m's process span, its child (a root span, or a child of ctx's span, when
// m carries no valid trace headers). Call end with the handling's error
// (nil: handled), exactly once; it ends the span. Run the handling with the
// returned context.
func (t *Tracer) StartProcess(ctx context.Context, m *message.Message) (context.Context, func(error)) {
	ctx = t.cfg.prop.Extract(ctx, NewHeadersCarrier(m))
	attrs := make([]attribute.KeyValue, 0, 7+len(t.cfg.attrs))
	attrs = append(attrs, systemAttr,
		semconv.MessagingDestinationName(m.Topic),
		semconv.MessagingOperationTypeProcess,
		semconv.MessagingOperationName(OpProcess),
		semconv.MessagingMessageBodySize(len(m.Body)),
		semconv.MessagingDestinationPartitionID(partitionID(m.BrokerID, m.Partition)))
	if m.ID != 0 {
		attrs = append(attrs, semconv.MessagingMessageID(strconv.FormatInt(m.ID, 10)))
	}
	if t.cfg.group != "" {
		attrs = append(attrs, semconv.MessagingConsumerGroupName(t.cfg.group))
	}
	attrs = append(attrs, t.cfg.attrs...)
	ctx, span := t.tracer.Start(ctx, OpProcess+" "+m.Topic,
		trace.WithSpanKind(trace.SpanKindConsumer), trace.WithAttributes(attrs...))
	return ctx, func(err error) {
		if err != nil {
			recordErr(span, err)
		}
		span.End()
	}
}

// WrapHandler returns a Handler that runs h in m's process span
// (StartProcess), ended when h returns, h's error recorded on it.
func (t *Tracer) WrapHandler(h client.Handler) client.Handler {
	return func(ctx context.Context, m *message.Message) (err error) {
		ctx, end := t.StartProcess(ctx, m)
		defer func() { end(err) }()
		return h(ctx, m)
	}
}

// WrapHandler is New(opts...).WrapHandler(h).
func WrapHandler(h client.Handler, opts ...Option) client.Handler {
	return New(opts...).WrapHandler(h)
}

// Producer sends messages through a Client, each in its publish span.
type Producer struct {
	*Tracer
	cl *client.Client
}

// NewProducer returns a Producer sending through cl.
func NewProducer(cl *client.Client, opts ...Option) *Producer {
	return &Producer{Tracer: New(opts...), cl: cl}
}

// Client returns the Client the Producer sends through.
func (p *Producer) Client() *client.Client { return p.cl }

// Produce is client.Client.Produce with m's publish span: started (and its
// context injected into m.Headers) now, ended when promise would run,
// before it.
func (p *Producer) Produce(ctx context.Context, m *message.Message, promise func(client.SendResult, error)) {
	_, end := p.StartPublish(ctx, m)
	p.cl.Produce(ctx, m, func(res client.SendResult, err error) {
		end(res, err)
		if promise != nil {
			promise(res, err)
		}
	})
}

// ProduceSync is client.Client.ProduceSync with a publish span per message,
// each ended with that message's outcome.
func (p *Producer) ProduceSync(ctx context.Context, msgs ...*message.Message) ([]client.SendResult, error) {
	return client.ProduceSyncVia(ctx, p.Produce, msgs...)
}

// partitionID is messaging.destination.partition.id: MetaQ's partition
// string "<brokerId>-<partition>".
func partitionID(brokerID int, part int32) string {
	return message.Partition{BrokerID: brokerID, Partition: part}.String()
}

func recordErr(span trace.Span, err error) {
	span.RecordError(err)
	span.SetStatus(codes.Error, err.Error())
	span.SetAttributes(semconv.ErrorType(err))
}
