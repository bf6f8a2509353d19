package spans_test

import (
	"context"
	"testing"

	"github.com/nats-io/nats.go"
	"go.opentelemetry.io/otel"
	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/propagation"
	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	"go.opentelemetry.io/otel/sdk/trace/tracetest"
	"go.opentelemetry.io/otel/trace"

	"github.com/ximd/ximd/handlers"
	"github.com/ximd/ximd/handlers/spans"
)

// startFunc starts a span.
type startFunc func(ctx context.Context, kind trace.SpanKind, verb, object string) (context.Context, trace.Span)

// aFinal makes the spans of one final as the gateway and the deliver stage do: the receive and
// publish spans, the context carried in NATS headers and read back from the bus metadata, the
// stage span and its target call and reply.
//
// start is how spans are started: spans.Start, or a provider's tracer.
func aFinal(start startFunc) {
	ctx, recv := start(context.Background(), trace.SpanKindServer, "edge receive", "")
	if recv.IsRecording() {
		recv.SetAttributes(attribute.String("xim.channel", "cch_1"), attribute.String("xim.type", "chat.message"), attribute.String("xim.packet_id", "pkt_1"))
	}
	pctx, pub := start(ctx, trace.SpanKindProducer, "publish", "XIM_IN")
	h := nats.Header{} // the packet's headers (the gateway sets four anyway)
	otel.GetTextMapPropagator().Inject(pctx, handlers.NATSHeaderCarrier(h))
	pub.End()
	recv.End()
	md := map[string]string{} // the bus's metadata of the delivered packet
	for k := range h {
		md[k] = h.Get(k)
	}
	sctx, stage := start(otel.GetTextMapPropagator().Extract(context.Background(), propagation.MapCarrier(md)),
		trace.SpanKindConsumer, "stage", "deliver")
	if stage.IsRecording() {
		stage.SetAttributes(attribute.String("xim.channel", "cch_1"), attribute.String("xim.type", "chat.message"), attribute.String("xim.packet_id", "pkt_1"))
	}
	_, call := start(sctx, trace.SpanKindClient, "target", "send")
	if call.IsRecording() {
		call.SetAttributes(attribute.String("xim.adapter", "webhook"), attribute.String("xim.outcome", "ok"))
	}
	call.End()
	_, reply := start(sctx, trace.SpanKindProducer, "reply", "chat.message.ack")
	reply.End()
	stage.End()
}

// With no provider installed, Start makes no span and allocates nothing.
func TestStart_OffAllocatesNothing(t *testing.T) {
	if spans.Enabled() {
		t.Skip("a tracer provider is installed in this process")
	}
	tr := otel.Tracer("test")
	ctx := context.Background()
	allocs := testing.AllocsPerRun(100, func() {
		sctx, span := spans.Start(ctx, tr, trace.SpanKindConsumer, "stage", "deliver")
		if span.IsRecording() || sctx != ctx {
			t.Fatal("a span was made")
		}
		span.End()
	})
	if allocs != 0 {
		t.Fatalf("Start with tracing off: %v allocations, want 0", allocs)
	}
}

// BenchmarkTracingPerFinal is the tracing cost of one final (five spans, one context carried
// through NATS headers): off (spans.Start with no provider installed, as ximd runs by
// default), sampled at 1% and at 100% (spans batched to an exporter that drops them).
func BenchmarkTracingPerFinal(b *testing.B) {
	for _, bc := range []struct {
		name string
		tp   trace.TracerProvider
	}{
		{"off", nil},
		{"sampled_1pct", sdktrace.NewTracerProvider(sdktrace.WithSampler(sdktrace.ParentBased(sdktrace.TraceIDRatioBased(0.01))),
			sdktrace.WithBatcher(tracetest.NewNoopExporter()))},
		{"sampled_all", sdktrace.NewTracerProvider(sdktrace.WithBatcher(tracetest.NewNoopExporter()))},
	} {
		b.Run(bc.name, func(b *testing.B) {
			if bc.name != "off" {
				prop := otel.GetTextMapPropagator()
				otel.SetTextMapPropagator(propagation.TraceContext{})
				defer otel.SetTextMapPropagator(prop)
			}
			tr := otel.Tracer("bench")
			start := func(ctx context.Context, kind trace.SpanKind, verb, object string) (context.Context, trace.Span) {
				return spans.Start(ctx, tr, kind, verb, object)
			}
			if bc.tp != nil {
				tr := bc.tp.Tracer("bench")
				start = func(ctx context.Context, kind trace.SpanKind, verb, object string) (context.Context, trace.Span) {
					if object != "" {
						verb += " " + object
					}
					return tr.Start(ctx, verb, trace.WithSpanKind(kind))
				}
			} else if spans.Enabled() {
				b.Skip("a tracer provider is installed in this process")
			}
			b.ReportAllocs()
			for b.Loop() {
				aFinal(start)
			}
		})
	}
}
