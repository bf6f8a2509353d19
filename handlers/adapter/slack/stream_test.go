package slack_test

import (
	"context"
	"testing"

	"github.com/ximd/ximd/handlers/adapter"
	"github.com/ximd/ximd/handlers/adapter/slack"
	"github.com/ximd/ximd/handlers/adapter/slack/slacktest"
)

// A conversation that does not take native streams (channel_type_not_supported) is streamed by
// editing, and remembered: the next answer does not try a stream again.
func TestStream_FallsBackToEditAndRemembers(t *testing.T) {
	fake := slacktest.New()
	t.Cleanup(fake.Close)
	fake.SetLimits(unlimited)
	bot := fake.AddBot("bot")
	ch := fake.AddChannel("im", "dm", fake.AddUser("Dan"))
	fake.SetStreamingSupported(ch, false)
	tg, err := slack.New(slack.Options{}).Open(config(t, fake, bot, ch, "", map[string]any{"activity": "none"}))
	if err != nil {
		t.Fatal(err)
	}
	ctx := context.Background()
	ed, _ := adapter.EditorOf(tg)
	for i, key := range []string{"c:a", "c:b"} {
		id, err := tg.Send(ctx, adapter.Message{Text: "first words", IdempotencyKey: key})
		if err != nil {
			t.Fatalf("answer %d: %v", i, err)
		}
		if err := ed.Edit(ctx, id, adapter.Message{Text: "first words, then the rest", IdempotencyKey: key}); err != nil {
			t.Fatal(err)
		}
		if err := ed.Edit(ctx, id, adapter.Message{Text: "first words, then the rest.", Final: true, IdempotencyKey: key}); err != nil {
			t.Fatal(err)
		}
	}
	starts := 0
	for _, c := range fake.Calls() {
		if c.Method == "chat.startStream" {
			starts++
		}
	}
	msgs := fake.Messages(ch)
	if starts != 1 || len(msgs) != 2 || msgs[0].Text != "first words, then the rest." || msgs[0].Edits < 2 || msgs[1].Streaming {
		t.Fatalf("%d stream starts, messages %+v: want one refused start, then edited messages", starts, msgs)
	}
}
