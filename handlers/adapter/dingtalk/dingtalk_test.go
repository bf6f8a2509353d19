package dingtalk_test

import (
	"context"
	"encoding/json"
	"errors"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/ximd/ximd/handlers/adapter"
	"github.com/ximd/ximd/handlers/adapter/adaptertest"
	"github.com/ximd/ximd/handlers/adapter/dingtalk"
	"github.com/ximd/ximd/handlers/adapter/dingtalk/dingtalktest"
	"github.com/ximd/ximd/profile"
)

func ctx10(t *testing.T) context.Context {
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	t.Cleanup(cancel)
	return ctx
}

func eventually(t *testing.T, what string, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(10 * time.Second)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("not within 10s: %s", what)
		}
		time.Sleep(10 * time.Millisecond)
	}
}

func codeOf(err error) string {
	var pe *profile.Error
	if errors.As(err, &pe) {
		return pe.Code
	}
	return ""
}

// streamingGroup is a group of a fake app and a target that streams cards into it (1,000 updates
// a second: no test waits on the budget).
func streamingGroup(t *testing.T) (*dingtalktest.Server, string, adapter.Target, adapter.Editor) {
	fake := dingtalktest.New()
	t.Cleanup(fake.Close)
	app, cid := fake.AddApp(), fake.AddGroup()
	tg, err := dingtalk.New(dingtalk.Options{}).Open(config(t, fake, app, cid, "", map[string]any{"card_updates_per_second": 1000}))
	if err != nil {
		t.Fatal(err)
	}
	ed, ok := adapter.EditorOf(tg)
	if !ok {
		t.Fatal("streaming card is not edit streaming")
	}
	return fake, cid, tg, ed
}

// A streamed answer is one card: created PROCESSING, INPUTING, streamed with the whole text and
// a new guid each call, finalized, FINISHED with the final text.
func TestDingTalk_CardStreamsThroughItsStatuses(t *testing.T) {
	fake, cid, tg, ed := streamingGroup(t)
	ctx, key := ctx10(t), "ch:m1"
	id, err := tg.Send(ctx, adapter.Message{Text: "Once", IdempotencyKey: key})
	if err != nil || id != dingtalk.OutTrackID(key, 0) {
		t.Fatalf("Send: %q %v", id, err)
	}
	for _, text := range []string{"Once upon", "Once upon a time"} {
		time.Sleep(5 * time.Millisecond) // the app's budget: 1000 a second
		if err := ed.Edit(ctx, id, adapter.Message{Text: text, IdempotencyKey: key}); err != nil {
			t.Fatal(err)
		}
		if c := fake.Cards(dingtalktest.GroupSpace(cid))[0]; c.Text() != text || c.Status() != "2" {
			t.Fatalf("while streaming the card shows %q status %s", c.Text(), c.Status())
		}
	}
	if err := ed.Edit(ctx, id, adapter.Message{Text: "Once upon a time, **the end**.", Final: true, IdempotencyKey: key}); err != nil {
		t.Fatal(err)
	}
	cards := fake.Cards(dingtalktest.GroupSpace(cid))
	if len(cards) != 1 {
		t.Fatalf("%d cards", len(cards))
	}
	c := cards[0]
	if !slices.Equal(c.Statuses, []string{"1", "2", "3"}) || !c.Finalized || c.Text() != "Once upon a time, **the end**." {
		t.Fatalf("card %+v", c)
	}
	if c.Streams != 3 || len(slices.Compact(slices.Sorted(slices.Values(c.GUIDs)))) != 3 {
		t.Fatalf("streaming calls %d guids %q, want 3 with a new guid each", c.Streams, c.GUIDs)
	}
}

// A streamed answer past a card's 3,000 characters rolls over into the next card, as the final
// will split it: the full card FINISHED with its part, only the card being written INPUTING;
// the final leaves every card FINISHED with the final's parts.
func TestDingTalk_StreamedPreviewRollsOverIntoTheNextCard(t *testing.T) {
	fake, cid, tg, ed := streamingGroup(t)
	ctx, key := ctx10(t), "ch:roll"
	para := strings.Repeat("长", 1200) // 1,200 characters a paragraph: a card holds two
	text := para
	id, err := tg.Send(ctx, adapter.Message{Text: text, IdempotencyKey: key})
	if err != nil {
		t.Fatal(err)
	}
	for range 3 {
		text += "\n\n" + para
		time.Sleep(2 * time.Millisecond) // the app's budget: 1000 a second
		if err := ed.Edit(ctx, id, adapter.Message{Text: text, IdempotencyKey: key}); err != nil {
			t.Fatal(err)
		}
	}
	cards := fake.Cards(dingtalktest.GroupSpace(cid))
	if len(cards) != 2 || cards[0].Status() != "3" || cards[0].Text() != para+"\n\n"+para ||
		cards[1].Status() != "2" || cards[1].Text() != para+"\n\n"+para {
		t.Fatalf("while streaming 4,800 characters: %d cards %+v, want the first FINISHED with two paragraphs, the second INPUTING with two", len(cards), cards)
	}
	final := text + "\n\nThe end."
	if err := ed.Edit(ctx, id, adapter.Message{Text: final, Final: true, IdempotencyKey: key}); err != nil {
		t.Fatal(err)
	}
	cards = fake.Cards(dingtalktest.GroupSpace(cid))
	var shown []string
	for _, c := range cards {
		if c.Status() != "3" {
			t.Fatalf("card %s left %s", c.OutTrackID, c.Status())
		}
		shown = append(shown, c.Text())
	}
	if got := strings.Join(shown, "\n\n"); got != final || len(cards) != 2 {
		t.Fatalf("%d cards showing %d characters, want the final's %d in the same 2", len(cards), len([]rune(got)), len([]rune(final)))
	}
}

// A streamed card whose final DingTalk refuses for good ends FAILED (edge-api §7.2.6: "a failure
// after the card exists"), never left INPUTING; a refusal that is a rate limit leaves it for
// the retry.
func TestDingTalk_FinalRefusedForGoodLeavesTheCardFailed(t *testing.T) {
	fake, cid, tg, ed := streamingGroup(t)
	ctx := ctx10(t)
	status := func(key string) []string {
		for _, c := range fake.Cards(dingtalktest.GroupSpace(cid)) {
			if c.OutTrackID == dingtalk.OutTrackID(key, 0) {
				return c.Statuses
			}
		}
		return nil
	}
	id, err := tg.Send(ctx, adapter.Message{Text: "Thinking", IdempotencyKey: "ch:limited"})
	if err != nil {
		t.Fatal(err)
	}
	fake.FailNext("/v1.0/card/instances", 1, 403, "Forbidden.AccessDenied.QpsLimitForApi")
	if err := ed.Edit(ctx, id, adapter.Message{Text: "done", Final: true, IdempotencyKey: "ch:limited"}); codeOf(err) != profile.CodeTargetRateLimited {
		t.Fatalf("rate-limited final: %v", err)
	}
	if got := status("ch:limited"); !slices.Equal(got, []string{"1", "2"}) {
		t.Fatalf("a rate-limited final's card went %v, want it INPUTING for the retry", got)
	}

	id, err = tg.Send(ctx, adapter.Message{Text: "Thinking", IdempotencyKey: "ch:refused"})
	if err != nil {
		t.Fatal(err)
	}
	fake.FailNext("/v1.0/card/instances", 1, 400, "invalidParameter")
	if err := ed.Edit(ctx, id, adapter.Message{Text: "done", Final: true, IdempotencyKey: "ch:refused"}); codeOf(err) != profile.CodeTargetDeliveryFailed {
		t.Fatalf("refused final: %v", err)
	}
	if got := status("ch:refused"); !slices.Equal(got, []string{"1", "2", "5"}) {
		t.Fatalf("a refused final's card went %v, want PROCESSING, INPUTING, FAILED", got)
	}
}

// A direct final is a card created FINISHED; a long one consecutive cards within the limit.
func TestDingTalk_DirectFinalIsAFinishedCard(t *testing.T) {
	fake := dingtalktest.New()
	t.Cleanup(fake.Close)
	app, person := fake.AddApp(), fake.AddUser("Ann")
	tg, _ := dingtalk.New(dingtalk.Options{}).Open(config(t, fake, app, "", person.StaffID, map[string]any{"streaming": "none"}))
	text := "| a | b |\n|---|---|\n| 1 | 2 |\n\n" + strings.Repeat("第一段文字。", 700)
	if _, err := tg.Send(ctx10(t), adapter.Message{Text: text, Final: true, IdempotencyKey: "ch:long"}); err != nil {
		t.Fatal(err)
	}
	cards := fake.Cards(dingtalktest.DirectSpace(person.StaffID))
	if len(cards) < 2 {
		t.Fatalf("%d cards, want consecutive cards", len(cards))
	}
	for _, c := range cards {
		if !slices.Equal(c.Statuses, []string{"3"}) || len([]rune(c.Text())) > dingtalk.MaxTextLength {
			t.Fatalf("card %s statuses %v, %d characters", c.OutTrackID, c.Statuses, len([]rune(c.Text())))
		}
	}
	if !strings.HasPrefix(cards[0].Text(), "| a | b |") {
		t.Fatalf("the card lost its table: %q", cards[0].Text()[:40])
	}
}

// In doubt: a crash left the card INPUTING; the final sent again by another process brings that
// card to FINISHED, no second card. A final whose outcome was lost is not shown twice.
func TestDingTalk_InDoubtSettledByOutTrackID(t *testing.T) {
	fake := dingtalktest.New()
	t.Cleanup(fake.Close)
	app, person := fake.AddApp(), fake.AddUser("Bo")
	cfg := config(t, fake, app, "", person.StaffID, nil)
	before, _ := dingtalk.New(dingtalk.Options{}).Open(cfg)
	if tc := before.Capabilities(); tc.InDoubtRule() != adapter.InDoubtDedupe || !tc.ResendSafe() {
		t.Fatalf("capabilities %+v", tc)
	}
	if _, err := before.Send(ctx10(t), adapter.Message{Text: "half an ans", IdempotencyKey: "ch:doubt"}); err != nil {
		t.Fatal(err)
	}
	after, _ := dingtalk.New(dingtalk.Options{}).Open(cfg) // a new process
	for range 2 {
		if _, err := after.Send(ctx10(t), adapter.Message{Text: "the whole answer", Final: true, IdempotencyKey: "ch:doubt"}); err != nil {
			t.Fatal(err)
		}
	}
	cards := fake.Cards(dingtalktest.DirectSpace(person.StaffID))
	if len(cards) != 1 || cards[0].Status() != "3" || cards[0].Text() != "the whole answer" {
		t.Fatalf("cards %+v", cards)
	}
}

// DingTalk's QPS refusal is a rate limit of a second: the app's next card update waits it out
// (no call to DingTalk before), and the final still ends FINISHED.
func TestDingTalk_QPSStormHonoured(t *testing.T) {
	fake := dingtalktest.New()
	t.Cleanup(fake.Close)
	app, person := fake.AddApp(), fake.AddUser("Cy")
	fake.SetCardQPS(3)
	tg, _ := dingtalk.New(dingtalk.Options{}).Open(config(t, fake, app, "", person.StaffID, map[string]any{"card_updates_per_second": 1000}))
	ed, _ := adapter.EditorOf(tg)
	ctx := ctx10(t)
	id, err := tg.Send(ctx, adapter.Message{Text: "storm", IdempotencyKey: "ch:storm"})
	if err != nil {
		t.Fatal(err)
	}
	limited := 0
	for i := range 40 {
		time.Sleep(5 * time.Millisecond) // the app's budget: 1000 a second
		err := ed.Edit(ctx, id, adapter.Message{Text: "storm " + strings.Repeat("!", i), IdempotencyKey: "ch:storm"})
		if after, ok := adapter.RetryAfterOf(err); ok {
			if codeOf(err) != profile.CodeTargetRateLimited || after > time.Second {
				t.Fatalf("edit %d: %v", i, err)
			}
			limited++
		} else if err != nil {
			t.Fatalf("edit %d: %v", i, err)
		}
	}
	var final error
	eventually(t, "the final through", func() bool {
		final = ed.Edit(ctx, id, adapter.Message{Text: "calm", Final: true, IdempotencyKey: "ch:storm"})
		_, wait := adapter.RetryAfterOf(final)
		if wait {
			time.Sleep(100 * time.Millisecond)
		}
		return !wait
	})
	if final != nil || limited == 0 {
		t.Fatalf("final %v, %d edits limited", final, limited)
	}
	var refused []time.Time
	var after []time.Time
	for _, c := range fake.Calls() {
		if c.Path != "/v1.0/card/streaming" {
			continue
		}
		if c.Status == 403 {
			refused = append(refused, c.At)
		} else if len(refused) > 0 {
			after = append(after, c.At)
		}
	}
	if len(refused) != 1 {
		t.Fatalf("DingTalk refused %d calls, want 1: every later one waited the pause", len(refused))
	}
	if len(after) == 0 || after[0].Sub(refused[0]) < 900*time.Millisecond {
		t.Fatalf("a card update %v after DingTalk's QPS refusal", after)
	}
	if c := fake.Cards(dingtalktest.DirectSpace(person.StaffID))[0]; c.Status() != "3" || c.Text() != "calm" {
		t.Fatalf("card %+v", c)
	}
}

// The access token is fetched again after InvalidAuthentication; a wrong secret is refused at
// the PUT (target_config_invalid) and a working one is not.
func TestDingTalk_TokenAndCredentials(t *testing.T) {
	fake := dingtalktest.New()
	t.Cleanup(fake.Close)
	app, person := fake.AddApp(), fake.AddUser("Di")
	a := dingtalk.New(dingtalk.Options{})
	cfg := config(t, fake, app, "", person.StaffID, nil)
	tg, _ := a.Open(cfg)
	if _, err := tg.Send(ctx10(t), adapter.Message{Text: "one", Final: true, IdempotencyKey: "k1"}); err != nil {
		t.Fatal(err)
	}
	fake.ExpireTokens()
	if _, err := tg.Send(ctx10(t), adapter.Message{Text: "two", Final: true, IdempotencyKey: "k2"}); err != nil {
		t.Fatalf("after the token expired: %v", err)
	}
	if err := a.Probe(ctx10(t), adapter.Channel{ID: "c", Target: adapter.Binding{Adapter: "dingtalk", Config: cfg}}); err != nil {
		t.Fatalf("Probe: %v", err)
	}
	bad := config(t, fake, dingtalktest.App{ClientID: app.ClientID, ClientSecret: "wrong"}, "", person.StaffID, nil)
	err := a.Probe(ctx10(t), adapter.Channel{ID: "c", Target: adapter.Binding{Adapter: "dingtalk", Config: bad}})
	if codeOf(err) != profile.CodeTargetConfigInvalid || strings.Contains(err.Error(), "wrong") {
		t.Fatalf("Probe with a wrong secret: %v", err)
	}
	badTarget, _ := a.Open(bad)
	if _, err := badTarget.Send(ctx10(t), adapter.Message{Text: "x", Final: true, IdempotencyKey: "k3"}); codeOf(err) != profile.CodeTargetAuthFailed {
		t.Fatalf("Send with a wrong secret: %v", err)
	}
}

// Ack codes: 5xx target_unavailable, another 4xx target_delivery_failed.
func TestDingTalk_ErrorsMapped(t *testing.T) {
	fake := dingtalktest.New()
	t.Cleanup(fake.Close)
	app, person := fake.AddApp(), fake.AddUser("Ed")
	tg, _ := dingtalk.New(dingtalk.Options{}).Open(config(t, fake, app, "", person.StaffID, nil))
	fake.FailNext("/v1.0/card/instances", 1, 503, "ServiceUnavailable")
	if _, err := tg.Send(ctx10(t), adapter.Message{Text: "x", Final: true, IdempotencyKey: "e1"}); codeOf(err) != profile.CodeTargetUnavailable {
		t.Fatalf("5xx: %v", err)
	}
	fake.FailNext("/v1.0/card/instances/createAndDeliver", 1, 400, "bot.stopped")
	if _, err := tg.Send(ctx10(t), adapter.Message{Text: "x", Final: true, IdempotencyKey: "e2"}); codeOf(err) != profile.CodeTargetDeliveryFailed {
		t.Fatalf("4xx: %v", err)
	}
}

func TestDingTalk_ConfigHasNoSecretInPublic(t *testing.T) {
	a := dingtalk.New(dingtalk.Options{})
	pub, err := a.Public(json.RawMessage(`{"client_id":"ding1","client_secret":"topsecret","user_id":"u1"}`))
	if err != nil || strings.Contains(string(pub), "topsecret") || !strings.Contains(string(pub), `"streaming":"card"`) {
		t.Fatalf("public %s %v", pub, err)
	}
	for _, bad := range []string{`{"client_id":"ding1","client_secret":"s"}`, `{"client_id":"ding1","user_id":"u"}`,
		`{"client_id":"ding1","client_secret":"s","user_id":"u","conversation_id":"c"}`, `{"client_id":"ding1","client_secret":"s","user_id":"u","streaming":"edit"}`} {
		if _, err := a.Open(json.RawMessage(bad)); codeOf(err) != profile.CodeInvalidDescriptor || strings.Contains(err.Error(), `"s"`) {
			t.Fatalf("%s: %v", bad, err)
		}
	}
}

// Stream mode: a ping is echoed with its opaque; a disconnect is answered by a new connection
// (nothing lost); a msgId pushed again with a new messageId is one message; a group's channel
// takes its @-messages, text without the mention.
func TestDingTalk_StreamMode(t *testing.T) {
	fake := dingtalktest.New()
	t.Cleanup(fake.Close)
	app, person, cid := fake.AddApp(), fake.AddUser("Fay"), fake.AddGroup()
	files := adaptertest.NewFiles()
	a := dingtalk.New(dingtalk.Options{Common: adapter.Common{Files: files}})
	ch := adapter.Channel{ID: "grp", Target: adapter.Binding{Adapter: "dingtalk", Config: config(t, fake, app, cid, "", nil)}, OpenedAt: time.Now().UnixMilli()}
	feed := adaptertest.NewFeed(files, ch)
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- a.Poll(ctx, feed) }()
	t.Cleanup(func() { cancel(); <-done })
	in := feed.InboxOf("grp")
	eventually(t, "connected", func() bool { return fake.Connected(app) })
	if !fake.Ping(app, "opaque-42") {
		t.Fatal("ping not sent")
	}
	eventually(t, "ping echoed", func() bool { return slices.Contains(fake.Pongs(app), `{"opaque":"opaque-42"}`) })
	msg := fake.Post(app, person, cid, "what is new?", true)
	eventually(t, "the message in", func() bool { return len(in.Messages()) == 1 })
	if m := in.Messages()[0]; m.Text != "what is new?" || m.MessageID != dingtalk.MessageIDOf(msg) {
		t.Fatalf("message %+v", m)
	}
	fake.Redeliver(app, msg)
	eventually(t, "the redelivery acknowledged", func() bool { return fake.Unacked(app) == 0 && in.Redelivered() >= 1 })
	fake.Disconnect(app, 50*time.Millisecond)
	time.Sleep(100 * time.Millisecond) // the old connection gone: a message now waits for the new one
	fake.Post(app, person, cid, "after the disconnect", true)
	eventually(t, "the message after the disconnect in", func() bool { return len(in.Messages()) == 2 })
	if got := in.Messages(); got[1].Text != "after the disconnect" {
		t.Fatalf("messages %+v", got)
	}
}
