// Package tracing switches OpenTelemetry tracing on from the standard OTEL_* variables. Off (the
// default), nothing is installed: handlers/spans' Start, which the edge and the stages start
// their spans with, makes no span (and allocates nothing) and no trace context travels in NATS
// headers.
package tracing

import (
	"context"
	"fmt"
	"os"
	"strings"

	"go.opentelemetry.io/otel"
	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/exporters/otlp/otlptrace/otlptracehttp"
	"go.opentelemetry.io/otel/propagation"
	"go.opentelemetry.io/otel/sdk/resource"
	sdktrace "go.opentelemetry.io/otel/sdk/trace"

	"github.com/ximd/ximd/handlers/spans"
)

// On reports whether the environment asks for traces: OTEL_TRACES_EXPORTER is "otlp", or it is
// unset and an OTLP endpoint (OTEL_EXPORTER_OTLP_ENDPOINT, OTEL_EXPORTER_OTLP_TRACES_ENDPOINT)
// is; OTEL_SDK_DISABLED=true turns them off whatever else is set.
func On(getenv func(string) string) bool {
	if strings.EqualFold(getenv("OTEL_SDK_DISABLED"), "true") {
		return false
	}
	switch exp := strings.ToLower(getenv("OTEL_TRACES_EXPORTER")); exp {
	case "otlp":
		return true
	case "":
		return getenv("OTEL_EXPORTER_OTLP_ENDPOINT") != "" || getenv("OTEL_EXPORTER_OTLP_TRACES_ENDPOINT") != ""
	default:
		return false // "none", or an exporter ximd does not ship
	}
}

// Setup installs, when On, a global tracer provider that batches spans to an OTLP/HTTP endpoint
// (endpoint, headers, timeout, compression and TLS from the OTEL_EXPORTER_OTLP_* variables;
// default http://localhost:4318), samples as OTEL_TRACES_SAMPLER and OTEL_TRACES_SAMPLER_ARG say
// (default parentbased_always_on), with service.name ximd (OTEL_SERVICE_NAME and
// OTEL_RESOURCE_ATTRIBUTES override), and the W3C trace-context propagator that carries a trace
// through the NATS headers. The returned function flushes and stops it (a no-op when off).
func Setup(ctx context.Context, role string) (shutdown func(context.Context) error, on bool, err error) {
	if !On(os.Getenv) {
		return func(context.Context) error { return nil }, false, nil
	}
	exp, err := otlptracehttp.New(ctx)
	if err != nil {
		return nil, false, fmt.Errorf("tracing: %w", err)
	}
	res, err := resource.Merge(resource.NewSchemaless(attribute.String("service.name", "ximd"), attribute.String("ximd.role", role)),
		resource.Environment())
	if err != nil {
		return nil, false, fmt.Errorf("tracing: %w", err)
	}
	tp := sdktrace.NewTracerProvider(sdktrace.WithBatcher(exp), sdktrace.WithResource(res))
	Install(tp)
	return tp.Shutdown, true, nil
}

// Install makes tp the global tracer provider, with the W3C trace-context propagator, and
// switches spans.Start on (tests install one with an in-memory exporter).
func Install(tp *sdktrace.TracerProvider) {
	otel.SetTracerProvider(tp)
	otel.SetTextMapPropagator(propagation.TraceContext{})
	spans.Enable()
}
