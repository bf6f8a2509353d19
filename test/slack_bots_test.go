package test

import (
	"bytes"
	"encoding/json"
	"net/http"
	"slices"
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

// putSlackBot PUTs a Slack bot with config cfg (the app's tokens, no conversation) and policy.
func putSlackBot(n *testkit.Node, id string, cfg, conversations map[string]any) (int, []byte, error) {
	body := map[string]any{
		"connection": map[string]any{"target_type": "im", "profiles": []string{"xagent.im.v2"}},
		"target":     map[string]any{"adapter": "slack", "config": cfg},
	}
	if conversations != nil {
		body["conversations"] = conversations
	}
	return n.Do(http.MethodPut, "/v1/bots/"+id, body)
}

// botSays are the texts of bot's messages in a conversation of fake.
func botSays(fake *slacktest.Server, ch string, bot slacktest.Bot) []string {
	var out []string
	for _, m := range fake.Messages(ch) {
		if m.BotID == bot.BotID {
			out = append(out, m.Text)
		}
	}
	return out
}

// edge-api §4.1 and §7.2.4 Bot, by Socket Mode: a person nobody bound writes to the app in a DM ->
// the bot's channel <bot>-<im id> opens, xAgent gets channel.opened (direct, titled with the
// person's name) then the chat.message on it, and the agent's streamed answer reaches that DM.
func TestSlackBots_StrangerOpensChannelAndAgentStreamsThere(t *testing.T) {
	e := newEnv(t, envOptions{mutate: fastAcks})
	fake := slacktest.New()
	t.Cleanup(fake.Close)
	fake.SetSocketMode(true)
	bot := fake.AddBot("ximd")
	cfg := map[string]any{"bot_token": bot.Token, "app_token": bot.AppToken, "api_url": fake.URL()}
	status, body, err := putSlackBot(e.node, "sk1", cfg, map[string]any{"direct": "open"})
	if err != nil || status != http.StatusOK {
		t.Fatalf("PUT bot: %d %s %v", status, body, err)
	}
	if bytes.Contains(body, []byte(bot.Token)) || bytes.Contains(body, []byte(bot.AppToken)) || bytes.Contains(body, []byte("channel_id")) {
		t.Fatalf("the bot's representation shows a token or a conversation: %s", body)
	}
	bad := map[string]any{"bot_token": "xoxb-wrong", "app_token": bot.AppToken, "api_url": fake.URL()}
	if status, body, _ := putSlackBot(e.node, "sk-bad", bad, nil); status != http.StatusUnprocessableEntity || !bytes.Contains(body, []byte("target_config_invalid")) {
		t.Fatalf("PUT a bot with a bad token: %d %s, want 422 target_config_invalid", status, body)
	}
	withChannel := map[string]any{"bot_token": bot.Token, "channel_id": "C1", "api_url": fake.URL()}
	if status, body, _ := putSlackBot(e.node, "sk-bad", withChannel, nil); status != http.StatusBadRequest || !bytes.Contains(body, []byte("channel_id")) {
		t.Fatalf("PUT a bot naming a conversation: %d %s, want 400 naming channel_id", status, body)
	}
	poll(t, "the app's Socket Mode connection", func() bool { return fake.Connections(bot.AppToken) == 1 })

	alice := fake.AddUser("Alice")
	dm := fake.AddChannel("im", "", alice)
	ts, _ := fake.Post(dm, alice, "hello, is anyone there?", "")
	channel := "sk1-" + dm
	opened := nextOf(t, e.agent, profile.TypeChannelOpened)
	var op struct {
		BotID        string `json:"bot_id"`
		Conversation struct{ Kind, Title string }
	}
	if err := json.Unmarshal(opened.Payload, &op); err != nil || opened.ChannelID != channel || op.BotID != "sk1" ||
		op.Conversation.Kind != "direct" || op.Conversation.Title != "Alice" {
		t.Fatalf("channel.opened on %s: %s (%v)", opened.ChannelID, opened.Payload, err)
	}
	if bytes.Contains(opened.Payload, []byte(alice.ID)) || bytes.Contains(opened.Payload, []byte(dm)) { // P-ID-2
		t.Fatalf("channel.opened carries a platform id: %s", opened.Payload)
	}
	env, m := userMessage(t, e.agent, wait)
	if env.ChannelID != channel || m.Text != "hello, is anyone there?" || m.MessageID != slack.MessageIDOf(dm, ts) {
		t.Fatalf("chat.message on %s: %+v", env.ChannelID, m)
	}
	ackUser(t, e.agent, env, map[string]any{"message_id": m.MessageID, "status": "accepted"})

	words := strings.Fields("Yes Alice, this answer streams into your direct message.")
	for i, w := range words {
		e.sendTo(channel, profile.TypeDelta, delta("a1", i+1, w+" "))
	}
	final := strings.Join(words, " ")
	if a := e.ackOf(e.sendTo(channel, profile.TypeMessage, msg("a1", final))); a.Status != profile.AckAccepted {
		t.Fatalf("final: %+v", a)
	}
	if says := botSays(fake, dm, bot); len(says) != 1 || says[0] != final {
		t.Fatalf("the DM shows %q from the bot, want the one final", says)
	}
	_, b, _ := e.node.Do(http.MethodGet, "/v1/channels/"+channel, nil)
	if ch := jsonOf(t, b); ch["bot"] != "sk1" || ch["conversation"].(map[string]any)["id"] != dm || bytes.Contains(b, []byte(bot.Token)) {
		t.Fatalf("channel representation: %s", b)
	}
	e.quiet(500 * time.Millisecond) // the bot's own messages came back as events: not passed
}

// edge-api §4.1 and §7.2.4 Bot, with the default policy: in a channel, a message without a mention
// -> nothing; with <@BOT> -> passed (one message, though Slack sends it as a message event and as
// an app_mention), the mention removed; another app's bot -> never passed (from_bot); a stranger
// in a DM -> one pairing code answer in their DM and nothing to xAgent; approval -> their next
// message opens the channel.
func TestSlackBots_MentionsOtherBotsAndPairing(t *testing.T) {
	e := newEnv(t, envOptions{mutate: fastAcks})
	fake := slacktest.New()
	t.Cleanup(fake.Close)
	fake.SetSocketMode(true)
	// The approval changes the bot, so its app's poll loop connects again (apps.connections.open,
	// Tier 1: the fake's default allows one a minute).
	fake.SetLimits(slacktest.Limits{Tier1PerMinute: 10})
	bot := fake.AddBot("ximd")
	other := fake.AddBot("another app")
	cfg := map[string]any{"bot_token": bot.Token, "app_token": bot.AppToken, "api_url": fake.URL()}
	if status, body, err := putSlackBot(e.node, "sk2", cfg, nil); err != nil || status != http.StatusOK {
		t.Fatalf("PUT bot: %d %s %v", status, body, err)
	}
	poll(t, "the app's Socket Mode connection", func() bool { return fake.Connections(bot.AppToken) == 1 })

	bob := fake.AddUser("Bob")
	team := fake.AddChannel("channel", "team", bob, fake.AddUser("Cy"))
	fake.Post(team, bob, "lunch anyone?", "")
	fake.PostAsBot(team, other, "<@"+bot.UserID+"> beep from another bot", "")
	poll(t, "both messages taken", func() bool { return fake.Unacknowledged(bot) == 0 })
	e.quiet(300 * time.Millisecond)
	ts, _ := fake.Post(team, bob, "<@"+bot.UserID+"> what is on the agenda?", "")
	opened := nextOf(t, e.agent, profile.TypeChannelOpened)
	if opened.ChannelID != "sk2-"+team || !bytes.Contains(opened.Payload, []byte(`"kind":"group"`)) || !bytes.Contains(opened.Payload, []byte(`"title":"team"`)) {
		t.Fatalf("channel.opened on %s: %s", opened.ChannelID, opened.Payload)
	}
	env, m := userMessage(t, e.agent, wait)
	if env.ChannelID != "sk2-"+team || m.Text != "what is on the agenda?" || m.MessageID != slack.MessageIDOf(team, ts) {
		t.Fatalf("chat.message on %s: %+v", env.ChannelID, m)
	}
	ackUser(t, e.agent, env, map[string]any{"message_id": m.MessageID, "status": "accepted"})
	poll(t, "both events of the mention taken", func() bool { return fake.Unacknowledged(bot) == 0 })
	e.quiet(500 * time.Millisecond) // the app_mention of the same message: no second chat.message

	carol := fake.AddUser("Carol")
	dm := fake.AddChannel("im", "", carol)
	fake.Post(dm, carol, "let me in", "")
	poll(t, "the pairing answer in Carol's DM", func() bool { return len(botSays(fake, dm, bot)) == 1 })
	fake.Post(dm, carol, "please?", "")
	poll(t, "both messages taken", func() bool { return fake.Unacknowledged(bot) == 0 })
	e.quiet(500 * time.Millisecond)
	if says := botSays(fake, dm, bot); len(says) != 1 {
		t.Fatalf("the bot answered %q, want one pairing answer", says)
	}
	_, b, _ := e.node.Do(http.MethodGet, "/v1/bots/sk2/pairings", nil)
	var list struct {
		Pairings []struct {
			Code, User  string
			DisplayName string `json:"display_name"`
		}
	}
	_ = json.Unmarshal(b, &list)
	if len(list.Pairings) != 1 || list.Pairings[0].User != carol.ID || list.Pairings[0].DisplayName != "Carol" ||
		!strings.Contains(botSays(fake, dm, bot)[0], list.Pairings[0].Code) {
		t.Fatalf("pairings %s; answer %q", b, botSays(fake, dm, bot))
	}
	if status, b, _ := e.node.Do(http.MethodPost, "/v1/bots/sk2/pairings/"+list.Pairings[0].Code, nil); status != http.StatusNoContent {
		t.Fatalf("approve: %d %s", status, b)
	}
	// The approval restarts the app's poll loop (the bot changed); a message read by the loop
	// before it did meets the bot as it was. Carol writes until the channel opens.
	var sent []string
	poll(t, "Carol's message after the approval opens her channel", func() bool {
		text := "thanks " + strconv.Itoa(len(sent))
		sent = append(sent, text)
		fake.Post(dm, carol, text, "")
		env, err := e.agent.Next(time.Second)
		if err != nil {
			return false
		}
		if env.Type != profile.TypeChannelOpened || env.ChannelID != "sk2-"+dm {
			t.Fatalf("after approval: %s on %s", env.Type, env.ChannelID)
		}
		return true
	})
	if env, m := userMessage(t, e.agent, wait); env.ChannelID != "sk2-"+dm || !slices.Contains(sent, m.Text) {
		t.Fatalf("after approval: %s %+v, sent %q", env.ChannelID, m, sent)
	}
	t.Logf("messages before the channel opened: %d", len(sent))
	poll(t, "the refusals in the bot's stats", func() bool {
		_, b, _ := e.node.Do(http.MethodGet, "/v1/bots/sk2", nil)
		return bytes.Contains(b, []byte(`"not_mentioned":1`)) && bytes.Contains(b, []byte(`"from_bot":1`)) && bytes.Contains(b, []byte(`"pairing_pending":`+strconv.Itoa(len(sent)+1)))
	})
}

// edge-api §7.2.4 Bot, by the Events API at POST /v1/targets/slack/bots/{bot_id}/events: the
// url_verification challenge is answered; a DM opens the bot's channel, its message reaches
// xAgent once however often Slack sends the event; a forged or stale signature is 401.
func TestSlackBots_EventsAPIRoute(t *testing.T) {
	addr := freeAddr(t)
	e := newEnv(t, envOptions{mutate: func(c *node.Config) { fastAcks(c); c.HTTPAddr, c.PublicURL = addr, "http://"+addr }})
	fake := slacktest.New()
	t.Cleanup(fake.Close)
	bot := fake.AddBot("ximd")
	cfg := map[string]any{"bot_token": bot.Token, "signing_secret": bot.SigningSecret, "api_url": fake.URL(), "streaming": "edit"}
	if status, body, err := putSlackBot(e.node, "sk3", cfg, map[string]any{"direct": "open"}); err != nil || status != http.StatusOK {
		t.Fatalf("PUT bot: %d %s %v", status, body, err)
	}
	route := "http://" + addr + "/v1/targets/slack/bots/sk3/events"
	fake.SetEventURL(route, "")
	if sent, got, err := fake.UrlVerification(); err != nil || sent == "" || got != sent {
		t.Fatalf("url_verification: sent %q, answered %q, %v", sent, got, err)
	}
	dan := fake.AddUser("Dan")
	dm := fake.AddChannel("im", "", dan)
	ts, eventID := fake.Post(dm, dan, "hi over HTTP", "")
	nextOf(t, e.agent, profile.TypeChannelOpened)
	env, m := userMessage(t, e.agent, wait)
	if env.ChannelID != "sk3-"+dm || m.Text != "hi over HTTP" || m.MessageID != slack.MessageIDOf(dm, ts) {
		t.Fatalf("chat.message on %s: %+v", env.ChannelID, m)
	}
	ackUser(t, e.agent, env, map[string]any{"message_id": m.MessageID, "status": "accepted"})
	fake.Redeliver(eventID)
	poll(t, "the redelivery answered", func() bool { return fake.Unacknowledged(bot) == 0 })
	e.quiet(500 * time.Millisecond)

	body := []byte(`{"type":"event_callback","event_id":"Ev1","event":{"type":"message","user":"U1","channel":"D1","channel_type":"im","text":"forged","ts":"1.1"}}`)
	now := strconv.FormatInt(time.Now().Unix(), 10)
	stale := strconv.FormatInt(time.Now().Add(-10*time.Minute).Unix(), 10)
	for name, h := range map[string][2]string{
		"forged": {now, "v0=" + strings.Repeat("0", 64)},
		"stale":  {stale, slacktest.Sign(bot.SigningSecret, stale, body)},
		"no bot": {now, slacktest.Sign(bot.SigningSecret, now, body)},
	} {
		url := route
		if name == "no bot" {
			url = "http://" + addr + "/v1/targets/slack/bots/nobot/events"
		}
		req, _ := http.NewRequest(http.MethodPost, url, bytes.NewReader(body))
		req.Header.Set("X-Slack-Request-Timestamp", h[0])
		req.Header.Set("X-Slack-Signature", h[1])
		resp, err := http.DefaultClient.Do(req)
		if err != nil || resp.StatusCode != http.StatusUnauthorized {
			t.Fatalf("%s: %v %v, want 401", name, resp, err)
		}
		resp.Body.Close()
	}
	e.quiet(300 * time.Millisecond)
}
