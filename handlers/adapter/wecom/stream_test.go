package wecom_test

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/ximd/ximd/handlers/adapter"
	"github.com/ximd/ximd/handlers/adapter/adaptertest"
	"github.com/ximd/ximd/handlers/adapter/wecom"
	"github.com/ximd/ximd/handlers/adapter/wecom/wecomtest"
	"github.com/ximd/ximd/profile"
)

// conversation is a person's single chat with a robot whose callbacks a poll loop reads.
type conversation struct {
	fake *wecomtest.Server
	bot  wecomtest.Bot
	conv wecomtest.Conv
	user string
	a    *wecom.Adapter
	tg   adapter.Target
	in   *adaptertest.Inbox
}

func newConversation(t *testing.T, fake *wecomtest.Server, extra map[string]any) *conversation {
	t.Helper()
	return newConversationWith(t, fake, nil, extra)
}

// newConversationWith is newConversation with the adapter's file source.
func newConversationWith(t *testing.T, fake *wecomtest.Server, files adapter.FileSource, extra map[string]any) *conversation {
	t.Helper()
	bot := fake.AddBot("Helper")
	user := fmt.Sprintf("person%d", people.Add(1))
	c := &conversation{fake: fake, bot: bot, conv: wecomtest.Single(user), user: user}
	c.a = wecom.New(wecom.Options{Common: adapter.Common{Logger: testLogger(t), Files: files}, Timing: fast})
	t.Cleanup(func() { _ = c.a.Close() })
	cfg := map[string]any{"user_id": user}
	for k, v := range extra {
		cfg[k] = v
	}
	raw := config(t, fake, bot, cfg)
	var err error
	if c.tg, err = c.a.Open(raw); err != nil {
		t.Fatal(err)
	}
	ch := adapter.Channel{ID: "wc_" + user, Target: adapter.Binding{Adapter: wecom.Name, Config: raw}, OpenedAt: time.Now().UnixMilli()}
	feed := adaptertest.NewFeed(adaptertest.NewFiles(), ch)
	c.in = feed.InboxOf(ch.ID)
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() { defer close(done); _ = c.a.Poll(ctx, feed) }()
	t.Cleanup(func() { cancel(); <-done })
	return c
}

// newFake is a fake WeCom, closed when t ends.
func newFake(t *testing.T) *wecomtest.Server {
	fake := wecomtest.New()
	t.Cleanup(fake.Close)
	return fake
}

// streaming starts a streamed answer with its first preview; it returns the editor and the
// message's id.
func (c *conversation) streaming(t *testing.T, ctx context.Context, text, key string) (adapter.Editor, string) {
	t.Helper()
	ed, ok := adapter.EditorOf(c.tg)
	if !ok {
		t.Fatal("the target does not stream by editing")
	}
	id, err := c.tg.Send(ctx, adapter.Message{Text: text, IdempotencyKey: key})
	if err != nil {
		t.Fatal(err)
	}
	return ed, id
}

// say has the person write, and waits until the message is in.
func (c *conversation) say(t *testing.T, text string) {
	t.Helper()
	n := len(c.in.Messages())
	c.fake.Say(c.bot, c.conv, c.user, text, false)
	waitFor(t, "the person's message in", func() bool { return len(c.in.Messages()) > n })
}

func waitFor(t *testing.T, what string, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(10 * time.Second)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("not within 10s: %s", what)
		}
		time.Sleep(10 * time.Millisecond)
	}
}

func ctxT(t *testing.T) context.Context {
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	t.Cleanup(cancel)
	return ctx
}

// An answer to the person's message is one stream bubble replying to it: every frame the whole
// text, the last finish: true with the final text.
func TestWeCom_StreamedAnswerIsOneBubbleFinishedAtTheFinal(t *testing.T) {
	fake := newFake(t)
	c := newConversation(t, fake, nil)
	c.say(t, "what is the weather?")
	ctx := ctxT(t)
	ed, id := c.streaming(t, ctx, "It is", "ch:m1")
	if err := ed.Edit(ctx, id, adapter.Message{Text: "It is sunny", IdempotencyKey: "ch:m1"}); err != nil {
		t.Fatal(err)
	}
	if err := ed.Edit(ctx, id, adapter.Message{Text: "It is **sunny**.", Final: true, IdempotencyKey: "ch:m1"}); err != nil {
		t.Fatal(err)
	}
	seen := fake.Messages(c.bot, c.conv)
	if len(seen) != 1 || seen[0].Kind != "stream" || !seen[0].Finished || seen[0].Text != "It is **sunny**." || seen[0].Frames != 3 || seen[0].ReplyTo == "" {
		t.Fatalf("the person sees %+v, want one finished stream of 3 frames", seen)
	}
	// A second answer with no new message from the person is a proactive message.
	if _, err := c.tg.Send(ctx, adapter.Message{Text: "And tomorrow too.", Final: true, IdempotencyKey: "ch:m2"}); err != nil {
		t.Fatal(err)
	}
	if seen := fake.Messages(c.bot, c.conv); len(seen) != 2 || seen[1].Kind != "markdown" || seen[1].Text != "And tomorrow too." {
		t.Fatalf("the person sees %+v, want the second answer as a markdown message", seen)
	}
}

// A stream past its 6 minutes (846608) is finished by a proactive message with the final text.
func TestWeCom_StreamPastItsLifeEndsInAProactiveMessage(t *testing.T) {
	fake := newFake(t)
	fake.SetStreamLife(200 * time.Millisecond)
	c := newConversation(t, fake, nil)
	c.say(t, "a long task")
	ctx := ctxT(t)
	ed, id := c.streaming(t, ctx, "Working on it", "ch:long")
	time.Sleep(300 * time.Millisecond) // the fake's stream life passes
	if err := ed.Edit(ctx, id, adapter.Message{Text: "Working on it, step 2", IdempotencyKey: "ch:long"}); err != nil {
		t.Fatalf("a preview past the stream's life: %v, want it skipped", err)
	}
	if err := ed.Edit(ctx, id, adapter.Message{Text: "Done: all steps.", Final: true, IdempotencyKey: "ch:long"}); err != nil {
		t.Fatal(err)
	}
	seen := fake.Messages(c.bot, c.conv)
	if len(seen) != 2 || seen[0].Kind != "stream" || seen[0].Text != "Working on it" || seen[1].Kind != "markdown" || seen[1].Text != "Done: all steps." {
		t.Fatalf("the person sees %+v, want the stream then the final as a markdown message", seen)
	}
}

// A final over 20,480 bytes: the stream finishes with its first part, the rest follows as
// proactive messages, each within the limit.
func TestWeCom_LongFinalIsSplitWithinTheContentLimit(t *testing.T) {
	fake := newFake(t)
	c := newConversation(t, fake, nil)
	c.say(t, "tell me everything")
	var b strings.Builder
	for i := 0; b.Len() < 30000; i++ {
		fmt.Fprintf(&b, "Paragraph %d 说明了一些足够长的内容。\n\n", i)
	}
	text := strings.TrimSpace(b.String())
	if _, err := c.tg.Send(ctxT(t), adapter.Message{Text: text, Final: true, IdempotencyKey: "ch:big"}); err != nil {
		t.Fatal(err)
	}
	seen := fake.Messages(c.bot, c.conv)
	if len(seen) < 2 || seen[0].Kind != "stream" || !seen[0].Finished {
		t.Fatalf("the person sees %d messages, want a finished stream and more", len(seen))
	}
	var all []string
	for _, m := range seen {
		if len(m.Text) > wecom.MaxContentBytes {
			t.Fatalf("a part of %d bytes", len(m.Text))
		}
		all = append(all, m.Text)
	}
	if strings.Join(strings.Fields(strings.Join(all, " ")), " ") != strings.Join(strings.Fields(text), " ") {
		t.Fatal("the parts do not make up the text")
	}
}

// In doubt: after a restart, the final frame with the same stream id finishes the bubble shown,
// never a second one.
func TestWeCom_InDoubtStreamIsSettledByItsStreamID(t *testing.T) {
	fake := newFake(t)
	c := newConversation(t, fake, nil)
	c.say(t, "hello")
	ctx := ctxT(t)
	id, err := c.tg.Send(ctx, adapter.Message{Text: "Hel", IdempotencyKey: "ch:doubt"})
	if err != nil {
		t.Fatal(err)
	}
	// The final frame is applied, its answer lost: ambiguous.
	fake.DropAnswers("aibot_respond_msg", 1)
	ed, _ := adapter.EditorOf(c.tg)
	err = ed.Edit(ctx, id, adapter.Message{Text: "Hello.", Final: true, IdempotencyKey: "ch:doubt"})
	if !adapter.IsAmbiguous(err) {
		t.Fatalf("a lost answer: %v, want ambiguous", err)
	}
	// Another process settles it by editing the recorded message.
	b := wecom.New(wecom.Options{Timing: fast})
	t.Cleanup(func() { _ = b.Close() })
	tg, err := b.Open(config(t, fake, c.bot, map[string]any{"user_id": c.user}))
	if err != nil {
		t.Fatal(err)
	}
	if tg.Capabilities().InDoubtRule() != adapter.InDoubtEdit {
		t.Fatalf("in-doubt rule %s", tg.Capabilities().InDoubtRule())
	}
	ed2, _ := adapter.EditorOf(tg)
	if err := ed2.Edit(ctx, id, adapter.Message{Text: "Hello.", Final: true, IdempotencyKey: "ch:doubt"}); err != nil {
		t.Fatal(err)
	}
	if seen := fake.Messages(c.bot, c.conv); len(seen) != 1 || seen[0].Text != "Hello." || !seen[0].Finished {
		t.Fatalf("the person sees %+v, want one finished bubble", seen)
	}
}

// A wrong secret: the probe refuses the config (422 target_config_invalid at the PUT) as soon as
// WeCom refuses the subscribe, naming its errcode.
func TestWeCom_WrongSecretRefusedAtProbe(t *testing.T) {
	fake := newFake(t)
	bot := fake.AddBot("Helper")
	a := wecom.New(wecom.Options{Timing: wecom.Timing{Connect: 2 * time.Second, MaxBackoff: 100 * time.Millisecond}})
	t.Cleanup(func() { _ = a.Close() })
	raw := config(t, fake, bot, map[string]any{"user_id": "u1", "secret": "wrong"})
	start := time.Now()
	err := a.Probe(ctxT(t), adapter.Channel{ID: "c1", Target: adapter.Binding{Adapter: wecom.Name, Config: raw}})
	var pe *profile.Error
	if !errors.As(err, &pe) || pe.Code != profile.CodeTargetConfigInvalid || strings.Contains(pe.Message, "wrong") || !strings.Contains(pe.Message, "40001") {
		t.Fatalf("probe: %v, want target_config_invalid naming the errcode, without the secret", err)
	}
	if took := time.Since(start); took > time.Second {
		t.Fatalf("the refusal took %s, want it as soon as WeCom answers the subscribe (not the 2 s connect bound)", took)
	}
	good := config(t, fake, bot, map[string]any{"user_id": "u1"})
	if err := a.Probe(ctxT(t), adapter.Channel{ID: "c1", Target: adapter.Binding{Adapter: wecom.Name, Config: good}}); err != nil {
		t.Fatalf("probe with the right secret: %v", err)
	}
}

// A msgid WeCom calls back again is one user message.
func TestWeCom_RepeatedMsgidIsOneMessage(t *testing.T) {
	fake := newFake(t)
	c := newConversation(t, fake, nil)
	c.say(t, "once")
	msgs := c.in.Messages()
	fake.Again(c.bot, fake.LastMsgID(c.bot))
	waitFor(t, "the callback made again seen", func() bool { return c.in.Redelivered() >= 1 })
	if got := c.in.Messages(); len(got) != 1 || got[0].MessageID != msgs[0].MessageID {
		t.Fatalf("messages %+v", got)
	}
}

func nowMilli() int64 { return time.Now().UnixMilli() }

// poll runs a's Poll on feed until the returned stop.
func poll(t *testing.T, a *wecom.Adapter, feed adapter.Feed) func() {
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() { defer close(done); _ = a.Poll(ctx, feed) }()
	var stopped bool
	stop := func() {
		if !stopped {
			stopped = true
			cancel()
			<-done
		}
	}
	t.Cleanup(stop)
	return stop
}

// A dropped connection is subscribed again, and sends go on.
func TestWeCom_ReconnectsAfterADroppedConnection(t *testing.T) {
	fake := newFake(t)
	c := newConversation(t, fake, map[string]any{"streaming": "none"})
	c.say(t, "hello")
	fake.Kick(c.bot)
	waitFor(t, "subscribed again", func() bool { return fake.Subscribes(c.bot) >= 2 && fake.Connected(c.bot) })
	if _, err := c.tg.Send(ctxT(t), adapter.Message{Text: "still here", Final: true, IdempotencyKey: "ch:after"}); err != nil {
		t.Fatal(err)
	}
	if seen := fake.Messages(c.bot, c.conv); len(seen) != 1 || seen[0].Text != "still here" {
		t.Fatalf("the person sees %+v", seen)
	}
}

// A callback WeCom makes again while the thinking bubble shows changes nothing: the answer
// streams into that bubble, and a second answer to the message is a proactive message.
func TestWeCom_RepeatedCallbackKeepsTheReply(t *testing.T) {
	fake := newFake(t)
	c := newConversation(t, fake, nil)
	c.say(t, "what is the weather?")
	ctx := ctxT(t)
	sh, _ := adapter.ShowerOf(c.tg)
	if err := sh.ShowActivity(ctx, adapter.Activity{Status: adapter.StatusThinking}); err != nil {
		t.Fatal(err)
	}
	fake.Again(c.bot, fake.LastMsgID(c.bot))
	waitFor(t, "the callback made again seen", func() bool { return c.in.Redelivered() >= 1 })
	if _, err := c.tg.Send(ctx, adapter.Message{Text: "Sunny.", Final: true, IdempotencyKey: "ch:a1"}); err != nil {
		t.Fatal(err)
	}
	fake.Again(c.bot, fake.LastMsgID(c.bot))
	waitFor(t, "the second callback made again seen", func() bool { return c.in.Redelivered() >= 2 })
	if _, err := c.tg.Send(ctx, adapter.Message{Text: "And warm.", Final: true, IdempotencyKey: "ch:a2"}); err != nil {
		t.Fatal(err)
	}
	seen := fake.Messages(c.bot, c.conv)
	if len(seen) != 2 || seen[0].Kind != "stream" || !seen[0].Finished || seen[0].Text != "Sunny." || seen[1].Kind != "markdown" || seen[1].Text != "And warm." {
		t.Fatalf("the person sees %+v, want the thinking bubble finished with the answer, then the second answer proactive", seen)
	}
}

// A final with files and no text, replying to the person: no empty stream message; the thinking
// bubble shown is finished as it is and the file follows.
func TestWeCom_FilesOnlyFinalSendsNoEmptyBubble(t *testing.T) {
	fake := newFake(t)
	files := adaptertest.NewFiles()
	for _, thinking := range []bool{false, true} {
		c := newConversationWith(t, fake, files, nil)
		c.say(t, "the report, please")
		ctx := ctxT(t)
		if thinking {
			sh, _ := adapter.ShowerOf(c.tg)
			if err := sh.ShowActivity(ctx, adapter.Activity{Status: adapter.StatusThinking}); err != nil {
				t.Fatal(err)
			}
		}
		sf := files.Add("report.txt", "text/plain", "file", []byte("figures"))
		f := adapter.File{Type: sf.Type, FileRef: sf.FileRef, Filename: sf.Filename, MimeType: sf.MimeType, ByteSize: sf.ByteSize}
		if _, err := c.tg.Send(ctx, adapter.Message{Final: true, Files: []adapter.File{f}, IdempotencyKey: fmt.Sprintf("ch:f%v", thinking)}); err != nil {
			t.Fatal(err)
		}
		seen := fake.Messages(c.bot, c.conv)
		want := 1
		if thinking {
			want = 2
		}
		if len(seen) != want || seen[want-1].Kind != "file" || string(seen[want-1].Data) != "figures" {
			t.Fatalf("thinking %v: the person sees %+v, want only the file", thinking, seen)
		}
		if thinking && (seen[0].Kind != "stream" || !seen[0].Finished || seen[0].Text != "<think></think>") {
			t.Fatalf("the thinking bubble is %+v, want it finished as it was", seen[0])
		}
	}
}

// After WeCom refuses a stream's frame as expired (846608), its previews stop (none spends the
// conversation's budget) and its final goes proactive.
func TestWeCom_ExpiredStreamSendsNoMorePreviews(t *testing.T) {
	fake := newFake(t)
	fake.SetStreamLife(100 * time.Millisecond)
	c := newConversation(t, fake, nil)
	c.say(t, "a long task")
	ctx := ctxT(t)
	ed, id := c.streaming(t, ctx, "Step 1", "ch:exp")
	time.Sleep(200 * time.Millisecond) // the fake's stream life passes
	for i := 2; i <= 5; i++ {
		if err := ed.Edit(ctx, id, adapter.Message{Text: fmt.Sprintf("Step %d", i), IdempotencyKey: "ch:exp"}); err != nil {
			t.Fatal(err)
		}
	}
	if err := ed.Edit(ctx, id, adapter.Message{Text: "Done.", Final: true, IdempotencyKey: "ch:exp"}); err != nil {
		t.Fatal(err)
	}
	responds := 0
	for _, f := range fake.Frames() {
		if f.Cmd == "aibot_respond_msg" {
			responds++
		}
	}
	if responds != 2 {
		t.Fatalf("%d stream frames sent, want 2 (the first, and the one refused as expired)", responds)
	}
	if seen := fake.Messages(c.bot, c.conv); len(seen) != 2 || seen[1].Kind != "markdown" || seen[1].Text != "Done." {
		t.Fatalf("the person sees %+v, want the stream then the final proactive", seen)
	}
}

// Another process subscribing the robot takes its connection over: this process's calls are
// then target_unavailable, retryable and certain (never target_auth_failed, which would refuse
// the answer for good), until it subscribes again after Retake.
func TestWeCom_TakenOverConnectionRefusesCallsRetryably(t *testing.T) {
	fake := newFake(t)
	c := newConversation(t, fake, nil)
	c.say(t, "hello")
	other := wecom.New(wecom.Options{Common: adapter.Common{Logger: testLogger(t)}, Timing: fast})
	t.Cleanup(func() { _ = other.Close() })
	ch := adapter.Channel{ID: "wc_other", Target: adapter.Binding{Adapter: wecom.Name, Config: config(t, fake, c.bot, map[string]any{"user_id": c.user})}}
	stop := poll(t, other, adaptertest.NewFeed(adaptertest.NewFiles(), ch))
	waitFor(t, "the other process's subscribe", func() bool {
		n := 0
		for _, f := range fake.Frames() {
			if f.Cmd == "aibot_subscribe" {
				n++
			}
		}
		return n >= 2
	})
	_, err := c.tg.Send(ctxT(t), adapter.Message{Text: "answer", Final: true, IdempotencyKey: "ch:taken"})
	if pe := profile.AsError(err); err == nil || pe.Code != profile.CodeTargetUnavailable || !pe.Retryable || adapter.IsAmbiguous(err) {
		t.Fatalf("a send on the taken-over connection: %v, want target_unavailable, retryable, certain", err)
	}
	stop() // the other process lets go; this one subscribes again after Retake
	waitFor(t, "the send goes through again", func() bool {
		_, err := c.tg.Send(ctxT(t), adapter.Message{Text: "answer", Final: true, IdempotencyKey: "ch:taken"})
		return err == nil
	})
}

// A poll loop that ends because the robot moved to another worker (adapter.ErrPollMoved) goes on
// passing on what WeCom pushes to its connection until the other worker subscribes.
func TestWeCom_MovedPollPassesOnUntilTakenOver(t *testing.T) {
	fake := newFake(t)
	bot := fake.AddBot("Helper")
	a := wecom.New(wecom.Options{Common: adapter.Common{Logger: testLogger(t)}, Timing: fast})
	t.Cleanup(func() { _ = a.Close() })
	ch := adapter.Channel{ID: "wc_moved", Target: adapter.Binding{Adapter: wecom.Name, Config: config(t, fake, bot, map[string]any{"user_id": "mo"})}, OpenedAt: nowMilli()}
	feed := adaptertest.NewFeed(adaptertest.NewFiles(), ch)
	in := feed.InboxOf(ch.ID)
	ctx, cancel := context.WithCancelCause(context.Background())
	done := make(chan struct{})
	go func() { defer close(done); _ = a.Poll(ctx, feed) }()
	waitFor(t, "subscribed", func() bool { return fake.Connected(bot) })
	cancel(adapter.ErrPollMoved)
	fake.Say(bot, wecomtest.Single("mo"), "mo", "written during the hand-over", false)
	waitFor(t, "the message pushed after the loop ended passed on", func() bool { return len(in.Messages()) == 1 })
	select {
	case <-done:
		t.Fatal("the moved loop let go before another process subscribed")
	default:
	}
	other := wecom.New(wecom.Options{Common: adapter.Common{Logger: testLogger(t)}, Timing: fast})
	t.Cleanup(func() { _ = other.Close() })
	poll(t, other, adaptertest.NewFeed(adaptertest.NewFiles(), ch))
	select {
	case <-done:
	case <-time.After(2 * time.Second): // well within the 3 s hand-over bound
		t.Fatal("the moved loop did not end when the other process subscribed")
	}
}
