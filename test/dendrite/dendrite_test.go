package dendrite_test

import (
	"context"
	"testing"

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
	ev, err := alice.Client.GetEvent(context.Background(), room, resp.EventID)
	if err != nil || ev.Type != event.EventMessage {
		t.Fatal(ev, err)
	}
	t.Log(room, resp.EventID)
}
