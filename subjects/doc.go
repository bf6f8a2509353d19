// Package subjects builds every NATS name ximd uses: subjects, stream, bucket and consumer names,
// and KV keys. Each builder rejects tokens that are unsafe in a NATS subject
// (empty, '.', '*', '>', whitespace, control characters), so a value taken from a packet can never
// widen a subscription or address another channel's data.
//
// Layout (see docs/design.md):
//
//	xim.in.<channel>.<kind>              gateway publishes inbound packets here (stream XIM_IN)
//	xim.part.<p>.<channel>.<kind>        stored subject after the partition transform
//	xim.poison.<consumer>                messages a stage gave up on (stream XIM_POISON)
//	xim.gw.<gateway>.reply               replies (acks, error packets) to one gateway (core NATS)
//	xim.ctl.stats                        scatter request answered by every worker (core NATS)
//	xim.ctl.clear.<instance>.<channel>   clear a channel's status on the activity stage's worker (core NATS)
//	xim.ctl.finished.<instance>.<channel> a message is final: drop its delta buffer (core NATS)
//	xim.ctl.relay.<poll key>             a call for the process holding an account's one connection (core NATS)
package subjects
