package test

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"mime/multipart"
	"net/http"
	"net/url"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/ximd/ximd/handlers/adapter/webchat"
	"github.com/ximd/ximd/internal/testkit"
	"github.com/ximd/ximd/pipeline/node"
	"github.com/ximd/ximd/profile"
)

// The webchat target (docs/webchat.md) over real HTTP on loopback against a real node; the
// browser itself is driven in cmd/internal/demo.

// openWebchat opens channel id on the webchat adapter and returns its page path and secret.
func openWebchat(t *testing.T, n *testkit.Node, id string, config map[string]any) (path, key string) {
	t.Helper()
	status, body, err := n.Do(http.MethodPut, "/v1/channels/"+id, map[string]any{
		"connection": map[string]any{"target_type": "im", "profiles": []string{"xagent.im.v2"}},
		"target":     map[string]any{"adapter": "webchat", "config": config},
	})
	if err != nil || status != http.StatusOK {
		t.Fatalf("PUT webchat channel %s: %d %s %v", id, status, body, err)
	}
	return pageLink(t, n, id)
}

func pageLink(t *testing.T, n *testkit.Node, id string) (path, key string) {
	t.Helper()
	status, body, err := n.Do(http.MethodGet, "/v1/channels/"+id+"/webchat", nil)
	if err != nil || status != http.StatusOK {
		t.Fatalf("GET page link of %s: %d %s %v", id, status, body, err)
	}
	path, _ = jsonOf(t, body)["page_path"].(string)
	u, err := url.Parse(path)
	if err != nil {
		t.Fatal(err)
	}
	if u.RawQuery != "" {
		t.Fatalf("page link %s has a query string: the secret belongs in the fragment", path)
	}
	frag, err := url.ParseQuery(u.Fragment)
	if err != nil {
		t.Fatal(err)
	}
	return u.Path, frag.Get("k")
}

// pageCall calls a page route with the secret in the X-Webchat-Key header ("" for none).
func pageCall(t *testing.T, n *testkit.Node, method, path, key, ctype string, body []byte) (int, []byte) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	req, _ := http.NewRequestWithContext(ctx, method, "http://"+n.Addr+path, bytes.NewReader(body))
	if key != "" {
		req.Header.Set("X-Webchat-Key", key)
	}
	if ctype != "" {
		req.Header.Set("Content-Type", ctype)
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	if strings.HasSuffix(path, "/events") && resp.StatusCode == http.StatusOK {
		return resp.StatusCode, nil // an open event stream: the status is the answer
	}
	b, _ := io.ReadAll(resp.Body)
	return resp.StatusCode, b
}

func pageUpload(t *testing.T, n *testkit.Node, path, key, name string, data []byte) (int, map[string]any) {
	t.Helper()
	var body bytes.Buffer
	mw := multipart.NewWriter(&body)
	fw, _ := mw.CreateFormFile("file", name)
	_, _ = fw.Write(data)
	_ = mw.Close()
	status, b := pageCall(t, n, http.MethodPost, path+"/uploads", key, mw.FormDataContentType(), body.Bytes())
	var m map[string]any
	_ = json.Unmarshal(b, &m)
	return status, m
}

func pagePost(t *testing.T, n *testkit.Node, path, key string, msg map[string]any) (int, map[string]any) {
	t.Helper()
	raw, _ := json.Marshal(msg)
	status, b := pageCall(t, n, http.MethodPost, path+"/messages", key, "application/json", raw)
	var m map[string]any
	_ = json.Unmarshal(b, &m)
	return status, m
}

// sseEvent is one Server-Sent Event of /webchat/{channel}/events.
type sseEvent struct {
	ID, Event string
	Item      webchat.Item
}

// events reads the channel's event stream (from lastID when non-zero) until done says enough,
// within 15s.
func events(t *testing.T, n *testkit.Node, path, key string, lastID string, done func([]sseEvent) bool) []sseEvent {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 15*time.Second)
	defer cancel()
	req, _ := http.NewRequestWithContext(ctx, http.MethodGet, "http://"+n.Addr+path+"/events", nil)
	req.Header.Set("X-Webchat-Key", key)
	if lastID != "" {
		req.Header.Set("Last-Event-ID", lastID)
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK || resp.Header.Get("Content-Type") != "text/event-stream" {
		t.Fatalf("events: %d %s", resp.StatusCode, resp.Header.Get("Content-Type"))
	}
	var out []sseEvent
	var cur sseEvent
	sc := bufio.NewScanner(resp.Body)
	sc.Buffer(make([]byte, 1<<20), 8<<20)
	for sc.Scan() {
		line := sc.Text()
		switch {
		case line == "":
			if cur.Event != "" {
				out = append(out, cur)
				if done(out) {
					return out
				}
			}
			cur = sseEvent{}
		case strings.HasPrefix(line, "id: "):
			cur.ID = line[4:]
		case strings.HasPrefix(line, "event: "):
			cur.Event = line[7:]
		case strings.HasPrefix(line, "data: ") && cur.Event == "item":
			if err := json.Unmarshal([]byte(line[6:]), &cur.Item); err != nil {
				t.Fatalf("event data %q: %v", line, err)
			}
		}
	}
	t.Fatalf("event stream ended (%v) before the expected events; got %+v", sc.Err(), out)
	return nil
}

func readyIn(evs []sseEvent) bool { return len(evs) > 0 && evs[len(evs)-1].Event == "ready" }

// edge-api §7.2 (webchat): the page and its routes need the channel's page secret, which only
// bearer-token holders get (GET /v1/channels/{id}/webchat); the channels API never shows it.
func TestWebchat_PageRoutesNeedTheSecret(t *testing.T) {
	t.Parallel()
	n, err := testkit.StartNode(testkit.NodeOptions{DataDir: t.TempDir()})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = n.Stop() })
	path, key := openWebchat(t, n, "wc-auth", map[string]any{"title": "Auth"})
	otherPath, otherKey := openWebchat(t, n, "wc-other", nil)
	if key == "" || key == otherKey || otherPath == path {
		t.Fatalf("page secrets %q and %q: want distinct, non-empty", key, otherKey)
	}
	status, m := pageUpload(t, n, path, key, "a.txt", []byte("hello"))
	if status != http.StatusCreated {
		t.Fatalf("upload: %d %v", status, m)
	}
	ref, _ := m["file_ref"].(string)

	routes := []struct{ method, path, ctype string }{
		{http.MethodPost, path + "/session", ""},
		{http.MethodGet, path + "/info", ""},
		{http.MethodGet, path + "/events", ""},
		{http.MethodPost, path + "/messages", "application/json"},
		{http.MethodGet, path + "/files/" + ref, ""},
	}
	tests := []struct {
		name       string
		key        string
		wantStatus int // 0: admitted (neither 401 nor 403)
	}{
		{name: "no secret", key: "", wantStatus: http.StatusUnauthorized},
		{name: "wrong secret", key: key + "x", wantStatus: http.StatusForbidden},
		{name: "another channel's secret", key: otherKey, wantStatus: http.StatusForbidden},
		{name: "the channel's secret", key: key},
	}
	for _, tt := range tests {
		for _, r := range routes {
			t.Run(tt.name+" "+r.method+" "+strings.TrimPrefix(r.path, path), func(t *testing.T) {
				status, body := pageCall(t, n, r.method, r.path, tt.key, r.ctype, []byte(`{}`))
				if tt.wantStatus == 0 {
					if status == http.StatusUnauthorized || status == http.StatusForbidden {
						t.Fatalf("%d %s: want admitted", status, body)
					}
					return
				}
				if status != tt.wantStatus {
					t.Fatalf("%d %s, want %d", status, body, tt.wantStatus)
				}
			})
		}
	}

	// The page itself is served to anyone and holds nothing of the channel (not its title).
	status, body := pageCall(t, n, http.MethodGet, path, "", "", nil)
	if status != http.StatusOK || strings.Contains(string(body), "Auth") || !strings.Contains(string(body), "ximd webchat") {
		t.Fatalf("page without secret: %d %s", status, body)
	}
	// A query string is no place for the secret: not accepted.
	if status, _ := pageCall(t, n, http.MethodGet, path+"/info?k="+url.QueryEscape(key), "", "", nil); status != http.StatusUnauthorized {
		t.Fatalf("info with ?k=: %d, want 401", status)
	}
	// POST /session trades the header for an HttpOnly cookie scoped to the channel's routes,
	// which GETs accept (EventSource and <img> cannot set headers) and POSTs do not (a forged
	// form from another site would carry the cookie, never the header).
	req, _ := http.NewRequest(http.MethodPost, "http://"+n.Addr+path+"/session", nil)
	req.Header.Set("X-Webchat-Key", key)
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	cookies := resp.Cookies()
	if resp.StatusCode != http.StatusNoContent || len(cookies) != 1 {
		t.Fatalf("session: %d %v", resp.StatusCode, cookies)
	}
	c := cookies[0]
	if !c.HttpOnly || c.SameSite != http.SameSiteStrictMode || c.Path != path+"/" || c.Value != key {
		t.Fatalf("session cookie %+v: want HttpOnly, SameSite=Strict, Path %s/", c, path)
	}
	withCookie := func(method, route string, cookie *http.Cookie, body []byte) int {
		req, _ := http.NewRequest(method, "http://"+n.Addr+path+route, bytes.NewReader(body))
		req.AddCookie(cookie)
		req.Header.Set("Content-Type", "application/json")
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		resp.Body.Close()
		return resp.StatusCode
	}
	for _, route := range []string{"/info", "/files/" + ref} {
		if got := withCookie(http.MethodGet, route, c, nil); got != http.StatusOK {
			t.Fatalf("GET %s with the cookie: %d, want 200", route, got)
		}
	}
	if got := withCookie(http.MethodPost, "/messages", c, []byte(`{"client_id":"client-cookie-only","text":"forged"}`)); got != http.StatusUnauthorized {
		t.Fatalf("POST /messages with only the cookie: %d, want 401", got)
	}
	if got := withCookie(http.MethodGet, "/info", &http.Cookie{Name: c.Name, Value: otherKey}, nil); got != http.StatusForbidden {
		t.Fatalf("GET /info with another channel's secret in the cookie: %d, want 403", got)
	}
	// The link needs the bearer token, and exists only for webchat channels.
	if status, _, _ := n.DoAuth(http.MethodGet, "/v1/channels/wc-auth/webchat", nil, ""); status != http.StatusUnauthorized {
		t.Fatalf("link without token: %d, want 401", status)
	}
	if err := n.OpenChannel("wh-plain", map[string]any{"url": "http://127.0.0.1:9/hook", "chat_id": "c", "secret": "s3cr3t"}); err != nil {
		t.Fatal(err)
	}
	if status, _, _ := n.Do(http.MethodGet, "/v1/channels/wh-plain/webchat", nil); status != http.StatusNotFound {
		t.Fatalf("link of a webhook channel: %d, want 404", status)
	}
	// The channels API never shows a page secret, generated or configured.
	const configured = "configured-secret-0123456789"
	cfgPath, cfgKey := openWebchat(t, n, "wc-configured", map[string]any{"secret": configured})
	if cfgKey != configured {
		t.Fatalf("configured secret: link carries %q", cfgKey)
	}
	for _, id := range []string{"wc-auth", "wc-configured"} {
		_, body, _ := n.Do(http.MethodGet, "/v1/channels/"+id, nil)
		list := listing(t, n)
		for _, b := range [][]byte{body, list} {
			if bytes.Contains(b, []byte(key)) || bytes.Contains(b, []byte(configured)) {
				t.Fatalf("channels API shows a page secret: %s", b)
			}
		}
	}
	if status, _ := pageCall(t, n, http.MethodGet, cfgPath+"/info", configured, "", nil); status != http.StatusOK {
		t.Fatalf("configured secret refused: %d", status)
	}

	// Deleting the channel revokes its link; opening it again makes a new one.
	if status, _, _ := n.Do(http.MethodDelete, "/v1/channels/wc-auth", nil); status != http.StatusNoContent {
		t.Fatalf("DELETE: %d", status)
	}
	if status, _ := pageCall(t, n, http.MethodGet, path+"/info", key, "", nil); status != http.StatusForbidden {
		t.Fatalf("old link after DELETE: %d, want 403", status)
	}
	time.Sleep(2 * time.Millisecond) // opened_at is in milliseconds
	_, newKey := openWebchat(t, n, "wc-auth", nil)
	if newKey == key {
		t.Fatal("re-opened channel has the deleted channel's secret")
	}
	if status, _ := pageCall(t, n, http.MethodGet, path+"/info", key, "", nil); status != http.StatusForbidden {
		t.Fatalf("old link after re-open: %d, want 403", status)
	}
}

// edge-api §5.4 through the page: a page message (with a file uploaded from the page) becomes one
// user chat.message to xAgent, whose file is in ximd's store; the page's retry of the same
// client_id never sends a second one.
func TestWebchat_PageMessageReachesAgentOnce(t *testing.T) {
	t.Parallel()
	n, err := testkit.StartNode(testkit.NodeOptions{DataDir: t.TempDir()})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = n.Stop() })
	path, key := openWebchat(t, n, "wc-send", nil)
	otherPath, otherKey := openWebchat(t, n, "wc-send-other", nil)
	ctx := context.Background()
	a, err := testkit.Dial(ctx, n.Addr, n.Token)
	if err != nil {
		t.Fatal(err)
	}
	defer a.Close()

	data := []byte("\x89PNG\r\n\x1a\n not really a png")
	status, meta := pageUpload(t, n, path, key, "pic.png", data)
	if status != http.StatusCreated {
		t.Fatalf("upload: %d %v", status, meta)
	}
	ref, _ := meta["file_ref"].(string)
	_, otherMeta := pageUpload(t, n, otherPath, otherKey, "x.txt", []byte("x"))
	otherRef, _ := otherMeta["file_ref"].(string)

	bad := []struct {
		name     string
		msg      map[string]any
		wantCode string
	}{
		{name: "client_id too short", msg: map[string]any{"client_id": "abc", "text": "hi"}, wantCode: profile.CodeInvalidPacket},
		{name: "nothing to send", msg: map[string]any{"client_id": "client-empty-1"}, wantCode: profile.CodeInvalidPacket},
		{name: "unknown field", msg: map[string]any{"client_id": "client-unknown", "text": "hi", "role": "assistant"}, wantCode: profile.CodeInvalidPacket},
		{name: "another channel's file", msg: map[string]any{"client_id": "client-other-f", "file_refs": []string{otherRef}}, wantCode: profile.CodeFileNotFound},
	}
	for _, tt := range bad {
		if status, m := pagePost(t, n, path, key, tt.msg); status < 400 || m["code"] != tt.wantCode {
			t.Errorf("%s: %d %v, want code %s", tt.name, status, m, tt.wantCode)
		}
	}

	const cid = "c0ffee00112233445566"
	status, m := pagePost(t, n, path, key, map[string]any{"client_id": cid, "text": "look at this", "file_refs": []string{ref}})
	if status != http.StatusAccepted || m["message_id"] != webchat.UserMessageID(cid) {
		t.Fatalf("post: %d %v, want 202 with message_id %s", status, m, webchat.UserMessageID(cid))
	}
	env, msg := userMessage(t, a, 10*time.Second)
	if env.ChannelID != "wc-send" || msg.MessageID != webchat.UserMessageID(cid) || msg.Text != "look at this" || len(msg.Files) != 1 {
		t.Fatalf("chat.message %s", env.Payload)
	}
	f := msg.Files[0]
	if f.FileRef != ref || f.DownloadURL != "/files/refs/"+ref || f.Filename != "pic.png" {
		t.Fatalf("file %+v, want %s with download_url /files/refs/%s", f, ref, ref)
	}
	if status, got, _ := n.Do(http.MethodGet, f.DownloadURL, nil); status != http.StatusOK || !bytes.Equal(got, data) {
		t.Fatalf("download_url: %d, %d bytes", status, len(got))
	}
	ackUser(t, a, env, map[string]any{"message_id": msg.MessageID, "status": "accepted"})

	// The page retries (it never saw the 202): same message, nothing sent again.
	status, m = pagePost(t, n, path, key, map[string]any{"client_id": cid, "text": "look at this", "file_refs": []string{ref}})
	if status != http.StatusAccepted || m["message_id"] != msg.MessageID || m["duplicate"] != true {
		t.Fatalf("retry: %d %v, want 202 duplicate with the same message_id", status, m)
	}
	if env, ok := a.Quiet(time.Second); !ok {
		t.Fatalf("after the retry xAgent got %s %s", env.Type, env.Payload)
	}
	// The user's message is in the channel's history, once.
	evs := events(t, n, path, key, "", readyIn)
	var users int
	for _, e := range evs {
		if e.Event == "item" && e.Item.Role == webchat.RoleUser {
			users++
			if e.Item.ClientID != cid || e.Item.Text != "look at this" || len(e.Item.Files) != 1 || e.Item.Files[0].FileRef != ref {
				t.Fatalf("user item %+v", e.Item)
			}
		}
	}
	if users != 1 {
		t.Fatalf("%d user items in the history, want 1: %+v", users, evs)
	}
}

// Profile §5-§8 on the webchat target: activity, streamed deltas and the final reach the page
// live through the real pipeline; a reload replays the history (each message once, in its
// final state); a reconnect with Last-Event-ID gets only what changed; the Reconciler finds the
// final.
func TestWebchat_StreamedAnswerLiveAndReplayed(t *testing.T) {
	t.Parallel()
	n, err := testkit.StartNode(testkit.NodeOptions{DataDir: t.TempDir()})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = n.Stop() })
	const channel = "wc-stream"
	path, key := openWebchat(t, n, channel, nil)
	ctx := context.Background()
	a, err := testkit.Dial(ctx, n.Addr, n.Token)
	if err != nil {
		t.Fatal(err)
	}
	defer a.Close()

	parts := []string{"Jet", "Stream ", "keeps ", "it."}
	full := strings.Join(parts, "")
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
	send := func(typ string, payload any) {
		t.Helper()
		if _, err := a.Send(ctx, channel, typ, payload); err != nil {
			t.Fatal(err)
		}
	}
	send(profile.TypeActivity, profile.Activity{Status: profile.ActivityTool, ToolName: "web_search"})
	// The stages run apart: a status still unshown when the first delta is displayed is stale and
	// never shown (P-ACT-5), so the deltas come once the status is on the page, as an agent's do.
	events(t, n, path, key, "", func(evs []sseEvent) bool {
		return slices.ContainsFunc(evs, func(e sseEvent) bool { return e.Item.Kind == webchat.KindStatus && e.Item.Status == "tool" })
	})
	for i, p := range parts {
		send(profile.TypeDelta, profile.Delta{MessageID: "asst_1", Sequence: int64(i + 1), Text: p})
	}
	// As an agent's stream takes its time, the final comes once the stream is on the page (the
	// stages run apart: a final sent at once may replace the stream before it was ever shown).
	events(t, n, path, key, "", func(evs []sseEvent) bool {
		return slices.ContainsFunc(evs, func(e sseEvent) bool {
			return e.Item.Kind == webchat.KindMessage && e.Item.Role == webchat.RoleAssistant
		})
	})
	pid, err := a.Send(ctx, channel, profile.TypeMessage, profile.Message{MessageID: "asst_1", Text: full, CreatedAt: time.Now().UnixMilli()})
	if err != nil {
		t.Fatal(err)
	}
	ackEnv, err := a.Reply(pid, 15*time.Second)
	if err != nil {
		t.Fatal(err)
	}
	if ack, _ := testkit.AckOf(ackEnv); ack.Status != profile.AckAccepted {
		t.Fatalf("final ack %s", ackEnv.Payload)
	}
	var evs []sseEvent
	select {
	case evs = <-live:
	case <-time.After(20 * time.Second):
		t.Fatal("live stream did not see the final")
	}
	var sawTool bool
	var texts []string
	id := ""
	for _, e := range evs {
		switch {
		case e.Item.Kind == webchat.KindStatus && e.Item.Status == "tool" && e.Item.ToolName == "web_search":
			sawTool = true
		case e.Item.Kind == webchat.KindMessage:
			if id == "" {
				id = e.Item.ID
			}
			if e.Item.ID != id {
				t.Fatalf("a second message %s: the stream must edit %s", e.Item.ID, id)
			}
			if !strings.HasPrefix(full, e.Item.Text) {
				t.Fatalf("displayed %q, not a prefix of %q", e.Item.Text, full)
			}
			texts = append(texts, e.Item.Text)
		}
	}
	if !sawTool || len(texts) < 2 || texts[len(texts)-1] != full {
		t.Fatalf("live: tool status %v, message states %q; want the tool status, a streamed part, then %q", sawTool, texts, full)
	}

	// A reload: the history, each message once and final, then ready.
	replay := events(t, n, path, key, "", readyIn)
	var finals int
	lastID := ""
	for _, e := range replay {
		if e.Item.Kind == webchat.KindMessage {
			finals++
			if e.Item.ID != id || !e.Item.Final || e.Item.Text != full {
				t.Fatalf("replayed %+v, want %s final %q", e.Item, id, full)
			}
		}
		if e.ID != "" {
			lastID = e.ID
		}
	}
	if finals != 1 {
		t.Fatalf("%d message items replayed, want 1: %+v", finals, replay)
	}
	// A reconnect with Last-Event-ID: nothing it has seen is replayed. (The status' idle, shown
	// asynchronously after the final, may come after the reload: only newer items may appear.)
	resumed := events(t, n, path, key, lastID, readyIn)
	last, _ := strconv.Atoi(lastID)
	for _, e := range resumed {
		if id, err := strconv.Atoi(e.ID); e.ID != "" && (err != nil || id <= last || e.Item.Kind == webchat.KindMessage) {
			t.Fatalf("resumed stream replayed %+v after %s, want only newer status items, then ready", resumed, lastID)
		}
	}

	// The Reconciler reads the same state, from any process.
	nc, err := nats.Connect(n.NATSURL(), n.NATSOptions()...)
	if err != nil {
		t.Fatal(err)
	}
	defer nc.Close()
	js, _ := jetstream.New(nc)
	ad, _ := webchat.New(webchat.Options{JetStream: js})
	tg, err := ad.Open(json.RawMessage(fmt.Sprintf(`{"channel":%q}`, channel)))
	if err != nil {
		t.Fatal(err)
	}
	shown, found, err := tg.(*webchat.Target).Lookup(ctx, channel+":asst_1")
	if err != nil || !found || !shown.Final || shown.ID != id {
		t.Fatalf("Lookup = %+v found=%v %v; want %s final", shown, found, err, id)
	}
}

// A page's open event stream ends within a second of its channel's DELETE, with an `event:
// revoked`: a revoked link keeps no live view of the chat.
func TestWebchat_DeleteClosesOpenStreams(t *testing.T) {
	t.Parallel()
	e := newEnv(t, envOptions{})
	id := e.channel + "_wcrev"
	path, key := openWebchat(t, e.node, id, nil)
	deletedAt := make(chan time.Time, 1)
	deleting := false
	events(t, e.node, path, key, "", func(evs []sseEvent) bool {
		if readyIn(evs) && !deleting {
			deleting = true
			go func() {
				status, _, err := e.node.Do(http.MethodDelete, "/v1/channels/"+id, nil)
				if err != nil || status != http.StatusNoContent {
					t.Errorf("DELETE: %d %v", status, err)
				}
				deletedAt <- time.Now()
			}()
		}
		return evs[len(evs)-1].Event == "revoked"
	})
	if took := time.Since(<-deletedAt); took > time.Second {
		t.Fatalf("the stream was revoked %s after the DELETE, want within 1s", took)
	}
}

// One page link holder cannot take more than its channel's quotas: past XIM_WEBCHAT_MAX_STREAMS
// open streams and XIM_WEBCHAT_MESSAGES_PER_MINUTE messages, 429 rate_limited with Retry-After.
func TestWebchat_QuotasAnswer429(t *testing.T) {
	t.Parallel()
	e := newEnv(t, envOptions{mutate: func(c *node.Config) { c.WebchatMaxStreams, c.WebchatMessagesPerMinute = 1, 2 }})
	id := e.channel + "_wcq"
	path, key := openWebchat(t, e.node, id, nil)
	for i := 0; i < 2; i++ {
		if status, body := pagePost(t, e.node, path, key, map[string]any{"client_id": fmt.Sprintf("client-quota-%d", i), "text": "hi"}); status != http.StatusAccepted {
			t.Fatalf("message %d: %d %v", i+1, status, body)
		}
	}
	if status, body := pagePost(t, e.node, path, key, map[string]any{"client_id": "client-quota-2", "text": "hi"}); status != http.StatusTooManyRequests || body["code"] != profile.CodeRateLimited {
		t.Fatalf("message 3 in the minute: %d %v, want 429 rate_limited", status, body)
	}
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	open := func() *http.Response {
		req, _ := http.NewRequestWithContext(ctx, http.MethodGet, "http://"+e.node.Addr+path+"/events", nil)
		req.Header.Set("X-Webchat-Key", key)
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { resp.Body.Close() })
		return resp
	}
	if first := open(); first.StatusCode != http.StatusOK {
		t.Fatalf("first stream: %d", first.StatusCode)
	}
	second := open()
	if second.StatusCode != http.StatusTooManyRequests || second.Header.Get("Retry-After") == "" {
		t.Fatalf("second stream: %d Retry-After %q, want 429 with Retry-After", second.StatusCode, second.Header.Get("Retry-After"))
	}
}
