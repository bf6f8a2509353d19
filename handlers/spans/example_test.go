package spans_test

import (
	"context"
	"fmt"

	"go.opentelemetry.io/otel"
	"go.opentelemetry.io/otel/trace"

	"github.com/ximd/ximd/handlers/spans"
)

// A stage starts its span with Start and ends it; with tracing off (no Enable, ximd's default)
// the span is the context's own no-op one and the context comes back as it went in.
func ExampleStart() {
	ctx := context.Background()
	sctx, span := spans.Start(ctx, otel.Tracer("example"), trace.SpanKindConsumer, "stage", "deliver")
	defer span.End()
	fmt.Println(span.IsRecording(), sctx == ctx)
	// Output: false true
}
