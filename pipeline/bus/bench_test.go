package bus_test

import (
	"context"
	"fmt"
	"testing"
	"time"

	"github.com/ThreeDotsLabs/watermill/message"
	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/ximd/ximd/pipeline/bus"
)

// The benchmarks move b.N messages of 256 bytes through one file-backed stream on an in-process
// server: published one by one synchronously (waiting for each PubAck) by one goroutine while one
// subscription consumes and acks them. BenchmarkPublishSubscribe does it through the bus;
// BenchmarkRawJetStreamPublishSubscribe is the same with nats.go jetstream alone (PublishMsg with
// a Nats-Msg-Id, Fetch batches of a durable pull consumer, fire-and-forget Ack), as the baseline.
// The Subscribe pair consumes pre-published messages only.

var benchPayload = make([]byte, 256)

func benchSetup(b *testing.B) jetstream.JetStream {
	b.Helper()
	s := startServer(b)
	js := connect(b, s)
	if _, err := js.CreateStream(context.Background(), jetstream.StreamConfig{
		Name: "BENCH", Subjects: []string{"bench.>"}, Storage: jetstream.FileStorage,
	}); err != nil {
		b.Fatal(err)
	}
	return js
}

func benchSubscriber(b *testing.B, js jetstream.JetStream) *bus.Subscriber {
	b.Helper()
	sub, err := bus.NewSubscriber(js, bus.SubscriberConfig{
		Consumer: func(topic string) bus.Consumer {
			return bus.Consumer{Stream: "BENCH", Durable: "bench", FilterSubjects: []string{topic}}
		},
		FetchWait: 200 * time.Millisecond,
	}, nil)
	if err != nil {
		b.Fatal(err)
	}
	b.Cleanup(func() { _ = sub.Close() })
	return sub
}

func benchConsume(b *testing.B, msgs <-chan *message.Message, n int) {
	b.Helper()
	for i := 0; i < n; i++ {
		select {
		case m := <-msgs:
			m.Ack()
		case <-time.After(30 * time.Second):
			b.Fatalf("received %d of %d", i, n)
		}
	}
}

func BenchmarkPublishSubscribe(b *testing.B) {
	js := benchSetup(b)
	pub, err := bus.NewPublisher(js, bus.PublisherConfig{}, nil)
	if err != nil {
		b.Fatal(err)
	}
	msgs, err := benchSubscriber(b, js).Subscribe(context.Background(), "bench.pubsub")
	if err != nil {
		b.Fatal(err)
	}
	b.ResetTimer()
	errs := make(chan error, 1)
	go func() {
		for i := 0; i < b.N; i++ {
			if err := pub.Publish("bench.pubsub", message.NewMessage(fmt.Sprint(i), benchPayload)); err != nil {
				errs <- err
				return
			}
		}
		errs <- nil
	}()
	benchConsume(b, msgs, b.N)
	if err := <-errs; err != nil {
		b.Fatal(err)
	}
}

func BenchmarkRawJetStreamPublishSubscribe(b *testing.B) {
	js := benchSetup(b)
	ctx := context.Background()
	cons, err := js.CreateOrUpdateConsumer(ctx, "BENCH", jetstream.ConsumerConfig{
		Durable: "bench", FilterSubject: "bench.raw", AckPolicy: jetstream.AckExplicitPolicy,
	})
	if err != nil {
		b.Fatal(err)
	}
	b.ResetTimer()
	errs := make(chan error, 1)
	go func() {
		for i := 0; i < b.N; i++ {
			m := &nats.Msg{Subject: "bench.raw", Data: benchPayload, Header: nats.Header{"Xim-Uuid": {fmt.Sprint(i)}}}
			if _, err := js.PublishMsg(ctx, m, jetstream.WithMsgID(fmt.Sprint(i))); err != nil {
				errs <- err
				return
			}
		}
		errs <- nil
	}()
	rawConsume(b, cons, b.N)
	if err := <-errs; err != nil {
		b.Fatal(err)
	}
}

func BenchmarkSubscribe(b *testing.B) {
	js := benchSetup(b)
	pub, err := bus.NewPublisher(js, bus.PublisherConfig{}, nil)
	if err != nil {
		b.Fatal(err)
	}
	for i := 0; i < b.N; i++ {
		if err := pub.Publish("bench.sub", message.NewMessage(fmt.Sprint(i), benchPayload)); err != nil {
			b.Fatal(err)
		}
	}
	sub := benchSubscriber(b, js)
	b.ResetTimer()
	msgs, err := sub.Subscribe(context.Background(), "bench.sub")
	if err != nil {
		b.Fatal(err)
	}
	benchConsume(b, msgs, b.N)
}

func BenchmarkRawJetStreamSubscribe(b *testing.B) {
	js := benchSetup(b)
	ctx := context.Background()
	for i := 0; i < b.N; i++ {
		m := &nats.Msg{Subject: "bench.rawsub", Data: benchPayload, Header: nats.Header{"Xim-Uuid": {fmt.Sprint(i)}}}
		if _, err := js.PublishMsg(ctx, m, jetstream.WithMsgID(fmt.Sprint(i))); err != nil {
			b.Fatal(err)
		}
	}
	b.ResetTimer()
	cons, err := js.CreateOrUpdateConsumer(ctx, "BENCH", jetstream.ConsumerConfig{
		Durable: "bench", FilterSubject: "bench.rawsub", AckPolicy: jetstream.AckExplicitPolicy,
	})
	if err != nil {
		b.Fatal(err)
	}
	rawConsume(b, cons, b.N)
}

// rawConsume is the bus's pull pattern without Watermill: Fetch batches of 64 (waiting up to
// 200ms), Ack each message. (A Messages iterator stalled for its 30s heartbeat window here.)
func rawConsume(b *testing.B, cons jetstream.Consumer, n int) {
	b.Helper()
	for got := 0; got < n; {
		batch, err := cons.Fetch(64, jetstream.FetchMaxWait(200*time.Millisecond))
		if err != nil {
			b.Fatal(err)
		}
		for m := range batch.Messages() {
			if err := m.Ack(); err != nil {
				b.Fatal(err)
			}
			got++
		}
		if err := batch.Error(); err != nil {
			b.Fatal(err)
		}
	}
}
