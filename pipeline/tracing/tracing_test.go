package tracing_test

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
	"go.opentelemetry.io/otel/trace/noop"

	"github.com/ximd/ximd/handlers"
	"github.com/ximd/ximd/pipeline/tracing"
)

func TestOn(t *testing.T) {
	for _, c := range []struct {
		env  map[string]string
		want bool
	}{
		{nil, false},
		{map[string]string{"OTEL_EXPORTER_OTLP_ENDPOINT": "http://collector:4318"}, true},
		{map[string]string{"OTEL_EXPORTER_OTLP_TRACES_ENDPOINT": "http://collector:4318/v1/traces"}, true},
		{map[string]string{"OTEL_TRACES_EXPORTER": "otlp"}, true},
		{map[string]string{"OTEL_TRACES_EXPORTER": "none", "OTEL_EXPORTER_OTLP_ENDPOINT": "http://collector:4318"}, false},
		{map[string]string{"OTEL_SDK_DISABLED": "true", "OTEL_TRACES_EXPORTER": "otlp"}, false},
		{map[string]string{"OTEL_TRACES_EXPORTER": "zipkin"}, false},
	} {
		if got := tracing.On(func(k string) string { return c.env[k] }); got != c.want {
			t.Errorf("On(%v) = %v, want %v", c.env, got, c.want)
		}
	}
}

// aFinal makes the spans of one final as the gateway and the deliver stage do: the receive and
// publish spans, the context carried in NATS headers and read back from the bus metadata, the
// stage span and its target call and reply.
func aFinal(tr trace.Tracer) {
	ctx, recv := tr.Start(context.Background(), "edge receive", trace.WithSpanKind(trace.SpanKindServer))
	if recv.IsRecording() {
		recv.SetAttributes(attribute.String("xim.channel", "cch_1"), attribute.String("xim.type", "chat.message"), attribute.String("xim.packet_id", "pkt_1"))
	}
	pctx, pub := tr.Start(ctx, "publish XIM_IN", trace.WithSpanKind(trace.SpanKindProducer))
	h := nats.Header{} // the packet's headers (the gateway sets four anyway)
	otel.GetTextMapPropagator().Inject(pctx, handlers.NATSHeaderCarrier(h))
	pub.End()
	recv.End()
	md := map[string]string{} // the bus's metadata of the delivered packet
	for k := range h {
		md[k] = h.Get(k)
	}
	sctx, stage := tr.Start(otel.GetTextMapPropagator().Extract(context.Background(), propagation.MapCarrier(md)), "stage deliver",
		trace.WithSpanKind(trace.SpanKindConsumer))
	if stage.IsRecording() {
		stage.SetAttributes(attribute.String("xim.channel", "cch_1"), attribute.String("xim.type", "chat.message"), attribute.String("xim.packet_id", "pkt_1"))
	}
	_, call := tr.Start(sctx, "target send", trace.WithSpanKind(trace.SpanKindClient))
	if call.IsRecording() {
		call.SetAttributes(attribute.String("xim.adapter", "webhook"), attribute.String("xim.outcome", "ok"))
	}
	call.End()
	_, reply := tr.Start(sctx, "reply chat.message.ack", trace.WithSpanKind(trace.SpanKindProducer))
	reply.End()
	stage.End()
}

// BenchmarkTracingPerFinal is the tracing cost of one final (five spans, one context carried
// through NATS headers): off (the no-op provider ximd runs with by default), sampled at 1% and
// at 100% (spans batched to an exporter that drops them).
func BenchmarkTracingPerFinal(b *testing.B) {
	for _, bc := range []struct {
		name string
		tp   trace.TracerProvider
	}{
		{"off", noop.NewTracerProvider()},
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
			tr := bc.tp.Tracer("bench")
			b.ReportAllocs()
			for b.Loop() {
				aFinal(tr)
			}
		})
	}
}
