// Package bus is ximd's Watermill transport: a [message.Publisher] and a [message.Subscriber] on
// nats.go's jetstream package. The worker pipeline (pipeline's Watermill router) reads each inbound
// partition through a [Subscriber] and writes to other streams (the poison stream) through a
// [Publisher]. Both take an existing [jetstream.JetStream]; neither dials, provisions streams or
// closes the connection.
//
// # Publishing
//
// [Publisher.Publish] publishes each message synchronously and returns once JetStream has stored
// it (PubAck). The payload is the message body; every metadata entry becomes a NATS header with its
// key unchanged; the Watermill UUID travels in header [HeaderUUID]; header Nats-Msg-Id is set from
// [PublisherConfig.MsgID] (default: the UUID) so that a re-publish inside the stream's duplicate
// window is stored once.
//
// NATS headers cannot carry every string, so a value is sent as NATS sends it: surrounding
// whitespace trimmed and CR/LF replaced by spaces. A key that is not a valid NATS header name is
// an error ([ErrInvalidMetadata]), never silently changed.
//
// # Subscribing
//
// A subscription reads one durable pull consumer (AckExplicit, DeliverAll), created or updated by
// [Subscriber.Subscribe] and [Subscriber.SubscribeInitialize] with CreateOrUpdateConsumer.
// Nothing in this package deletes a consumer: neither Close nor the cancellation of a Subscribe
// context does, so a later Subscriber on the same topic resumes after the last acknowledged
// message. Subscribers (in one process or several) that map a topic to the same durable share
// its messages, which is how Watermill consumer groups map onto JetStream.
//
// The messages of one subscription reach the output channel one at a time, in stream order: the
// next is sent only after the previous one was acked or nacked. With [SubscriberConfig.Lane] that
// holds per lane (a lane is a key of the message's subject, ximd's channel): the heads of
// different lanes are in handlers at once (at most [SubscriberConfig.MaxLanes]), acked out of
// stream order, while each lane keeps its order through Nacks, redeliveries and hand-overs (a
// lane keeps its messages sorted by stream sequence and, with [SubscriberConfig.LaneSubjects] on a
// WorkQueue or Interest stream, waits for an earlier message of the lane that the server
// delivered elsewhere and will redeliver after AckWait: see order.go).
//
//   - Ack sends a JetStream Ack without waiting for the server's confirmation (fire-and-forget,
//     like nats.go's Msg.Ack): a lost ack only causes a redelivery after AckWait, which handlers
//     must tolerate anyway (at-least-once delivery). Close flushes the connection, so acks sent
//     before Close reach the server before Close returns.
//   - Nack redelivers the same message, in process, after [SubscriberConfig.NakDelay] and before
//     any later message, so order is kept and a failing handler does not spin. Meanwhile the
//     JetStream message stays un-acked; the subscriber keeps its AckWait from expiring.
//   - Every held message (in a handler, waiting for its Nack delay, or fetched and waiting its
//     turn) gets an InProgress ack once half of its AckWait has passed (checked every AckWait/4),
//     which restarts the server's timer: long handlers do not cause redeliveries.
//   - When [SubscriberConfig.MaxDeliver] is positive, a message Nacked after its delivery count
//     (see [MetaNumDelivered]) reached it is terminated instead of retried. The default is
//     unlimited: the router's retry and poison middleware decide when to give up.
//   - A message that cannot be turned into a Watermill message (a header with several values, a
//     reply subject without JetStream metadata) is logged with its stream sequence (never its
//     payload), terminated with TermWithReason (when it has a JetStream reply subject) and
//     skipped. Nothing on this path panics.
//
// # Metadata
//
// A received message carries all its NATS headers as metadata (keys as sent, first and only
// value), plus the keys [MetaStream], [MetaSubject], [MetaStreamSeq] and [MetaNumDelivered], set
// by the subscriber (they replace headers of the same name). Its UUID is header [HeaderUUID] when
// present, else header Nats-Msg-Id, else "<stream>:<stream sequence>".
//
// # Shutdown
//
// The context of every emitted message derives from the Subscribe context and is cancelled when
// the message is acked or nacked, when the Subscribe context ends, and on [Subscriber.Close].
// Ending a subscription stops fetching, waits for the message in the handler to be acked or
// nacked and for the open pull request to end (at most [SubscriberConfig.FetchWait] later), all
// within [SubscriberConfig.CloseTimeout], then Naks, in stream order, every message it still
// holds (the nacked or unfinished one, those fetched but not yet delivered, those the pull
// request brought meanwhile) so the server redelivers them at once, flushes the connection and
// closes the output channel. Past CloseTimeout it Naks what it holds, the message in the handler
// included (a late Ack of it is ignored), and stops waiting. Close waits for every subscription's goroutine; Subscribe after
// Close returns [ErrClosed].
package bus
