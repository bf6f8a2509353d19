package wecom_test

import (
	"testing"
	"time"

	"github.com/ximd/ximd/handlers/adapter"
)

// While xAgent thinks, the reply opens with a <think></think> stream frame; a tool's status
// names the tool; the answer streams into the same bubble, and a status after it changes
// nothing.
func TestWeCom_ThinkingFrameTurnsIntoTheAnswer(t *testing.T) {
	fake := newFake(t)
	c := newConversation(t, fake, nil)
	if got := c.tg.Capabilities().Activity; got != adapter.ActivityStatus {
		t.Fatalf("activity %q, want status", got)
	}
	sh, ok := adapter.ShowerOf(c.tg)
	if !ok {
		t.Fatal("no ActivityShower")
	}
	c.say(t, "what is the weather?")
	ctx := ctxT(t)
	if err := sh.ShowActivity(ctx, adapter.Activity{Status: adapter.StatusThinking}); err != nil {
		t.Fatal(err)
	}
	seen := fake.Messages(c.bot, c.conv)
	if len(seen) != 1 || seen[0].Kind != "stream" || seen[0].Finished || seen[0].Text != "<think></think>" || seen[0].ReplyTo == "" {
		t.Fatalf("the person sees %+v, want one open stream showing <think></think>", seen)
	}
	bubble := seen[0].ID
	if err := sh.ShowActivity(ctx, adapter.Activity{Status: adapter.StatusTool, ToolName: "weather<lookup>"}); err != nil {
		t.Fatal(err)
	}
	if seen := fake.Messages(c.bot, c.conv); len(seen) != 1 || seen[0].Text != "<think>weatherlookup</think>" {
		t.Fatalf("the person sees %+v, want the tool named in the thinking block", seen)
	}
	ed, id := c.streaming(t, ctx, "It is", "ch:m1")
	// The stages clear the status at the first shown delta; the status shown after it too.
	if err := sh.ShowActivity(ctx, adapter.Activity{Status: adapter.StatusIdle}); err != nil {
		t.Fatal(err)
	}
	if err := sh.ShowActivity(ctx, adapter.Activity{Status: adapter.StatusThinking}); err != nil {
		t.Fatal(err)
	}
	time.Sleep(2 * fast.ThinkGrace) // an idle that wrongly finished the bubble would have by now
	if err := ed.Edit(ctx, id, adapter.Message{Text: "It is **sunny**.", Final: true, IdempotencyKey: "ch:m1"}); err != nil {
		t.Fatal(err)
	}
	seen = fake.Messages(c.bot, c.conv)
	if len(seen) != 1 || seen[0].ID != bubble || !seen[0].Finished || seen[0].Text != "It is **sunny**." || seen[0].Frames != 4 {
		t.Fatalf("the person sees %+v, want the thinking bubble %s finished with the answer after 4 frames", seen, bubble)
	}
}

// A cleared status with no answer taking the bubble finishes it after the grace; the answer
// then goes as a proactive message, once.
func TestWeCom_ThinkingClearedWithoutAnswerFinishesTheBubble(t *testing.T) {
	fake := newFake(t)
	c := newConversation(t, fake, nil)
	sh, _ := adapter.ShowerOf(c.tg)
	c.say(t, "hello")
	ctx := ctxT(t)
	if err := sh.ShowActivity(ctx, adapter.Activity{Status: adapter.StatusThinking}); err != nil {
		t.Fatal(err)
	}
	if err := sh.ShowActivity(ctx, adapter.Activity{Status: adapter.StatusIdle}); err != nil {
		t.Fatal(err)
	}
	waitFor(t, "the thinking bubble finished", func() bool {
		seen := fake.Messages(c.bot, c.conv)
		return len(seen) == 1 && seen[0].Finished && seen[0].Text == "<think></think>"
	})
	if _, err := c.tg.Send(ctx, adapter.Message{Text: "Hi there.", Final: true, IdempotencyKey: "ch:late"}); err != nil {
		t.Fatal(err)
	}
	seen := fake.Messages(c.bot, c.conv)
	if len(seen) != 2 || seen[1].Kind != "markdown" || seen[1].Text != "Hi there." || seen[0].Text != "<think></think>" {
		t.Fatalf("the person sees %+v, want the finished thinking bubble, then the answer as a markdown message", seen)
	}
}

// Thinking shown again before the grace ends keeps the bubble open for the answer.
func TestWeCom_ThinkingAgainKeepsTheBubbleOpen(t *testing.T) {
	fake := newFake(t)
	c := newConversation(t, fake, nil)
	sh, _ := adapter.ShowerOf(c.tg)
	c.say(t, "hello")
	ctx := ctxT(t)
	for _, st := range []adapter.Status{adapter.StatusThinking, adapter.StatusIdle, adapter.StatusThinking} {
		if err := sh.ShowActivity(ctx, adapter.Activity{Status: st}); err != nil {
			t.Fatal(err)
		}
	}
	time.Sleep(2 * fast.ThinkGrace)
	if seen := fake.Messages(c.bot, c.conv); len(seen) != 1 || seen[0].Finished {
		t.Fatalf("the person sees %+v, want the thinking bubble open", seen)
	}
	if _, err := c.tg.Send(ctx, adapter.Message{Text: "Hi there.", Final: true, IdempotencyKey: "ch:m"}); err != nil {
		t.Fatal(err)
	}
	if seen := fake.Messages(c.bot, c.conv); len(seen) != 1 || !seen[0].Finished || seen[0].Text != "Hi there." {
		t.Fatalf("the person sees %+v, want the bubble finished with the answer", seen)
	}
}

// Nothing to reply to (the person has not written since), or streaming "none": no thinking
// bubble.
func TestWeCom_NoThinkingBubbleWithoutAReply(t *testing.T) {
	fake := newFake(t)
	c := newConversation(t, fake, nil)
	sh, _ := adapter.ShowerOf(c.tg)
	if err := sh.ShowActivity(ctxT(t), adapter.Activity{Status: adapter.StatusThinking}); err != nil {
		t.Fatal(err)
	}
	if seen := fake.Messages(c.bot, c.conv); len(seen) != 0 {
		t.Fatalf("the person sees %+v, want nothing", seen)
	}
	n := newConversation(t, fake, map[string]any{"streaming": "none"})
	if _, ok := adapter.ShowerOf(n.tg); ok || n.tg.Capabilities().Activity != adapter.ActivityNone {
		t.Fatalf("streaming none: activity %q, want none", n.tg.Capabilities().Activity)
	}
}
