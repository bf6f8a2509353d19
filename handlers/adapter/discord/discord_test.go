package discord_test

import (
	"context"
	"errors"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/ximd/ximd/handlers/adapter"
	"github.com/ximd/ximd/handlers/adapter/adaptertest"
	"github.com/ximd/ximd/handlers/adapter/discord"
	"github.com/ximd/ximd/handlers/adapter/discord/discordtest"
	"github.com/ximd/ximd/profile"
)

// setup is a fake with a bot, a person and a guild channel of both, and a target bound to it.
func setup(t *testing.T, extra map[string]any) (*discordtest.Server, discordtest.User, discordtest.User, string, adapter.Target) {
	t.Helper()
	fake := discordtest.New()
	t.Cleanup(fake.Close)
	fake.SetLimits(unlimited)
	bot := fake.AddBot("tok", "bot")
	person := fake.AddUser("Ann")
	ch := fake.AddChannel("g1", bot, person)
	tg, err := discord.New(discord.Options{}).Open(config(t, fake, bot, ch, extra))
	if err != nil {
		t.Fatal(err)
	}
	return fake, bot, person, ch, tg
}

func ctx5(t *testing.T) context.Context {
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	t.Cleanup(cancel)
	return ctx
}

// The agent never pings: a mention in its text shows as text, on create and on every edit.
func TestDiscord_AllowedMentionsEmpty(t *testing.T) {
	fake, _, person, ch, tg := setup(t, nil)
	id, err := tg.Send(ctx5(t), adapter.Message{Text: "hi", IdempotencyKey: "k1"})
	if err != nil {
		t.Fatal(err)
	}
	if err := tg.(adapter.Editor).Edit(ctx5(t), id, adapter.Message{Text: "hi <@" + person.ID + "> @everyone", Final: true, IdempotencyKey: "k1"}); err != nil {
		t.Fatal(err)
	}
	ms := fake.Messages(ch)
	if len(ms) != 1 || len(ms[0].Mentions) != 0 || ms[0].Edits != 1 {
		t.Fatalf("messages %+v: want one, edited once, pinging nobody", ms)
	}
}

// A final sent again with its key (a crash before its id was recorded) within the nonce window
// is the message already made, edited to the final when it showed a streamed preview.
func TestDiscord_NonceSettlesAResend(t *testing.T) {
	fake, _, _, ch, tg := setup(t, nil)
	ctx := ctx5(t)
	first, err := tg.Send(ctx, adapter.Message{Text: "Hello, wor", IdempotencyKey: "ch:m1"})
	if err != nil {
		t.Fatal(err)
	}
	// A new process: the same key, nothing remembered.
	fresh, err := discord.New(discord.Options{}).Open(configOf(t, tg, fake, ch))
	if err != nil {
		t.Fatal(err)
	}
	again, err := fresh.Send(ctx, adapter.Message{Text: "Hello, world.", Final: true, IdempotencyKey: "ch:m1"})
	if err != nil {
		t.Fatal(err)
	}
	ms := fake.Messages(ch)
	if again != first || len(ms) != 1 || ms[0].Content != "Hello, world." {
		t.Fatalf("resend gave %s (first %s), channel shows %+v", again, first, ms)
	}
	for _, c := range fake.Calls() {
		if c.Method == http.MethodPost && strings.HasSuffix(c.Path, "/messages") && c.Status != 200 {
			t.Fatalf("a create answered %d", c.Status)
		}
	}
}

func configOf(t *testing.T, _ adapter.Target, fake *discordtest.Server, ch string) []byte {
	return config(t, fake, discordtest.User{Token: "tok"}, ch, nil)
}

// A 5,000-character final is three messages, each within 2,000 characters, the first replying.
func TestDiscord_LongFinalInThreeMessages(t *testing.T) {
	fake, _, person, ch, tg := setup(t, map[string]any{"streaming": "none"})
	q := fake.Post(ch, person, "question")
	text := strings.TrimSpace(strings.Repeat("A sentence of the answer, long enough. ", 128)) // ~5,000
	if _, err := tg.Send(ctx5(t), adapter.Message{Text: text, Final: true, IdempotencyKey: "k", ReplyTo: q}); err != nil {
		t.Fatal(err)
	}
	var got []discordtest.Message
	for _, m := range fake.Messages(ch) {
		if m.Author.Bot {
			got = append(got, m)
		}
	}
	if len(got) != 3 || got[0].ReplyTo != q || got[1].ReplyTo != "" {
		t.Fatalf("%d messages, reply_to %q", len(got), got[0].ReplyTo)
	}
	for _, m := range got {
		if n := len([]rune(m.Content)); n > 2000 {
			t.Fatalf("a message of %d characters", n)
		}
	}
}

// A streamed preview past 2,000 characters rolls over into a second message; the final edits
// both in place.
func TestDiscord_PreviewRollsOver(t *testing.T) {
	fake, _, _, ch, tg := setup(t, nil)
	ctx := ctx5(t)
	id, err := tg.Send(ctx, adapter.Message{Text: "Start.", IdempotencyKey: "k"})
	if err != nil {
		t.Fatal(err)
	}
	long := strings.TrimSpace(strings.Repeat("Words of a long streamed answer. ", 90)) // ~2,900
	wait(t, func() error {
		return tg.(adapter.Editor).Edit(ctx, id, adapter.Message{Text: long, IdempotencyKey: "k"})
	})
	if n := len(fake.Messages(ch)); n != 2 {
		t.Fatalf("%d messages after the rollover, want 2", n)
	}
	wait(t, func() error {
		return tg.(adapter.Editor).Edit(ctx, id, adapter.Message{Text: long + " The end.", Final: true, IdempotencyKey: "k"})
	})
	ms := fake.Messages(ch)
	if len(ms) != 2 || ms[0].ID != id || !strings.HasSuffix(ms[1].Content, "The end.") {
		t.Fatalf("after the final: %+v", ms)
	}
}

// wait makes a display call as the stage does: a RetryAfterError is waited out.
func wait(t *testing.T, call func() error) {
	t.Helper()
	for i := 0; ; i++ {
		err := call()
		d, ok := adapter.RetryAfterOf(err)
		if err == nil || !ok || i > 20 {
			if err != nil {
				t.Fatal(err)
			}
			return
		}
		time.Sleep(d)
	}
}

// A 429 is target_rate_limited with Discord's retry_after, and the channel makes no call before
// it has passed.
func TestDiscord_RetryAfterHonoured(t *testing.T) {
	fake, _, _, _, tg := setup(t, map[string]any{"streaming": "none"})
	fake.FailNext("messages", 1, http.StatusTooManyRequests)
	_, err := tg.Send(ctx5(t), adapter.Message{Text: "x", Final: true, IdempotencyKey: "k"})
	after, ok := adapter.RetryAfterOf(err)
	if pe := profile.AsError(err); !ok || after <= 0 || pe.Code != profile.CodeTargetRateLimited {
		t.Fatalf("err %v, want target_rate_limited with a retry time", err)
	}
	calls := len(fake.Calls())
	if _, err := tg.Send(ctx5(t), adapter.Message{Text: "x", Final: true, IdempotencyKey: "k"}); err == nil {
		t.Fatal("sent within the retry time")
	}
	if n := len(fake.Calls()); n != calls {
		t.Fatalf("%d calls made within the retry time", n-calls)
	}
	time.Sleep(after)
	if _, err := tg.Send(ctx5(t), adapter.Message{Text: "x", Final: true, IdempotencyKey: "k"}); err != nil {
		t.Fatalf("after the retry time: %v", err)
	}
}

// A token Discord refuses is target_auth_failed, and stops its calls: REST and gateway.
func TestDiscord_RefusedTokenStops(t *testing.T) {
	fake := discordtest.New()
	t.Cleanup(fake.Close)
	person := fake.AddUser("Ann")
	bot := fake.AddBot("good", "bot")
	ch := fake.AddChannel("g1", bot, person)
	a := discord.New(discord.Options{})
	bad := config(t, fake, discordtest.User{Token: "revoked"}, ch, nil)
	tg, err := a.Open(bad)
	if err != nil {
		t.Fatal(err)
	}
	_, err = tg.Send(ctx5(t), adapter.Message{Text: "x", Final: true, IdempotencyKey: "k"})
	if pe := profile.AsError(err); pe.Code != profile.CodeTargetAuthFailed {
		t.Fatalf("err %v, want target_auth_failed", err)
	}
	calls := len(fake.Calls())
	feed := adaptertest.NewFeed(adaptertest.NewFiles(), adapter.Channel{ID: "c", Target: adapter.Binding{Adapter: "discord", Config: bad}, OpenedAt: time.Now().UnixMilli()})
	for range 3 {
		if err := a.Poll(ctx5(t), feed); err == nil || profile.AsError(err).Code != profile.CodeTargetAuthFailed {
			t.Fatalf("Poll: %v, want target_auth_failed at once", err)
		}
	}
	if n := len(fake.Calls()); n != calls {
		t.Fatalf("%d calls after the refusal", n-calls)
	}
	// The probe of a PUT asks again, and says why.
	err = a.Probe(ctx5(t), adapter.Channel{ID: "c", Target: adapter.Binding{Adapter: "discord", Config: bad}})
	if pe := profile.AsError(err); pe.Code != profile.CodeTargetConfigInvalid {
		t.Fatalf("Probe: %v, want target_config_invalid", err)
	}
}

// The gateway refusing a token (close code 4004: the library would reconnect forever) stops it.
func TestDiscord_Gateway4004Stops(t *testing.T) {
	fake := discordtest.New()
	t.Cleanup(fake.Close)
	bot := fake.AddBot("good", "bot")
	person := fake.AddUser("Ann")
	ch := fake.AddChannel("g1", bot, person)
	gw := strings.Replace(fake.URL(), "http", "ws", 1)
	gw = strings.TrimSuffix(gw, "/api/v10") + "/gateway"
	cfg := config(t, fake, bot, ch, map[string]any{"gateway_url": gw})
	a := discord.New(discord.Options{})
	fake.RevokeGateway("good")
	feed := adaptertest.NewFeed(adaptertest.NewFiles(), adapter.Channel{ID: "c", Target: adapter.Binding{Adapter: "discord", Config: cfg}, OpenedAt: time.Now().UnixMilli()})
	err := a.Poll(ctx5(t), feed)
	if pe := profile.AsError(err); pe.Code != profile.CodeTargetAuthFailed {
		t.Fatalf("Poll: %v, want target_auth_failed", err)
	}
	if err := a.Poll(ctx5(t), feed); err == nil || fake.GatewayDials() != 1 {
		t.Fatalf("Poll again: %v after %d dials, want no second dial", err, fake.GatewayDials())
	}
}

// Probe: an unknown channel and a channel the bot cannot see are 422 with the reason.
func TestDiscord_Probe(t *testing.T) {
	fake := discordtest.New()
	t.Cleanup(fake.Close)
	bot := fake.AddBot("tok", "bot")
	person := fake.AddUser("Ann")
	hidden := fake.AddChannel("g1", person)
	a := discord.New(discord.Options{})
	for name, tc := range map[string]struct{ ch, want string }{
		"unknown": {ch: "12345", want: "10003"},
		"hidden":  {ch: hidden, want: "50001"},
	} {
		t.Run(name, func(t *testing.T) {
			err := a.Probe(ctx5(t), adapter.Channel{ID: "c", Target: adapter.Binding{Adapter: "discord", Config: config(t, fake, bot, tc.ch, nil)}})
			var pe *profile.Error
			if !errors.As(err, &pe) || pe.Code != profile.CodeTargetConfigInvalid || !strings.Contains(pe.Message, tc.want) {
				t.Fatalf("Probe: %v, want target_config_invalid naming %s", err, tc.want)
			}
		})
	}
}
