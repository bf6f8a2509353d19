package test

import (
	"bytes"
	"context"
	"encoding/json"
	"net/http"
	"strings"
	"testing"
	"time"

	"maunium.net/go/mautrix"
	"maunium.net/go/mautrix/event"
	"maunium.net/go/mautrix/id"

	"github.com/ximd/ximd/handlers/adapter"
	"github.com/ximd/ximd/handlers/adapter/matrix"
	"github.com/ximd/ximd/profile"
	"github.com/ximd/ximd/test/dendrite"
)

// mxBotName is the display name of the tests' bot account.
const mxBotName = "Ximbot"

// mxBot registers a bot account named mxBotName on s.
func mxBot(t *testing.T, s *dendrite.Server) *dendrite.User {
	t.Helper()
	bot := s.Register(t, "bot")
	if err := bot.Client.SetDisplayName(context.Background(), mxBotName); err != nil {
		t.Fatal(err)
	}
	return bot
}

// putMatrixBot PUTs a matrix bot of account bot with the conversations policy.
func (e *env) putMatrixBot(id string, s *dendrite.Server, bot *dendrite.User, conversations map[string]any) (int, []byte) {
	e.t.Helper()
	body := map[string]any{
		"connection": map[string]any{"target_type": "im", "profiles": []string{"xagent.im.v2"}},
		"target":     map[string]any{"adapter": "matrix", "config": map[string]any{"homeserver": s.URL, "access_token": bot.Token}},
	}
	if conversations != nil {
		body["conversations"] = conversations
	}
	status, b, err := e.node.Do(http.MethodPut, "/v1/bots/"+id, body)
	if err != nil {
		e.t.Fatal(err)
	}
	return status, b
}

// mxJoined waits until u sees bot joined in room.
func mxJoined(t *testing.T, u *dendrite.User, room id.RoomID, bot id.UserID) {
	t.Helper()
	poll(t, "the bot joins "+string(room), func() bool {
		resp, err := u.Client.JoinedMembers(context.Background(), room)
		_, in := resp.Joined[bot]
		return err == nil && in
	})
}

// mxDirect is a room person creates with the bot invited as a direct chat.
func mxDirect(t *testing.T, person *dendrite.User, bot id.UserID) id.RoomID {
	t.Helper()
	resp, err := person.Client.CreateRoom(context.Background(), &mautrix.ReqCreateRoom{Preset: "trusted_private_chat", IsDirect: true, Invite: []id.UserID{bot}})
	if err != nil {
		t.Fatal(err)
	}
	return resp.RoomID
}

// mxBotSays waits until person sees a message of bot in room for which ok holds.
func mxBotSays(t *testing.T, person *dendrite.User, room id.RoomID, bot id.UserID, desc string, ok func(body string) bool) dendrite.Message {
	t.Helper()
	var got dendrite.Message
	poll(t, desc, func() bool {
		for _, m := range person.Messages(t, room) {
			if m.Sender == bot && ok(m.Body) {
				got = m
				return true
			}
		}
		return false
	})
	return got
}

// edge-api §4.1, §7.2.1 Bot: a person nobody bound invites the bot to a direct room -> it joins
// (policy open), her first message opens the channel <bot>-h_<digest of the room id>: xAgent
// gets channel.opened, then the chat.message; the agent's streamed answer appears in her room.
func TestMatrixBots_DirectInviteOpensChannelAndAgentAnswersThere(t *testing.T) {
	s := dendrite.Start(t, dendrite.Options{})
	bot, alice := mxBot(t, s), s.Register(t, "alice")
	e := newEnv(t, envOptions{mutate: fastAcks})
	if status, b := e.putMatrixBot("mb1", s, bot, map[string]any{"direct": "open"}); status != http.StatusOK || bytes.Contains(b, []byte(bot.Token)) {
		t.Fatalf("PUT bot: %d %s", status, b)
	}
	if status, b := e.putMatrixBot("mbbad", s, &dendrite.User{Token: "wrong"}, nil); status != http.StatusUnprocessableEntity || !bytes.Contains(b, []byte(profile.CodeTargetConfigInvalid)) {
		t.Fatalf("PUT bot with a bad token: %d %s, want 422 target_config_invalid", status, b)
	}
	room := mxDirect(t, alice, bot.ID)
	mxJoined(t, alice, room, bot.ID)
	sent, err := alice.Client.SendText(context.Background(), room, "hello bot")
	if err != nil {
		t.Fatal(err)
	}
	channel := adapter.Conversation{ID: string(room)}.ChannelID("mb1")
	if !strings.HasPrefix(channel, "mb1-h_") {
		t.Fatalf("channel id %s: a room id is not token-safe, its key is h_…", channel)
	}
	opened := nextOf(t, e.agent, profile.TypeChannelOpened)
	var op struct {
		BotID        string `json:"bot_id"`
		Conversation struct{ Kind, Title string }
	}
	if err := json.Unmarshal(opened.Payload, &op); err != nil || opened.ChannelID != channel || op.BotID != "mb1" ||
		op.Conversation.Kind != "direct" || op.Conversation.Title != "alice" {
		t.Fatalf("channel.opened on %s: %s", opened.ChannelID, opened.Payload)
	}
	if bytes.Contains(opened.Payload, []byte(room)) || bytes.Contains(opened.Payload, []byte(alice.ID)) { // P-ID-2
		t.Fatalf("channel.opened carries a platform id: %s", opened.Payload)
	}
	env, m := userMessage(t, e.agent, wait)
	if env.ChannelID != channel || m.Text != "hello bot" || m.MessageID != matrix.MessageIDOf(sent.EventID) {
		t.Fatalf("chat.message on %s: %+v", env.ChannelID, m)
	}
	ackUser(t, e.agent, env, map[string]any{"message_id": m.MessageID, "status": "accepted"})

	// The agent answers, streamed, on the bot's channel: one message in alice's room, edited
	// to the final text.
	for i, part := range []string{"Hi ", "Alice, ", "how can I help?"} {
		e.sendTo(channel, profile.TypeDelta, delta("a1", i+1, part))
	}
	pid := e.sendTo(channel, profile.TypeMessage, msg("a1", "Hi Alice, how can I help?"))
	wantAck(t, e.ackOf(pid), "accepted", "")
	mxBotSays(t, alice, room, bot.ID, "the answer in alice's room", func(b string) bool { return b == "Hi Alice, how can I help?" })
	var mine int
	for _, m := range alice.Messages(t, room) {
		if m.Sender == bot.ID {
			mine++
		}
	}
	if mine != 1 {
		t.Fatalf("alice sees %d messages of the bot, want the one answer", mine)
	}
	_, b, _ := e.node.Do(http.MethodGet, "/v1/channels/"+channel, nil)
	if ch := jsonOf(t, b); ch["bot"] != "mb1" || ch["conversation"].(map[string]any)["id"] != string(room) || strings.Contains(string(b), bot.Token) {
		t.Fatalf("channel representation: %s", b)
	}
}

// edge-api §4.1 groups "mention", §7.2.1 Bot: in a room of several people the bot joins when
// invited; chatter and another bot's m.notice (even mentioning it) never reach xAgent; a message
// naming the bot does, without the mention.
func TestMatrixBots_GroupNeedsAMentionRemoved(t *testing.T) {
	s := dendrite.Start(t, dendrite.Options{})
	bot, bob, carol, other := mxBot(t, s), s.Register(t, "bob"), s.Register(t, "carol"), s.Register(t, "otherbot")
	e := newEnv(t, envOptions{mutate: fastAcks})
	if status, b := e.putMatrixBot("mb2", s, bot, nil); status != http.StatusOK {
		t.Fatalf("PUT bot: %d %s", status, b)
	}
	room := s.Room(t, bob, false, carol, other)
	ctx := context.Background()
	if _, err := bob.Client.InviteUser(ctx, room, &mautrix.ReqInviteUser{UserID: bot.ID}); err != nil {
		t.Fatal(err)
	}
	mxJoined(t, bob, room, bot.ID)
	mention := map[string]any{"user_ids": []id.UserID{bot.ID}}
	for _, post := range []struct {
		who     *dendrite.User
		content map[string]any
	}{
		{bob, map[string]any{"msgtype": "m.text", "body": "chatter between people"}},
		{other, map[string]any{"msgtype": "m.notice", "body": mxBotName + ": beep", "m.mentions": mention}},
		{carol, map[string]any{"msgtype": "m.text", "body": mxBotName + ": what is on today?", "m.mentions": mention}},
	} {
		if _, err := post.who.Client.SendMessageEvent(ctx, room, event.EventMessage, post.content); err != nil {
			t.Fatal(err)
		}
	}
	channel := adapter.Conversation{ID: string(room)}.ChannelID("mb2")
	opened := nextOf(t, e.agent, profile.TypeChannelOpened)
	if opened.ChannelID != channel || !bytes.Contains(opened.Payload, []byte(`"kind":"group"`)) || !bytes.Contains(opened.Payload, []byte(`"title":"ximd test"`)) {
		t.Fatalf("channel.opened on %s: %s", opened.ChannelID, opened.Payload)
	}
	// The room's messages are read in order: the first passed on is the mention.
	env, m := userMessage(t, e.agent, wait)
	if env.ChannelID != channel || m.Text != "what is on today?" {
		t.Fatalf("the first message passed on %s: %q, want the mention without it", env.ChannelID, m.Text)
	}
	ackUser(t, e.agent, env, map[string]any{"message_id": m.MessageID, "status": "accepted"})
	poll(t, "refusals counted", func() bool {
		_, b, _ := e.node.Do(http.MethodGet, "/v1/bots/mb2", nil)
		return strings.Contains(string(b), `"not_mentioned":1`) && strings.Contains(string(b), `"from_bot":1`)
	})
	e.quiet(300 * time.Millisecond)
}

// edge-api §4.1 pairing, §7.2.1 Bot: under the default policy a stranger's direct invitation is
// joined so the bot can answer; their message gets one answer with a code in their room and
// nothing reaches xAgent; once the operator approves the code, their next message opens the
// channel.
func TestMatrixBots_PairingCodeThenApprovalOpens(t *testing.T) {
	s := dendrite.Start(t, dendrite.Options{})
	bot, dave := mxBot(t, s), s.Register(t, "dave")
	e := newEnv(t, envOptions{mutate: fastAcks})
	if status, b := e.putMatrixBot("mb3", s, bot, nil); status != http.StatusOK || !bytes.Contains(b, []byte(`"direct":"pairing"`)) {
		t.Fatalf("PUT bot: %d %s", status, b)
	}
	room := mxDirect(t, dave, bot.ID)
	mxJoined(t, dave, room, bot.ID)
	ctx := context.Background()
	if _, err := dave.Client.SendText(ctx, room, "let me in"); err != nil {
		t.Fatal(err)
	}
	answer := mxBotSays(t, dave, room, bot.ID, "the pairing answer in dave's room", func(b string) bool { return strings.Contains(b, "pairing code") })
	_, b, _ := e.node.Do(http.MethodGet, "/v1/bots/mb3/pairings", nil)
	var list struct {
		Pairings []struct{ Code, User string }
	}
	_ = json.Unmarshal(b, &list)
	if len(list.Pairings) != 1 || list.Pairings[0].User != string(dave.ID) || !strings.Contains(answer.Body, list.Pairings[0].Code) {
		t.Fatalf("pairings %s; answer %q", b, answer.Body)
	}
	if _, err := dave.Client.SendText(ctx, room, "still waiting"); err != nil {
		t.Fatal(err)
	}
	poll(t, "both refused pairing_pending", func() bool {
		_, b, _ := e.node.Do(http.MethodGet, "/v1/bots/mb3", nil)
		return strings.Contains(string(b), `"pairing_pending":2`)
	})
	e.quiet(300 * time.Millisecond)
	if status, b, _ := e.node.Do(http.MethodPost, "/v1/bots/mb3/pairings/"+list.Pairings[0].Code, nil); status != http.StatusNoContent {
		t.Fatalf("approve: %d %s", status, b)
	}
	if _, err := dave.Client.SendText(ctx, room, "thanks"); err != nil {
		t.Fatal(err)
	}
	channel := adapter.Conversation{ID: string(room)}.ChannelID("mb3")
	if opened := nextOf(t, e.agent, profile.TypeChannelOpened); opened.ChannelID != channel {
		t.Fatalf("channel.opened on %s, want %s", opened.ChannelID, channel)
	}
	if env, m := userMessage(t, e.agent, wait); env.ChannelID != channel || m.Text != "thanks" {
		t.Fatalf("first message passed on %s: %q, want %q", env.ChannelID, m.Text, "thanks")
	}
	var answers int
	for _, m := range dave.Messages(t, room) {
		if m.Sender == bot.ID {
			answers++
		}
	}
	if answers != 1 {
		t.Fatalf("dave got %d answers from the bot, want the one pairing answer", answers)
	}
}
