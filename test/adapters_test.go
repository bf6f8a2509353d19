package test

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"slices"
	"strings"
	"sync"
	"testing"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/ximd/ximd/handlers/adapter"
	"github.com/ximd/ximd/handlers/adapter/adaptertest"
	"github.com/ximd/ximd/handlers/adapter/webchat"
	"github.com/ximd/ximd/handlers/adapter/webhook"
	"github.com/ximd/ximd/internal/testkit"
	"github.com/ximd/ximd/pipeline/natstest"
	"github.com/ximd/ximd/subjects"
)

// The universal adapter suite (handlers/adapter/adaptertest) on the webhook adapter, against the
// loopback webhook target of edge-api §7.1 (testkit.Target), channels bound with lookup on.
func TestAdapters_WebhookPassesTheUniversalSuite(t *testing.T) {
	files := adaptertest.NewFiles()
	links := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		_, _ = w.Write(files.Bytes(strings.TrimPrefix(r.URL.Path, "/files/refs/")))
	}))
	t.Cleanup(links.Close)
	adaptertest.Run(t, adaptertest.Setup{
		Adapter: webhook.New(webhook.Options{}),
		Files:   files,
		FileURL: func(ref string) string { return links.URL + adapter.RefPath(ref) },
		NewChat: func(t *testing.T, streaming adapter.Streaming, activity adapter.ActivityMode) adaptertest.Chat {
			tg, err := testkit.NewTarget("s3cr3t-suite-0123456789", testkit.TargetOptions{})
			if err != nil {
				t.Fatal(err)
			}
			t.Cleanup(tg.Close)
			cfg := tg.Config(string(streaming), string(activity))
			cfg["lookup"] = true
			raw, _ := json.Marshal(cfg)
			return adaptertest.Chat{
				Config:   raw,
				Messages: func(t *testing.T) []adaptertest.Seen { return seenByWebhook(t, tg) },
				Activity: func(*testing.T) bool {
					calls := tg.ActivityCalls()
					return len(calls) > 0 && calls[len(calls)-1] != string(adapter.StatusIdle)
				},
			}
		},
	})
}

// seenByWebhook replays the target's message calls: each POST a message, each PATCH an edit.
func seenByWebhook(t *testing.T, tg *testkit.Target) []adaptertest.Seen {
	var out []adaptertest.Seen
	byID := map[string]int{}
	for _, c := range tg.MessageCalls() {
		var files []adaptertest.SeenFile
		raw, _ := c.Body["files"].([]any)
		for _, f := range raw {
			fm, _ := f.(map[string]any)
			u, _ := fm["url"].(string)
			resp, err := http.Get(u)
			if err != nil {
				t.Fatal(err)
			}
			data, _ := io.ReadAll(resp.Body)
			resp.Body.Close()
			name, _ := fm["filename"].(string)
			files = append(files, adaptertest.SeenFile{Name: name, Data: data})
		}
		if id, ok := strings.CutPrefix(c.Path, "/messages/"); ok {
			if i, known := byID[id]; known {
				out[i].Text, out[i].Files = c.Text(), files
			}
			continue
		}
		replyTo, _ := c.Body["reply_to_target_message_id"].(string)
		id := fmt.Sprintf("tm-%d", len(byID)+1) // testkit.Target numbers its messages in order
		byID[id] = len(out)
		out = append(out, adaptertest.Seen{ID: id, Text: c.Text(), Files: files, ReplyTo: replyTo})
	}
	return out
}

// The universal adapter suite on the webchat adapter, against its store on a real JetStream (what
// the page shows).
func TestAdapters_WebchatPassesTheUniversalSuite(t *testing.T) {
	js := natstest.JetStream(t)
	if err := webchat.Provision(context.Background(), js, webchat.StoreConfig{}); err != nil {
		t.Fatal(err)
	}
	a, err := webchat.New(webchat.Options{JetStream: js})
	if err != nil {
		t.Fatal(err)
	}
	files := adaptertest.NewFiles()
	n := 0
	adaptertest.Run(t, adaptertest.Setup{
		Adapter: a,
		Files:   files,
		NewChat: func(t *testing.T, streaming adapter.Streaming, activity adapter.ActivityMode) adaptertest.Chat {
			n++
			channel := fmt.Sprintf("suite-%d", n)
			raw, _ := json.Marshal(map[string]any{webchat.ChannelKey: channel})
			return adaptertest.Chat{
				Config:   raw,
				Messages: func(t *testing.T) []adaptertest.Seen { return seenOnPage(t, js, files, channel) },
				Activity: func(t *testing.T) bool {
					for _, it := range pageItems(t, js, channel) {
						if it.Kind == webchat.KindStatus {
							return it.Status != string(adapter.StatusIdle)
						}
					}
					return false
				},
			}
		},
	})
}

// pageItems reads the latest state of every item of a webchat channel.
func pageItems(t *testing.T, js jetstream.JetStream, channel string) []webchat.Item {
	t.Helper()
	ctx := context.Background()
	filter, _ := subjects.WebchatChannel(channel)
	c, err := js.OrderedConsumer(ctx, subjects.StreamWebchat, jetstream.OrderedConsumerConfig{FilterSubjects: []string{filter}, DeliverPolicy: jetstream.DeliverLastPerSubjectPolicy})
	if err != nil {
		t.Fatal(err)
	}
	info, err := c.Info(ctx)
	if err != nil {
		t.Fatal(err)
	}
	var items []webchat.Item
	if info.NumPending == 0 {
		return nil
	}
	batch, err := c.Fetch(int(info.NumPending))
	if err != nil {
		t.Fatal(err)
	}
	for m := range batch.Messages() {
		var it webchat.Item
		if json.Unmarshal(m.Data(), &it) == nil {
			items = append(items, it)
		}
	}
	return items
}

func seenOnPage(t *testing.T, js jetstream.JetStream, files *adaptertest.Files, channel string) []adaptertest.Seen {
	var msgs []webchat.Item
	for _, it := range pageItems(t, js, channel) {
		if it.Kind == webchat.KindMessage && it.Role == webchat.RoleAssistant {
			msgs = append(msgs, it)
		}
	}
	slices.SortFunc(msgs, func(a, b webchat.Item) int { return int(a.Created - b.Created) })
	var out []adaptertest.Seen
	for _, it := range msgs {
		s := adaptertest.Seen{ID: it.ID, Text: it.Text, ReplyTo: it.ReplyTo}
		for _, f := range it.Files {
			s.Files = append(s.Files, adaptertest.SeenFile{Name: f.Filename, Data: files.Bytes(f.FileRef)})
		}
		out = append(out, s)
	}
	return out
}

// The universal suite's bot cases on the webhook adapter: its bot route (ReceiveBot) served on a
// loopback listener with the suite's feed, the target's calls filtered by conversation.
func TestAdapters_WebhookPassesTheBotCases(t *testing.T) {
	files := adaptertest.NewFiles()
	a := webhook.New(webhook.Options{})
	setup := adaptertest.Setup{Adapter: a, Files: files}
	adaptertest.RunBots(t, setup, func(t *testing.T) adaptertest.BotSetup {
		tg, err := testkit.NewTarget("s3cr3t-bots-0123456789", testkit.TargetOptions{})
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(tg.Close)
		cfg := tg.Config("none", "none")
		delete(cfg, "chat_id")
		raw, _ := json.Marshal(cfg)
		var route struct {
			bot  adapter.Bot
			feed *adaptertest.Feed
		}
		var mu sync.Mutex
		srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			mu.Lock()
			b, feed := route.bot, route.feed
			mu.Unlock()
			r.SetPathValue("path", "messages")
			if _, err := a.ReceiveBot(w, r, b, feed); err != nil {
				http.Error(w, err.Error(), http.StatusBadRequest)
			}
		}))
		t.Cleanup(srv.Close)
		n := 0
		post := func(t *testing.T, conv, kind, sender string, isBot, mention bool, text string) string {
			mu.Lock()
			n++
			id := fmt.Sprintf("tm-%d", n)
			mu.Unlock()
			body, _ := json.Marshal(map[string]any{"conversation": map[string]any{"id": conv, "kind": kind},
				"sender": map[string]any{"id": sender, "is_bot": isBot}, "mentioned": mention, "target_message_id": id, "text": text})
			req, _ := http.NewRequest(http.MethodPost, srv.URL, strings.NewReader(string(body)))
			req.Header.Set(webhook.SignatureHeader, webhook.Sign([]byte(tg.Secret), body))
			resp, err := http.DefaultClient.Do(req)
			if err != nil {
				t.Fatal(err)
			}
			resp.Body.Close()
			if resp.StatusCode != http.StatusAccepted {
				t.Fatalf("bot route: %d", resp.StatusCode)
			}
			return id
		}
		chat := func(conv, kind string) adaptertest.BotChat {
			person := "person-" + conv
			return adaptertest.BotChat{
				Kind: adapter.ConversationKind(kind), Author: person,
				Post: func(t *testing.T, text string, mention bool) string {
					return post(t, conv, kind, person, false, mention, text)
				},
				PostAsBot: func(t *testing.T, text string) { post(t, conv, kind, "another-bot", true, true, text) },
				Messages: func(t *testing.T) []adaptertest.Seen {
					var out []adaptertest.Seen
					for _, c := range tg.MessageCalls() {
						if c.Body["chat_id"] == conv {
							out = append(out, adaptertest.Seen{Text: c.Text()})
						}
					}
					return out
				},
			}
		}
		convs := 0
		next := func() string { convs++; return fmt.Sprintf("conv-%d", convs) }
		return adaptertest.BotSetup{
			Config: raw,
			Direct: func(*testing.T) adaptertest.BotChat { return chat(next(), "direct") },
			Group:  func(*testing.T) adaptertest.BotChat { return chat(next(), "group") },
			Listen: func(_ *testing.T, b adapter.Bot, feed *adaptertest.Feed) {
				mu.Lock()
				route.bot, route.feed = b, feed
				mu.Unlock()
			},
		}
	})
}
