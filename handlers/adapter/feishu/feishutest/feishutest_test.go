package feishutest_test

import (
	"bytes"
	"context"
	"crypto/aes"
	"crypto/cipher"
	"crypto/sha256"
	"encoding/base64"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"image"
	"image/png"
	"io"
	"mime/multipart"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/ximd/ximd/handlers/adapter/feishu/feishutest"
)

// noLimits turns the rate limits off for tests about something else.
var noLimits = feishutest.Limits{PerChatPerSecond: 1e6, CardPerSecond: 1e6, AppPerMinute: 1e6, AppPerSecond: 1e6}

// clock is a settable clock for SetClock: frozen, moved only by advance.
type clock struct {
	mu sync.Mutex
	t  time.Time
}

func newClock(s *feishutest.Server) *clock {
	c := &clock{t: time.Date(2026, 5, 1, 12, 0, 0, 0, time.UTC)}
	s.SetClock(c.now)
	return c
}

func (c *clock) now() time.Time {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.t
}

func (c *clock) advance(d time.Duration) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.t = c.t.Add(d)
}

// world is a fake with one app, one person, a group and a p2p chat, and a token.
type world struct {
	s     *feishutest.Server
	clock *clock
	app   feishutest.App
	ann   feishutest.User
	group string
	p2p   string
	token string
}

func newWorld(t *testing.T) *world {
	t.Helper()
	s := feishutest.New()
	t.Cleanup(s.Close)
	w := &world{s: s, clock: newClock(s), app: s.AddApp("cli_a1b2c3d4", "app-secret", "ximd"), ann: s.AddUser("Ann")}
	w.group = s.AddChat("group", "Team", w.ann)
	w.p2p = s.AddChat("p2p", "", w.ann)
	w.token = w.issueToken(t, w.app.ID, w.app.Secret).TenantAccessToken
	return w
}

// answer is a decoded Feishu answer.
type answer struct {
	status            int
	header            http.Header
	raw               []byte
	Code              int             `json:"code"`
	Msg               string          `json:"msg"`
	Data              json.RawMessage `json:"data"`
	TenantAccessToken string          `json:"tenant_access_token"`
	Expire            int             `json:"expire"`
}

// do makes a request with a JSON body (nil: none) and the token ("" : no Authorization).
func do(t *testing.T, method, url, token string, body any) answer {
	t.Helper()
	var rd io.Reader
	if body != nil {
		b, err := json.Marshal(body)
		if err != nil {
			t.Fatal(err)
		}
		rd = bytes.NewReader(b)
	}
	req, err := http.NewRequest(method, url, rd)
	if err != nil {
		t.Fatal(err)
	}
	req.Header.Set("Content-Type", "application/json; charset=utf-8")
	if token != "" {
		req.Header.Set("Authorization", "Bearer "+token)
	}
	return send(t, req)
}

func send(t *testing.T, req *http.Request) answer {
	t.Helper()
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatalf("%s %s: %v", req.Method, req.URL.Path, err)
	}
	defer resp.Body.Close()
	a := answer{status: resp.StatusCode, header: resp.Header}
	if a.raw, err = io.ReadAll(resp.Body); err != nil {
		t.Fatal(err)
	}
	if strings.HasPrefix(resp.Header.Get("Content-Type"), "application/json") {
		if err := json.Unmarshal(a.raw, &a); err != nil {
			t.Fatalf("decode answer %q: %v", a.raw, err)
		}
	}
	return a
}

// wantCode checks an answer's HTTP status and code.
func wantCode(t *testing.T, a answer, status, code int) {
	t.Helper()
	if a.status != status || a.Code != code {
		t.Fatalf("answer = HTTP %d code %d %q; want HTTP %d code %d", a.status, a.Code, a.Msg, status, code)
	}
}

func (w *world) issueToken(t *testing.T, appID, secret string) answer {
	t.Helper()
	a := do(t, http.MethodPost, w.s.URL()+feishutest.RouteToken, "", map[string]string{"app_id": appID, "app_secret": secret})
	return a
}

// msg is the Message object of a send or reply answer.
type msg struct {
	MessageID string `json:"message_id"`
	ChatID    string `json:"chat_id"`
	MsgType   string `json:"msg_type"`
	ParentID  string `json:"parent_id"`
	RootID    string `json:"root_id"`
	ThreadID  string `json:"thread_id"`
	Body      struct {
		Content string `json:"content"`
	} `json:"body"`
	Sender struct {
		ID     string `json:"id"`
		IDType string `json:"id_type"`
	} `json:"sender"`
}

func (w *world) sendTo(t *testing.T, chatID, msgType string, content any, uuid string) answer {
	t.Helper()
	c, ok := content.(string)
	if !ok {
		b, err := json.Marshal(content)
		if err != nil {
			t.Fatal(err)
		}
		c = string(b)
	}
	body := map[string]any{"receive_id": chatID, "msg_type": msgType, "content": c}
	if uuid != "" {
		body["uuid"] = uuid
	}
	return do(t, http.MethodPost, w.s.URL()+feishutest.RouteMessages+"?receive_id_type=chat_id", w.token, body)
}

func (w *world) sendText(t *testing.T, chatID, text, uuid string) answer {
	t.Helper()
	return w.sendTo(t, chatID, "text", map[string]string{"text": text}, uuid)
}

func decodeData[T any](t *testing.T, a answer) T {
	t.Helper()
	var v T
	if err := json.Unmarshal(a.Data, &v); err != nil {
		t.Fatalf("decode data %s: %v", a.Data, err)
	}
	return v
}

func TestTokenIssueReuseAndExpiry(t *testing.T) {
	w := newWorld(t)
	// "Get custom app tenant_access_token": 2 hours; the same token while 30 minutes or more
	// are left, a new one (both valid) after that.
	first := w.issueToken(t, w.app.ID, w.app.Secret)
	wantCode(t, first, http.StatusOK, 0)
	if first.Expire != 7200 || !strings.HasPrefix(first.TenantAccessToken, "t-") || first.Msg != "ok" {
		t.Fatalf("first token = %+v", first)
	}
	w.clock.advance(89 * time.Minute)
	again := w.issueToken(t, w.app.ID, w.app.Secret)
	if again.TenantAccessToken != first.TenantAccessToken || again.Expire != 31*60 {
		t.Fatalf("with 31 min left: token %q expire %d; want the same token, 1860", again.TenantAccessToken, again.Expire)
	}
	w.clock.advance(2 * time.Minute)
	fresh := w.issueToken(t, w.app.ID, w.app.Secret)
	if fresh.TenantAccessToken == first.TenantAccessToken || fresh.Expire != 7200 {
		t.Fatalf("with 29 min left: got %+v, want a new 2-hour token", fresh)
	}
	chatURL := w.s.URL() + "/open-apis/im/v1/chats/" + w.group
	wantCode(t, do(t, http.MethodGet, chatURL, first.TenantAccessToken, nil), http.StatusOK, 0)
	w.clock.advance(29 * time.Minute)
	wantCode(t, do(t, http.MethodGet, chatURL, first.TenantAccessToken, nil), http.StatusBadRequest, 99991663)
	wantCode(t, do(t, http.MethodGet, chatURL, fresh.TenantAccessToken, nil), http.StatusOK, 0)

	tests := []struct {
		name         string
		appID, token string
		secret       string
		wantStatus   int
		wantCode     int
	}{
		{name: "wrong secret", appID: w.app.ID, secret: "nope", wantStatus: 400, wantCode: 10014},
		{name: "unknown app", appID: "cli_unknown", secret: "x", wantStatus: 400, wantCode: 10003},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			wantCode(t, w.issueToken(t, tt.appID, tt.secret), tt.wantStatus, tt.wantCode)
		})
	}
	for _, tt := range []struct {
		name, token string
		wantCode    int
	}{
		{name: "no token", token: "", wantCode: 99991661},
		{name: "not t- or u-", token: "abc", wantCode: 99991671},
		{name: "unknown tenant token", token: "t-0000", wantCode: 99991663},
	} {
		t.Run(tt.name, func(t *testing.T) {
			wantCode(t, do(t, http.MethodGet, chatURL, tt.token, nil), http.StatusBadRequest, tt.wantCode)
		})
	}

	t.Run("SetTokenTTL", func(t *testing.T) {
		w.s.SetTokenTTL(2 * time.Second)
		other := w.s.AddApp("cli_other", "s2", "other")
		a := w.issueToken(t, other.ID, other.Secret)
		if a.Expire != 2 {
			t.Fatalf("expire = %d, want 2", a.Expire)
		}
		w.clock.advance(2 * time.Second)
		wantCode(t, do(t, http.MethodGet, chatURL, a.TenantAccessToken, nil), http.StatusBadRequest, 99991663)
	})
}

func TestSendUUIDDedupWithinAnHour(t *testing.T) {
	w := newWorld(t)
	first := w.sendText(t, w.group, "hello", "req-1")
	wantCode(t, first, http.StatusOK, 0)
	m1 := decodeData[msg](t, first)
	if !strings.HasPrefix(m1.MessageID, "om_") || m1.ChatID != w.group || m1.Sender.ID != w.app.ID || m1.Sender.IDType != "app_id" {
		t.Fatalf("message = %+v", m1)
	}
	// "Send message": requests with the same uuid send at most one message within 1 hour.
	// The second answers the first message (the page does not say; see README).
	w.clock.advance(59 * time.Minute)
	again := decodeData[msg](t, w.sendText(t, w.group, "hello", "req-1"))
	if again.MessageID != m1.MessageID {
		t.Fatalf("retry within the hour sent %q, want the first message %q", again.MessageID, m1.MessageID)
	}
	if n := len(w.s.Messages(w.group)); n != 1 {
		t.Fatalf("%d messages in the chat, want 1", n)
	}
	w.clock.advance(time.Minute)
	later := decodeData[msg](t, w.sendText(t, w.group, "hello", "req-1"))
	if later.MessageID == m1.MessageID {
		t.Fatal("an hour later the same uuid still answered the old message")
	}
	msgs := w.s.Messages(w.group)
	if len(msgs) != 2 || msgs[0].Text != "hello" || msgs[0].UUID != "req-1" {
		t.Fatalf("messages = %+v", msgs)
	}
	wantCode(t, w.sendText(t, w.group, "x", strings.Repeat("u", 51)), http.StatusBadRequest, 230001)
}

func TestSendRefusals(t *testing.T) {
	w := newWorld(t)
	w.s.SetLimits(noLimits)
	removed := w.s.AddChat("group", "Gone", w.ann)
	w.s.RemoveBot(removed, w.app.ID)
	tests := []struct {
		name     string
		chatID   string
		msgType  string
		content  any
		wantCode int
	}{
		{name: "unknown chat", chatID: "oc_nope", msgType: "text", content: map[string]string{"text": "x"}, wantCode: 230001},
		{name: "bot not in the group", chatID: removed, msgType: "text", content: map[string]string{"text": "x"}, wantCode: 230002},
		{name: "text of 150 KB", chatID: w.group, msgType: "text", content: `{"text":"` + strings.Repeat("a", 150<<10-11) + `"}`},
		{name: "text over 150 KB", chatID: w.group, msgType: "text", content: `{"text":"` + strings.Repeat("a", 150<<10-10) + `"}`, wantCode: 230025},
		{name: "card over 30 KB", chatID: w.group, msgType: "interactive", content: `{"elements":[{"tag":"markdown","content":"` + strings.Repeat("a", 30<<10) + `"}]}`, wantCode: 230025},
		{name: "text content without text", chatID: w.group, msgType: "text", content: `{"txt":"x"}`, wantCode: 230001},
		{name: "unknown msg_type", chatID: w.group, msgType: "fax", content: `{}`, wantCode: 230001},
		{name: "unknown card entity", chatID: w.group, msgType: "interactive", content: `{"type":"card","data":{"card_id":"123"}}`, wantCode: 230099},
		{name: "image never uploaded", chatID: w.group, msgType: "image", content: `{"image_key":"img_v2_x"}`, wantCode: 230001},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			a := w.sendTo(t, tt.chatID, tt.msgType, tt.content, "")
			if tt.wantCode == 0 {
				wantCode(t, a, http.StatusOK, 0)
				return
			}
			wantCode(t, a, http.StatusBadRequest, tt.wantCode)
		})
	}
	a := do(t, http.MethodPost, w.s.URL()+feishutest.RouteMessages, w.token, map[string]string{"receive_id": w.group, "msg_type": "text", "content": `{"text":"x"}`})
	wantCode(t, a, http.StatusBadRequest, 230001) // no receive_id_type
}

func TestSendToPersonUsesTheirP2PChat(t *testing.T) {
	w := newWorld(t)
	a := do(t, http.MethodPost, w.s.URL()+feishutest.RouteMessages+"?receive_id_type=open_id", w.token,
		map[string]string{"receive_id": w.ann.OpenID, "msg_type": "text", "content": `{"text":"hi Ann"}`})
	wantCode(t, a, http.StatusOK, 0)
	if got := w.s.Messages(w.p2p); len(got) != 1 || got[0].Text != "hi Ann" {
		t.Fatalf("p2p messages = %+v", got)
	}
}

func TestReplyParentAndThread(t *testing.T) {
	w := newWorld(t)
	w.s.SetLimits(noLimits)
	asked, _ := w.s.Post(w.group, w.ann, "question")
	reply := func(id string, inThread bool) answer {
		return do(t, http.MethodPost, w.s.URL()+"/open-apis/im/v1/messages/"+id+"/reply", w.token,
			map[string]any{"msg_type": "text", "content": `{"text":"answer"}`, "reply_in_thread": inThread})
	}
	a := reply(asked, false)
	wantCode(t, a, http.StatusOK, 0)
	r := decodeData[msg](t, a)
	if r.ParentID != asked || r.RootID != asked || r.ThreadID != "" {
		t.Fatalf("reply = %+v; want parent and root %q", r, asked)
	}
	second := decodeData[msg](t, reply(r.MessageID, false))
	if second.ParentID != r.MessageID || second.RootID != asked {
		t.Fatalf("reply to the reply = %+v; want parent %q root %q", second, r.MessageID, asked)
	}
	other, _ := w.s.Post(w.group, w.ann, "thread me")
	th := decodeData[msg](t, reply(other, true))
	if !strings.HasPrefix(th.ThreadID, "omt_") || th.ParentID != other || th.RootID != other {
		t.Fatalf("reply in thread = %+v", th)
	}
	if got := w.s.Messages(w.group); len(got) != 3 || got[0].ParentID != asked {
		t.Fatalf("messages = %+v", got)
	}
	wantCode(t, reply("om_unknown", false), http.StatusBadRequest, 230001)
}

func TestChatInfo(t *testing.T) {
	w := newWorld(t)
	get := func(id string) answer {
		return do(t, http.MethodGet, w.s.URL()+"/open-apis/im/v1/chats/"+id, w.token, nil)
	}
	type chat struct {
		Name      string `json:"name"`
		ChatMode  string `json:"chat_mode"`
		ChatType  string `json:"chat_type"`
		UserCount string `json:"user_count"`
		BotCount  string `json:"bot_count"`
	}
	g := decodeData[chat](t, get(w.group))
	if g.Name != "Team" || g.ChatMode != "group" || g.ChatType != "private" || g.UserCount != "1" || g.BotCount != "1" {
		t.Fatalf("group = %+v", g)
	}
	p := decodeData[chat](t, get(w.p2p))
	if p.ChatMode != "p2p" || p.ChatType != "" || p.Name != "" {
		t.Fatalf("p2p = %+v", p)
	}
	wantCode(t, get("oc_unknown"), http.StatusBadRequest, 232006)
	w.s.RemoveBot(w.group, w.app.ID)
	wantCode(t, get(w.group), http.StatusBadRequest, 232011)
}

// streamingCard is card JSON 2.0 in streaming mode with one markdown element "answer".
const streamingCard = `{"schema":"2.0","config":{"streaming_mode":true,"update_multi":true},` +
	`"body":{"elements":[{"tag":"markdown","element_id":"answer","content":"…"}]}}`

func (w *world) createCard(t *testing.T, data string) answer {
	t.Helper()
	return do(t, http.MethodPost, w.s.URL()+feishutest.RouteCards, w.token, map[string]string{"type": "card_json", "data": data})
}

func (w *world) streamText(t *testing.T, cardID, elementID, text string, seq int) answer {
	t.Helper()
	return do(t, http.MethodPut, w.s.URL()+"/open-apis/cardkit/v1/cards/"+cardID+"/elements/"+elementID+"/content",
		w.token, map[string]any{"content": text, "sequence": seq})
}

func (w *world) settings(t *testing.T, cardID string, streaming bool, seq int) answer {
	t.Helper()
	s := fmt.Sprintf(`{"config":{"streaming_mode":%v}}`, streaming)
	return do(t, http.MethodPatch, w.s.URL()+"/open-apis/cardkit/v1/cards/"+cardID+"/settings",
		w.token, map[string]any{"settings": s, "sequence": seq})
}

func TestCardStreamingLifecycle(t *testing.T) {
	w := newWorld(t)
	w.s.SetLimits(noLimits)
	created := w.createCard(t, streamingCard)
	wantCode(t, created, http.StatusOK, 0)
	cardID := decodeData[map[string]string](t, created)["card_id"]
	sent := w.sendTo(t, w.group, "interactive", map[string]any{"type": "card", "data": map[string]string{"card_id": cardID}}, "")
	wantCode(t, sent, http.StatusOK, 0)
	// "Streaming card updates": an entity is sent once.
	again := w.sendTo(t, w.group, "interactive", map[string]any{"type": "card", "data": map[string]string{"card_id": cardID}}, "")
	wantCode(t, again, http.StatusBadRequest, 230099)

	for i, text := range []string{"Hel", "Hello", "Hello, Ann"} {
		wantCode(t, w.streamText(t, cardID, "answer", text, i+1), http.StatusOK, 0)
	}
	// sequence must be strictly greater than the card's last
	wantCode(t, w.streamText(t, cardID, "answer", "stale", 3), http.StatusBadRequest, 300317)
	wantCode(t, w.streamText(t, cardID, "nope", "x", 4), http.StatusBadRequest, 10002)
	wantCode(t, w.settings(t, cardID, false, 4), http.StatusOK, 0)
	// streaming closed: text updates are refused
	wantCode(t, w.streamText(t, cardID, "answer", "more", 5), http.StatusBadRequest, 300309)

	msgs := w.s.Messages(w.group)
	if len(msgs) != 1 || msgs[0].Card == nil || msgs[0].Card.ID != cardID || msgs[0].Text != "Hello, Ann" {
		t.Fatalf("messages = %+v", msgs)
	}
	card := w.s.Cards()[0]
	if card.Streaming || card.MessageID != msgs[0].ID || card.Sequence != 4 {
		t.Fatalf("card = %+v", card)
	}
	var seqs []int
	for _, u := range card.Updates {
		seqs = append(seqs, u.Sequence)
	}
	if fmt.Sprint(seqs) != "[1 2 3 4]" {
		t.Fatalf("update sequences = %v", seqs)
	}
	last := card.Updates[len(card.Updates)-1]
	if last.Kind != "settings" || last.Streaming || last.Text != "Hello, Ann" {
		t.Fatalf("last update = %+v; want streaming closed with the final text", last)
	}
	if !card.Updates[0].Streaming || card.Updates[0].Text != "Hel" {
		t.Fatalf("first update = %+v", card.Updates[0])
	}

	// full update replaces the body; the final card has no streaming_mode
	final := `{"schema":"2.0","body":{"elements":[{"tag":"markdown","element_id":"answer","content":"Done."}]}}`
	up := do(t, http.MethodPut, w.s.URL()+"/open-apis/cardkit/v1/cards/"+cardID, w.token,
		map[string]any{"card": map[string]string{"type": "card_json", "data": final}, "sequence": 5, "uuid": "final-1"})
	wantCode(t, up, http.StatusOK, 0)
	// the same uuid and request again is done once; another request with it conflicts
	up2 := do(t, http.MethodPut, w.s.URL()+"/open-apis/cardkit/v1/cards/"+cardID, w.token,
		map[string]any{"card": map[string]string{"type": "card_json", "data": final}, "sequence": 5, "uuid": "final-1"})
	wantCode(t, up2, http.StatusOK, 0)
	up3 := do(t, http.MethodPut, w.s.URL()+"/open-apis/cardkit/v1/cards/"+cardID, w.token,
		map[string]any{"card": map[string]string{"type": "card_json", "data": final}, "sequence": 6, "uuid": "final-1"})
	wantCode(t, up3, http.StatusBadRequest, 200770)
	if got := w.s.Messages(w.group)[0]; got.Text != "Done." || len(got.Card.Updates) != 5 {
		t.Fatalf("after full update: text %q, %d updates", got.Text, len(got.Card.Updates))
	}
}

func TestCardStreamingTimesOutAfterTenMinutes(t *testing.T) {
	w := newWorld(t)
	cardID := decodeData[map[string]string](t, w.createCard(t, streamingCard))["card_id"]
	w.clock.advance(10 * time.Minute)
	wantCode(t, w.streamText(t, cardID, "answer", "late", 1), http.StatusBadRequest, 200850)
	wantCode(t, w.settings(t, cardID, true, 1), http.StatusOK, 0)
	wantCode(t, w.streamText(t, cardID, "answer", "again", 2), http.StatusOK, 0)
}

func TestCardCreateRefusals(t *testing.T) {
	w := newWorld(t)
	w.s.SetLimits(noLimits)
	tests := []struct {
		name     string
		data     string
		wantCode int
	}{
		{name: "schema 1.0", data: `{"elements":[]}`, wantCode: 300303},
		{name: "duplicate element_id", data: `{"schema":"2.0","body":{"elements":[{"tag":"markdown","element_id":"a"},{"tag":"markdown","element_id":"a"}]}}`, wantCode: 300301},
		{name: "update_multi false", data: `{"schema":"2.0","config":{"update_multi":false},"body":{"elements":[]}}`, wantCode: 300302},
		{name: "empty", data: "", wantCode: 300307},
		{name: "not JSON", data: `{"schema":`, wantCode: 200220},
		{name: "over 30 KB", data: `{"schema":"2.0","body":{"elements":[{"tag":"markdown","content":"` + strings.Repeat("x", 30<<10) + `"}]}}`, wantCode: 200860},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			wantCode(t, w.createCard(t, tt.data), http.StatusBadRequest, tt.wantCode)
		})
	}
	other := w.s.AddApp("cli_other", "s2", "other")
	otherToken := w.issueToken(t, other.ID, other.Secret).TenantAccessToken
	cardID := decodeData[map[string]string](t, w.createCard(t, streamingCard))["card_id"]
	a := do(t, http.MethodPut, w.s.URL()+"/open-apis/cardkit/v1/cards/"+cardID+"/elements/answer/content", otherToken,
		map[string]any{"content": "x", "sequence": 1})
	wantCode(t, a, http.StatusBadRequest, 300311)
	wantCode(t, w.streamText(t, "1234", "answer", "x", 1), http.StatusBadRequest, 200740)
}

func TestCardRateLimitResetAndEarlyCalls(t *testing.T) {
	w := newWorld(t)
	cardID := decodeData[map[string]string](t, w.createCard(t, streamingCard))["card_id"]
	// "Streaming card updates": at most 10 operations a second on one card entity. The clock
	// is frozen, so all of these fall in the same second.
	for seq := 1; seq <= 10; seq++ {
		wantCode(t, w.streamText(t, cardID, "answer", strings.Repeat("a", seq), seq), http.StatusOK, 0)
	}
	over := w.streamText(t, cardID, "answer", "eleven", 11)
	wantCode(t, over, http.StatusTooManyRequests, 99991400)
	if over.header.Get("x-ogw-ratelimit-limit") != "10" || over.header.Get("x-ogw-ratelimit-reset") != "1" {
		t.Fatalf("headers = %v", over.header)
	}
	if n := w.s.EarlyCalls(); n != 0 {
		t.Fatalf("EarlyCalls = %d before any call inside the reset", n)
	}
	early := w.streamText(t, cardID, "answer", "eleven", 11)
	wantCode(t, early, http.StatusTooManyRequests, 99991400)
	if n := w.s.EarlyCalls(); n != 1 {
		t.Fatalf("EarlyCalls = %d, want 1", n)
	}
	w.clock.advance(time.Second)
	wantCode(t, w.streamText(t, cardID, "answer", "eleven", 11), http.StatusOK, 0)
	if n := len(w.s.Cards()[0].Updates); n != 11 {
		t.Fatalf("%d updates recorded, want 11 (refused calls are not)", n)
	}
	if n := w.s.EarlyCalls(); n != 1 {
		t.Fatalf("EarlyCalls = %d after the reset, want 1", n)
	}
}

func TestAppRateLimit(t *testing.T) {
	w := newWorld(t)
	w.s.SetLimits(feishutest.Limits{AppPerSecond: 2})
	url := w.s.URL() + "/open-apis/im/v1/chats/" + w.group
	wantCode(t, do(t, http.MethodGet, url, w.token, nil), http.StatusOK, 0)
	wantCode(t, do(t, http.MethodGet, url, w.token, nil), http.StatusOK, 0)
	over := do(t, http.MethodGet, url, w.token, nil)
	wantCode(t, over, http.StatusTooManyRequests, 99991400)
	if over.header.Get("x-ogw-ratelimit-limit") != "2" || over.header.Get("x-ogw-ratelimit-reset") != "1" {
		t.Fatalf("headers = %v", over.header)
	}
	// another API of the same app has its own limit
	wantCode(t, w.sendText(t, w.group, "still fine", ""), http.StatusOK, 0)
	wantCode(t, do(t, http.MethodGet, url, w.token, nil), http.StatusTooManyRequests, 99991400)
	if n := w.s.EarlyCalls(); n != 1 {
		t.Fatalf("EarlyCalls = %d, want 1", n)
	}
}

func TestChatRateLimitIs230020(t *testing.T) {
	w := newWorld(t)
	for i := range 5 {
		wantCode(t, w.sendText(t, w.group, fmt.Sprint(i), ""), http.StatusOK, 0)
	}
	// "Send message": 5 QPS per group, answered 400 / 230020 with no reset time.
	over := w.sendText(t, w.group, "sixth", "")
	wantCode(t, over, http.StatusBadRequest, 230020)
	if over.header.Get("x-ogw-ratelimit-reset") != "" {
		t.Fatalf("230020 carries a reset header: %v", over.header)
	}
	wantCode(t, w.sendText(t, w.p2p, "other chat", ""), http.StatusOK, 0)
	w.clock.advance(time.Second)
	wantCode(t, w.sendText(t, w.group, "sixth", ""), http.StatusOK, 0)
	if n := len(w.s.Messages(w.group)); n != 6 {
		t.Fatalf("%d messages, want 6", n)
	}
}

func TestFailNextAndHang(t *testing.T) {
	w := newWorld(t)
	w.s.FailNext(feishutest.RouteMessages, 1, http.StatusTooManyRequests, 99991400, "request trigger frequency limit", 2)
	a := w.sendText(t, w.group, "x", "")
	wantCode(t, a, http.StatusTooManyRequests, 99991400)
	if a.header.Get("x-ogw-ratelimit-reset") != "2" {
		t.Fatalf("headers = %v", a.header)
	}
	wantCode(t, w.sendText(t, w.group, "x", ""), http.StatusTooManyRequests, 99991400)
	w.clock.advance(2 * time.Second)
	wantCode(t, w.sendText(t, w.group, "x", "u-1"), http.StatusOK, 0)
	if n := w.s.EarlyCalls(); n != 1 {
		t.Fatalf("EarlyCalls = %d, want 1", n)
	}

	// Hang: the message is sent but the client gives up before the answer.
	w.s.Hang(feishutest.RouteMessages, 5*time.Second)
	ctx, cancel := context.WithTimeout(context.Background(), 100*time.Millisecond)
	defer cancel()
	body, _ := json.Marshal(map[string]string{"receive_id": w.group, "msg_type": "text", "content": `{"text":"in doubt"}`, "uuid": "u-2"})
	req, _ := http.NewRequestWithContext(ctx, http.MethodPost, w.s.URL()+feishutest.RouteMessages+"?receive_id_type=chat_id", bytes.NewReader(body))
	req.Header.Set("Authorization", "Bearer "+w.token)
	if _, err := http.DefaultClient.Do(req); !errors.Is(err, context.DeadlineExceeded) {
		t.Fatalf("hung call: err = %v, want deadline exceeded", err)
	}
	w.s.Hang(feishutest.RouteMessages, 0)
	msgs := w.s.Messages(w.group)
	if len(msgs) != 2 || msgs[1].Text != "in doubt" {
		t.Fatalf("messages = %+v", msgs)
	}
	eventually(t, "the hung call to be recorded without an answer", func() bool {
		calls := w.s.Calls()
		c := calls[len(calls)-1]
		return c.Route == feishutest.RouteMessages && c.Status == 0
	})
	// the retry with the same uuid answers the message that was sent
	retry := decodeData[msg](t, w.sendTo(t, w.group, "text", `{"text":"in doubt"}`, "u-2"))
	if retry.MessageID != msgs[1].ID || len(w.s.Messages(w.group)) != 2 {
		t.Fatalf("retry answered %q; messages %d", retry.MessageID, len(w.s.Messages(w.group)))
	}
}

// eventually polls cond until it holds or 5 seconds pass.
func eventually(t *testing.T, what string, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(5 * time.Second)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("timed out waiting for %s", what)
		}
		time.Sleep(5 * time.Millisecond)
	}
}

func pngBytes(t *testing.T, w, h int) []byte {
	t.Helper()
	var buf bytes.Buffer
	if err := png.Encode(&buf, image.NewGray(image.Rect(0, 0, w, h))); err != nil {
		t.Fatal(err)
	}
	return buf.Bytes()
}

// upload POSTs a multipart form: fields, then the file part.
func (w *world) upload(t *testing.T, route string, fields map[string]string, fileField, fileName string, data []byte) answer {
	t.Helper()
	var buf bytes.Buffer
	mw := multipart.NewWriter(&buf)
	for k, v := range fields {
		if err := mw.WriteField(k, v); err != nil {
			t.Fatal(err)
		}
	}
	if fileField != "" {
		fw, err := mw.CreateFormFile(fileField, fileName)
		if err != nil {
			t.Fatal(err)
		}
		if _, err := fw.Write(data); err != nil {
			t.Fatal(err)
		}
	}
	if err := mw.Close(); err != nil {
		t.Fatal(err)
	}
	req, err := http.NewRequest(http.MethodPost, w.s.URL()+route, &buf)
	if err != nil {
		t.Fatal(err)
	}
	req.Header.Set("Content-Type", mw.FormDataContentType())
	req.Header.Set("Authorization", "Bearer "+w.token)
	return send(t, req)
}

func (w *world) download(t *testing.T, messageID, key, typ string) answer {
	t.Helper()
	return do(t, http.MethodGet, w.s.URL()+"/open-apis/im/v1/messages/"+messageID+"/resources/"+key+"?type="+typ, w.token, nil)
}

func TestImageAndFileUploadThenDownload(t *testing.T) {
	w := newWorld(t)
	w.s.SetLimits(noLimits)
	img := pngBytes(t, 40, 30)
	up := w.upload(t, feishutest.RouteImages, map[string]string{"image_type": "message"}, "image", "a.png", img)
	wantCode(t, up, http.StatusOK, 0)
	imageKey := decodeData[map[string]string](t, up)["image_key"]
	sent := decodeData[msg](t, w.sendTo(t, w.group, "image", map[string]string{"image_key": imageKey}, ""))
	got := w.download(t, sent.MessageID, imageKey, "image")
	if got.status != http.StatusOK || !bytes.Equal(got.raw, img) || got.header.Get("Content-Type") != "image/png" {
		t.Fatalf("download: HTTP %d %q, %d bytes", got.status, got.header.Get("Content-Type"), len(got.raw))
	}

	pdf := []byte("%PDF-1.4 fake")
	fu := w.upload(t, feishutest.RouteFiles, map[string]string{"file_type": "pdf", "file_name": "report.pdf"}, "file", "report.pdf", pdf)
	wantCode(t, fu, http.StatusOK, 0)
	fileKey := decodeData[map[string]string](t, fu)["file_key"]
	// "Send message" 230055: an mp4 upload must be sent as media, a pdf as a file
	wantCode(t, w.sendTo(t, w.group, "media", map[string]string{"file_key": fileKey}, ""), http.StatusBadRequest, 230055)
	fileMsg := decodeData[msg](t, w.sendTo(t, w.group, "file", map[string]string{"file_key": fileKey}, ""))
	if got := w.download(t, fileMsg.MessageID, fileKey, "file"); !bytes.Equal(got.raw, pdf) {
		t.Fatalf("file download = %q", got.raw)
	}
	if m := w.s.Messages(w.group)[1]; m.File == nil || m.File.Name != "report.pdf" || m.File.FileType != "pdf" {
		t.Fatalf("file message = %+v", m)
	}
	wantCode(t, w.download(t, fileMsg.MessageID, imageKey, "file"), http.StatusBadRequest, 234003)

	// a person's file: the adapter reads message_id and file_key from the event
	recv := newReceiver(t, nil)
	w.s.SetEventURL(w.app.ID, recv.url, "vt", "")
	posted, _ := w.s.PostFile(w.group, w.ann, "file", "notes.txt", []byte("hello"))
	ev := decodeEvent(t, recv.next(t).body, "")
	var content struct {
		FileKey  string `json:"file_key"`
		FileName string `json:"file_name"`
	}
	if err := json.Unmarshal([]byte(ev.Event.Message.Content), &content); err != nil || ev.Event.Message.MessageID != posted {
		t.Fatalf("event message = %+v (%v)", ev.Event.Message, err)
	}
	if ev.Event.Message.MessageType != "file" || content.FileName != "notes.txt" {
		t.Fatalf("event message = %+v", ev.Event.Message)
	}
	if got := w.download(t, posted, content.FileKey, "file"); got.status != http.StatusOK || string(got.raw) != "hello" {
		t.Fatalf("person's file = HTTP %d %q", got.status, got.raw)
	}
	wantCode(t, w.download(t, posted, content.FileKey, "image"), http.StatusBadRequest, 234001)
	w.s.RemoveBot(w.group, w.app.ID)
	wantCode(t, w.download(t, posted, content.FileKey, "file"), http.StatusBadRequest, 234004)

	tests := []struct {
		name     string
		fields   map[string]string
		field    string
		data     []byte
		route    string
		wantCode int
	}{
		{name: "empty image", route: feishutest.RouteImages, fields: map[string]string{"image_type": "message"}, field: "image", data: []byte{}, wantCode: 234010},
		{name: "image over 10 MB", route: feishutest.RouteImages, fields: map[string]string{"image_type": "message"}, field: "image", data: append(bytes.Clone(img), make([]byte, 10<<20)...), wantCode: 234006},
		{name: "not an image", route: feishutest.RouteImages, fields: map[string]string{"image_type": "message"}, field: "image", data: []byte("text"), wantCode: 234011},
		{name: "GIF over 2000 px", route: feishutest.RouteImages, fields: map[string]string{"image_type": "message"}, field: "image", data: gifHeader(2001, 10), wantCode: 234039},
		{name: "no image_type", route: feishutest.RouteImages, field: "image", data: img, wantCode: 234001},
		{name: "unknown file_type", route: feishutest.RouteFiles, fields: map[string]string{"file_type": "exe", "file_name": "a.exe"}, field: "file", data: []byte("x"), wantCode: 234001},
		{name: "empty file", route: feishutest.RouteFiles, fields: map[string]string{"file_type": "stream", "file_name": "a"}, field: "file", data: []byte{}, wantCode: 234010},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			wantCode(t, w.upload(t, tt.route, tt.fields, tt.field, "f", tt.data), http.StatusBadRequest, tt.wantCode)
		})
	}
}

// gifHeader is the start of a GIF with a logical screen of w x h.
func gifHeader(w, h int) []byte {
	return []byte{'G', 'I', 'F', '8', '9', 'a', byte(w), byte(w >> 8), byte(h), byte(h >> 8), 0, 0, 0}
}

// received is one request to a test event URL.
type received struct {
	header http.Header
	body   []byte
}

// receiver is a test event URL; answer decides each answer (nil: HTTP 200 with {}).
type receiver struct {
	url  string
	got  chan received
	mu   sync.Mutex
	n    int
	resp func(n int, body []byte) (int, []byte)
}

func newReceiver(t *testing.T, answer func(n int, body []byte) (int, []byte)) *receiver {
	t.Helper()
	r := &receiver{got: make(chan received, 100), resp: answer}
	ts := httptest.NewServer(http.HandlerFunc(func(rw http.ResponseWriter, req *http.Request) {
		body, _ := io.ReadAll(req.Body)
		r.mu.Lock()
		r.n++
		n := r.n
		r.mu.Unlock()
		r.got <- received{header: req.Header.Clone(), body: body}
		status, out := http.StatusOK, []byte(`{}`)
		if r.resp != nil {
			status, out = r.resp(n, body)
		}
		rw.WriteHeader(status)
		_, _ = rw.Write(out)
	}))
	t.Cleanup(ts.Close)
	r.url = ts.URL + "/feishu/events"
	return r
}

// next waits for the next request.
func (r *receiver) next(t *testing.T) received {
	t.Helper()
	select {
	case got := <-r.got:
		return got
	case <-time.After(5 * time.Second):
		t.Fatal("timed out waiting for an event request")
		return received{}
	}
}

// decrypt decrypts an "encrypt" value the way "Receive events" documents: base64, key =
// SHA-256 of the Encrypt Key, IV = the first 16 bytes, AES-256-CBC, padding removed.
func decrypt(t *testing.T, encrypted, encryptKey string) []byte {
	t.Helper()
	out, err := decryptEvent(encrypted, encryptKey)
	if err != nil {
		t.Fatal(err)
	}
	return out
}

func decryptEvent(encrypted, encryptKey string) ([]byte, error) {
	buf, err := base64.StdEncoding.DecodeString(encrypted)
	if err != nil || len(buf) < 2*aes.BlockSize || len(buf)%aes.BlockSize != 0 {
		return nil, fmt.Errorf("ciphertext %q: %v", encrypted, err)
	}
	key := sha256.Sum256([]byte(encryptKey))
	block, err := aes.NewCipher(key[:])
	if err != nil {
		return nil, fmt.Errorf("aes: %w", err)
	}
	out := make([]byte, len(buf)-aes.BlockSize)
	cipher.NewCBCDecrypter(block, buf[:aes.BlockSize]).CryptBlocks(out, buf[aes.BlockSize:])
	pad := int(out[len(out)-1])
	if pad < 1 || pad > aes.BlockSize || !bytes.Equal(out[len(out)-pad:], bytes.Repeat([]byte{byte(pad)}, pad)) {
		return nil, fmt.Errorf("bad PKCS#7 padding in %q", out)
	}
	return out[:len(out)-pad], nil
}

func TestDecryptDocumentedVector(t *testing.T) {
	// The example of "Receive events": key "test key" decrypts to "hello world".
	if got := decrypt(t, "P37w+VZImNgPEO1RBhJ6RtKl7n6zymIbEG1pReEzghk=", "test key"); string(got) != "hello world" {
		t.Fatalf("decrypt = %q", got)
	}
}

// event is a decoded im.message.receive_v1 event.
type event struct {
	Schema string `json:"schema"`
	Header struct {
		EventID    string `json:"event_id"`
		EventType  string `json:"event_type"`
		CreateTime string `json:"create_time"`
		Token      string `json:"token"`
		AppID      string `json:"app_id"`
		TenantKey  string `json:"tenant_key"`
	} `json:"header"`
	Event struct {
		Sender struct {
			SenderID struct {
				OpenID  string `json:"open_id"`
				UnionID string `json:"union_id"`
				UserID  string `json:"user_id"`
			} `json:"sender_id"`
			SenderType string `json:"sender_type"`
		} `json:"sender"`
		Message struct {
			MessageID   string `json:"message_id"`
			RootID      string `json:"root_id"`
			ParentID    string `json:"parent_id"`
			CreateTime  string `json:"create_time"`
			ChatID      string `json:"chat_id"`
			ChatType    string `json:"chat_type"`
			MessageType string `json:"message_type"`
			Content     string `json:"content"`
			Mentions    []struct {
				Key string `json:"key"`
				ID  struct {
					OpenID  string `json:"open_id"`
					UnionID string `json:"union_id"`
				} `json:"id"`
				Name      string `json:"name"`
				TenantKey string `json:"tenant_key"`
			} `json:"mentions"`
		} `json:"message"`
	} `json:"event"`
}

// decodeEvent decodes an event body, decrypting it when encryptKey is set.
func decodeEvent(t *testing.T, body []byte, encryptKey string) event {
	t.Helper()
	if encryptKey != "" {
		var enc struct {
			Encrypt string `json:"encrypt"`
		}
		if err := json.Unmarshal(body, &enc); err != nil || enc.Encrypt == "" {
			t.Fatalf("encrypted body %q: %v", body, err)
		}
		body = decrypt(t, enc.Encrypt, encryptKey)
	}
	var ev event
	if err := json.Unmarshal(body, &ev); err != nil {
		t.Fatalf("event %q: %v", body, err)
	}
	return ev
}

func TestEventDeliverySignedAndEncrypted(t *testing.T) {
	w := newWorld(t)
	recv := newReceiver(t, nil)
	w.s.SetEventURL(w.app.ID, recv.url, "v-token", "e-key")
	messageID, eventID := w.s.Post(w.group, w.ann, "hello bot")
	got := recv.next(t)

	// "Receive events": X-Lark-Signature is hex SHA-256 of timestamp + nonce + encrypt key + body.
	ts, nonce := got.header.Get("X-Lark-Request-Timestamp"), got.header.Get("X-Lark-Request-Nonce")
	h := sha256.Sum256(append([]byte(ts+nonce+"e-key"), got.body...))
	if ts == "" || nonce == "" || got.header.Get("X-Lark-Signature") != hex.EncodeToString(h[:]) {
		t.Fatalf("signature headers = %v", got.header)
	}
	if got.header.Get("X-Lark-Signature") != feishutest.Signature(ts, nonce, "e-key", got.body) {
		t.Fatal("Signature disagrees with the documented computation")
	}
	if ts != fmt.Sprint(w.clock.now().Unix()) {
		t.Fatalf("timestamp %q, want the fake clock's %d", ts, w.clock.now().Unix())
	}
	ev := decodeEvent(t, got.body, "e-key")
	if ev.Schema != "2.0" || ev.Header.EventID != eventID || ev.Header.EventType != "im.message.receive_v1" ||
		ev.Header.Token != "v-token" || ev.Header.AppID != w.app.ID || ev.Header.TenantKey == "" ||
		ev.Header.CreateTime != fmt.Sprint(w.clock.now().UnixMilli()) {
		t.Fatalf("header = %+v", ev.Header)
	}
	s, m := ev.Event.Sender, ev.Event.Message
	if s.SenderType != "user" || s.SenderID.OpenID != w.ann.OpenID || s.SenderID.UnionID != w.ann.UnionID || s.SenderID.UserID != w.ann.UserID {
		t.Fatalf("sender = %+v", s)
	}
	if m.MessageID != messageID || m.ChatID != w.group || m.ChatType != "group" || m.MessageType != "text" || m.Content != `{"text":"hello bot"}` {
		t.Fatalf("message = %+v", m)
	}
	eventually(t, "the delivery to be recorded", func() bool {
		evs := w.s.Events()
		return len(evs) == 1 && evs[0].Delivered
	})
	if n := w.s.EventDeliveries(); n != 1 {
		t.Fatalf("EventDeliveries = %d, want 1", n)
	}

	// a chat the bot was removed from sends the app nothing
	w.s.RemoveBot(w.p2p, w.app.ID)
	if _, id := w.s.Post(w.p2p, w.ann, "unseen"); id != "" {
		t.Fatalf("event %q for a chat without the bot", id)
	}
}

func TestEventRetriedUntilAnswered200InTime(t *testing.T) {
	w := newWorld(t)
	w.s.SetEventRetry(feishutest.EventRetry{Timeout: 100 * time.Millisecond, Intervals: []time.Duration{10 * time.Millisecond, 10 * time.Millisecond, 10 * time.Millisecond}})
	recv := newReceiver(t, func(n int, _ []byte) (int, []byte) {
		switch n {
		case 1:
			time.Sleep(300 * time.Millisecond) // answered after the timeout: failed
			return http.StatusOK, nil
		case 2:
			return http.StatusInternalServerError, nil
		case 3:
			return http.StatusNoContent, nil // only 200 counts
		}
		return http.StatusOK, nil
	})
	w.s.SetEventURL(w.app.ID, recv.url, "vt", "")
	_, eventID := w.s.Post(w.group, w.ann, "retry me")
	for i := range 4 {
		got := recv.next(t)
		if got.header.Get("X-Lark-Signature") != "" {
			t.Fatalf("attempt %d signed without an Encrypt Key", i+1)
		}
		if ev := decodeEvent(t, got.body, ""); ev.Header.EventID != eventID {
			t.Fatalf("attempt %d event_id %q, want %q", i+1, ev.Header.EventID, eventID)
		}
	}
	eventually(t, "delivery", func() bool { return w.s.Events()[0].Delivered })
	if n := w.s.EventDeliveries(); n != 4 {
		t.Fatalf("EventDeliveries = %d, want 4", n)
	}
}

func TestEventGivesUpAfterTheLastRetry(t *testing.T) {
	w := newWorld(t)
	w.s.SetEventRetry(feishutest.EventRetry{Intervals: []time.Duration{5 * time.Millisecond, 5 * time.Millisecond}})
	recv := newReceiver(t, func(int, []byte) (int, []byte) { return http.StatusServiceUnavailable, nil })
	w.s.SetEventURL(w.app.ID, recv.url, "vt", "")
	w.s.Post(w.group, w.ann, "never")
	for range 3 {
		recv.next(t)
	}
	time.Sleep(50 * time.Millisecond) // no fourth attempt may come
	if n, ev := w.s.EventDeliveries(), w.s.Events()[0]; n != 3 || ev.Attempts != 3 || ev.Delivered {
		t.Fatalf("deliveries %d, event %+v; want 3 failed attempts", n, ev)
	}
}

func TestRedeliverAndDuplicate(t *testing.T) {
	w := newWorld(t)
	recv := newReceiver(t, nil)
	w.s.SetEventURL(w.app.ID, recv.url, "vt", "key")
	messageID, eventID := w.s.Post(w.group, w.ann, "once")
	first := decodeEvent(t, recv.next(t).body, "key")

	w.s.Redeliver(eventID)
	again := decodeEvent(t, recv.next(t).body, "key")
	if again.Header.EventID != eventID || again.Event.Message.MessageID != messageID {
		t.Fatalf("redelivered %q/%q, want the same event %q", again.Header.EventID, again.Event.Message.MessageID, eventID)
	}
	if again.Event.Message.Content != first.Event.Message.Content {
		t.Fatal("redelivered content differs")
	}
	dupID := w.s.Duplicate(eventID)
	dup := decodeEvent(t, recv.next(t).body, "key")
	if dup.Header.EventID != dupID || dupID == eventID || dup.Event.Message.MessageID != messageID {
		t.Fatalf("duplicate = %q for message %q", dup.Header.EventID, dup.Event.Message.MessageID)
	}
	eventually(t, "three deliveries", func() bool { return w.s.EventDeliveries() == 3 })
}

func TestChallenge(t *testing.T) {
	for _, key := range []string{"", "e-key"} {
		t.Run("encrypt key "+key, func(t *testing.T) {
			w := newWorld(t)
			var seen struct {
				Challenge, Token, Type string
			}
			recv := newReceiver(t, func(_ int, body []byte) (int, []byte) {
				if key != "" {
					var enc struct {
						Encrypt string `json:"encrypt"`
					}
					_ = json.Unmarshal(body, &enc)
					plain, err := decryptEvent(enc.Encrypt, key)
					if err != nil {
						return http.StatusBadRequest, []byte(err.Error()) // the challenge then fails
					}
					body = plain
				}
				_ = json.Unmarshal(body, &seen)
				out, _ := json.Marshal(map[string]string{"challenge": seen.Challenge})
				return http.StatusOK, out
			})
			w.s.SetEventURL(w.app.ID, recv.url, "v-token", key)
			got, err := w.s.Challenge(w.app.ID)
			if err != nil {
				t.Fatal(err)
			}
			if got == "" || got != seen.Challenge || seen.Token != "v-token" || seen.Type != "url_verification" {
				t.Fatalf("challenge %q; request %+v", got, seen)
			}
		})
	}
	t.Run("wrong answer", func(t *testing.T) {
		w := newWorld(t)
		recv := newReceiver(t, func(int, []byte) (int, []byte) { return http.StatusOK, []byte(`{"challenge":"nope"}`) })
		w.s.SetEventURL(w.app.ID, recv.url, "vt", "")
		got, err := w.s.Challenge(w.app.ID)
		if !errors.Is(err, feishutest.ErrChallengeMismatch) || got != "nope" {
			t.Fatalf("Challenge = %q, %v; want nope and ErrChallengeMismatch", got, err)
		}
	})
}

func TestUnknownPathAndMethod(t *testing.T) {
	w := newWorld(t)
	wantCode(t, do(t, http.MethodGet, w.s.URL()+"/open-apis/im/v1/nothing", w.token, nil), http.StatusNotFound, 99991201)
	wantCode(t, do(t, http.MethodDelete, w.s.URL()+feishutest.RouteCards, w.token, nil), http.StatusMethodNotAllowed, 99991301)
}

// "Get bot information": {"code":0,"msg":"ok","bot":{...,"open_id"}} with no data object, for a
// tenant token; none: 99991661.
func TestBotInfo(t *testing.T) {
	w := newWorld(t)
	a := do(t, http.MethodGet, w.s.URL()+feishutest.RouteBotInfo, w.token, nil)
	var got struct {
		Code int             `json:"code"`
		Msg  string          `json:"msg"`
		Data json.RawMessage `json:"data"`
		Bot  struct {
			ActivateStatus int      `json:"activate_status"`
			AppName        string   `json:"app_name"`
			IPWhiteList    []string `json:"ip_white_list"`
			OpenID         string   `json:"open_id"`
		} `json:"bot"`
	}
	if err := json.Unmarshal(a.raw, &got); err != nil {
		t.Fatal(err)
	}
	if a.status != http.StatusOK || got.Code != 0 || got.Msg != "ok" || got.Data != nil || got.Bot.OpenID != w.app.BotOpenID ||
		got.Bot.AppName != "ximd" || got.Bot.ActivateStatus != 2 || got.Bot.IPWhiteList == nil {
		t.Fatalf("bot info: HTTP %d %s", a.status, a.raw)
	}
	wantCode(t, do(t, http.MethodGet, w.s.URL()+feishutest.RouteBotInfo, "", nil), http.StatusBadRequest, 99991661)
}

// "Receive message": a mention is its key in the text and an entry of message.mentions (a
// person's ids and name; a bot's open_id and name).
func TestPostMentioningCarriesMentions(t *testing.T) {
	w := newWorld(t)
	recv := newReceiver(t, nil)
	w.s.SetEventURL(w.app.ID, recv.url, "vt", "")
	bob := w.s.AddUser("Bob")
	w.s.PostMentioning(w.group, w.ann, "@_user_1 ask @_user_2", w.app.BotOpenID, bob.OpenID)
	m := decodeEvent(t, recv.next(t).body, "").Event.Message
	if m.Content != `{"text":"@_user_1 ask @_user_2"}` || len(m.Mentions) != 2 {
		t.Fatalf("message = %+v", m)
	}
	bot, person := m.Mentions[0], m.Mentions[1]
	if bot.Key != "@_user_1" || bot.ID.OpenID != w.app.BotOpenID || bot.ID.UnionID != "" || bot.Name != "ximd" || bot.TenantKey == "" {
		t.Fatalf("the bot's mention = %+v", bot)
	}
	if person.Key != "@_user_2" || person.ID.OpenID != bob.OpenID || person.ID.UnionID != bob.UnionID || person.Name != "Bob" {
		t.Fatalf("the person's mention = %+v", person)
	}
	w.s.Post(w.group, w.ann, "plain")
	if m := decodeEvent(t, recv.next(t).body, "").Event.Message; m.Mentions != nil {
		t.Fatalf("a message without mentions has %+v", m.Mentions)
	}
}

// PostAsBot: another app's bot writes; the apps with an event URL but the writer get an event
// with sender_type "app"; the chat shows the message as the writer's.
func TestPostAsBotReachesOtherApps(t *testing.T) {
	w := newWorld(t)
	other := w.s.AddApp("cli_other", "other-secret", "other")
	mine, theirs := newReceiver(t, nil), newReceiver(t, nil)
	w.s.SetEventURL(w.app.ID, mine.url, "vt", "")
	w.s.SetEventURL(other.ID, theirs.url, "vt2", "")
	messageID, eventID := w.s.PostAsBot(w.group, other.ID, "beep")
	ev := decodeEvent(t, mine.next(t).body, "")
	if ev.Header.EventID != eventID || ev.Header.AppID != w.app.ID || ev.Event.Sender.SenderType != "app" ||
		ev.Event.Sender.SenderID.OpenID != other.BotOpenID || ev.Event.Message.MessageID != messageID {
		t.Fatalf("event = %+v", ev)
	}
	if evs := w.s.Events(); len(evs) != 1 || evs[0].AppID != w.app.ID {
		t.Fatalf("events %+v: the writer got its own message", evs)
	}
	if shown := w.s.Messages(w.group); len(shown) != 1 || shown[0].Sender != other.ID || shown[0].Text != "beep" {
		t.Fatalf("the chat shows %+v", shown)
	}
}
