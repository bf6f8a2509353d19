package dendrite_test

import (
	"context"
	"testing"
	"time"

	"github.com/ximd/ximd/test/dendrite"
	"maunium.net/go/mautrix/event"
)

func TestServerRuns(t *testing.T) {
	s := dendrite.Start(t, dendrite.Options{})
	bot, alice := s.Register(t, "bot"), s.Register(t, "alice")
	room := s.Room(t, bot, false, alice)
	resp, err := bot.Client.SendText(context.Background(), room, "hello")
	if err != nil {
		t.Fatal(err)
	}
	// Dendrite answers the send once the event is in its roomserver; another member may read it
	// a moment later (M_NOT_FOUND until then), so the read is polled.
	deadline := time.Now().Add(20 * time.Second)
	for {
		ev, err := alice.Client.GetEvent(context.Background(), room, resp.EventID)
		if err == nil && ev.Type == event.EventMessage {
			break
		}
		if time.Now().After(deadline) {
			t.Fatal(ev, err)
		}
		time.Sleep(50 * time.Millisecond)
	}
	t.Log(room, resp.EventID)
}
