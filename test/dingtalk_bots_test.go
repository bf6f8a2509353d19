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

	"github.com/ximd/ximd/handlers/adapter/dingtalk"
	"github.com/ximd/ximd/handlers/adapter/dingtalk/dingtalktest"
	"github.com/ximd/ximd/profile"
)

// dingTalkWorld is a node with the DingTalk fake and one app.
type dingTalkWorld struct {
	*env
	fake *dingtalktest.Server
	app  dingtalktest.App
}

func newDingTalkWorld(t *testing.T) *dingTalkWorld {
	fake := dingtalktest.New()
	t.Cleanup(fake.Close)
	return &dingTalkWorld{env: newEnv(t, envOptions{mutate: fastAcks}), fake: fake, app: fake.AddApp()}
}

// putBot PUTs a bot of w's app with the conversations policy and extra config.
func (w *dingTalkWorld) putBot(id string, conversations, extra map[string]any) (int, []byte) {
	w.t.Helper()
	body := map[string]any{
		"connection": map[string]any{"target_type": "im", "profiles": []string{"xagent.im.v2"}},
		"target":     map[string]any{"adapter": "dingtalk", "config": dingTalkConfig(w.fake, w.app, extra)},
	}
	if conversations != nil {
		body["conversations"] = conversations
	}
	status, b, err := w.node.Do(http.MethodPut, "/v1/bots/"+id, body)
	if err != nil {
		w.t.Fatal(err)
	}
	if bytes.Contains(b, []byte(w.app.ClientSecret)) {
		w.t.Fatalf("the bot's representation shows the secret: %s", b)
	}
	return status, b
}

func (w *dingTalkWorld) mustPutBot(id string, conversations map[string]any) {
	w.t.Helper()
	if status, b := w.putBot(id, conversations, nil); status != http.StatusOK {
		w.t.Fatalf("PUT bot %s: %d %s", id, status, b)
	}
}

// refusedOf polls the bot's stats until refused[reason] is want.
func (w *dingTalkWorld) refusedOf(bot, reason string, want int) {
	w.t.Helper()
	poll(w.t, fmt.Sprintf("%s refused %s %d times", bot, reason, want), func() bool {
		_, b, _ := w.node.Do(http.MethodGet, "/v1/bots/"+bot, nil)
		return strings.Contains(string(b), fmt.Sprintf(`"%s":%d`, reason, want))
	})
}

// edge-api §4.1, §7.2.6: a person nobody bound writes to the app's robot one-to-one -> the
// channel <bot>-<staff id> opens, xAgent gets channel.opened and then the chat.message on it,
// and the agent's streamed answer reaches that conversation as one AI card that ends FINISHED.
// A bot config naming a conversation, or a secret DingTalk refuses, is refused at PUT.
func TestDingTalkBots_StrangerOpensChannelAndAgentAnswersThere(t *testing.T) {
	w := newDingTalkWorld(t)
	if status, b := w.putBot("dkbad", nil, map[string]any{"user_id": "staff1"}); status != http.StatusBadRequest || !strings.Contains(string(b), "user_id") {
		t.Fatalf("a bot config with user_id: %d %s", status, b)
	}
	if status, b, _ := w.node.Do(http.MethodPut, "/v1/bots/dkbad", map[string]any{
		"connection": map[string]any{"target_type": "im", "profiles": []string{"xagent.im.v2"}},
		"target": map[string]any{"adapter": "dingtalk", "config": dingTalkConfig(w.fake,
			dingtalktest.App{ClientID: w.app.ClientID, ClientSecret: "wrong-secret"}, nil)},
	}); status != http.StatusUnprocessableEntity || !strings.Contains(string(b), "target_config_invalid") || bytes.Contains(b, []byte("wrong-secret")) {
		t.Fatalf("a bot with a wrong secret: %d %s", status, b)
	}
	w.mustPutBot("dk1", map[string]any{"direct": "open"})

	alice := w.fake.AddUser("Alice")
	sent := w.fake.Post(w.app, alice, "", "hello bot", false)
	want := "dk1-" + alice.StaffID
	ch, conv := opened(t, w.agent)
	if ch != want || conv.Kind != "direct" || conv.Title != "Alice" {
		t.Fatalf("channel.opened on %s %+v, want %s direct Alice", ch, conv, want)
	}
	ch, m := nextUser(t, w.agent)
	if ch != want || m.Text != "hello bot" || m.MessageID != dingtalk.MessageIDOf(sent) {
		t.Fatalf("chat.message on %s: %+v", ch, m)
	}

	// The agent's streamed answer: one card in alice's one-to-one chat, FINISHED with the final.
	words := strings.Fields("Hello Alice, nice to meet you here today")
	for i, word := range words {
		w.sendTo(want, profile.TypeDelta, delta("a1", i+1, word+" "))
		time.Sleep(20 * time.Millisecond)
	}
	final := strings.Join(words, " ")
	if a := w.ackOf(w.sendTo(want, profile.TypeMessage, msg("a1", final))); a.Status != profile.AckAccepted {
		t.Fatalf("final: %+v", a)
	}
	cards := w.fake.Cards(dingtalktest.DirectSpace(alice.StaffID))
	if len(cards) != 1 || cards[0].Text() != final || !slices.Equal(cards[0].Statuses, []string{"1", "2", "3"}) || cards[0].Streams < 1 {
		t.Fatalf("alice's chat shows %+v, want one streamed card FINISHED with the final", cards)
	}

	_, b, _ := w.node.Do(http.MethodGet, "/v1/channels/"+want, nil)
	rep := jsonOf(t, b)
	if rep["bot"] != "dk1" || rep["conversation"].(map[string]any)["id"] != alice.StaffID || bytes.Contains(b, []byte(w.app.ClientSecret)) {
		t.Fatalf("channel representation: %s", b)
	}

	// Her next message comes on the same channel, without another channel.opened.
	w.fake.Post(w.app, alice, "", "thanks", false)
	env, m2 := userMessage(t, w.agent, wait)
	if env.ChannelID != want || m2.Text != "thanks" {
		t.Fatalf("second message %s %+v", env.ChannelID, m2)
	}
	ackUser(t, w.agent, env, map[string]any{"message_id": m2.MessageID, "status": "accepted"})
}

// edge-api §4.1 groups "mention": a group message that does not @-mention the robot is not
// passed (DingTalk does not push it; the fake is made to, so the adapter's own gating is what is
// tested), one that does is, the mention removed, and the answer is a card in the group.
func TestDingTalkBots_GroupMention(t *testing.T) {
	w := newDingTalkWorld(t)
	w.fake.SetAllGroupMessages(true)
	w.mustPutBot("dk2", nil) // groups: mention (default)
	bob := w.fake.AddUser("Bob")
	cid := w.fake.AddGroup()

	w.fake.Post(w.app, bob, cid, "chatter nobody addressed to the robot", false)
	w.refusedOf("dk2", "not_mentioned", 1)
	w.fake.Post(w.app, bob, cid, "what is the weather?", true)
	ch, conv := opened(t, w.agent)
	if !strings.HasPrefix(ch, "dk2-h_") || conv.Kind != "group" {
		t.Fatalf("channel.opened on %s %+v, want dk2-h_… group", ch, conv)
	}
	if got, m := nextUser(t, w.agent); got != ch || m.Text != "what is the weather?" {
		t.Fatalf("first passed on %s: %q (the chatter comes before it)", got, m.Text)
	}
	var rep struct {
		Conversation struct{ ID string } `json:"conversation"`
	}
	_, b, _ := w.node.Do(http.MethodGet, "/v1/channels/"+ch, nil)
	if err := json.Unmarshal(b, &rep); err != nil || rep.Conversation.ID != cid {
		t.Fatalf("channel representation: %s (%v), want conversation %s", b, err, cid)
	}
	if a := w.ackOf(w.sendTo(ch, profile.TypeMessage, msg("g1", "Sunny."))); a.Status != profile.AckAccepted {
		t.Fatalf("final: %+v", a)
	}
	if cards := w.fake.Cards(dingtalktest.GroupSpace(cid)); len(cards) != 1 || cards[0].Text() != "Sunny." || cards[0].Status() != "3" {
		t.Fatalf("the group shows %+v", cards)
	}
	w.fake.Post(w.app, bob, cid, "more chatter", false)
	w.refusedOf("dk2", "not_mentioned", 2)
	w.quiet(300 * time.Millisecond)
}

// edge-api §4.1 pairing: a stranger gets one answer from the robot with a code (a card), however
// often they write, and nothing reaches xAgent; POST /v1/bots/{id}/pairings/{code} approves them;
// their next message opens the channel.
func TestDingTalkBots_PairingCodeThenApproval(t *testing.T) {
	w := newDingTalkWorld(t)
	w.mustPutBot("dk3", nil) // direct: pairing (default)
	carol := w.fake.AddUser("Carol")
	w.fake.Post(w.app, carol, "", "hi", false)
	w.fake.Post(w.app, carol, "", "let me in", false)
	w.refusedOf("dk3", "pairing_pending", 2)
	space := dingtalktest.DirectSpace(carol.StaffID)
	poll(t, "the pairing answer", func() bool { return len(w.fake.Cards(space)) > 0 })
	_, b, _ := w.node.Do(http.MethodGet, "/v1/bots/dk3/pairings", nil)
	var list struct {
		Pairings []struct {
			Code, User  string
			DisplayName string `json:"display_name"`
		} `json:"pairings"`
	}
	if err := json.Unmarshal(b, &list); err != nil || len(list.Pairings) != 1 {
		t.Fatalf("pairings %s (%v)", b, err)
	}
	p := list.Pairings[0]
	answers := w.fake.Cards(space)
	if len(answers) != 1 || p.User != carol.StaffID || p.DisplayName != "Carol" || !strings.Contains(answers[0].Text(), p.Code) {
		t.Fatalf("pairing %+v; the answers %+v", p, answers)
	}
	w.quiet(300 * time.Millisecond) // nothing reached xAgent
	if status, b, _ := w.node.Do(http.MethodPost, "/v1/bots/dk3/pairings/"+p.Code, nil); status != http.StatusNoContent {
		t.Fatalf("approve: %d %s", status, b)
	}
	w.fake.Post(w.app, carol, "", "thanks", false)
	want := "dk3-" + carol.StaffID
	if ch, _ := opened(t, w.agent); ch != want {
		t.Fatalf("channel.opened on %s, want %s", ch, want)
	}
	if ch, m := nextUser(t, w.agent); ch != want || m.Text != "thanks" {
		t.Fatalf("after approval: %s %q", ch, m.Text)
	}
	if n := len(w.fake.Cards(space)); n != 1 {
		t.Fatalf("carol's chat shows %d cards, want the one pairing answer", n)
	}
}
