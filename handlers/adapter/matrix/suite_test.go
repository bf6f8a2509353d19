package matrix_test

import (
	"context"
	"testing"
	"time"

	"maunium.net/go/mautrix/event"
	"maunium.net/go/mautrix/id"

	"github.com/ximd/ximd/handlers/adapter"
	"github.com/ximd/ximd/handlers/adapter/adaptertest"
	"github.com/ximd/ximd/handlers/adapter/matrix"
	"github.com/ximd/ximd/test/dendrite"
)

// The universal adapter suite against a real Dendrite: alice is the person in each room.
func TestMatrix_UniversalAdapterSuite(t *testing.T) {
	s := dendrite.Start(t, dendrite.Options{})
	bot, alice := s.Register(t, "bot"), s.Register(t, "alice")
	files := adaptertest.NewFiles()
	limited := dendrite.Start(t, dendrite.Options{RateLimit: true})
	limitedBot := limited.Register(t, "bot")
	adaptertest.Run(t, adaptertest.Setup{
		Adapter: matrix.New(matrix.Options{Common: adapter.Common{Files: files}, SyncTimeout: 50 * time.Millisecond}), // syncs that bring nothing, too
		Files:   files,
		RateLimited: func(t *testing.T) func(context.Context) error {
			// Dendrite rate-limits typing notifications (not sends).
			tg, err := matrix.New(matrix.Options{}).Open(config(t, limited, limitedBot, limited.Room(t, limitedBot, false), nil))
			if err != nil {
				t.Fatal(err)
			}
			return func(ctx context.Context) error {
				return tg.(adapter.ActivityShower).ShowActivity(ctx, adapter.Activity{Status: adapter.StatusTyping})
			}
		},
		NewChat: func(t *testing.T, streaming adapter.Streaming, activity adapter.ActivityMode) adaptertest.Chat {
			room := s.Room(t, bot, false, alice)
			cfg := config(t, s, bot, room, map[string]any{"streaming": streaming, "activity": activity})
			typing := alice.Typing(room, bot.ID)
			return adaptertest.Chat{
				Config:   cfg,
				Messages: func(t *testing.T) []adaptertest.Seen { return seenBy(t, alice, bot.ID, room) },
				Activity: func(t *testing.T) bool { return typing(t) },
				Post: func(t *testing.T, text string, f *adaptertest.SeenFile) string {
					return postAs(t, alice, room, text, f)
				},
			}
		},
	})
}

// seenBy is the room as u sees it: the bot's messages, oldest first, with their files' bytes.
func seenBy(t *testing.T, u *dendrite.User, bot id.UserID, room id.RoomID) []adaptertest.Seen {
	t.Helper()
	var out []adaptertest.Seen
	for _, m := range u.Messages(t, room) {
		if m.Sender != bot {
			continue
		}
		s := adaptertest.Seen{ID: string(m.ID), Text: m.Body, ReplyTo: m.ReplyTo}
		if m.URL != "" {
			uri, err := id.ParseContentURI(m.URL)
			if err != nil {
				t.Fatal(err)
			}
			data, err := u.Client.DownloadBytes(context.Background(), uri)
			if err != nil {
				t.Fatal(err)
			}
			name := m.Filename
			if name == "" {
				name = m.Body
			}
			s.Text, s.Files = "", []adaptertest.SeenFile{{Name: name, Data: data}}
		}
		out = append(out, s)
	}
	return out
}

// postAs sends text (or a file with text as its caption) as u.
func postAs(t *testing.T, u *dendrite.User, room id.RoomID, text string, f *adaptertest.SeenFile) string {
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
