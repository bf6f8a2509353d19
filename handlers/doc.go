// Package handlers holds the worker stages of the receive path and the send path, one file per
// stage, and their shared parts:
//
//	stages.go           decode a stored packet and dispatch it by type (the stage consumers' handler); the poison handler
//	validate.go         payload validation against the profile catalog (P-ID-2, P-MSG-*, P-DLT-*, P-ACT-*)
//	assemble.go         delta assembly and streamed display (P-DLT-1..7, edge-api §5.2)
//	deliver.go          final delivery with intent records and completed IDs (P-MSG-9..13, P-STATE-6, §5.1)
//	invoke.go           answers tool.invoke, delivered like a final (edge-api §8)
//	activity.go         chat.activity display and clearing (P-ACT-4..6, §5.3)
//	activity_leases.go  the KV leases of shown statuses, so any worker clears one whose worker died (P-ACT-6)
//	clear.go            status clears across stages and processes (P-ACT-5); a packet's Place
//	finish.go           the finish notice to the assemble stage of another process
//	ack.go              replies to xAgent: chat.message.ack and error packets (P-ACK-1/2)
//	replies.go          the replies consumer: replies no gateway could write, sent once xAgent is back
//	outbound.go         the send path's pending set: user messages to xAgent until acked (P-STATE-1..3)
//	fate.go             the one way a work item is settled: Outcome, settle, Route, the plain consumer loop
//	records.go          the KV records the stages keep (intent/completed, display handles); compare-and-set
//	calls.go            what this process knows of its own target calls that the records do not say yet
//	donecache.go        the bounded in-memory cache of completed message_ids
//	pacer.go            a chat's retry-after, held across its calls
//	targets.go          channel -> bound target adapter, cached per channel revision
//	metrics.go          the stages' Prometheus metrics and their outcome label values
//	trace.go            span attributes and the trace context in NATS headers
//
// Every work item's handler returns an Outcome (done, retry after a delay or the transport's
// back-off, reject for good with a reason, poison with a reason), and settle alone applies it:
// to a plain JetStream consumer's item (outbound, replies) as ack, NakWithDelay or
// TermWithReason; to a stage packet through the Watermill router (Route), whose middleware acks
// it, retries it with back-off and then poisons it to XIM_POISON (pipeline.NewRouter).
//
// A stage never blocks another channel's partition longer than its bounded target budget, and
// every stage is idempotent on (channel, message_id, sequence) because JetStream redelivers.
package handlers
