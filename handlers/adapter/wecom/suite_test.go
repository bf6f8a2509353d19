package wecom_test

import (
	"context"
	"encoding/json"
	"fmt"
	"log/slog"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/ximd/ximd/handlers/adapter"
	"github.com/ximd/ximd/handlers/adapter/adaptertest"
	"github.com/ximd/ximd/handlers/adapter/wecom"
	"github.com/ximd/ximd/handlers/adapter/wecom/wecomtest"
)

var people atomic.Int64

// fast is the long connection's timing in tests: quick reconnections.
var fast = wecom.Timing{Ping: time.Second, Answer: 2 * time.Second, Connect: 5 * time.Second, MaxBackoff: 500 * time.Millisecond, Retake: 500 * time.Millisecond, ThinkGrace: 200 * time.Millisecond}

// The universal adapter suite against the WeCom fake: each chat is a person's single chat with
// one robot. The person wrote to it before, not since the binding, so answers are proactive
// messages here (stream_test.go covers replies).
func TestWeCom_UniversalAdapterSuite(t *testing.T) {
	fake := newFake(t)
	bot := fake.AddBot("Helper")
	files := adaptertest.NewFiles()
	a := wecom.New(wecom.Options{Common: adapter.Common{Files: files, Logger: testLogger(t)}, Timing: fast})
	t.Cleanup(func() { _ = a.Close() })
	adaptertest.Run(t, adaptertest.Setup{
		Adapter:          a,
		Files:            files,
		ForgetsConfirmed: true, // WeCom pushes callbacks and keeps no position
		SeenID:           func(id string) string { sid, _, _ := strings.Cut(id, "@"); return sid },
		RateLimited: func(t *testing.T) func(context.Context) error {
			user := fmt.Sprintf("limited%d", people.Add(1))
			fake.Say(bot, wecomtest.Single(user), user, "hi", false)
			tg, err := a.Open(config(t, fake, bot, map[string]any{"user_id": user, "streaming": "none"}))
			if err != nil {
				t.Fatal(err)
			}
			n := 0
			return func(ctx context.Context) error {
				n++
				_, err := tg.Send(ctx, adapter.Message{Text: fmt.Sprintf("limited %d", n), Final: true, IdempotencyKey: fmt.Sprintf("suite:limited:%d", n)})
				return err
			}
		},
		NewChat: func(t *testing.T, streaming adapter.Streaming, _ adapter.ActivityMode) adaptertest.Chat {
			user := fmt.Sprintf("person%d", people.Add(1))
			conv := wecomtest.Single(user)
			fake.Met(bot, conv)
			s := "stream"
			if streaming == adapter.StreamingNone {
				s = "none"
			}
			return adaptertest.Chat{
				Config:   config(t, fake, bot, map[string]any{"user_id": user, "streaming": s}),
				Messages: func(t *testing.T) []adaptertest.Seen { return seen(fake, bot, conv) },
				Post: func(t *testing.T, text string, f *adaptertest.SeenFile) string {
					if f != nil {
						return fake.SayFile(bot, user, f.Name, f.Data)
					}
					return fake.Say(bot, conv, user, text, false)
				},
			}
		},
	})
}

// config is a channel config of bot with extra keys.
func config(t *testing.T, fake *wecomtest.Server, bot wecomtest.Bot, extra map[string]any) json.RawMessage {
	t.Helper()
	c := map[string]any{"bot_id": bot.ID, "secret": bot.Secret, "ws_url": fake.URL()}
	for k, v := range extra {
		c[k] = v
	}
	raw, err := json.Marshal(c)
	if err != nil {
		t.Fatal(err)
	}
	return raw
}

// seen is the conversation as its person sees it.
func seen(fake *wecomtest.Server, bot wecomtest.Bot, conv wecomtest.Conv) []adaptertest.Seen {
	var out []adaptertest.Seen
	for _, m := range fake.Messages(bot, conv) {
		s := adaptertest.Seen{ID: m.ID, Text: m.Text}
		if m.Kind == "file" || m.Kind == "image" {
			s.Files = []adaptertest.SeenFile{{Name: m.FileName, Data: m.Data}}
		}
		out = append(out, s)
	}
	return out
}

func testLogger(t *testing.T) *slog.Logger {
	return slog.New(slog.NewTextHandler(tWriter{t}, &slog.HandlerOptions{Level: slog.LevelDebug}))
}

type tWriter struct{ t *testing.T }

func (w tWriter) Write(p []byte) (int, error) {
	w.t.Log(strings.TrimSpace(string(p)))
	return len(p), nil
}
