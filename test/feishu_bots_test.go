package test

import (
	"bytes"
	"encoding/json"
	"fmt"
	"net/http"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/ximd/ximd/handlers/adapter/feishu"
	"github.com/ximd/ximd/handlers/adapter/feishu/feishutest"
	"github.com/ximd/ximd/internal/testkit"
	"github.com/ximd/ximd/profile"
)

const fsBotToken, fsBotKey = "bots-e2e-verification-token", "bots-e2e-encrypt-key"

// feishuBot is a Feishu app served as a bot by a node, its events pointed at the bot's route.
type feishuBot struct {
	e    *env
	fake *feishutest.Server
	app  feishutest.App
	id   string
}

// newFeishuBot starts a node and a fake Feishu with one app, and PUTs bot id on the app with the
// conversations policy (nil: every default).
func newFeishuBot(t *testing.T, id string, conversations map[string]any) *feishuBot {
	t.Helper()
	e := newEnv(t, envOptions{mutate: fastAcks})
	fake := feishutest.New()
	t.Cleanup(fake.Close)
	b := &feishuBot{e: e, fake: fake, app: fake.AddApp("cli_bots_e2e", "bots-e2e-app-secret", "ximd bot"), id: id}
	status, body := b.put(id, b.config(nil), conversations)
	if status != http.StatusOK {
		t.Fatalf("PUT feishu bot: %d %s", status, body)
	}
	for _, secret := range []string{b.app.Secret, fsBotToken, fsBotKey} {
		if bytes.Contains(body, []byte(secret)) {
			t.Fatalf("the bot's representation shows a secret: %s", body)
		}
	}
	fake.SetEventURL(b.app.ID, "http://"+e.node.Addr+"/v1/targets/feishu/bots/"+id+"/events", fsBotToken, fsBotKey)
	if got, err := fake.Challenge(b.app.ID); err != nil || got == "" {
		t.Fatalf("URL verification of the bot's route: %q %v", got, err)
	}
	return b
}

// config is the bot's target.config, with extra keys.
func (b *feishuBot) config(extra map[string]any) map[string]any {
	c := map[string]any{"app_id": b.app.ID, "app_secret": b.app.Secret, "base_url": b.fake.URL(),
		"verification_token": fsBotToken, "encrypt_key": fsBotKey}
	for k, v := range extra {
		c[k] = v
	}
	return c
}

func (b *feishuBot) put(id string, cfg map[string]any, conversations map[string]any) (int, []byte) {
	b.e.t.Helper()
	body := map[string]any{
		"connection": map[string]any{"target_type": "im", "profiles": []string{"xagent.im.v2"}},
		"target":     map[string]any{"adapter": "feishu", "config": cfg},
	}
	if conversations != nil {
		body["conversations"] = conversations
	}
	status, raw, err := b.e.node.Do(http.MethodPut, "/v1/bots/"+id, body)
	if err != nil {
		b.e.t.Fatal(err)
	}
	return status, raw
}

// delivered waits until every event the fake made so far was answered 200 by the node.
func (b *feishuBot) delivered() {
	b.e.t.Helper()
	poll(b.e.t, "every Feishu event answered 200", func() bool {
		evs := b.fake.Events()
		return len(evs) > 0 && !slices.ContainsFunc(evs, func(ev feishutest.Event) bool { return !ev.Delivered })
	})
}

// refused waits for the bot's stats to count n refusals for reason.
func (b *feishuBot) refused(reason string, n int) {
	b.e.t.Helper()
	poll(b.e.t, fmt.Sprintf("%d refused %s in the bot's stats", n, reason), func() bool {
		_, raw, _ := b.e.node.Do(http.MethodGet, "/v1/bots/"+b.id, nil)
		return strings.Contains(string(raw), fmt.Sprintf(`"%s":%d`, reason, n))
	})
}

// texts are what the chat shows of the bot, oldest first.
func (b *feishuBot) texts(chat string) []string {
	var out []string
	for _, m := range b.fake.Messages(chat) {
		if m.Sender == b.app.ID {
			out = append(out, m.Text)
		}
	}
	return out
}

// edge-api §4.1 and §7.2.3 Bot: a Feishu app put as a bot under "pairing": a stranger's p2p
// message gets one answer in their chat naming a code and nothing reaches xAgent; the operator
// approves the code; their next message opens the channel <bot>-<chat_id> (channel.opened, then
// the chat.message), and the agent's streamed answer is a card in that same chat.
func TestFeishuBots_PairingApprovalThenTheAgentAnswersInTheChat(t *testing.T) {
	t.Parallel()
	b := newFeishuBot(t, "fsb", nil)
	e := b.e
	for name, bad := range map[string]struct {
		cfg    map[string]any
		status int
		code   string
	}{
		"names a chat": {b.config(map[string]any{"chat_id": "oc_x"}), http.StatusBadRequest, profile.CodeInvalidDescriptor},
		"wrong secret": {b.config(map[string]any{"app_secret": "wrong-app-secret"}), http.StatusUnprocessableEntity, profile.CodeTargetConfigInvalid},
	} {
		if status, body := b.put("fsbad", bad.cfg, nil); status != bad.status || !bytes.Contains(body, []byte(bad.code)) || bytes.Contains(body, []byte("wrong-app-secret")) {
			t.Fatalf("PUT a bot whose config %s: %d %s, want %d %s", name, status, body, bad.status, bad.code)
		}
	}

	alice := b.fake.AddUser("Alice")
	chat := b.fake.AddChat("p2p", "", alice)
	b.fake.Post(chat, alice, "hello, who are you?")
	poll(t, "the pairing answer in alice's chat", func() bool { return len(b.texts(chat)) == 1 })
	b.fake.Post(chat, alice, "hello?")
	b.refused("pairing_pending", 2)
	b.delivered()
	if texts := b.texts(chat); len(texts) != 1 {
		t.Fatalf("the chat shows %q, want one pairing answer", texts)
	}
	e.quiet(300 * time.Millisecond) // nothing reached xAgent
	_, raw, _ := e.node.Do(http.MethodGet, "/v1/bots/fsb/pairings", nil)
	var list struct {
		Pairings []struct{ Code, User string }
	}
	_ = json.Unmarshal(raw, &list)
	if len(list.Pairings) != 1 || list.Pairings[0].User != alice.OpenID || !strings.Contains(b.texts(chat)[0], list.Pairings[0].Code) {
		t.Fatalf("pairings %s; the chat shows %q", raw, b.texts(chat))
	}
	if status, raw, _ := e.node.Do(http.MethodPost, "/v1/bots/fsb/pairings/"+list.Pairings[0].Code, nil); status != http.StatusNoContent {
		t.Fatalf("approve: %d %s", status, raw)
	}

	fmID, _ := b.fake.Post(chat, alice, "thanks! what is 2+2?")
	channel := "fsb-" + chat // a chat id (oc_ and 32 hex digits) is its own key
	opened := nextOf(t, e.agent, profile.TypeChannelOpened)
	if opened.ChannelID != channel || !bytes.Contains(opened.Payload, []byte(`"kind":"direct"`)) ||
		bytes.Contains(opened.Payload, []byte(alice.OpenID)) || bytes.Contains(opened.Payload, []byte(chat)) {
		t.Fatalf("channel.opened on %s: %s", opened.ChannelID, opened.Payload)
	}
	uenv, um := userMessage(t, e.agent, wait)
	if uenv.ChannelID != channel || um.Text != "thanks! what is 2+2?" || um.MessageID != feishu.MessageIDOf(fmID) {
		t.Fatalf("chat.message on %s: %+v", uenv.ChannelID, um)
	}
	ackUser(t, e.agent, uenv, map[string]any{"message_id": um.MessageID, "status": "accepted"})

	// The agent answers, streamed: one card in alice's chat, closed with the final text.
	for i, part := range []string{"Two ", "plus two ", "is four."} {
		e.sendTo(channel, profile.TypeDelta, delta("a_four", i+1, part))
	}
	poll(t, "the streamed card in alice's chat", func() bool {
		shown := b.fake.Messages(chat)
		return len(shown) == 2 && shown[1].Card != nil && shown[1].Text == "Two plus two is four."
	})
	pid := e.sendTo(channel, profile.TypeMessage, msg("a_four", "Two plus two is four."))
	env, err := e.agent.Reply(pid, wait)
	if err != nil {
		t.Fatal(err)
	}
	if ack, err := testkit.AckOf(env); err != nil || ack.Status != profile.AckAccepted {
		t.Fatalf("the answer's ack: %+v %v", ack, err)
	}
	shown := b.fake.Messages(chat)
	if last := shown[len(shown)-1]; len(shown) != 2 || last.Card == nil || last.Card.Streaming || last.Text != "Two plus two is four." {
		t.Fatalf("alice's chat shows %+v, want the pairing answer then the answer's card", shown)
	}
	_, raw, _ = e.node.Do(http.MethodGet, "/v1/channels/"+channel, nil)
	ch := jsonOf(t, raw)
	if ch["bot"] != "fsb" || ch["conversation"].(map[string]any)["id"] != chat || bytes.Contains(raw, []byte(b.app.Secret)) {
		t.Fatalf("the bot's channel: %s", raw)
	}
}

// edge-api §4.1 and §7.2.3 Bot, groups under "mention": a group message without the bot's
// mention, and another bot's message, pass nothing; one mentioning the bot opens the group's
// channel (titled with the group's name) with the mention removed, and the agent's answer
// reaches the group; a group a channel PUT binds gets its messages on that channel, and the bot
// opens none for it.
func TestFeishuBots_GroupPassesOnlyAMentionNeverABot(t *testing.T) {
	t.Parallel()
	b := newFeishuBot(t, "fsg", map[string]any{"direct": "open", "groups": "mention"})
	e := b.e
	other := b.fake.AddApp("cli_other_e2e", "other-secret", "another bot")
	ann, bob := b.fake.AddUser("Ann"), b.fake.AddUser("Bob")
	group := b.fake.AddChat("group", "Release team", ann, bob)

	b.fake.Post(group, ann, "lunch at noon?")
	b.fake.PostAsBot(group, other.ID, "beep: build 512 passed")
	b.delivered()
	b.refused("not_mentioned", 1)
	b.refused("from_bot", 1)
	b.fake.PostMentioning(group, bob, "@_user_1 what changed in build 512, @_user_2?", b.app.BotOpenID, ann.OpenID)
	channel := "fsg-" + group
	opened := nextOf(t, e.agent, profile.TypeChannelOpened)
	if opened.ChannelID != channel || !bytes.Contains(opened.Payload, []byte(`"kind":"group"`)) || !bytes.Contains(opened.Payload, []byte(`"title":"Release team"`)) {
		t.Fatalf("channel.opened on %s: %s", opened.ChannelID, opened.Payload)
	}
	uenv, um := userMessage(t, e.agent, wait)
	if uenv.ChannelID != channel || um.Text != "what changed in build 512, @Ann?" {
		t.Fatalf("the first chat.message (on %s): %q, want only the mention's, without it", uenv.ChannelID, um.Text)
	}
	ackUser(t, e.agent, uenv, map[string]any{"message_id": um.MessageID, "status": "accepted"})
	if a := e.ackOf(e.sendTo(channel, profile.TypeMessage, msg("a_build", "Build 512 fixed the login page."))); a.Status != profile.AckAccepted {
		t.Fatalf("the answer's ack: %+v", a)
	}
	if texts := b.texts(group); len(texts) != 1 || texts[0] != "Build 512 fixed the login page." {
		t.Fatalf("the group shows %q", texts)
	}

	// A channel PUT for another group of the app wins over the bot.
	ops := b.fake.AddChat("group", "Ops", ann)
	putCfg := b.config(map[string]any{"chat_id": ops})
	if status, body, err := openFeishu(e.node, "fs-ops", putCfg); err != nil || status != http.StatusOK {
		t.Fatalf("PUT channel: %d %s %v", status, body, err)
	}
	b.fake.PostMentioning(ops, ann, "@_user_1 restart the cache", b.app.BotOpenID)
	uenv, um = userMessage(t, e.agent, wait)
	if uenv.ChannelID != "fs-ops" || um.Text != "restart the cache" {
		t.Fatalf("chat.message on %s: %q, want on the PUT channel", uenv.ChannelID, um.Text)
	}
	ackUser(t, e.agent, uenv, map[string]any{"message_id": um.MessageID, "status": "accepted"})
	e.quiet(300 * time.Millisecond)
	_, raw, _ := e.node.Do(http.MethodGet, "/v1/bots/fsg", nil)
	if st := jsonOf(t, raw)["stats"].(map[string]any); st["channels"] != float64(1) {
		t.Fatalf("the bot's stats %v: one channel (the mentioned group's) expected", st)
	}
	if status, _, _ := e.node.Do(http.MethodGet, "/v1/channels/fsg-"+ops, nil); status != http.StatusNotFound {
		t.Fatalf("the bot opened a channel for the PUT group: %d", status)
	}
}
