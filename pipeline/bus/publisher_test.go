package bus_test

import (
	"context"
	"errors"
	"strings"
	"testing"

	"github.com/ThreeDotsLabs/watermill/message"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/ximd/ximd/pipeline/bus"
)

func TestPublisherErrors(t *testing.T) {
	f := newFixture(t)
	closed, err := bus.NewPublisher(f.js, bus.PublisherConfig{}, nil)
	if err != nil {
		t.Fatal(err)
	}
	if err := closed.Close(); err != nil {
		t.Fatal(err)
	}
	tests := []struct {
		name    string
		pub     *bus.Publisher
		topic   string
		meta    map[string]string
		wantErr error
	}{
		{name: "stored", pub: f.pub, topic: testTopic, meta: map[string]string{"k": "v"}},
		{name: "no stream for the subject", pub: f.pub, topic: "nowhere", wantErr: jetstream.ErrNoStreamResponse},
		{name: "key with a space", pub: f.pub, topic: testTopic, meta: map[string]string{"bad key": "v"}, wantErr: bus.ErrInvalidMetadata},
		{name: "key with a colon", pub: f.pub, topic: testTopic, meta: map[string]string{"a:b": "v"}, wantErr: bus.ErrInvalidMetadata},
		{name: "empty key", pub: f.pub, topic: testTopic, meta: map[string]string{"": "v"}, wantErr: bus.ErrInvalidMetadata},
		{name: "closed", pub: closed, topic: testTopic, wantErr: bus.ErrClosed},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			msg := message.NewMessage("id-"+strings.ReplaceAll(tt.name, " ", "-"), []byte("x"))
			for k, v := range tt.meta {
				msg.Metadata.Set(k, v)
			}
			err := tt.pub.Publish(tt.topic, msg)
			if tt.wantErr == nil {
				if err != nil {
					t.Fatalf("Publish: %v", err)
				}
				return
			}
			if !errors.Is(err, tt.wantErr) {
				t.Fatalf("Publish: %v, want %v", err, tt.wantErr)
			}
			if !strings.Contains(err.Error(), tt.topic) {
				t.Errorf("error %q does not name topic %q", err, tt.topic)
			}
		})
	}
}

func TestPublisherDeduplicatesAndMapsSubjects(t *testing.T) {
	f := newFixture(t)
	ctx := context.Background()
	pub, err := bus.NewPublisher(f.js, bus.PublisherConfig{
		Subject: func(topic string) string { return "orders." + topic },
		MsgID:   func(topic string, m *message.Message) string { return topic + ":" + m.Metadata.Get("packet_id") },
	}, nil)
	if err != nil {
		t.Fatal(err)
	}
	send := func(uuid, packetID string) {
		t.Helper()
		m := message.NewMessage(uuid, []byte("x"))
		m.Metadata.Set("packet_id", packetID)
		if err := pub.Publish("new", m); err != nil {
			t.Fatal(err)
		}
	}
	send("u1", "p1")
	send("u2", "p1") // same Nats-Msg-Id "new:p1": a duplicate
	send("u3", "p2")

	stream, err := f.js.Stream(ctx, testStream)
	if err != nil {
		t.Fatal(err)
	}
	info, err := stream.Info(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if info.State.Msgs != 2 {
		t.Errorf("stream holds %d messages, want 2 (one duplicate dropped)", info.State.Msgs)
	}
	raw, err := stream.GetMsg(ctx, 1)
	if err != nil {
		t.Fatal(err)
	}
	if raw.Subject != "orders.new" || raw.Header.Get("Nats-Msg-Id") != "new:p1" || raw.Header.Get(bus.HeaderUUID) != "u1" {
		t.Errorf("stored subject %q headers %v", raw.Subject, raw.Header)
	}
}
