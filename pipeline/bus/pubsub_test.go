package bus_test

import (
	"testing"
	"time"

	"github.com/ThreeDotsLabs/watermill/message"
	"github.com/ThreeDotsLabs/watermill/pubsub/tests"

	"github.com/ximd/ximd/pipeline/bus"
)

// suiteFeatures are the Watermill features the bus has, stated honestly:
//   - Persistent, ConsumerGroups: durables outlive subscribers; the consumer group is the durable.
//   - GuaranteedOrder only with a single subscriber per durable: subscribers sharing a durable
//     split its messages between them.
//   - not ExactlyOnceDelivery (at-least-once), not NewSubscriberReceivesOldMessages (a new
//     subscriber on the same topic shares the durable and resumes after the last ack), not
//     ContextPreserved (contexts do not travel over NATS).
//   - no RestartServiceCommand: TestReconnect is skipped; TestSubscriberSurvivesServerRestart
//     covers reconnects against an in-process server.
var suiteFeatures = tests.Features{
	ConsumerGroups:                      true,
	ExactlyOnceDelivery:                 false,
	GuaranteedOrder:                     true,
	GuaranteedOrderWithSingleSubscriber: true,
	Persistent:                          true,
	NewSubscriberReceivesOldMessages:    false,
}

// TestPubSub runs Watermill's universal Pub/Sub suite against an in-process JetStream server.
// Each topic gets its own stream; a consumer group maps to the durable of that name, no group to
// a durable per topic. NakDelay and FetchWait are shortened: the suite nacks hundreds of times
// and closes subscribers in sequence.
func TestPubSub(t *testing.T) {
	newPubSub := suiteConstructor(t)
	tests.TestPubSub(t, suiteFeatures,
		func(t *testing.T) (message.Publisher, message.Subscriber) { return newPubSub(t, "") },
		newPubSub,
	)
}

// suiteConstructor starts a server and returns the suite's consumer-group constructor.
func suiteConstructor(t *testing.T) tests.ConsumerGroupPubSubConstructor {
	s := startServer(t)
	prov := newStreams(connect(t, s))

	return func(t *testing.T, group string) (message.Publisher, message.Subscriber) {
		js := connect(t, s)
		pub, err := bus.NewPublisher(js, bus.PublisherConfig{
			Subject: func(topic string) string {
				prov.ensure(t, topic)
				return topic
			},
		}, nil)
		if err != nil {
			t.Fatal(err)
		}
		sub, err := bus.NewSubscriber(js, bus.SubscriberConfig{
			Consumer: func(topic string) bus.Consumer {
				durable := group
				if durable == "" {
					durable = "d_" + topic
				}
				return bus.Consumer{Stream: prov.ensure(t, topic), Durable: sanitize(durable)}
			},
			NakDelay:     5 * time.Millisecond,
			FetchWait:    250 * time.Millisecond,
			CloseTimeout: 2 * time.Second, // TestMessageCtx leaves a message un-acked at Close
		}, nil)
		if err != nil {
			t.Fatal(err)
		}
		return pub, sub
	}
}
