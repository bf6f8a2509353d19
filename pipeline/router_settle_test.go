package pipeline_test

import (
	"context"
	"errors"
	"log/slog"
	"sync"
	"testing"
	"time"

	"github.com/ThreeDotsLabs/watermill"
	"github.com/ThreeDotsLabs/watermill/message"
	"github.com/ThreeDotsLabs/watermill/pubsub/gochannel"

	"github.com/ximd/ximd/handlers"
	"github.com/ximd/ximd/pipeline"
)

// The stage consumers' outcomes, routed by handlers.Route through the router: done and a
// rejection are acked and never poisoned; a retry is retried (Retries more times, with back-off)
// and then poisoned with its cause as the reason header; a poisoning goes to the poison topic at
// once, with its reason, and is not retried.
func TestRouterSettlesStageOutcomes(t *testing.T) {
	const retries = 2
	ps := gochannel.NewGoChannel(gochannel.Config{BlockPublishUntilSubscriberAck: true}, watermill.NopLogger{})
	defer func() { _ = ps.Close() }()
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	poisoned, err := ps.Subscribe(ctx, "poison")
	if err != nil {
		t.Fatal(err)
	}
	r, err := pipeline.NewRouter(pipeline.RouterConfig{Retries: retries, RetryInitial: time.Millisecond, RetryMax: 2 * time.Millisecond, CloseTimeout: time.Second},
		ps, "poison", slog.New(slog.DiscardHandler))
	if err != nil {
		t.Fatal(err)
	}
	var mu sync.Mutex
	attempts := map[string]int{}
	r.AddNoPublisherHandler("stage", "in", ps, handlers.Route(func(msg *message.Message) handlers.Outcome {
		kind := string(msg.Payload)
		mu.Lock()
		attempts[kind]++
		mu.Unlock()
		switch kind {
		case "retry":
			return handlers.Retry(errors.New("records unavailable"))
		case "poison":
			return handlers.Poison("the packet cannot be handled")
		case "reject":
			return handlers.Reject("not a packet")
		}
		return handlers.Done()
	}))
	go func() { _ = r.Run(ctx) }()
	<-r.Running()
	defer func() { _ = r.Close() }()

	reasons := map[string]string{}
	var wg sync.WaitGroup
	wg.Add(1)
	go func() {
		defer wg.Done()
		for len(reasons) < 2 {
			select {
			case m := <-poisoned:
				reasons[string(m.Payload)] = m.Metadata.Get("reason_poisoned")
				m.Ack()
			case <-time.After(10 * time.Second):
				return
			}
		}
	}()
	for _, kind := range []string{"done", "reject", "retry", "poison"} {
		// The publish returns once the router acked the message.
		if err := ps.Publish("in", message.NewMessage(watermill.NewUUID(), []byte(kind))); err != nil {
			t.Fatal(err)
		}
	}
	wg.Wait()
	want := map[string]string{"retry": "records unavailable", "poison": "the packet cannot be handled"}
	if len(reasons) != len(want) || reasons["retry"] != want["retry"] || reasons["poison"] != want["poison"] {
		t.Errorf("poisoned with reasons %q, want %q", reasons, want)
	}
	mu.Lock()
	defer mu.Unlock()
	for kind, n := range map[string]int{"done": 1, "reject": 1, "retry": retries + 1, "poison": 1} {
		if attempts[kind] != n {
			t.Errorf("%s handled %d times, want %d", kind, attempts[kind], n)
		}
	}
}
