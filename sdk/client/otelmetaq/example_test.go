package otelmetaq_test

import (
	"context"
	"fmt"
	"log"
	"time"

	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	"go.opentelemetry.io/otel/sdk/trace/tracetest"

	"github.com/metaq-go/metaq/sdk/client"
	"github.com/metaq-go/metaq/sdk/client/otelmetaq"
	"github.com/metaq-go/metaq/sdk/message"
)

// A producer sends through a Producer, a consumer handles with a wrapped
// Handler: the process span continues the trace of the publish span. (A
// real program passes its own TracerProvider, with an exporter; this one
// records the spans to print them.)
func Example() {
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	rec := tracetest.NewSpanRecorder()
	tp := sdktrace.NewTracerProvider(sdktrace.WithSpanProcessor(rec))
	defer tp.Shutdown(ctx)

	// Producer side: a publish span per message, its context in the
	// message's traceparent header.
	pc, err := client.New(client.Brokers(exampleAddr))
	if err != nil {
		log.Fatal(err)
	}
	defer pc.Close(ctx)
	p := otelmetaq.NewProducer(pc, otelmetaq.WithTracerProvider(tp))
	if _, err := p.ProduceSync(ctx, &message.Message{Topic: "ex-otel", Body: []byte("hello")}); err != nil {
		log.Fatal(err)
	}

	// Consumer side: the handler runs in a process span, a child of it.
	cc, err := client.New(client.Brokers(exampleAddr), client.ConsumeTopics("ex-otel"), client.ConsumerGroup("ex"))
	if err != nil {
		log.Fatal(err)
	}
	defer cc.Close(ctx)
	cctx, stop := context.WithCancel(ctx)
	h := otelmetaq.WrapHandler(func(ctx context.Context, m *message.Message) error {
		fmt.Printf("handled %s\n", m.Body)
		stop()
		return nil
	}, otelmetaq.WithTracerProvider(tp), otelmetaq.WithConsumerGroup("ex"))
	if err := cc.Consume(cctx, h); err != nil && cctx.Err() == nil {
		log.Fatal(err)
	}

	spans := rec.Ended()
	pub, proc := spans[0], spans[1]
	fmt.Println(pub.Name(), pub.SpanKind())
	fmt.Println(proc.Name(), proc.SpanKind())
	fmt.Println("child of the publish span:", proc.Parent().SpanID() == pub.SpanContext().SpanID())
	// Output:
	// handled hello
	// publish ex-otel producer
	// process ex-otel consumer
	// child of the publish span: true
}
