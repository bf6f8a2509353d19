package matrix_test

import (
	"context"
	"encoding/json"
	"testing"
	"time"

	"maunium.net/go/mautrix"
	"maunium.net/go/mautrix/event"
	"maunium.net/go/mautrix/id"

	"github.com/ximd/ximd/handlers/target"
	"github.com/ximd/ximd/handlers/target/matrix"
	"github.com/ximd/ximd/handlers/target/targettest"
	"github.com/ximd/ximd/test/dendrite"
)

// The universal adapter suite against a real Dendrite: alice is the person in each room.
func TestMatrix_UniversalAdapterSuite(t *testing.T) {
	s := dendrite.Start(t, dendrite.Options{})
	bot, alice := s.Register(t, "bot"), s.Register(t, "alice")
	files := targettest.NewFiles()
	limited := dendrite.Start(t, dendrite.Options{RateLimit: true})
	limitedBot := limited.Register(t, "bot")
	targettest.Run(t, targettest.Setup{
		Adapter: matrix.New(matrix.Options{Files: files, SyncTimeout: 50 * time.Millisecond}), // syncs that bring nothing, too
		Files:   files,
		RateLimited: func(t *testing.T) func(context.Context) error {
			// Dendrite rate-limits typing notifications (not sends).
			tg, err := matrix.New(matrix.Options{}).Open(config(t, limited, limitedBot, limited.Room(t, limitedBot, false), nil))
			if err != nil {
				t.Fatal(err)
			}
			return func(ctx context.Context) error {
				return tg.(target.ActivityShower).ShowActivity(ctx, target.Activity{Status: target.StatusTyping})
			}
		},
		NewChat: func(t *testing.T, streaming, activity string) targettest.Chat {
			room := s.Room(t, bot, false, alice)
			cfg := config(t, s, bot, room, map[string]any{"streaming": streaming, "activity": activity})
			return targettest.Chat{
				Config:   cfg,
				Channel:  target.Channel{ID: "suite"},
				Messages: func(t *testing.T) []targettest.Seen { return seenBy(t, alice, bot.ID, room) },
				Activity: typingSeenBy(t, alice, bot.ID, room),
				Post:     func(t *testing.T, text string, f *targettest.SeenFile) string { return postAs(t, alice, room, text, f) },
			}
		},
	})
}

// seenBy is the room as u sees it: the bot's messages, oldest first, each with its latest edit.
func seenBy(t *testing.T, u *dendrite.User, bot id.UserID, room id.RoomID) []targettest.Seen {
	t.Helper()
	ctx := context.Background()
	resp, err := u.Client.Messages(ctx, room, "", "", mautrix.DirectionBackward, &mautrix.FilterPart{Types: []event.Type{event.EventMessage}, Senders: []id.UserID{bot}}, 500)
	if err != nil {
		t.Fatal(err)
	}
	type content struct {
		MsgType    string `json:"msgtype"`
		Body       string `json:"body"`
		Filename   string `json:"filename"`
		URL        string `json:"url"`
		NewContent *struct {
			Body string `json:"body"`
		} `json:"m.new_content"`
		RelatesTo *struct {
			RelType   string `json:"rel_type"`
			EventID   string `json:"event_id"`
			InReplyTo *struct {
				EventID string `json:"event_id"`
			} `json:"m.in_reply_to"`
		} `json:"m.relates_to"`
	}
	latest := map[string]string{}
	var out []targettest.Seen
	for _, ev := range resp.Chunk { // newest first
		var c content
		_ = json.Unmarshal(ev.Content.VeryRaw, &c)
		if c.RelatesTo != nil && c.RelatesTo.RelType == "m.replace" && c.NewContent != nil {
			if _, ok := latest[c.RelatesTo.EventID]; !ok {
				latest[c.RelatesTo.EventID] = c.NewContent.Body
			}
			continue
		}
		m := targettest.Seen{ID: string(ev.ID), Text: c.Body}
		if body, ok := latest[m.ID]; ok {
			m.Text = body
		}
		if c.RelatesTo != nil && c.RelatesTo.InReplyTo != nil {
			m.ReplyTo = c.RelatesTo.InReplyTo.EventID
		}
		if c.URL != "" {
			uri, err := id.ParseContentURI(c.URL)
			if err != nil {
				t.Fatal(err)
			}
			data, err := u.Client.DownloadBytes(ctx, uri)
			if err != nil {
				t.Fatal(err)
			}
			name := c.Filename
			if name == "" {
				name = c.Body
			}
			m.Text, m.Files = "", []targettest.SeenFile{{Name: name, Data: data}}
		}
		out = append([]targettest.Seen{m}, out...)
	}
	return out
}

// typingSeenBy reports, from u's sync, whether the bot types in the room.
func typingSeenBy(t *testing.T, u *dendrite.User, bot id.UserID, room id.RoomID) func(*testing.T) bool {
	since := ""
	typing := false
	return func(t *testing.T) bool {
		resp, err := u.Client.SyncRequest(context.Background(), 200, since, "", false, event.PresenceOffline)
		if err != nil {
			t.Fatal(err)
		}
		since = resp.NextBatch
		jr := resp.Rooms.Join[room]
		if jr == nil {
			return typing
		}
		for _, ev := range jr.Ephemeral.Events {
			if ev.Type != event.EphemeralEventTyping {
				continue
			}
			var c struct {
				UserIDs []id.UserID `json:"user_ids"`
			}
			_ = json.Unmarshal(ev.Content.VeryRaw, &c)
			typing = false
			for _, uid := range c.UserIDs {
				typing = typing || uid == bot
			}
		}
		return typing
	}
}

// postAs sends text (or a file with text as its caption) as u.
func postAs(t *testing.T, u *dendrite.User, room id.RoomID, text string, f *targettest.SeenFile) string {
	t.Helper()
	ctx := context.Background()
	if f == nil {
		resp, err := u.Client.SendText(ctx, room, text)
		if err != nil {
			t.Fatal(err)
		}
		return string(resp.EventID)
	}
	up, err := u.Client.UploadBytes(ctx, f.Data, "application/octet-stream")
	if err != nil {
		t.Fatal(err)
	}
	content := map[string]any{"msgtype": "m.file", "body": f.Name, "filename": f.Name, "url": up.ContentURI.String()}
	if text != "" {
		content["body"] = text
	}
	resp, err := u.Client.SendMessageEvent(ctx, room, event.EventMessage, content)
	if err != nil {
		t.Fatal(err)
	}
	return string(resp.EventID)
}
