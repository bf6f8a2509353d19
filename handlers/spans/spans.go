// Package spans starts the spans of ximd's work (the gateway's receive and publish, the stages,
// their target calls and replies, the outbox), once a tracer provider is installed. It sits below
// the stages so they need nothing from pipeline/: pipeline/tracing installs the provider from the
// OTEL_* variables and then calls [Enable]. Until then (ximd's default) [Start] makes no span and
// allocates nothing.
package spans

import (
	"context"
	"sync/atomic"

	"go.opentelemetry.io/otel/trace"
)

// enabled is set once a tracer provider is installed.
var enabled atomic.Bool

// Enable makes [Start] start spans from now on: the installer of the global tracer provider
// (pipeline/tracing) calls it once the provider is in place. There is no way back: a process
// that traced keeps tracing.
func Enable() { enabled.Store(true) }

// Enabled reports whether [Enable] was called (spans are made).
func Enabled() bool { return enabled.Load() }

// Start starts a span of kind with t, named verb or "verb object", once [Enable] was called.
// Before that it returns ctx and the span ctx carries (a no-op one) and allocates nothing, not
// even the name: the global tracer's placeholder spans cost every packet a few hundred bytes.
func Start(ctx context.Context, t trace.Tracer, kind trace.SpanKind, verb, object string) (context.Context, trace.Span) {
	if !enabled.Load() {
		return ctx, trace.SpanFromContext(ctx)
	}
	name := verb
	if object != "" {
		name += " " + object
	}
	return t.Start(ctx, name, trace.WithSpanKind(kind))
}
