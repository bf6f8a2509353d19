package matrix_test

import (
	"context"
	"encoding/json"
	"fmt"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"maunium.net/go/mautrix"
	"maunium.net/go/mautrix/event"
	"maunium.net/go/mautrix/id"

	"github.com/ximd/ximd/handlers/adapter"
	"github.com/ximd/ximd/handlers/adapter/adaptertest"
	"github.com/ximd/ximd/handlers/adapter/matrix"
	"github.com/ximd/ximd/test/dendrite"
)

// botName is the display name the tests' bot accounts take: a word nobody writes by chance.
const botName = "Ximbot"

var accounts atomic.Int64

// register creates a new account on s (names are unique per test binary).
func register(t *testing.T, s *dendrite.Server, prefix string) *dendrite.User {
	t.Helper()
	return s.Register(t, fmt.Sprintf("%s%d", prefix, accounts.Add(1)))
}

// newBotAccount registers a bot account named botName.
func newBotAccount(t *testing.T, s *dendrite.Server) *dendrite.User {
	t.Helper()
	bot := register(t, s, "bot")
	if err := bot.Client.SetDisplayName(context.Background(), botName); err != nil {
		t.Fatal(err)
	}
	return bot
}

// botConfig is a bot's target.config: the account, no room.
func botConfig(s *dendrite.Server, bot *dendrite.User) json.RawMessage {
	raw, _ := json.Marshal(map[string]any{"homeserver": s.URL, "access_token": bot.Token})
	return raw
}

// waitJoined waits until u sees bot joined in room (the bot's poll accepts the invitation).
func waitJoined(t *testing.T, u *dendrite.User, room id.RoomID, bot id.UserID) {
	t.Helper()
	deadline := time.Now().Add(20 * time.Second)
	for {
		resp, err := u.Client.JoinedMembers(context.Background(), room)
		if err == nil {
			if _, ok := resp.Joined[bot]; ok {
				return
			}
		}
		if time.Now().After(deadline) {
			t.Fatalf("%s did not join %s within 20s (%v)", bot, room, err)
		}
		time.Sleep(20 * time.Millisecond)
	}
}

// directRoom is a room person creates with the bot invited as a direct chat (is_direct).
func directRoom(t *testing.T, person *dendrite.User, bot id.UserID) id.RoomID {
	t.Helper()
	resp, err := person.Client.CreateRoom(context.Background(), &mautrix.ReqCreateRoom{Preset: "trusted_private_chat", IsDirect: true, Invite: []id.UserID{bot}})
	if err != nil {
		t.Fatal(err)
	}
	return resp.RoomID
}

// groupRoom is a room owner creates with others joined, then the bot invited (no is_direct).
func groupRoom(t *testing.T, owner *dendrite.User, bot id.UserID, others ...*dendrite.User) id.RoomID {
	t.Helper()
	ctx := context.Background()
	resp, err := owner.Client.CreateRoom(ctx, &mautrix.ReqCreateRoom{Preset: "private_chat", Name: "Team room"})
	if err != nil {
		t.Fatal(err)
	}
	for _, o := range others {
		if _, err := owner.Client.InviteUser(ctx, resp.RoomID, &mautrix.ReqInviteUser{UserID: o.ID}); err != nil {
			t.Fatal(err)
		}
		if _, err := o.Client.JoinRoomByID(ctx, resp.RoomID); err != nil {
			t.Fatal(err)
		}
	}
	if _, err := owner.Client.InviteUser(ctx, resp.RoomID, &mautrix.ReqInviteUser{UserID: bot}); err != nil {
		t.Fatal(err)
	}
	return resp.RoomID
}

// mentionContent is text addressed to the bot as a client writes it: the pill's display name
// in the body, the user id in m.mentions.
func mentionContent(bot id.UserID, text string) map[string]any {
	return map[string]any{"msgtype": "m.text", "body": botName + ": " + text, "m.mentions": map[string]any{"user_ids": []id.UserID{bot}}}
}

// botChat is a conversation of person with the bot in room; the first post waits for the bot
// to have joined.
func botChat(s *dendrite.Server, kind adapter.ConversationKind, person *dendrite.User, bot id.UserID, room id.RoomID) adaptertest.BotChat {
	joined := false
	return adaptertest.BotChat{
		Kind:   kind,
		Author: string(person.ID),
		Post: func(t *testing.T, text string, mention bool) string {
			if !joined {
				waitJoined(t, person, room, bot)
				joined = true
			}
			var content any = map[string]any{"msgtype": "m.text", "body": text}
			if mention {
				content = mentionContent(bot, text)
			}
			resp, err := person.Client.SendMessageEvent(context.Background(), room, event.EventMessage, content)
			if err != nil {
				t.Fatal(err)
			}
			return string(resp.EventID)
		},
		Messages: func(t *testing.T) []adaptertest.Seen { return seenBy(t, person, bot, room) },
	}
}

// The universal bot cases (edge-api §4.1) against a real Dendrite: each case a new bot account
// (display name Ximbot); a person invites it to a direct room (is_direct) or to a room of
// three; another account's m.notice is another bot's message.
func TestMatrix_Bots(t *testing.T) {
	s := dendrite.Start(t, dendrite.Options{})
	files := adaptertest.NewFiles()
	a := matrix.New(matrix.Options{Common: adapter.Common{Files: files}, SyncTimeout: 200 * time.Millisecond})
	adaptertest.RunBots(t, adaptertest.Setup{Adapter: a, Files: files}, func(t *testing.T) adaptertest.BotSetup {
		bot := newBotAccount(t, s)
		return adaptertest.BotSetup{
			Config: botConfig(s, bot),
			Direct: func(t *testing.T) adaptertest.BotChat {
				person := register(t, s, "alice")
				return botChat(s, adapter.Direct, person, bot.ID, directRoom(t, person, bot.ID))
			},
			Group: func(t *testing.T) adaptertest.BotChat {
				owner, other := register(t, s, "carol"), register(t, s, "otherbot")
				room := groupRoom(t, owner, bot.ID, other)
				chat := botChat(s, adapter.Group, owner, bot.ID, room)
				chat.PostAsBot = func(t *testing.T, text string) {
					waitJoined(t, other, room, bot.ID)
					if _, err := other.Client.SendMessageEvent(context.Background(), room, event.EventMessage, map[string]any{"msgtype": "m.notice", "body": text}); err != nil {
						t.Fatal(err)
					}
				}
				return chat
			},
		}
	})
}

// until polls cond every 20 ms for up to 20 s.
func until(t *testing.T, what string, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(20 * time.Second)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("not within 20s: %s", what)
		}
		time.Sleep(20 * time.Millisecond)
	}
}

// runPoll runs a.Poll(feed) until the test ends or the returned stop is called.
func runPoll(t *testing.T, a *matrix.Adapter, feed *adaptertest.Feed) (stop func()) {
	t.Helper()
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- a.Poll(ctx, feed) }()
	stopped := false
	stop = func() {
		if stopped {
			return
		}
		stopped = true
		cancel()
		if err := <-done; err != nil && ctx.Err() == nil {
			t.Errorf("Poll: %v", err)
		}
	}
	t.Cleanup(stop)
	return stop
}

func newBot(t *testing.T, cfg json.RawMessage, policy string) adapter.Bot {
	t.Helper()
	p, err := adapter.ParsePolicy(json.RawMessage(policy))
	if err != nil {
		t.Fatal(err)
	}
	return adapter.Bot{ID: fmt.Sprintf("mxbot%d", accounts.Add(1)), Target: adapter.Binding{Adapter: matrix.Name, Config: cfg},
		Connection: adapter.Connection{TargetType: "im", Profiles: []string{"xagent.im.v2"}}, Conversations: p, OpenedAt: time.Now().UnixMilli()}
}

func joinedRooms(t *testing.T, u *dendrite.User) map[id.RoomID]bool {
	t.Helper()
	resp, err := u.Client.JoinedRooms(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	out := map[id.RoomID]bool{}
	for _, r := range resp.JoinedRooms {
		out[r] = true
	}
	return out
}

// edge-api §7.2.1 Bot: the bot joins a room it is invited to when its policy admits the inviter
// (direct: the inviter as a direct message's author; group: groups not closed, allow_groups
// naming the room), never an encrypted one, and leaves the others invited.
func TestMatrix_BotJoinsTheInvitationsItsPolicyAdmits(t *testing.T) {
	s := dendrite.Start(t, dendrite.Options{})
	bot := newBotAccount(t, s)
	alice, bob := register(t, s, "alice"), register(t, s, "bob")
	ctx := context.Background()
	allowed, _ := alice.Client.CreateRoom(ctx, &mautrix.ReqCreateRoom{Preset: "private_chat", Name: "allowed"})
	other, _ := bob.Client.CreateRoom(ctx, &mautrix.ReqCreateRoom{Preset: "private_chat", Name: "other"})
	policy := fmt.Sprintf(`{"direct": "allowlist", "allow_users": [%q], "groups": "mention", "allow_groups": [%q]}`, alice.ID, allowed.RoomID)
	feed := adaptertest.NewFeed(adaptertest.NewFiles())
	feed.AddBot(newBot(t, botConfig(s, bot), policy))
	a := matrix.New(matrix.Options{SyncTimeout: 100 * time.Millisecond})
	runPoll(t, a, feed)
	encrypted, err := alice.Client.CreateRoom(ctx, &mautrix.ReqCreateRoom{Preset: "trusted_private_chat", IsDirect: true, Invite: []id.UserID{bot.ID},
		InitialState: []*event.Event{{Type: event.StateEncryption, StateKey: new(""), Content: event.Content{Parsed: &event.EncryptionEventContent{Algorithm: id.AlgorithmMegolmV1}}}}})
	if err != nil {
		t.Fatal(err)
	}
	strangerDM := directRoom(t, bob, bot.ID)
	for _, r := range []id.RoomID{allowed.RoomID, other.RoomID} {
		owner := map[id.RoomID]*dendrite.User{allowed.RoomID: alice, other.RoomID: bob}[r]
		if _, err := owner.Client.InviteUser(ctx, r, &mautrix.ReqInviteUser{UserID: bot.ID}); err != nil {
			t.Fatal(err)
		}
	}
	aliceDM := directRoom(t, alice, bot.ID)
	until(t, "the bot joins alice's direct room and the allowed group", func() bool {
		j := joinedRooms(t, bot)
		return j[aliceDM] && j[allowed.RoomID]
	})
	// A marker written after the joins is read by a later sync than every invitation's.
	if _, err := alice.Client.SendText(ctx, aliceDM, "marker"); err != nil {
		t.Fatal(err)
	}
	until(t, "the marker read", func() bool { return len(feed.Arrivals()) == 1 })
	j := joinedRooms(t, bot)
	for name, r := range map[string]id.RoomID{"a stranger's direct room (allowlist)": strangerDM, "a group allow_groups does not name": other.RoomID, "an encrypted room": encrypted.RoomID} {
		if j[r] {
			t.Errorf("the bot joined %s", name)
		}
	}
	// A direct room the bot joined is in its m.direct, so it stays direct when others join.
	var direct event.DirectChatsEventContent
	if err := bot.Client.GetAccountData(ctx, event.AccountDataDirectChats.Type, &direct); err != nil || len(direct[alice.ID]) != 1 || direct[alice.ID][0] != aliceDM {
		t.Fatalf("the bot's m.direct: %v %v", direct, err)
	}
}

// edge-api §7.2.1 Bot: a room of two is direct even without is_direct, titled with the person's
// name; in a group, a reply to the bot's message and the bot's user id in the body are mentions,
// removed (with the reply's quoted fallback) from the text.
func TestMatrix_BotKindsAndMentions(t *testing.T) {
	s := dendrite.Start(t, dendrite.Options{})
	bot := newBotAccount(t, s)
	alice, bob := register(t, s, "alice"), register(t, s, "bob")
	ctx := context.Background()
	files := adaptertest.NewFiles()
	b := newBot(t, botConfig(s, bot), `{"direct": "open", "groups": "mention"}`)
	feed := adaptertest.NewFeed(files)
	feed.AddBot(b)
	a := matrix.New(matrix.Options{Common: adapter.Common{Files: files}, SyncTimeout: 100 * time.Millisecond})
	runPoll(t, a, feed)

	// Two members, no is_direct: direct.
	two, _ := alice.Client.CreateRoom(ctx, &mautrix.ReqCreateRoom{Preset: "private_chat", Invite: []id.UserID{bot.ID}})
	waitJoined(t, alice, two.RoomID, bot.ID)
	if _, err := alice.Client.SendText(ctx, two.RoomID, "just us two"); err != nil {
		t.Fatal(err)
	}
	conv := adapter.Conversation{Kind: adapter.Direct, ID: string(two.RoomID)}
	until(t, "the message of the room of two in a direct channel", func() bool {
		in := feed.InboxOf(conv.ChannelID(b.ID))
		return in != nil && len(in.Messages()) == 1 && in.Messages()[0].Text == "just us two"
	})
	if arr := feed.Arrivals()[0]; arr.Conversation.Title != alice.ID.Localpart() || arr.Author.DisplayName != alice.ID.Localpart() {
		t.Fatalf("arrival %+v: want titled with alice's display name", arr)
	}

	// A group: the bot's message, then replies.
	group := groupRoom(t, alice, bot.ID, bob)
	waitJoined(t, alice, group, bot.ID)
	cfg, _ := a.Bind(b.Target.Config, adapter.Conversation{ID: string(group)})
	tg, err := a.Open(cfg)
	if err != nil {
		t.Fatal(err)
	}
	said, err := tg.Send(ctx, adapter.Message{Text: "I am here", Final: true})
	if err != nil {
		t.Fatal(err)
	}
	for _, content := range []map[string]any{
		{"msgtype": "m.text", "body": "> <" + string(bot.ID) + "> I am here\n\nthanks, and the weather?",
			"m.relates_to": map[string]any{"m.in_reply_to": map[string]any{"event_id": said}}},
		{"msgtype": "m.text", "body": "chatter between people"},
		{"msgtype": "m.text", "body": "hey " + string(bot.ID) + " what time is it?"},
	} {
		if _, err := bob.Client.SendMessageEvent(ctx, group, event.EventMessage, content); err != nil {
			t.Fatal(err)
		}
	}
	gconv := adapter.Conversation{Kind: adapter.Group, ID: string(group)}
	until(t, "the two mentions in the group's channel", func() bool {
		in := feed.InboxOf(gconv.ChannelID(b.ID))
		return in != nil && len(in.Messages()) == 2
	})
	got := feed.InboxOf(gconv.ChannelID(b.ID)).Messages()
	if got[0].Text != "thanks, and the weather?" || got[1].Text != "hey what time is it?" {
		t.Fatalf("group messages %q, %q", got[0].Text, got[1].Text)
	}
	if n := feed.Refused(adapter.RefusedNotMentioned); n != 1 {
		t.Fatalf("refused not_mentioned %d times, want 1", n)
	}
}

// A channel PUT on an account whose sync loop already runs (for a bot) is served by that loop,
// its room read back from its binding on: a message the loop read before it served the room is
// not lost.
func TestMatrix_ChannelJoiningARunningAccountLoopIsReadBack(t *testing.T) {
	s := dendrite.Start(t, dendrite.Options{})
	bot := newBotAccount(t, s)
	alice := register(t, s, "alice")
	room := s.Room(t, bot, false, alice)
	b := newBot(t, botConfig(s, bot), `{"direct": "closed", "groups": "closed"}`)
	a := matrix.New(matrix.Options{SyncTimeout: 100 * time.Millisecond})
	files := adaptertest.NewFiles()
	before := adaptertest.NewFeed(files)
	before.AddBot(b)
	stop := runPoll(t, a, before)
	cfg, _ := a.Bind(b.Target.Config, adapter.Conversation{ID: string(room)})
	ch := adapter.Channel{ID: "put1", Connection: b.Connection, Target: adapter.Binding{Adapter: matrix.Name, Config: cfg}, OpenedAt: time.Now().UnixMilli()}
	if a.PollKey(ch) != a.PollKey(adapter.Channel{ID: b.ID, Target: adapter.Binding{Adapter: matrix.Name, Config: must(a.Bind(b.Target.Config, adapter.Conversation{}))}}) {
		t.Fatal("the channel's poll key is not its account's")
	}
	if _, err := alice.Client.SendText(context.Background(), room, "said while only the bot listened"); err != nil {
		t.Fatal(err)
	}
	until(t, "the bot's loop read it (refused)", func() bool { return before.Refused(adapter.RefusedDirectClosed) == 1 })
	// A marker read by a later sync: the position saved is past the first message.
	if _, err := alice.Client.SendText(context.Background(), room, "marker"); err != nil {
		t.Fatal(err)
	}
	until(t, "the marker read", func() bool { return before.Refused(adapter.RefusedDirectClosed) == 2 })
	stop()
	after := adaptertest.NewFeed(files, ch)
	after.AddBot(b)
	cursor, _ := before.Cursor(context.Background())
	after.SetCursor(cursor)
	runPoll(t, a, after)
	until(t, "both messages in the PUT channel", func() bool { return len(after.InboxOf("put1").Messages()) == 2 })
	if m := after.InboxOf("put1").Messages(); m[0].Text != "said while only the bot listened" || m[1].Text != "marker" {
		t.Fatalf("PUT channel got %+v", m)
	}
	if len(after.Arrivals()) != 0 {
		t.Fatalf("the bot admitted %+v from a room a channel PUT binds", after.Arrivals())
	}
}

func must(raw json.RawMessage, err error) json.RawMessage {
	if err != nil {
		panic(err)
	}
	return raw
}

// A bot's config names no room; Bind names one (a placeholder without a conversation), and the
// bot's poll key is its account's, as a channel's on that account is; the key of a room is the
// one docs/adapters/matrix.md shows.
func TestMatrix_BotBindsRoomsOfItsAccount(t *testing.T) {
	a := matrix.New(matrix.Options{})
	if got := a.ConversationKeys(); len(got) != 1 || got[0] != "room_id" {
		t.Fatalf("ConversationKeys %v", got)
	}
	bot := json.RawMessage(`{"homeserver": "https://matrix.example.org", "access_token": "syt_SECRET", "streaming": "none"}`)
	key := func(cfg json.RawMessage) string {
		return a.PollKey(adapter.Channel{ID: "x", Target: adapter.Binding{Adapter: matrix.Name, Config: cfg}})
	}
	placeholder := must(a.Bind(bot, adapter.Conversation{}))
	if _, err := a.Open(placeholder); err != nil {
		t.Fatalf("the placeholder binding does not open: %v", err)
	}
	room := must(a.Bind(bot, adapter.Conversation{Kind: adapter.Group, ID: "!abc:example.org"}))
	var c map[string]any
	_ = json.Unmarshal(room, &c)
	if c["room_id"] != "!abc:example.org" || c["streaming"] != "none" {
		t.Fatalf("bound config %s", room)
	}
	other := must(a.Bind(json.RawMessage(`{"homeserver": "https://matrix.example.org", "access_token": "syt_OTHER"}`), adapter.Conversation{ID: "!abc:example.org"}))
	if k := key(placeholder); k == "" || k != key(room) || k == key(other) || strings.Contains(k, "SECRET") {
		t.Fatalf("poll keys %q %q %q", k, key(room), key(other))
	}
	if got := (adapter.Conversation{ID: "!abc:example.org"}).ChannelID("helper"); got != "helper-h_t323bmloixk7bpw45ta4zx2v5b" {
		t.Fatalf("channel id %s (docs/adapters/matrix.md shows helper-h_t323bmloixk7bpw45ta4zx2v5b)", got)
	}
}

// The first poll of an account with only channels (no bot), its room holding more than one
// sync's timeline: the gap is read back to the channel's binding, every message once (it once
// indexed the feed's bots, none, and the process died on every start until a cursor was saved).
func TestMatrix_FirstPollOfALongRoomReadsBackToTheBinding(t *testing.T) {
	s := dendrite.Start(t, dendrite.Options{})
	bot := newBotAccount(t, s)
	alice := register(t, s, "alice")
	room := s.Room(t, bot, false, alice)
	ctx := context.Background()
	if _, err := alice.Client.SendText(ctx, room, "before the binding"); err != nil {
		t.Fatal(err)
	}
	// Bound as if a grace after that message: it lies before what the channel takes.
	opened := time.Now().Add(adapter.BindGrace + time.Millisecond).UnixMilli()
	ch := adapter.Channel{ID: "long", Target: adapter.Binding{Adapter: matrix.Name, Config: config(t, s, bot, room, nil)}, OpenedAt: opened}
	// The lines are written after the channel's first millisecond (timestamps are whole ms).
	until(t, "the clock past the binding", func() bool { return time.Now().UnixMilli() > ch.Since()+1 })
	const n = 130 // past one sync's timeline (100)
	for i := range n {
		if _, err := alice.Client.SendText(ctx, room, fmt.Sprintf("line %d", i)); err != nil {
			t.Fatal(err)
		}
	}
	feed := adaptertest.NewFeed(adaptertest.NewFiles(), ch)
	runPoll(t, matrix.New(matrix.Options{SyncTimeout: 100 * time.Millisecond}), feed)
	deadline := time.Now().Add(time.Minute)
	for got := feed.InboxOf("long").Messages(); len(got) < n; got = feed.InboxOf("long").Messages() {
		if time.Now().After(deadline) {
			first := ""
			if len(got) > 0 {
				first = got[0].Text
			}
			t.Fatalf("%d of %d lines in the channel after a minute, the first %q", len(got), n, first)
		}
		time.Sleep(20 * time.Millisecond)
	}
	for i, m := range feed.InboxOf("long").Messages() {
		if want := fmt.Sprintf("line %d", i); i >= n || m.Text != want {
			t.Fatalf("message %d is %q, want %q (in order, once each, none before the binding)", i, m.Text, want)
		}
	}
}
