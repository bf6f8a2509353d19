package bus_test

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"runtime/pprof"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/ThreeDotsLabs/watermill/message"
	"github.com/nats-io/nats-server/v2/server"
	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/ximd/ximd/pipeline/bus"
)

const (
	testStream  = "ORDERS"
	testTopic   = "orders.new"
	testDurable = "work"
)

// fixture is a server with stream ORDERS (subjects orders.>) and a publisher on it.
type fixture struct {
	srv *server.Server
	js  jetstream.JetStream
	pub *bus.Publisher
}

func newFixture(t *testing.T) *fixture {
	t.Helper()
	s := startServer(t)
	js := connect(t, s)
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	if _, err := js.CreateStream(ctx, jetstream.StreamConfig{
		Name:     testStream,
		Subjects: []string{"orders.>"},
		Storage:  jetstream.FileStorage,
	}); err != nil {
		t.Fatalf("create stream: %v", err)
	}
	pub, err := bus.NewPublisher(js, bus.PublisherConfig{}, nil)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = pub.Close() })
	return &fixture{srv: s, js: js, pub: pub}
}

// subscriber returns a Subscriber on its own connection reading durable "work" of ORDERS. The
// test closes it (Close is idempotent); cleanup closes it again.
func (f *fixture) subscriber(t *testing.T, cfg bus.SubscriberConfig, logger *slog.Logger) *bus.Subscriber {
	t.Helper()
	if cfg.Consumer == nil {
		cfg.Consumer = func(topic string) bus.Consumer {
			return bus.Consumer{Stream: testStream, Durable: testDurable, FilterSubjects: []string{topic}, Description: "test"}
		}
	}
	sub, err := bus.NewSubscriber(connect(t, f.srv), cfg, logger)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = sub.Close() })
	return sub
}

// publish publishes messages m<from>..m<to> to testTopic.
func (f *fixture) publish(t *testing.T, from, to int) {
	t.Helper()
	for i := from; i <= to; i++ {
		if err := f.pub.Publish(testTopic, message.NewMessage(fmt.Sprintf("m%d", i), []byte(strconv.Itoa(i)))); err != nil {
			t.Fatal(err)
		}
	}
}

func (f *fixture) consumerInfo(t *testing.T) *jetstream.ConsumerInfo {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	c, err := f.js.Consumer(ctx, testStream, testDurable)
	if err != nil {
		t.Fatalf("consumer %s: %v", testDurable, err)
	}
	info, err := c.Info(ctx)
	if err != nil {
		t.Fatalf("consumer info: %v", err)
	}
	return info
}

// receive returns the next message or fails after d.
func receive(t *testing.T, ch <-chan *message.Message, d time.Duration) *message.Message {
	t.Helper()
	select {
	case m, ok := <-ch:
		if !ok {
			t.Fatal("channel closed")
		}
		return m
	case <-time.After(d):
		t.Fatalf("no message within %s", d)
	}
	return nil
}

// expectClosed fails unless ch is closed within d (messages still in it are nacked).
func expectClosed(t *testing.T, ch <-chan *message.Message, d time.Duration) {
	t.Helper()
	timeout := time.After(d)
	for {
		select {
		case m, ok := <-ch:
			if !ok {
				return
			}
			m.Nack()
		case <-timeout:
			t.Fatalf("channel not closed within %s", d)
		}
	}
}

func wantMsg(t *testing.T, m *message.Message, uuid, numDelivered string) {
	t.Helper()
	if m.UUID != uuid || m.Metadata.Get(bus.MetaNumDelivered) != numDelivered {
		t.Fatalf("got %s (delivered %s), want %s (delivered %s)", m.UUID, m.Metadata.Get(bus.MetaNumDelivered), uuid, numDelivered)
	}
}

func TestSubscriberDurableSurvivesCloseAndResumes(t *testing.T) {
	f := newFixture(t)
	f.publish(t, 1, 6)

	sub1 := f.subscriber(t, bus.SubscriberConfig{}, nil)
	ch, err := sub1.Subscribe(context.Background(), testTopic)
	if err != nil {
		t.Fatal(err)
	}
	for i := 1; i <= 3; i++ {
		m := receive(t, ch, 5*time.Second)
		wantMsg(t, m, fmt.Sprintf("m%d", i), "1")
		m.Ack()
	}
	if err := sub1.Close(); err != nil {
		t.Fatal(err)
	}
	expectClosed(t, ch, time.Second)

	info := f.consumerInfo(t) // still there after Close
	cfg := info.Config
	if cfg.AckPolicy != jetstream.AckExplicitPolicy || cfg.DeliverPolicy != jetstream.DeliverAllPolicy ||
		cfg.AckWait != bus.DefaultAckWait || cfg.MaxAckPending != bus.DefaultMaxAckPending ||
		cfg.MaxDeliver != bus.DefaultMaxDeliver || cfg.FilterSubject != testTopic || cfg.Description != "test" {
		t.Errorf("consumer config = %+v", cfg)
	}

	// A new subscriber resumes after the last ack: m4 first, nothing redelivered.
	sub2 := f.subscriber(t, bus.SubscriberConfig{}, nil)
	ctx, cancel := context.WithCancel(context.Background())
	ch2, err := sub2.Subscribe(ctx, testTopic)
	if err != nil {
		t.Fatal(err)
	}
	for i := 4; i <= 6; i++ {
		m := receive(t, ch2, 5*time.Second)
		// sub1 had fetched m4..m6 and handed them back: the server delivered them once before.
		wantMsg(t, m, fmt.Sprintf("m%d", i), "2")
		m.Ack()
	}
	cancel()
	expectClosed(t, ch2, 5*time.Second)
	f.consumerInfo(t) // still there after the Subscribe context ended
	if err := sub2.Close(); err != nil {
		t.Fatal(err)
	}
	if err := sub2.Close(); err != nil {
		t.Fatalf("second Close: %v", err)
	}
}

func TestSubscriberDeliversOneAtATimeInOrderDespiteNacks(t *testing.T) {
	f := newFixture(t)
	const n = 40
	f.publish(t, 1, n)
	sub := f.subscriber(t, bus.SubscriberConfig{NakDelay: 5 * time.Millisecond, FetchBatch: 8}, nil)
	ch, err := sub.Subscribe(context.Background(), testTopic)
	if err != nil {
		t.Fatal(err)
	}
	next := 1
	for next <= n {
		m := receive(t, ch, 5*time.Second)
		if want := fmt.Sprintf("m%d", next); m.UUID != want {
			t.Fatalf("got %s, want %s", m.UUID, want)
		}
		// Nack every third message on its first delivery: it must come back before the next one.
		if next%3 == 0 && m.Metadata.Get(bus.MetaNumDelivered) == "1" {
			m.Nack()
			continue
		}
		m.Ack()
		next++
	}
}

func TestSubscriberNackRedeliversSameMessageAfterDelay(t *testing.T) {
	f := newFixture(t)
	f.publish(t, 1, 2)
	const delay = 300 * time.Millisecond
	sub := f.subscriber(t, bus.SubscriberConfig{NakDelay: delay}, nil)
	ch, err := sub.Subscribe(context.Background(), testTopic)
	if err != nil {
		t.Fatal(err)
	}

	m := receive(t, ch, 5*time.Second)
	wantMsg(t, m, "m1", "1")
	nackedAt := time.Now()
	m.Nack()
	select {
	case <-m.Context().Done():
	case <-time.After(time.Second):
		t.Fatal("message context not cancelled by Nack")
	}

	again := receive(t, ch, 5*time.Second)
	if waited := time.Since(nackedAt); waited < delay {
		t.Errorf("redelivered after %s, want >= NakDelay %s", waited, delay)
	}
	wantMsg(t, again, "m1", "2")
	if again.Metadata.Get(bus.MetaStreamSeq) != "1" || string(again.Payload) != "1" {
		t.Errorf("redelivery = seq %s payload %q", again.Metadata.Get(bus.MetaStreamSeq), again.Payload)
	}
	if again.Context().Err() != nil {
		t.Error("redelivered message has a cancelled context")
	}
	again.Ack()
	m2 := receive(t, ch, 5*time.Second)
	wantMsg(t, m2, "m2", "1")
	m2.Ack()

	// The redelivery happened in process: the server delivered m1 once.
	if info := f.consumerInfo(t); info.NumRedelivered != 0 {
		t.Errorf("server redeliveries = %d, want 0", info.NumRedelivered)
	}
}

func TestSubscriberLongHandlerCausesNoRedelivery(t *testing.T) {
	f := newFixture(t)
	f.publish(t, 1, 2)
	const ackWait = time.Second
	cfg := bus.SubscriberConfig{AckWait: ackWait}
	sub := f.subscriber(t, cfg, nil)
	ch, err := sub.Subscribe(context.Background(), testTopic)
	if err != nil {
		t.Fatal(err)
	}
	m := receive(t, ch, 5*time.Second)
	wantMsg(t, m, "m1", "1")
	eventually(t, 5*time.Second, "m2 fetched too", func() bool { return f.consumerInfo(t).NumAckPending == 2 })

	// Another worker pulls from the same durable: it would get m1 and m2 as soon as their
	// AckWait expired.
	other := f.subscriber(t, cfg, nil)
	otherCh, err := other.Subscribe(context.Background(), testTopic)
	if err != nil {
		t.Fatal(err)
	}

	// The handler works for 2.5 AckWaits while m2 waits its turn.
	select {
	case m := <-otherCh:
		t.Fatalf("%s redelivered to the other worker during the handler", m.UUID)
	case <-time.After(5 * ackWait / 2):
	}
	if info := f.consumerInfo(t); info.NumRedelivered != 0 {
		t.Fatalf("server redeliveries = %d, want 0", info.NumRedelivered)
	}
	m.Ack()
	m2 := receive(t, ch, 5*time.Second)
	wantMsg(t, m2, "m2", "1")
	m2.Ack()
	eventually(t, 5*time.Second, "both acked", func() bool {
		info := f.consumerInfo(t)
		return info.NumAckPending == 0 && info.AckFloor.Stream == 2
	})
}

func TestSubscriberTerminatesUnconvertibleMessage(t *testing.T) {
	f := newFixture(t)
	ctx := context.Background()
	// A header with two values cannot become Watermill metadata.
	bad := &nats.Msg{Subject: testTopic, Data: []byte("secret-payload"), Header: nats.Header{"X-Dup": {"a", "b"}}}
	if _, err := f.js.PublishMsg(ctx, bad); err != nil {
		t.Fatal(err)
	}
	f.publish(t, 2, 2)

	var logs logBuffer
	sub := f.subscriber(t, bus.SubscriberConfig{}, logs.logger())
	ch, err := sub.Subscribe(ctx, testTopic)
	if err != nil {
		t.Fatal(err)
	}
	m := receive(t, ch, 5*time.Second)
	wantMsg(t, m, "m2", "1")
	m.Ack()

	eventually(t, 5*time.Second, "bad message terminated, good one acked", func() bool {
		info := f.consumerInfo(t)
		return info.NumAckPending == 0 && info.AckFloor.Stream == 2
	})
	if info := f.consumerInfo(t); info.NumRedelivered != 0 {
		t.Errorf("server redeliveries = %d, want 0", info.NumRedelivered)
	}
	out := logs.String()
	if !strings.Contains(out, "bus_message_unconvertible") || !strings.Contains(out, "stream_seq=1") {
		t.Errorf("log lacks the unconvertible message and its sequence:\n%s", out)
	}
	if strings.Contains(out, "secret-payload") {
		t.Errorf("log contains the payload:\n%s", out)
	}
}

func TestSubscriberMetadata(t *testing.T) {
	f := newFixture(t)
	ctx := context.Background()

	msg := message.NewMessage("uuid-1", []byte("body"))
	msg.Metadata.Set("Xim-Gateway", "gw-1")
	msg.Metadata.Set("lower-case_key", "v")
	msg.Metadata.Set("Spaces", "  padded\r\nvalue  ")
	msg.Metadata.Set(bus.MetaStreamSeq, "999") // replaced by the subscriber
	if err := f.pub.Publish(testTopic, msg); err != nil {
		t.Fatal(err)
	}
	// Published by something else: with only Nats-Msg-Id, then with no id at all.
	if _, err := f.js.PublishMsg(ctx, &nats.Msg{Subject: testTopic, Header: nats.Header{"Nats-Msg-Id": {"chan:pkt-1"}}}); err != nil {
		t.Fatal(err)
	}
	if _, err := f.js.Publish(ctx, testTopic, []byte("raw")); err != nil {
		t.Fatal(err)
	}

	sub := f.subscriber(t, bus.SubscriberConfig{}, nil)
	ch, err := sub.Subscribe(ctx, testTopic)
	if err != nil {
		t.Fatal(err)
	}

	m := receive(t, ch, 5*time.Second)
	want := map[string]string{
		"Xim-Gateway":        "gw-1",
		"lower-case_key":     "v",
		"Spaces":             "padded  value",
		bus.HeaderUUID:       "uuid-1",
		"Nats-Msg-Id":        "uuid-1",
		bus.MetaStream:       testStream,
		bus.MetaSubject:      testTopic,
		bus.MetaStreamSeq:    "1",
		bus.MetaNumDelivered: "1",
	}
	if m.UUID != "uuid-1" || string(m.Payload) != "body" {
		t.Errorf("got uuid %q payload %q", m.UUID, m.Payload)
	}
	for k, v := range want {
		if got, ok := m.Metadata[k]; !ok || got != v {
			t.Errorf("metadata %q = %q (present %v), want %q", k, got, ok, v)
		}
	}
	if len(m.Metadata) != len(want) {
		t.Errorf("metadata = %v, want exactly %v", m.Metadata, want)
	}
	m.Ack()

	if m := receive(t, ch, 5*time.Second); m.UUID != "chan:pkt-1" {
		t.Errorf("uuid from Nats-Msg-Id = %q", m.UUID)
	} else {
		m.Ack()
	}
	if m := receive(t, ch, 5*time.Second); m.UUID != testStream+":3" || string(m.Payload) != "raw" {
		t.Errorf("uuid without ids = %q", m.UUID)
	} else {
		m.Ack()
	}
}

func TestSubscriberCloseHandsBackHeldMessages(t *testing.T) {
	f := newFixture(t)
	f.publish(t, 1, 5)
	const closeTimeout = 300 * time.Millisecond
	sub1 := f.subscriber(t, bus.SubscriberConfig{CloseTimeout: closeTimeout, FetchWait: 200 * time.Millisecond}, nil)
	ch, err := sub1.Subscribe(context.Background(), testTopic)
	if err != nil {
		t.Fatal(err)
	}
	m := receive(t, ch, 5*time.Second) // the handler never acks m1
	wantMsg(t, m, "m1", "1")
	start := time.Now()
	if err := sub1.Close(); err != nil {
		t.Fatal(err)
	}
	if took := time.Since(start); took < closeTimeout || took > closeTimeout+3*time.Second {
		t.Errorf("Close took %s, want about CloseTimeout %s", took, closeTimeout)
	}
	if m.Context().Err() == nil {
		t.Error("message context not cancelled by Close")
	}
	m.Ack() // too late: m1 was handed back

	// Everything sub1 held comes back at once (not after AckWait, 30s) and in order.
	sub2 := f.subscriber(t, bus.SubscriberConfig{}, nil)
	ch2, err := sub2.Subscribe(context.Background(), testTopic)
	if err != nil {
		t.Fatal(err)
	}
	for i := 1; i <= 5; i++ {
		m := receive(t, ch2, 5*time.Second)
		wantMsg(t, m, fmt.Sprintf("m%d", i), "2") // all five had been fetched by sub1
		m.Ack()
	}
}

func TestSubscriberCloseHandsBackNackedMessage(t *testing.T) {
	f := newFixture(t)
	f.publish(t, 1, 2)
	sub1 := f.subscriber(t, bus.SubscriberConfig{NakDelay: time.Hour}, nil)
	ch, err := sub1.Subscribe(context.Background(), testTopic)
	if err != nil {
		t.Fatal(err)
	}
	receive(t, ch, 5*time.Second).Nack() // waits an hour for its redelivery
	if err := sub1.Close(); err != nil {
		t.Fatal(err)
	}

	sub2 := f.subscriber(t, bus.SubscriberConfig{}, nil)
	ch2, err := sub2.Subscribe(context.Background(), testTopic)
	if err != nil {
		t.Fatal(err)
	}
	for i := 1; i <= 2; i++ {
		m := receive(t, ch2, 5*time.Second)
		wantMsg(t, m, fmt.Sprintf("m%d", i), "2")
		m.Ack()
	}
}

func TestSubscriberMaxDeliverTerminates(t *testing.T) {
	f := newFixture(t)
	f.publish(t, 1, 2)
	var logs logBuffer
	sub := f.subscriber(t, bus.SubscriberConfig{MaxDeliver: 2, NakDelay: 10 * time.Millisecond}, logs.logger())
	ch, err := sub.Subscribe(context.Background(), testTopic)
	if err != nil {
		t.Fatal(err)
	}
	m := receive(t, ch, 5*time.Second)
	wantMsg(t, m, "m1", "1")
	m.Nack()
	m = receive(t, ch, 5*time.Second)
	wantMsg(t, m, "m1", "2")
	m.Nack() // the second delivery was the last: terminated
	m = receive(t, ch, 5*time.Second)
	wantMsg(t, m, "m2", "1")
	m.Ack()
	eventually(t, 5*time.Second, "m1 terminated, m2 acked", func() bool {
		info := f.consumerInfo(t)
		return info.NumAckPending == 0 && info.AckFloor.Stream == 2
	})
	if !strings.Contains(logs.String(), "bus_max_deliver_reached") {
		t.Errorf("log lacks bus_max_deliver_reached:\n%s", logs.String())
	}
}

func TestSubscriberAfterClose(t *testing.T) {
	f := newFixture(t)
	sub := f.subscriber(t, bus.SubscriberConfig{}, nil)
	if err := sub.Close(); err != nil {
		t.Fatal(err)
	}
	if _, err := sub.Subscribe(context.Background(), testTopic); !errors.Is(err, bus.ErrClosed) {
		t.Errorf("Subscribe after Close: %v, want ErrClosed", err)
	}
	if err := sub.SubscribeInitialize(testTopic); !errors.Is(err, bus.ErrClosed) {
		t.Errorf("SubscribeInitialize after Close: %v, want ErrClosed", err)
	}
}

func TestSubscribeInitializeCreatesAndUpdates(t *testing.T) {
	f := newFixture(t)
	for _, cfg := range []bus.SubscriberConfig{{}, {}, {MaxAckPending: 1, AckWait: time.Minute}} {
		if err := f.subscriber(t, cfg, nil).SubscribeInitialize(testTopic); err != nil {
			t.Fatal(err)
		}
	}
	got := f.consumerInfo(t).Config
	if got.MaxAckPending != 1 || got.AckWait != time.Minute || got.Durable != testDurable {
		t.Errorf("consumer config after update = %+v", got)
	}
}

func TestSubscriberMappingErrors(t *testing.T) {
	f := newFixture(t)
	tests := []struct {
		name     string
		consumer bus.Consumer
		wantErr  error
	}{
		{name: "no stream", consumer: bus.Consumer{Durable: "d"}},
		{name: "no durable", consumer: bus.Consumer{Stream: testStream}},
		{name: "unknown stream", consumer: bus.Consumer{Stream: "NOPE", Durable: "d"}, wantErr: jetstream.ErrStreamNotFound},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			sub := f.subscriber(t, bus.SubscriberConfig{Consumer: func(string) bus.Consumer { return tt.consumer }}, nil)
			_, err := sub.Subscribe(context.Background(), testTopic)
			if err == nil || !strings.Contains(err.Error(), testTopic) {
				t.Fatalf("Subscribe: %v, want an error naming the topic", err)
			}
			if tt.wantErr != nil && !errors.Is(err, tt.wantErr) {
				t.Errorf("Subscribe: %v, want %v", err, tt.wantErr)
			}
		})
	}
}

func TestSubscriberConfigValidate(t *testing.T) {
	mapping := func(string) bus.Consumer { return bus.Consumer{Stream: "S", Durable: "d"} }
	tests := []struct {
		name    string
		cfg     bus.SubscriberConfig
		wantErr bool
	}{
		{name: "defaults", cfg: bus.SubscriberConfig{Consumer: mapping}},
		{name: "all set", cfg: bus.SubscriberConfig{Consumer: mapping, AckWait: time.Second, MaxDeliver: 5, MaxAckPending: -1, BackOff: []time.Duration{time.Second}, NakDelay: time.Millisecond, CloseTimeout: time.Second, FetchBatch: 1, FetchWait: time.Second}},
		{name: "no mapping", cfg: bus.SubscriberConfig{}, wantErr: true},
		{name: "negative ack wait", cfg: bus.SubscriberConfig{Consumer: mapping, AckWait: -1}, wantErr: true},
		{name: "max deliver -2", cfg: bus.SubscriberConfig{Consumer: mapping, MaxDeliver: -2}, wantErr: true},
		{name: "max ack pending -2", cfg: bus.SubscriberConfig{Consumer: mapping, MaxAckPending: -2}, wantErr: true},
		{name: "zero back-off", cfg: bus.SubscriberConfig{Consumer: mapping, BackOff: []time.Duration{0}}, wantErr: true},
		{name: "negative nak delay", cfg: bus.SubscriberConfig{Consumer: mapping, NakDelay: -time.Second}, wantErr: true},
		{name: "negative close timeout", cfg: bus.SubscriberConfig{Consumer: mapping, CloseTimeout: -time.Second}, wantErr: true},
		{name: "negative fetch batch", cfg: bus.SubscriberConfig{Consumer: mapping, FetchBatch: -1}, wantErr: true},
		{name: "negative fetch wait", cfg: bus.SubscriberConfig{Consumer: mapping, FetchWait: -1}, wantErr: true},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			err := tt.cfg.Validate()
			if (err != nil) != tt.wantErr {
				t.Fatalf("Validate() = %v, wantErr %v", err, tt.wantErr)
			}
			if _, nerr := bus.NewSubscriber(nil, tt.cfg, nil); nerr == nil {
				t.Error("NewSubscriber(nil JetStream) succeeded")
			}
		})
	}
}

// busGoroutines counts the goroutines running code of package bus (the in-process server's
// goroutines, e.g. those of the durable consumers it keeps, do not count).
func busGoroutines() int {
	var dump strings.Builder
	_ = pprof.Lookup("goroutine").WriteTo(&dump, 2)
	n := 0
	for _, g := range strings.Split(dump.String(), "\n\n") {
		if strings.Contains(g, "ximd/pipeline/bus.") {
			n++
		}
	}
	return n
}

func TestSubscriberLeavesNoGoroutines(t *testing.T) {
	f := newFixture(t)
	f.publish(t, 1, 3)
	js := connect(t, f.srv)
	if n := busGoroutines(); n != 0 {
		t.Fatalf("%d bus goroutines before the test", n)
	}

	sub, err := bus.NewSubscriber(js, bus.SubscriberConfig{
		Consumer: func(topic string) bus.Consumer {
			return bus.Consumer{Stream: testStream, Durable: sanitize(topic), FilterSubjects: []string{topic}}
		},
		FetchWait: 200 * time.Millisecond,
	}, nil)
	if err != nil {
		t.Fatal(err)
	}
	// The first subscription ends by its context, the others by Close.
	ctx, cancel := context.WithCancel(context.Background())
	chans := make([]<-chan *message.Message, 0, 3)
	for i, topic := range []string{testTopic, "orders.other", "orders.third"} {
		subCtx := context.Background()
		if i == 0 {
			subCtx = ctx
		}
		ch, err := sub.Subscribe(subCtx, topic)
		if err != nil {
			t.Fatal(err)
		}
		chans = append(chans, ch)
	}
	receive(t, chans[0], 5*time.Second).Ack()
	receive(t, chans[0], 5*time.Second).Nack()
	// One per subscription once the handlers' Ack and Nack were taken (a goroutine watches each
	// message in a handler, and one wakes a nacked lane).
	settle := time.Now().Add(2 * time.Second)
	for busGoroutines() != 3 {
		if time.Now().After(settle) {
			t.Fatalf("%d bus goroutines with 3 subscriptions, want 3", busGoroutines())
		}
		time.Sleep(5 * time.Millisecond)
	}

	cancel()
	expectClosed(t, chans[0], 5*time.Second)
	if err := sub.Close(); err != nil {
		t.Fatal(err)
	}
	for _, ch := range chans {
		expectClosed(t, ch, time.Second)
	}
	// Close returned after every goroutine signalled its end; give them the instant to return.
	end := time.Now().Add(time.Second)
	for busGoroutines() != 0 {
		if time.Now().After(end) {
			var dump strings.Builder
			_ = pprof.Lookup("goroutine").WriteTo(&dump, 1)
			t.Fatalf("%d bus goroutines after Close:\n%s", busGoroutines(), dump.String())
		}
		time.Sleep(5 * time.Millisecond)
	}
}

func TestSubscriberSurvivesServerRestart(t *testing.T) {
	dir := t.TempDir()
	s1 := startServerAt(t, -1, dir)
	port := s1.Addr().(*net.TCPAddr).Port
	js := connect(t, s1, nats.MaxReconnects(-1), nats.ReconnectWait(50*time.Millisecond))
	ctx := context.Background()
	if _, err := js.CreateStream(ctx, jetstream.StreamConfig{Name: testStream, Subjects: []string{"orders.>"}, Storage: jetstream.FileStorage}); err != nil {
		t.Fatal(err)
	}
	pub, err := bus.NewPublisher(js, bus.PublisherConfig{}, nil)
	if err != nil {
		t.Fatal(err)
	}
	sub, err := bus.NewSubscriber(js, bus.SubscriberConfig{
		Consumer:  func(string) bus.Consumer { return bus.Consumer{Stream: testStream, Durable: testDurable} },
		FetchWait: 200 * time.Millisecond,
	}, nil)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = sub.Close() })
	publish := func(i int) {
		t.Helper()
		msg := message.NewMessage(fmt.Sprintf("m%d", i), nil)
		eventually(t, 20*time.Second, "publish "+msg.UUID, func() bool { return pub.Publish(testTopic, msg) == nil })
	}
	for i := 1; i <= 3; i++ {
		publish(i)
	}
	ch, err := sub.Subscribe(ctx, testTopic)
	if err != nil {
		t.Fatal(err)
	}
	for i := 1; i <= 2; i++ {
		m := receive(t, ch, 5*time.Second)
		wantMsg(t, m, fmt.Sprintf("m%d", i), "1")
		m.Ack()
	}
	if err := js.Conn().Flush(); err != nil { // the acks above reach the server
		t.Fatal(err)
	}

	s1.Shutdown()
	s1.WaitForShutdown()
	startServerAt(t, port, dir)
	for i := 4; i <= 6; i++ {
		publish(i)
	}

	// m3 was delivered before the restart and not acked: it comes back (possibly after AckWait
	// if its delivery was lost with the server), then the rest in order.
	seen := map[string]bool{}
	for len(seen) < 4 {
		m := receive(t, ch, 45*time.Second)
		seen[m.UUID] = true
		m.Ack()
	}
	for i := 3; i <= 6; i++ {
		if !seen[fmt.Sprintf("m%d", i)] {
			t.Errorf("m%d not received after the restart (got %v)", i, seen)
		}
	}
}

// TestSubscriberKeepsProvisionedConsumer reads a WorkQueue stream's durable created the way
// pipeline.Provision creates the partition consumers: a Subscriber with the same settings leaves
// the consumer's configuration as it was.
func TestSubscriberKeepsProvisionedConsumer(t *testing.T) {
	s := startServer(t)
	js := connect(t, s)
	ctx := context.Background()
	if _, err := js.CreateStream(ctx, jetstream.StreamConfig{
		Name: "IN", Subjects: []string{"in.>"}, Retention: jetstream.WorkQueuePolicy, Storage: jetstream.FileStorage,
	}); err != nil {
		t.Fatal(err)
	}
	provisioned := jetstream.ConsumerConfig{
		Durable:       "in-p00",
		Description:   "partition 0",
		FilterSubject: "in.0.>",
		AckPolicy:     jetstream.AckExplicitPolicy,
		DeliverPolicy: jetstream.DeliverAllPolicy,
		AckWait:       30 * time.Second,
		MaxAckPending: 1024,
	}
	c, err := js.CreateOrUpdateConsumer(ctx, "IN", provisioned)
	if err != nil {
		t.Fatal(err)
	}
	before := c.CachedInfo().Config

	sub, err := bus.NewSubscriber(js, bus.SubscriberConfig{
		Consumer: func(string) bus.Consumer {
			return bus.Consumer{Stream: "IN", Durable: "in-p00", FilterSubjects: []string{"in.0.>"}, Description: "partition 0"}
		},
	}, nil)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = sub.Close() })
	if err := sub.SubscribeInitialize("partition-0"); err != nil {
		t.Fatal(err)
	}
	c, err = js.Consumer(ctx, "IN", "in-p00")
	if err != nil {
		t.Fatal(err)
	}
	after := c.CachedInfo().Config
	if fmt.Sprintf("%+v", after) != fmt.Sprintf("%+v", before) {
		t.Errorf("consumer config changed:\nbefore %+v\nafter  %+v", before, after)
	}

	if _, err := js.Publish(ctx, "in.0.chan.message", []byte("x")); err != nil {
		t.Fatal(err)
	}
	ch, err := sub.Subscribe(ctx, "partition-0")
	if err != nil {
		t.Fatal(err)
	}
	m := receive(t, ch, 5*time.Second)
	if m.Metadata.Get(bus.MetaSubject) != "in.0.chan.message" || m.UUID != "IN:1" {
		t.Errorf("got %s from %s", m.UUID, m.Metadata.Get(bus.MetaSubject))
	}
	m.Ack()
	eventually(t, 5*time.Second, "work queue message removed after Ack", func() bool {
		st, err := js.Stream(ctx, "IN")
		if err != nil {
			return false
		}
		info, err := st.Info(ctx)
		return err == nil && info.State.Msgs == 0
	})
}
