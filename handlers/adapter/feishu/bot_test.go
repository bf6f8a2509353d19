package feishu_test

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"net/http/httptest"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/ximd/ximd/handlers/adapter"
	"github.com/ximd/ximd/handlers/adapter/adaptertest"
	"github.com/ximd/ximd/handlers/adapter/feishu"
	"github.com/ximd/ximd/handlers/adapter/feishu/feishutest"
	"github.com/ximd/ximd/profile"
)

// botWorld is an app of the fake served as a bot by the adapter through a local events route.
type botWorld struct {
	fake *feishutest.Server
	a    *feishu.Adapter
	app  feishutest.App
	bot  adapter.Bot
	feed *adaptertest.Feed
}

const botToken, botKey = "bot-verification-token", "bot-encrypt-key"

// newBotWorld puts a bot with policy on a new app and points the app's events at it.
func newBotWorld(t *testing.T, policy string, openedAt time.Time) *botWorld {
	t.Helper()
	fake := feishutest.New()
	t.Cleanup(fake.Close)
	fake.SetLimits(unlimited)
	files := adaptertest.NewFiles()
	w := &botWorld{fake: fake, a: feishu.New(feishu.Options{Common: adapter.Common{Files: files}}),
		app: fake.AddApp("cli_botworld", "botworld-secret", "ximd bot"), feed: adaptertest.NewFeed(files)}
	p, err := adapter.ParsePolicy(json.RawMessage(policy))
	if err != nil {
		t.Fatal(err)
	}
	w.bot = adapter.Bot{ID: "fsbot", Target: adapter.Binding{Adapter: feishu.Name, Config: w.config(nil)},
		Conversations: p, OpenedAt: openedAt.UnixMilli()}
	w.feed.AddBot(w.bot)
	fake.SetEventURL(w.app.ID, listenBot(t, w.a, w.bot, w.feed), botToken, botKey)
	return w
}

// config is the bot's config with extra keys (nil values removed).
func (w *botWorld) config(extra map[string]any) json.RawMessage {
	c := map[string]any{"app_id": w.app.ID, "app_secret": w.app.Secret, "base_url": w.fake.URL(),
		"verification_token": botToken, "encrypt_key": botKey}
	for k, v := range extra {
		if v == nil {
			delete(c, k)
		} else {
			c[k] = v
		}
	}
	raw, _ := json.Marshal(c)
	return raw
}

// delivered waits until every event the fake made was answered 200.
func (w *botWorld) delivered(t *testing.T) {
	t.Helper()
	eventually(t, "every event answered 200", func() bool {
		evs := w.fake.Events()
		return len(evs) > 0 && !slices.ContainsFunc(evs, func(e feishutest.Event) bool { return !e.Delivered })
	})
}

// texts are the messages submitted to a channel of the bot.
func (w *botWorld) texts(channel string) []string {
	in := w.feed.InboxOf(channel)
	if in == nil {
		return nil
	}
	var out []string
	for _, m := range in.Messages() {
		out = append(out, m.Text)
	}
	return out
}

func (w *botWorld) calls(route string) int {
	n := 0
	for _, c := range w.fake.Calls() {
		if c.Route == route {
			n++
		}
	}
	return n
}

func eventually(t *testing.T, what string, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(10 * time.Second)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("timed out waiting for %s", what)
		}
		time.Sleep(10 * time.Millisecond)
	}
}

// edge-api §7.2.3 Bot: the bot's own @_user_N is removed and the message marked mentioned;
// other people's are written as their names ("@_user_1" is not taken for "@_user_10"); a
// group's channel has the chat's name as its title, a p2p chat none.
func TestBot_MentionsRewrittenAndGroupTitled(t *testing.T) {
	w := newBotWorld(t, `{"direct": "open", "groups": "all"}`, time.Now())
	ann, bob := w.fake.AddUser("Ann"), w.fake.AddUser("Bob")
	group := w.fake.AddChat("group", "Release team", ann, bob)
	var ten []string // @_user_1 .. @_user_10: the bot first, Bob tenth
	ten = append(ten, w.app.BotOpenID)
	for i := 2; i <= 9; i++ {
		ten = append(ten, w.fake.AddUser(fmt.Sprint("P", i)).OpenID)
	}
	ten = append(ten, bob.OpenID)
	cases := []struct {
		name, text    string
		mentioned     []string
		want          string
		wantMentioned bool
	}{
		{"the bot first", "@_user_1 what is the weather?", []string{w.app.BotOpenID}, "what is the weather?", true},
		{"the bot inside", "please @_user_1 help", []string{w.app.BotOpenID}, "please help", true},
		{"another person", "ask @_user_1 about it", []string{bob.OpenID}, "ask @Bob about it", false},
		{"ten mentions", "@_user_10 and @_user_1 and @_user_2", ten, "@Bob and and @P2", true},
	}
	channel := adapter.Conversation{Kind: adapter.Group, ID: group}.ChannelID(w.bot.ID)
	for i, c := range cases {
		w.fake.PostMentioning(group, ann, c.text, c.mentioned...)
		eventually(t, c.name, func() bool { return len(w.texts(channel)) == i+1 })
		if got := w.texts(channel)[i]; got != c.want {
			t.Errorf("%s: text %q, want %q", c.name, got, c.want)
		}
		if a := w.feed.Arrivals()[i]; a.Mentioned != c.wantMentioned || a.Conversation.Title != "Release team" || a.Author.ID != ann.OpenID || a.Author.IsBot {
			t.Errorf("%s: arrival %+v", c.name, a)
		}
	}
	if n := w.calls(feishutest.RouteChat); n != 1 {
		t.Errorf("%d chat calls for the group's title, want 1 (kept)", n)
	}
	if n := w.calls(feishutest.RouteBotInfo); n != 1 {
		t.Errorf("%d bot info calls, want 1 (kept per app)", n)
	}
	p2p := w.fake.AddChat("p2p", "", ann)
	w.fake.Post(p2p, ann, "hello")
	eventually(t, "the p2p message", func() bool { return len(w.feed.Arrivals()) == len(cases)+1 })
	if a := w.feed.Arrivals()[len(cases)]; a.Conversation.Kind != adapter.Direct || a.Conversation.ID != p2p || a.Conversation.Title != "" {
		t.Fatalf("p2p arrival %+v", a)
	}
}

// A group message the policy refuses costs no call for the chat's name.
func TestBot_RefusedGroupMessageAsksNothing(t *testing.T) {
	w := newBotWorld(t, `{"groups": "mention"}`, time.Now())
	ann := w.fake.AddUser("Ann")
	group := w.fake.AddChat("group", "Team", ann)
	w.fake.Post(group, ann, "chatter")
	w.delivered(t)
	if w.feed.Refused(adapter.RefusedNotMentioned) != 1 || w.calls(feishutest.RouteChat) != 0 {
		t.Fatalf("refused %d, chat calls %d", w.feed.Refused(adapter.RefusedNotMentioned), w.calls(feishutest.RouteChat))
	}
}

// edge-api §7.2.3: duplicates of an event_id are ignored: an event Feishu delivers again reaches
// the policy once (a stranger's pairing is asked for once, not three times).
func TestBot_EventDeliveredAgainReachesThePolicyOnce(t *testing.T) {
	w := newBotWorld(t, `{"direct": "pairing"}`, time.Now())
	carol := w.fake.AddUser("Carol")
	_, eventID := w.fake.Post(w.fake.AddChat("p2p", "", carol), carol, "let me in")
	w.delivered(t)
	w.fake.Redeliver(eventID)
	w.fake.Redeliver(eventID)
	eventually(t, "both redeliveries answered", func() bool { return w.fake.EventDeliveries() >= 3 })
	w.delivered(t)
	if n := len(w.feed.Arrivals()); n != 1 || w.feed.Refused(adapter.RefusedPairingPending) != 1 {
		t.Fatalf("%d arrivals (%d pairing_pending) for one event delivered three times", n, w.feed.Refused(adapter.RefusedPairingPending))
	}
}

// edge-api §4.1: messages written before the bot was put (less adapter.BindGrace) are not passed.
func TestBot_MessagesBeforeTheBotAreNotPassed(t *testing.T) {
	w := newBotWorld(t, `{"direct": "open"}`, time.Now().Add(time.Minute+adapter.BindGrace))
	ann := w.fake.AddUser("Ann")
	w.fake.Post(w.fake.AddChat("p2p", "", ann), ann, "old news")
	w.delivered(t)
	if n := len(w.feed.Arrivals()); n != 0 {
		t.Fatalf("%d arrivals of a message older than the bot", n)
	}
}

// The bot's route answers the URL verification with the challenge, and refuses an event whose
// signature is forged (401, as the channel route does).
func TestBot_URLVerificationAndSignature(t *testing.T) {
	w := newBotWorld(t, `{"direct": "open"}`, time.Now())
	if got, err := w.fake.Challenge(w.app.ID); err != nil || got == "" {
		t.Fatalf("URL verification: %q %v", got, err)
	}
	url := listenBot(t, w.a, w.bot, w.feed)
	req, _ := http.NewRequest(http.MethodPost, url, bytes.NewReader([]byte(`{"encrypt":"AAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAA="}`)))
	req.Header.Set("X-Lark-Request-Timestamp", fmt.Sprint(time.Now().Unix()))
	req.Header.Set("X-Lark-Signature", strings.Repeat("0", 64))
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if resp.StatusCode != http.StatusUnauthorized || len(w.feed.Arrivals()) != 0 {
		t.Fatalf("forged event: %d", resp.StatusCode)
	}
}

// edge-api §7.2.3 Bot: the PUT's probe fetches the tenant token and the bot's info; a config that
// cannot work is 422 target_config_invalid, never naming the secret.
func TestBot_ProbeChecksTheAppAndItsBot(t *testing.T) {
	w := newBotWorld(t, `{}`, time.Now())
	probe := func(cfg json.RawMessage) error {
		b := w.bot
		b.Target.Config = cfg
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		return w.a.ProbeBot(ctx, b)
	}
	if err := probe(w.config(nil)); err != nil {
		t.Fatalf("probe of a working app: %v", err)
	}
	if w.calls(feishutest.RouteBotInfo) != 1 {
		t.Fatal("the probe did not ask for the bot's info")
	}
	w.fake.FailNext(feishutest.RouteBotInfo, 1, http.StatusBadRequest, 10003, "invalid param", 0)
	cases := []struct {
		name string
		cfg  json.RawMessage
	}{
		{"wrong secret", w.config(map[string]any{"app_secret": "not-the-secret-4d1"})},
		{"no events", w.config(map[string]any{"verification_token": nil, "encrypt_key": nil})},
		{"no bot info", w.config(map[string]any{"app_id": w.fake.AddApp("cli_nobot", "nobot-secret", "x").ID, "app_secret": "nobot-secret"})},
	}
	for _, c := range cases {
		err := probe(c.cfg)
		var pe *profile.Error
		if !errors.As(err, &pe) || pe.Code != profile.CodeTargetConfigInvalid || strings.Contains(pe.Message, "secret-4d1") {
			t.Errorf("%s: %v, want target_config_invalid without the secret", c.name, err)
		}
	}
}

// The channel route writes every mention as "@" and the name (it does not know the bot's
// open_id, so the bot's mention is a name too): no "@_user_N" reaches xAgent.
func TestChannel_MentionsWrittenAsNames(t *testing.T) {
	fake := feishutest.New()
	t.Cleanup(fake.Close)
	fake.SetLimits(unlimited)
	app := fake.AddApp("cli_channel_mentions", "cm-secret", "ximd bot")
	ann, bob := fake.AddUser("Ann"), fake.AddUser("Bob")
	group := fake.AddChat("group", "Team", ann, bob)
	files := adaptertest.NewFiles()
	a := feishu.New(feishu.Options{Common: adapter.Common{Files: files}})
	ch := adapter.Channel{ID: "fs_team", Target: adapter.Binding{Adapter: feishu.Name,
		Config: config(t, fake.URL(), app, group, map[string]any{"verification_token": botToken})}, OpenedAt: time.Now().UnixMilli()}
	feed := adaptertest.NewFeed(files, ch)
	mux := http.NewServeMux()
	mux.HandleFunc("POST /{channel}/{path}", func(w http.ResponseWriter, r *http.Request) {
		if _, err := a.Receive(w, r, ch, feed); err != nil {
			http.Error(w, profile.AsError(err).Code, http.StatusServiceUnavailable)
		}
	})
	srv := httptest.NewServer(mux)
	t.Cleanup(srv.Close)
	fake.SetEventURL(app.ID, srv.URL+"/fs_team/events", botToken, "")
	fake.PostMentioning(group, ann, "@_user_1 ping @_user_2", app.BotOpenID, bob.OpenID)
	eventually(t, "the message", func() bool { return len(feed.InboxOf(ch.ID).Messages()) == 1 })
	if got := feed.InboxOf(ch.ID).Messages()[0].Text; got != "@ximd bot ping @Bob" {
		t.Fatalf("text %q", got)
	}
}
