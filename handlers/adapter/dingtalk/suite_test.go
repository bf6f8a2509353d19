package dingtalk_test

import (
	"context"
	"encoding/json"
	"fmt"
	"testing"

	"github.com/ximd/ximd/handlers/adapter"
	"github.com/ximd/ximd/handlers/adapter/adaptertest"
	"github.com/ximd/ximd/handlers/adapter/dingtalk"
	"github.com/ximd/ximd/handlers/adapter/dingtalk/dingtalktest"
)

// The universal adapter suite against the DingTalk fake: each chat is a one-to-one chat of a
// new person with the app's robot; messages in by Stream mode.
func TestDingTalk_UniversalAdapterSuite(t *testing.T) {
	fake := dingtalktest.New()
	t.Cleanup(fake.Close)
	app := fake.AddApp()
	files := adaptertest.NewFiles()
	limited := dingtalktest.New()
	t.Cleanup(limited.Close)
	limitedApp := limited.AddApp()
	limited.SetCardQPS(2)
	adaptertest.Run(t, adaptertest.Setup{
		Adapter: dingtalk.New(dingtalk.Options{Common: adapter.Common{Files: files}}),
		Files:   files,
		// Stream mode: an acknowledged frame is not pushed again.
		ForgetsConfirmed: true,
		RateLimited: func(t *testing.T) func(context.Context) error {
			person := limited.AddUser("Lim")
			// A budget above DingTalk's QPS, so DingTalk's refusal is what limits.
			tg, err := dingtalk.New(dingtalk.Options{}).Open(config(t, limited, limitedApp, "", person.StaffID, map[string]any{"card_updates_per_second": 1000}))
			if err != nil {
				t.Fatal(err)
			}
			ed, _ := adapter.EditorOf(tg)
			id, err := tg.Send(context.Background(), adapter.Message{Text: "limited", IdempotencyKey: "suite:limited"})
			if err != nil {
				t.Fatal(err)
			}
			n := 0
			return func(ctx context.Context) error {
				n++
				return ed.Edit(ctx, id, adapter.Message{Text: fmt.Sprintf("limited %d", n), IdempotencyKey: "suite:limited"})
			}
		},
		NewChat: func(t *testing.T, streaming adapter.Streaming, _ adapter.ActivityMode) adaptertest.Chat {
			person := fake.AddUser("Alice")
			s := dingtalk.StreamingCard
			if streaming == adapter.StreamingNone {
				s = adapter.StreamingNone
			} else if streaming != adapter.StreamingEdit {
				s = streaming
			}
			return adaptertest.Chat{
				Config:   config(t, fake, app, "", person.StaffID, map[string]any{"streaming": s, "card_updates_per_second": 100}),
				Messages: func(t *testing.T) []adaptertest.Seen { return seen(fake, dingtalktest.DirectSpace(person.StaffID)) },
				Post: func(t *testing.T, text string, f *adaptertest.SeenFile) string {
					if f != nil {
						return fake.PostFile(app, person, f.Name, "text/plain", f.Data)
					}
					return fake.Post(app, person, "", text, false)
				},
			}
		},
	})
}

// config is a channel config of app binding a group (cid) or a person (staff).
func config(t *testing.T, fake *dingtalktest.Server, app dingtalktest.App, cid, staff string, extra map[string]any) json.RawMessage {
	t.Helper()
	c := map[string]any{"client_id": app.ClientID, "client_secret": app.ClientSecret, "api_url": fake.URL(), "oapi_url": fake.URL()}
	if cid != "" {
		c["conversation_id"] = cid
	}
	if staff != "" {
		c["user_id"] = staff
	}
	for k, v := range extra {
		c[k] = v
	}
	raw, err := json.Marshal(c)
	if err != nil {
		t.Fatal(err)
	}
	return raw
}

// seen is a conversation as its people see it: the robot's cards and messages, oldest first
// (files as messages of their own, after the cards they came with are created: the fake keeps
// them apart, so they are listed after the cards).
func seen(fake *dingtalktest.Server, space string) []adaptertest.Seen {
	var out []adaptertest.Seen
	for _, c := range fake.Cards(space) {
		out = append(out, adaptertest.Seen{ID: c.OutTrackID, Text: c.Text()})
	}
	for i, m := range fake.Messages(space) {
		s := adaptertest.Seen{ID: fmt.Sprintf("robot-%d", i)}
		if m.Data != nil {
			s.Files = []adaptertest.SeenFile{{Name: m.FileName, Data: m.Data}}
		}
		out = append(out, s)
	}
	return out
}
