package test

import (
	"context"
	"fmt"
	"net/http"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/ximd/ximd/handlers/adapter/markdown"
	"github.com/ximd/ximd/handlers/adapter/webchat"
	"github.com/ximd/ximd/handlers/adapter/webchat/webchattest"
	"github.com/ximd/ximd/internal/testkit"
	"github.com/ximd/ximd/profile"
)

// edge-api §7.3 (webchat) over a real node: the page's event stream carries each assistant
// message with its Markdown rendered (html, the only markup the page sets), streamed states and
// finals alike, live and replayed; no hostile agent text reaches it as markup outside the
// allow-list; a person's message, and an html stored in the stream by anyone, never does.
func TestWebchatMarkdown_OnlyRenderedMarkupReachesThePage(t *testing.T) {
	t.Parallel()
	n, err := testkit.StartNode(testkit.NodeOptions{DataDir: t.TempDir()})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = n.Stop() })
	const channel = "wc-md"
	path, key := openWebchat(t, n, channel, nil)
	ctx := context.Background()
	a, err := testkit.Dial(ctx, n.Addr, n.Token)
	if err != nil {
		t.Fatal(err)
	}
	defer a.Close()

	// The person writes Markdown and markup: it stays their text. A page cannot post an html.
	const typed = "**hi** <img src=x onerror=alert(1)>"
	if status, m := pagePost(t, n, path, key, map[string]any{"client_id": "client-md-0001", "text": typed}); status != http.StatusAccepted {
		t.Fatalf("page post: %d %v", status, m)
	}
	if status, m := pagePost(t, n, path, key, map[string]any{"client_id": "client-md-0002", "text": "x", "html": "<b>x</b>"}); status < 400 || m["code"] != profile.CodeInvalidPacket {
		t.Fatalf("page post with an html: %d %v, want invalid_packet", status, m)
	}

	// A streamed answer, live: every state the page gets is rendered, and safe.
	live := make(chan []sseEvent, 1)
	started := make(chan struct{})
	go func() {
		var once bool
		live <- events(t, n, path, key, "", func(evs []sseEvent) bool {
			if !once && readyIn(evs) {
				once = true
				close(started)
			}
			last := evs[len(evs)-1]
			return last.Event == "item" && last.Item.Final && last.Item.Role == webchat.RoleAssistant
		})
	}()
	select {
	case <-started:
	case <-time.After(15 * time.Second):
		t.Fatal("event stream not ready")
	}
	parts := []string{"| a | b |\n|---|---|\n| <img src=x onerror=", "alert(1)> | `x` |\n\n```go\nfmt.Println(\"</code></pre><script>", "alert(1)</script>\")\n```\n\n[x](javascript:alert(1)) **done**"}
	for i, p := range parts {
		if _, err := a.Send(ctx, channel, profile.TypeDelta, profile.Delta{MessageID: "asst_stream", Sequence: int64(i + 1), Text: p}); err != nil {
			t.Fatal(err)
		}
	}
	events(t, n, path, key, "", func(evs []sseEvent) bool {
		return slices.ContainsFunc(evs, func(e sseEvent) bool { return e.Item.Role == webchat.RoleAssistant })
	})
	full := strings.Join(parts, "")
	webchatFinal(t, a, channel, "asst_stream", full)
	var evs []sseEvent
	select {
	case evs = <-live:
	case <-time.After(20 * time.Second):
		t.Fatal("live stream did not see the final")
	}
	var states int
	for _, e := range evs {
		if e.Item.Role == webchat.RoleAssistant {
			states++
			checkWebchatPageItem(t, e.Item)
		}
	}
	if states < 2 {
		t.Fatalf("%d assistant states on the live stream, want a streamed part and the final", states)
	}
	if last := evs[len(evs)-1].Item; !strings.Contains(last.HTML, "<table>") || !strings.Contains(last.HTML, `<pre><code class="language-go">`) ||
		!strings.Contains(webchattest.Text(last.HTML), "<img src=x onerror=alert(1)>") {
		t.Fatalf("the final renders %q", last.HTML)
	}

	// Every hostile text of the corpus as a direct final.
	sent := map[string]webchattest.Hostile{}
	for i, h := range webchattest.XSS {
		id := fmt.Sprintf("asst_x%02d", i)
		webchatFinal(t, a, channel, id, h.Markdown)
		sent[webchat.AssistantItemID(channel+":"+id)] = h
	}

	// Anything else writing to the stream cannot bring markup: a stored html is dropped.
	nc, err := nats.Connect(n.NATSURL(), n.NATSOptions()...)
	if err != nil {
		t.Fatal(err)
	}
	defer nc.Close()
	js, _ := jetstream.New(nc)
	store := webchat.NewStore(js)
	forged := []webchat.Item{
		{Kind: webchat.KindMessage, ID: "uforged0000000000000000000", Role: webchat.RoleUser, Text: "plain", HTML: "<img src=x onerror=alert(1)>", Final: true, Created: 1, Updated: 1},
		{Kind: webchat.KindMessage, ID: "aforged0000000000000000000", Role: webchat.RoleAssistant, Text: "*kept*", HTML: "<script>alert(1)</script>", Final: true, Created: 1, Updated: 1},
	}
	for _, it := range forged {
		if _, err := store.Put(ctx, channel, it.ID, it, false); err != nil {
			t.Fatal(err)
		}
	}

	// A reload replays it all: rendered, safe, the corpus' markup as text.
	replay := events(t, n, path, key, "", readyIn)
	seen := map[string]webchat.Item{}
	for _, e := range replay {
		if e.Item.Kind == webchat.KindMessage {
			checkWebchatPageItem(t, e.Item)
			seen[e.Item.ID] = e.Item
		}
	}
	for id, h := range sent {
		it, ok := seen[id]
		if !ok {
			t.Fatalf("%s: not replayed", h.Name)
		}
		if h.Shows != "" && !strings.Contains(webchattest.Text(it.HTML), h.Shows) {
			t.Errorf("%s: %q is not shown as text in %q", h.Name, h.Shows, it.HTML)
		}
	}
	if it := seen["aforged0000000000000000000"]; it.HTML != "<p><em>kept</em></p>" {
		t.Errorf("a stored assistant html reached the page: %q", it.HTML)
	}
	var users int
	for _, it := range seen {
		if it.Role == webchat.RoleUser {
			users++
		}
	}
	if users != 2 || seen["uforged0000000000000000000"].Text != "plain" {
		t.Fatalf("replayed %d user messages: %+v", users, seen)
	}
}

// checkWebchatPageItem: an assistant item carries exactly the rendering of its text, inside the
// allow-list; any other item carries no markup.
func checkWebchatPageItem(t *testing.T, it webchat.Item) {
	t.Helper()
	if it.Role != webchat.RoleAssistant {
		if it.HTML != "" {
			t.Errorf("%s item %s carries html %q", it.Role, it.ID, it.HTML)
		}
		return
	}
	if want := markdown.Parse(it.Text).HTML(markdown.Web); it.HTML != want {
		t.Errorf("item %s: html %q, want the rendering of its text %q", it.ID, it.HTML, want)
	}
	if err := webchattest.CheckHTML(it.HTML); err != nil {
		t.Errorf("item %s (text %q): %v", it.ID, it.Text, err)
	}
}

// webchatFinal sends the agent's final of message id and waits for its accepted ack.
func webchatFinal(t *testing.T, a *testkit.Agent, channel, id, text string) {
	t.Helper()
	pid, err := a.Send(context.Background(), channel, profile.TypeMessage, profile.Message{MessageID: id, Text: text, CreatedAt: time.Now().UnixMilli()})
	if err != nil {
		t.Fatal(err)
	}
	env, err := a.Reply(pid, 15*time.Second)
	if err != nil {
		t.Fatal(err)
	}
	if ack, _ := testkit.AckOf(env); ack.Status != profile.AckAccepted {
		t.Fatalf("final %s (%q): %s", id, text, env.Payload)
	}
}
