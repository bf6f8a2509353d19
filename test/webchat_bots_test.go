package test

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"io"
	"net/http"
	"net/http/cookiejar"
	"strings"
	"testing"
	"time"

	"github.com/ximd/ximd/handlers/adapter/webchat"
	"github.com/ximd/ximd/internal/testkit"
	"github.com/ximd/ximd/profile"
)

// visitor is one browser on a webchat bot's public page: its own cookie jar.
type visitor struct {
	t      *testing.T
	n      *testkit.Node
	bot    string
	client *http.Client
}

func newVisitor(t *testing.T, n *testkit.Node, bot string) *visitor {
	jar, _ := cookiejar.New(nil)
	return &visitor{t: t, n: n, bot: bot, client: &http.Client{Jar: jar, Timeout: 15 * time.Second}}
}

// call makes a request of the visitor (POSTs with the visitor header, as the page sends them).
func (v *visitor) call(method, path string, body any) (int, map[string]any) {
	v.t.Helper()
	var r io.Reader
	if body != nil {
		raw, _ := json.Marshal(body)
		r = bytes.NewReader(raw)
	}
	req, _ := http.NewRequest(method, "http://"+v.n.Addr+path, r)
	if method == http.MethodPost {
		req.Header.Set("X-Webchat-Visitor", "1")
		req.Header.Set("Content-Type", "application/json")
	}
	resp, err := v.client.Do(req)
	if err != nil {
		v.t.Fatal(err)
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	var m map[string]any
	_ = json.Unmarshal(b, &m)
	return resp.StatusCode, m
}

func (v *visitor) session() map[string]any {
	v.t.Helper()
	status, m := v.call(http.MethodPost, "/webchat/bots/"+v.bot+"/session", nil)
	if status != http.StatusOK {
		v.t.Fatalf("session: %d %v", status, m)
	}
	return m
}

func (v *visitor) post(clientID, text string) (int, map[string]any) {
	v.t.Helper()
	return v.call(http.MethodPost, "/webchat/bots/"+v.bot+"/messages", map[string]any{"client_id": clientID, "text": text})
}

// streamUntil reads the visitor's channel's event stream until done.
func (v *visitor) streamUntil(channel string, done func([]webchat.Item) bool) []webchat.Item {
	v.t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 15*time.Second)
	defer cancel()
	req, _ := http.NewRequestWithContext(ctx, http.MethodGet, "http://"+v.n.Addr+"/webchat/"+channel+"/events", nil)
	resp, err := v.client.Do(req)
	if err != nil {
		v.t.Fatal(err)
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		v.t.Fatalf("events of %s: %d", channel, resp.StatusCode)
	}
	var items []webchat.Item
	sc := bufio.NewScanner(resp.Body)
	sc.Buffer(make([]byte, 1<<20), 8<<20)
	for sc.Scan() {
		if line, ok := strings.CutPrefix(sc.Text(), "data: "); ok {
			var it webchat.Item
			if json.Unmarshal([]byte(line), &it) == nil && it.Kind == webchat.KindMessage {
				items = append(items, it)
				if done(items) {
					return items
				}
			}
		}
	}
	v.t.Fatalf("event stream of %s ended before the expected items: %+v", channel, items)
	return nil
}

func putWebchatBot(t *testing.T, n *testkit.Node, id string, conversations map[string]any, config map[string]any) (int, []byte) {
	t.Helper()
	status, b, err := n.Do(http.MethodPut, "/v1/bots/"+id, map[string]any{
		"connection":    map[string]any{"target_type": "im", "profiles": []string{"xagent.im.v2"}},
		"target":        map[string]any{"adapter": "webchat", "config": config},
		"conversations": conversations,
	})
	if err != nil {
		t.Fatal(err)
	}
	return status, b
}

// edge-api §4.1 webchat bots: a public page where each visitor has a direct conversation of their
// own (their cookie is the key): the first message opens the visitor's channel, channel.opened and
// the chat.message reach xAgent, the streamed answer reaches that visitor's page only.
func TestWebchatBots_EachVisitorHasOwnConversation(t *testing.T) {
	t.Parallel()
	e := newEnv(t, envOptions{mutate: fastAcks})
	if status, b := putWebchatBot(t, e.node, "site", map[string]any{"direct": "open"}, map[string]any{"title": "Ask us", "frame_ancestors": []string{"https://www.example.com"}}); status != http.StatusOK {
		t.Fatalf("PUT: %d %s", status, b)
	}
	status, b, _ := e.node.Do(http.MethodGet, "/v1/bots/site/webchat", nil)
	link := jsonOf(t, b)
	if status != http.StatusOK || link["page_path"] != "/webchat/bots/site" || !strings.Contains(link["snippet"].(string), `<iframe src="`+link["page_url"].(string)+`"`) || !strings.HasSuffix(link["page_url"].(string), "/webchat/bots/site") {
		t.Fatalf("link: %d %s", status, b)
	}
	// The page itself, framed only by the listed origin.
	resp, err := http.Get("http://" + e.node.Addr + "/webchat/bots/site")
	if err != nil {
		t.Fatal(err)
	}
	page, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	if resp.StatusCode != 200 || !strings.Contains(resp.Header.Get("Content-Security-Policy"), "frame-ancestors 'self' https://www.example.com") ||
		resp.Header.Get("X-Frame-Options") != "" || !strings.Contains(string(page), `data-bot="site"`) {
		t.Fatalf("page: %d %v", resp.StatusCode, resp.Header)
	}

	alice, bob := newVisitor(t, e.node, "site"), newVisitor(t, e.node, "site")
	if s := alice.session(); s["channel"] != nil || s["title"] != "Ask us" {
		t.Fatalf("alice's first session: %v", s)
	}
	bob.session()
	status, ans := alice.post("cid-alice-1", "hi from alice")
	aliceCh, _ := ans["connector_channel_id"].(string)
	if status != http.StatusAccepted || !strings.HasPrefix(aliceCh, "site-v") {
		t.Fatalf("alice's post: %d %v", status, ans)
	}
	opened := nextOf(t, e.agent, profile.TypeChannelOpened)
	env, m := userMessage(t, e.agent, wait)
	if opened.ChannelID != aliceCh || env.ChannelID != aliceCh || m.Text != "hi from alice" {
		t.Fatalf("to xAgent: %s then %s %q", opened.ChannelID, env.ChannelID, m.Text)
	}
	ackUser(t, e.agent, env, map[string]any{"message_id": m.MessageID, "status": "accepted"})
	if s := alice.session(); s["channel"] != aliceCh {
		t.Fatalf("alice's later session: %v", s)
	}
	_, ans = bob.post("cid-bob-1", "hi from bob")
	bobCh, _ := ans["connector_channel_id"].(string)
	if bobCh == "" || bobCh == aliceCh {
		t.Fatalf("bob's channel %q (alice's %q)", bobCh, aliceCh)
	}
	nextOf(t, e.agent, profile.TypeChannelOpened)
	env, m = userMessage(t, e.agent, wait)
	ackUser(t, e.agent, env, map[string]any{"message_id": m.MessageID, "status": "accepted"})

	// The agent answers alice, streamed: her page shows it; bob cannot read her channel.
	e.sendTo(aliceCh, profile.TypeDelta, map[string]any{"message_id": "r1", "sequence": 1, "text": "Hello "})
	pid := e.sendTo(aliceCh, profile.TypeMessage, msg("r1", "Hello Alice"))
	wantAck(t, e.ackOf(pid), "accepted", "")
	alice.streamUntil(aliceCh, func(items []webchat.Item) bool {
		for _, it := range items {
			if it.Role == webchat.RoleAssistant && it.Text == "Hello Alice" && it.Final {
				return true
			}
		}
		return false
	})
	req, _ := http.NewRequest(http.MethodGet, "http://"+e.node.Addr+"/webchat/"+aliceCh+"/events", nil)
	resp, err = bob.client.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if resp.StatusCode != http.StatusUnauthorized {
		t.Fatalf("bob reading alice's stream: %d", resp.StatusCode)
	}
	// A post without the visitor header (another site's form) is refused.
	req, _ = http.NewRequest(http.MethodPost, "http://"+e.node.Addr+"/webchat/bots/site/messages", strings.NewReader(`{"client_id":"cid-forged-1","text":"x"}`))
	if resp, err = alice.client.Do(req); err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if resp.StatusCode != http.StatusForbidden {
		t.Fatalf("forged post: %d", resp.StatusCode)
	}
}

// A webchat bot refuses pairing and allowlist (its visitors are anonymous), and a closed bot
// answers a visitor's post with the refusal, passing nothing on.
func TestWebchatBots_PolicyAndRefusals(t *testing.T) {
	t.Parallel()
	e := newEnv(t, envOptions{mutate: fastAcks})
	for _, direct := range []string{"pairing", "allowlist"} {
		if status, b := putWebchatBot(t, e.node, "w1", map[string]any{"direct": direct}, nil); status != http.StatusBadRequest || !strings.Contains(string(b), "conversations.direct") {
			t.Fatalf("direct %s: %d %s", direct, status, b)
		}
	}
	if status, b := putWebchatBot(t, e.node, "w1", map[string]any{"direct": "closed"}, nil); status != http.StatusOK {
		t.Fatalf("PUT: %d %s", status, b)
	}
	v := newVisitor(t, e.node, "w1")
	v.session()
	if status, ans := v.post("cid-closed-1", "anyone?"); status != http.StatusAccepted || ans["refused"] != "direct_closed" {
		t.Fatalf("post to a closed bot: %d %v", status, ans)
	}
	if status, _ := newVisitor(t, e.node, "nobot").call(http.MethodGet, "/webchat/bots/nobot", nil); status != http.StatusNotFound {
		t.Fatalf("page of no bot: %d", status)
	}
	e.quiet(200 * time.Millisecond)
}
