package matrix_test

import (
	"context"
	"encoding/json"
	"fmt"
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
