package bus_test

import (
	"context"
	"fmt"
	"log/slog"
	"os"
	"time"

	"github.com/ThreeDotsLabs/watermill/message"
	"github.com/nats-io/nats-server/v2/server"
	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/ximd/ximd/pipeline/bus"
)

// Example publishes two messages to a stream and reads them back through a durable consumer: a
// Nack brings the same message back (after NakDelay) before the next one.
func Example() {
	dir, _ := os.MkdirTemp("", "bus-example")
	defer os.RemoveAll(dir)
	srv, _ := server.NewServer(&server.Options{Port: -1, JetStream: true, StoreDir: dir, NoLog: true, NoSigs: true})
	go srv.Start()
	defer srv.Shutdown()
	srv.ReadyForConnections(10 * time.Second)
	nc, err := nats.Connect(srv.ClientURL())
	if err != nil {
		fmt.Println(err)
		return
	}
	defer nc.Close()
	js, _ := jetstream.New(nc)
	ctx := context.Background()
	if _, err := js.CreateStream(ctx, jetstream.StreamConfig{Name: "ORDERS", Subjects: []string{"orders.>"}}); err != nil {
		fmt.Println(err)
		return
	}
	logger := slog.New(slog.DiscardHandler)

	pub, _ := bus.NewPublisher(js, bus.PublisherConfig{}, logger)
	defer pub.Close()
	sub, _ := bus.NewSubscriber(js, bus.SubscriberConfig{
		Consumer: func(topic string) bus.Consumer {
			return bus.Consumer{Stream: "ORDERS", Durable: "orders-worker", FilterSubjects: []string{topic}}
		},
		NakDelay: 10 * time.Millisecond,
	}, logger)
	defer sub.Close()

	for _, id := range []string{"first", "second"} {
		msg := message.NewMessage(id, []byte("payload of "+id))
		msg.Metadata.Set("Xim-Gateway", "gw-1")
		if err := pub.Publish("orders.new", msg); err != nil {
			fmt.Println(err)
			return
		}
	}

	msgs, err := sub.Subscribe(ctx, "orders.new")
	if err != nil {
		fmt.Println(err)
		return
	}
	for range 3 {
		msg := <-msgs
		fmt.Println(msg.UUID, msg.Metadata.Get(bus.MetaStreamSeq), msg.Metadata.Get(bus.MetaNumDelivered), msg.Metadata.Get("Xim-Gateway"))
		if msg.UUID == "first" && msg.Metadata.Get(bus.MetaNumDelivered) == "1" {
			msg.Nack()
			continue
		}
		msg.Ack()
	}
	// Output:
	// first 1 1 gw-1
	// first 1 2 gw-1
	// second 2 1 gw-1
}
