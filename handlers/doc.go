// Package handlers holds the worker stages of the receive path, one file per stage:
//
//	stages.go    decode a stored packet and dispatch it by type (the Watermill handler)
//	validate.go  payload validation against the profile catalog (P-ID-2, P-MSG-*, P-DLT-*, P-ACT-*)
//	assemble.go  delta assembly and streamed display (P-DLT-1..7, edge-api §5.2)
//	deliver.go   final delivery with intent records and completed IDs (P-MSG-9..13, P-STATE-6, §5.1)
//	activity.go  chat.activity display and clearing (P-ACT-4..6, §5.3)
//	ack.go       replies to xAgent: chat.message.ack and error packets (P-ACK-1/2)
//	outbound.go  the send path's pending set: user messages to xAgent until acked (P-STATE-1..3)
//	tools.go     answers tool.invoke (edge-api §8)
//	records.go   the KV records the stages keep (intent/completed, display handles)
//	targets.go   channel -> bound target adapter, cached per channel revision
//
// A stage never blocks another channel's partition longer than its bounded target budget, and
// every stage is idempotent on (channel, message_id, sequence) because JetStream redelivers.
package handlers
