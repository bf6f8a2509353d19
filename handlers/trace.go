package handlers

import (
	"github.com/nats-io/nats.go"
	"go.opentelemetry.io/otel"
	"go.opentelemetry.io/otel/attribute"
)

// tracer starts the stages' spans: a stage's span is the child of the gateway's publish span,
// whose context the packet carries in its NATS headers (W3C traceparent), and the parent of the
// target calls and the reply it makes. Spans are started through spans.Start (handlers/spans):
// until pipeline/tracing installs a tracer provider, none is.
var tracer = otel.Tracer("github.com/ximd/ximd/handlers")

// Span attribute keys.
var (
	attrChannel  = attribute.Key("xim.channel")
	attrType     = attribute.Key("xim.type")
	attrPacketID = attribute.Key("xim.packet_id")
	attrAdapter  = attribute.Key("xim.adapter")
	attrOutcome  = attribute.Key("xim.outcome")
	attrSent     = attribute.Key("xim.sent")
)

// NATSHeaderCarrier carries a trace context in NATS headers under the propagator's own keys
// (traceparent, tracestate): NATS header names are case-sensitive, and http.Header (which
// propagation.HeaderCarrier wraps) would write them as Traceparent. The bus hands the headers to
// the stages as message metadata under the same keys (propagation.MapCarrier reads them).
type NATSHeaderCarrier nats.Header

// Get returns the value of key.
func (c NATSHeaderCarrier) Get(key string) string { return nats.Header(c).Get(key) }

// Set sets key to value.
func (c NATSHeaderCarrier) Set(key, value string) { nats.Header(c).Set(key, value) }

// Keys returns the header names.
func (c NATSHeaderCarrier) Keys() []string {
	keys := make([]string, 0, len(c))
	for k := range c {
		keys = append(keys, k)
	}
	return keys
}
