package test

import (
	"bytes"
	"net/http"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/ximd/ximd/handlers/adapter/slack"
	"github.com/ximd/ximd/handlers/adapter/slack/slacktest"
	"github.com/ximd/ximd/internal/testkit"
	"github.com/ximd/ximd/pipeline/node"
	"github.com/ximd/ximd/profile"
)

// openSlack binds channel to a Slack conversation through the real API.
func openSlack(n *testkit.Node, channel string, cfg map[string]any) (int, []byte, error) {
	return n.Do(http.MethodPut, "/v1/channels/"+channel, map[string]any{
		"connection": map[string]any{"target_type": "im", "profiles": []string{"xagent.im.v2"}},
		"target":     map[string]any{"adapter": "slack", "config": cfg},
	})
}

func slackConfig(fake *slacktest.Server, bot slacktest.Bot, ch, thread string, extra map[string]any) map[string]any {
	cfg := map[string]any{"bot_token": bot.Token, "channel_id": ch, "api_url": fake.URL()}
	if thread != "" {
		cfg["thread_ts"] = thread
	}
	for k, v := range extra {
		cfg[k] = v
	}
	return cfg
}

// The Slack adapter end to end (edge-api §7.2.4) through /v1/ws against the Slack fake, messages
// in by Socket Mode: the assistant status shows while the agent thinks and clears with the
// answer; a streamed answer is one native stream ending with the final text and carrying ximd's
// metadata; a 429 storm ends accepted with no call before Retry-After; a person's message comes
// in once; a config that cannot work is refused at PUT.
func TestSlack_EndToEndSocketMode(t *testing.T) {
	e := newEnv(t, envOptions{mutate: func(c *node.Config) { c.TargetRetryBudget = time.Minute }})
	fake := slacktest.New()
	t.Cleanup(fake.Close)
	fake.SetSocketMode(true)
	bot := fake.AddBot("ximd")
	alice := fake.AddUser("Alice")
	dm := fake.AddChannel("im", "alice", alice)
	thread, _ := fake.Post(dm, alice, "can you help?", "")
	cfg := slackConfig(fake, bot, dm, thread, map[string]any{"app_token": bot.AppToken})
	if status, body, err := openSlack(e.node, "sl", cfg); err != nil || status != http.StatusOK {
		t.Fatalf("PUT slack channel: %d %s %v", status, body, err)
	} else if bytes.Contains(body, []byte(bot.Token)) || bytes.Contains(body, []byte(bot.AppToken)) {
		t.Fatalf("the channel's representation shows a token: %s", body)
	}
	if status, body, _ := openSlack(e.node, "sl-bad", slackConfig(fake, slacktest.Bot{Token: "xoxb-wrong"}, dm, "", nil)); status != http.StatusUnprocessableEntity {
		t.Fatalf("PUT with a bad token: %d %s, want 422", status, body)
	}

	// The status while the agent thinks, cleared by the answer.
	e.sendTo("sl", profile.TypeActivity, map[string]any{"status": "thinking"})
	poll(t, "the thread shows the status", func() bool { return fake.CurrentStatus(dm, thread) != "" })

	// A streamed answer: one native stream, its final text and metadata.
	words := strings.Fields("Sure Alice, this answer streams natively and stops with its final text.")
	for i, w := range words {
		e.sendTo("sl", profile.TypeDelta, delta("m_stream", i+1, w+" "))
		time.Sleep(30 * time.Millisecond)
	}
	final := strings.Join(words, " ")
	if a := e.ackOf(e.sendTo("sl", profile.TypeMessage, msg("m_stream", final))); a.Status != profile.AckAccepted {
		t.Fatalf("final: %+v", a)
	}
	var answers []slacktest.Message
	for _, m := range fake.Messages(dm) {
		if m.BotID == bot.BotID {
			answers = append(answers, m)
		}
	}
	if len(answers) != 1 || answers[0].Text != final || answers[0].Streaming || answers[0].Appends < 1 || answers[0].ThreadTS != thread {
		t.Fatalf("the bot's messages %+v, want one stopped stream in the thread with the final text", answers)
	}
	if md := answers[0].Metadata; md == nil || md.EventType != slack.MetadataEventType || md.EventPayload["idempotency_key"] != "sl:m_stream" {
		t.Fatalf("the answer's metadata %+v", answers[0].Metadata)
	}
	poll(t, "the status cleared", func() bool { return fake.CurrentStatus(dm, thread) == "" })

	// A 429 storm: retried no sooner than Retry-After, then accepted.
	fake.FailNext("chat.postMessage", 3, "ratelimited", http.StatusTooManyRequests, 1)
	start := time.Now()
	if a := e.ackOf(e.sendTo("sl", profile.TypeMessage, msg("m_storm", "after the storm"))); a.Status != profile.AckAccepted {
		t.Fatalf("final through a 429 storm: %+v", a)
	}
	if took := time.Since(start); took < 3*time.Second || fake.EarlyCalls() != 0 {
		t.Fatalf("accepted after %s with %d calls before Retry-After", took, fake.EarlyCalls())
	}

	// IM -> xAgent by Socket Mode, once.
	ts, _ := fake.Post(dm, alice, "thanks!", thread)
	uenv, um := userMessage(t, e.agent, wait)
	if uenv.ChannelID != "sl" || um.Text != "thanks!" || um.MessageID != slack.MessageIDOf(dm, ts) {
		t.Fatalf("user message %s %+v", uenv.ChannelID, um)
	}
	ackUser(t, e.agent, uenv, map[string]any{"message_id": um.MessageID, "status": "accepted"})
	e.quiet(time.Second)
}

// The Events API (edge-api §7.2.4): url_verification answered; a message Slack delivers three
// times reaches xAgent once, its file with it; a forged, stale or missing signature is 401.
func TestSlack_EventsAPI(t *testing.T) {
	addr := freeAddr(t)
	e := newEnv(t, envOptions{mutate: func(c *node.Config) { c.HTTPAddr, c.PublicURL = addr, "http://"+addr }})
	fake := slacktest.New()
	t.Cleanup(fake.Close)
	bot := fake.AddBot("ximd")
	bob := fake.AddUser("Bob")
	ch := fake.AddChannel("channel", "team", bob)
	cfg := slackConfig(fake, bot, ch, "", map[string]any{"signing_secret": bot.SigningSecret, "streaming": "edit"})
	if status, body, err := openSlack(e.node, "sle", cfg); err != nil || status != http.StatusOK {
		t.Fatalf("PUT slack channel: %d %s %v", status, body, err)
	}
	route := "http://" + addr + "/v1/targets/slack/sle/events"
	fake.SetEventURL(route, "")
	if sent, got, err := fake.UrlVerification(); err != nil || sent == "" || got != sent {
		t.Fatalf("url_verification: sent %q, answered %q, %v", sent, got, err)
	}
	ts, eventID := fake.Post(ch, bob, "hello from the team", "")
	uenv, um := userMessage(t, e.agent, wait)
	if uenv.ChannelID != "sle" || um.Text != "hello from the team" || um.MessageID != slack.MessageIDOf(ch, ts) {
		t.Fatalf("user message %s %+v", uenv.ChannelID, um)
	}
	ackUser(t, e.agent, uenv, map[string]any{"message_id": um.MessageID, "status": "accepted"})
	before := fake.EventDeliveries()
	fake.Redeliver(eventID)
	fake.Redeliver(eventID)
	poll(t, "both redeliveries answered", func() bool { return fake.EventDeliveries() >= before+2 })
	data := []byte("a report the team shares")
	fake.PostFile(ch, bob, "report.txt", data)
	uenv, um = userMessage(t, e.agent, wait)
	if len(um.Files) != 1 || um.Files[0].Filename != "report.txt" {
		t.Fatalf("after the redeliveries the agent got %+v, want only the file message", um)
	}
	if status, got, _ := e.node.Do(http.MethodGet, um.Files[0].DownloadURL, nil); status != http.StatusOK || !bytes.Equal(got, data) {
		t.Fatalf("the file in ximd's file store: %d, %d bytes", status, len(got))
	}
	ackUser(t, e.agent, uenv, map[string]any{"message_id": um.MessageID, "status": "accepted"})

	body := []byte(`{"type":"event_callback","event_id":"Ev1","event":{"type":"message","user":"U1","channel":"` + ch + `","text":"forged","ts":"1.1"}}`)
	now := strconv.FormatInt(time.Now().Unix(), 10)
	stale := strconv.FormatInt(time.Now().Add(-10*time.Minute).Unix(), 10)
	for name, h := range map[string][2]string{
		"forged": {now, "v0=" + strings.Repeat("0", 64)},
		"stale":  {stale, slacktest.Sign(bot.SigningSecret, stale, body)},
		"none":   {now, ""},
	} {
		req, _ := http.NewRequest(http.MethodPost, route, bytes.NewReader(body))
		req.Header.Set("X-Slack-Request-Timestamp", h[0])
		if h[1] != "" {
			req.Header.Set("X-Slack-Signature", h[1])
		}
		resp, err := http.DefaultClient.Do(req)
		if err != nil || resp.StatusCode != http.StatusUnauthorized {
			t.Fatalf("%s signature: %v %v, want 401", name, resp, err)
		}
		resp.Body.Close()
	}
	e.quiet(time.Second)
}

// Edge-api §7.2.4 under kill -9: a final whose chat.postMessage Slack applied but whose answer
// never came (ximd killed meanwhile) is found by its metadata after the restart: the conversation
// shows exactly one message and the final is accepted.
func TestSlack_KillNineBetweenIntentAndOutcome(t *testing.T) {
	skipFaults(t)
	fake := slacktest.New()
	t.Cleanup(fake.Close)
	bot := fake.AddBot("ximd")
	dm := fake.AddChannel("im", "carol", fake.AddUser("Carol"))
	killBetweenIntentAndOutcome(t, "slack", inDoubtPlatform{
		bind: func(n *testkit.Node) (int, []byte, error) {
			return openSlack(n, "kd", slackConfig(fake, bot, dm, "", map[string]any{"streaming": "none"}))
		},
		hang: func(on bool) { fake.Hang("chat.postMessage", held(on)) },
		shown: func() (texts []string) {
			for _, m := range fake.Messages(dm) {
				if m.BotID == bot.BotID {
					texts = append(texts, m.Text)
				}
			}
			return texts
		},
	})
}
