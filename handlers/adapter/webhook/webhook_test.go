package webhook_test

import (
	"context"
	"crypto/hmac"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log"
	"maps"
	"net"
	"net/http"
	"net/http/httptest"
	"net/url"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/ximd/ximd/handlers/adapter"
	"github.com/ximd/ximd/handlers/adapter/webhook"
	"github.com/ximd/ximd/profile"
)

const testSecret = "s3cr3t-Do-Not-Leak"

// received is one request as the target saw it.
type received struct {
	Method     string
	RequestURI string // raw, as sent on the wire
	Path       string // unescaped
	Header     http.Header
	Body       []byte
}

// fakeTarget is a real loopback HTTP server that records every request.
// By default it answers POST .../messages with 201 {"message_id":"tm-1"}
// and everything else with 204.
type fakeTarget struct {
	*httptest.Server
	mu     sync.Mutex
	reqs   []received
	answer func(w http.ResponseWriter, r *http.Request) // optional override
}

func newFakeTarget(t *testing.T) *fakeTarget {
	t.Helper()
	f := &fakeTarget{}
	f.Server = httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		body, _ := io.ReadAll(r.Body)
		f.mu.Lock()
		f.reqs = append(f.reqs, received{
			Method: r.Method, RequestURI: r.RequestURI, Path: r.URL.Path,
			Header: r.Header.Clone(), Body: body,
		})
		answer := f.answer
		f.mu.Unlock()
		if answer != nil {
			answer(w, r)
			return
		}
		if r.Method == http.MethodPost && strings.HasSuffix(r.URL.Path, "/messages") {
			w.Header().Set("Content-Type", "application/json")
			w.WriteHeader(http.StatusCreated)
			io.WriteString(w, `{"message_id":"tm-1"}`)
			return
		}
		w.WriteHeader(http.StatusNoContent)
	}))
	t.Cleanup(f.Close)
	return f
}

func (f *fakeTarget) setAnswer(h func(w http.ResponseWriter, r *http.Request)) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.answer = h
}

func (f *fakeTarget) requests() []received {
	f.mu.Lock()
	defer f.mu.Unlock()
	return slices.Clone(f.reqs)
}

func (f *fakeTarget) only(t *testing.T) received {
	t.Helper()
	reqs := f.requests()
	if len(reqs) != 1 {
		t.Fatalf("target got %d requests, want 1", len(reqs))
	}
	return reqs[0]
}

// config builds a webhook config for url; extra keys override or add
// (a nil value deletes the key).
func config(url string, extra map[string]any) json.RawMessage {
	c := map[string]any{"url": url, "chat_id": "room-1", "secret": testSecret}
	for k, v := range extra {
		if v == nil {
			delete(c, k)
			continue
		}
		c[k] = v
	}
	b, err := json.Marshal(c)
	if err != nil {
		panic(err)
	}
	return b
}

func open(t *testing.T, url string, extra map[string]any) adapter.Target {
	t.Helper()
	tg, err := webhook.New(webhook.Options{}).Open(config(url, extra))
	if err != nil {
		t.Fatalf("Open: %v", err)
	}
	return tg
}

func mustEditor(t *testing.T, tg adapter.Target) adapter.Editor {
	t.Helper()
	ed, ok := adapter.EditorOf(tg)
	if !ok {
		t.Fatalf("%+v: the stages would not edit", tg.Capabilities())
	}
	return ed
}

func mustShower(t *testing.T, tg adapter.Target) adapter.ActivityShower {
	t.Helper()
	sh, ok := adapter.ShowerOf(tg)
	if !ok {
		t.Fatalf("%+v: the stages would not show activity", tg.Capabilities())
	}
	return sh
}

// errCode is the profile code of err, "" for nil, "<not a *profile.Error>"
// otherwise.
func errCode(err error) string {
	if err == nil {
		return ""
	}
	var perr *profile.Error
	if !errors.As(err, &perr) {
		return "<not a *profile.Error>"
	}
	return perr.Code
}

func asProfile(t *testing.T, err error) *profile.Error {
	t.Helper()
	var perr *profile.Error
	if !errors.As(err, &perr) {
		t.Fatalf("error %v (%T) is not a *profile.Error", err, err)
	}
	return perr
}

// decodeObject decodes a JSON object body, keeping raw values.
func decodeObject(t *testing.T, body []byte) map[string]json.RawMessage {
	t.Helper()
	var m map[string]json.RawMessage
	if err := json.Unmarshal(body, &m); err != nil {
		t.Fatalf("body %s is not a JSON object: %v", body, err)
	}
	return m
}

func keys(m map[string]json.RawMessage) []string {
	return slices.Sorted(maps.Keys(m))
}

func hmacHex(secret string, body []byte) string {
	m := hmac.New(sha256.New, []byte(secret))
	m.Write(body)
	return hex.EncodeToString(m.Sum(nil))
}

var sampleFile = adapter.File{
	Type: "image", FileRef: "fr_0123456789abcdef", Filename: "cat.png",
	MimeType: "image/png", ByteSize: 2048,
	URL: "https://ximd.example/files/refs/fr_0123456789abcdef?exp=1790000000&sig=ab",
}

func TestWebhook_SignatureIsHMACOfRawBody(t *testing.T) {
	f := newFakeTarget(t)
	tg := open(t, f.URL, map[string]any{"activity": "status"})
	ctx := t.Context()

	if _, err := tg.Send(ctx, adapter.Message{Text: "héllo \"x\" <b>", Final: true, IdempotencyKey: "cch_1:m1"}); err != nil {
		t.Fatalf("Send: %v", err)
	}
	if err := mustEditor(t, tg).Edit(ctx, "tm-1", adapter.Message{Text: "whole", Files: []adapter.File{sampleFile}, Final: true}); err != nil {
		t.Fatalf("Edit: %v", err)
	}
	if err := mustShower(t, tg).ShowActivity(ctx, adapter.Activity{Status: "tool", ToolName: "web_search"}); err != nil {
		t.Fatalf("ShowActivity: %v", err)
	}

	reqs := f.requests()
	if len(reqs) != 3 {
		t.Fatalf("target got %d requests, want 3", len(reqs))
	}
	for _, r := range reqs {
		got := r.Header.Get("X-Xim-Signature")
		if want := "sha256=" + hmacHex(testSecret, r.Body); got != want {
			t.Errorf("%s %s: X-Xim-Signature = %q, want %q (HMAC-SHA256 of the raw body)", r.Method, r.Path, got, want)
		}
		if !webhook.Verify([]byte(testSecret), r.Body, got) {
			t.Errorf("%s %s: Verify rejects the signature sent", r.Method, r.Path)
		}
		if ct := r.Header.Get("Content-Type"); ct != "application/json" {
			t.Errorf("%s %s: Content-Type = %q, want application/json", r.Method, r.Path, ct)
		}
		if !json.Valid(r.Body) {
			t.Errorf("%s %s: body is not JSON: %s", r.Method, r.Path, r.Body)
		}
	}
}

func TestWebhook_PostReturnsTargetID(t *testing.T) {
	tests := []struct {
		name   string
		status int
		answer string
		wantID string
	}{
		{name: "201 string id", status: 201, answer: `{"message_id":"tg-42"}`, wantID: "tg-42"},
		{name: "200 with other keys", status: 200, answer: `{"ok":true,"message_id":"a/b c"}`, wantID: "a/b c"},
		{name: "202 numeric id", status: 202, answer: `{"message_id":1234567890123456789}`, wantID: "1234567890123456789"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			f := newFakeTarget(t)
			f.setAnswer(func(w http.ResponseWriter, r *http.Request) {
				w.WriteHeader(tt.status)
				io.WriteString(w, tt.answer)
			})
			id, err := open(t, f.URL, nil).Send(t.Context(), adapter.Message{Text: "hi", Final: true, IdempotencyKey: "cch_1:m1"})
			if err != nil {
				t.Fatalf("Send: %v", err)
			}
			if id != tt.wantID {
				t.Errorf("Send = %q, want %q", id, tt.wantID)
			}
			if r := f.only(t); r.Method != http.MethodPost || r.RequestURI != "/messages" {
				t.Errorf("request = %s %s, want POST /messages", r.Method, r.RequestURI)
			}
		})
	}
}

func TestWebhook_PostBodyHasEveryField(t *testing.T) {
	t.Run("no files", func(t *testing.T) {
		f := newFakeTarget(t)
		if _, err := open(t, f.URL, nil).Send(t.Context(), adapter.Message{Text: "first part", Final: false, IdempotencyKey: "cch_1:assistant_1"}); err != nil {
			t.Fatalf("Send: %v", err)
		}
		r := f.only(t)
		body := decodeObject(t, r.Body)
		if got, want := keys(body), []string{"chat_id", "files", "final", "idempotency_key", "text"}; !slices.Equal(got, want) {
			t.Errorf("body keys = %v, want %v", got, want)
		}
		for k, want := range map[string]string{
			"chat_id": `"room-1"`, "text": `"first part"`, "files": `[]`, "final": `false`,
			"idempotency_key": `"cch_1:assistant_1"`,
		} {
			if got := string(body[k]); got != want {
				t.Errorf("body.%s = %s, want %s", k, got, want)
			}
		}
		if got := r.Header.Get("Idempotency-Key"); got != "cch_1:assistant_1" {
			t.Errorf("Idempotency-Key header = %q, want cch_1:assistant_1", got)
		}
	})
	t.Run("final with files", func(t *testing.T) {
		f := newFakeTarget(t)
		if _, err := open(t, f.URL, nil).Send(t.Context(), adapter.Message{Text: "done", Files: []adapter.File{sampleFile}, Final: true, IdempotencyKey: "cch_1:m2"}); err != nil {
			t.Fatalf("Send: %v", err)
		}
		body := decodeObject(t, f.only(t).Body)
		if got := string(body["final"]); got != "true" {
			t.Errorf("body.final = %s, want true", got)
		}
		var files []map[string]json.RawMessage
		if err := json.Unmarshal(body["files"], &files); err != nil || len(files) != 1 {
			t.Fatalf("body.files = %s, want one object", body["files"])
		}
		want := map[string]string{
			"type": `"image"`, "file_ref": `"fr_0123456789abcdef"`, "filename": `"cat.png"`,
			"mime_type": `"image/png"`, "byte_size": `2048`,
			"url": `"https://ximd.example/files/refs/fr_0123456789abcdef?exp=1790000000\u0026sig=ab"`,
		}
		if got, wantKeys := keys(files[0]), slices.Sorted(maps.Keys(want)); !slices.Equal(got, wantKeys) {
			t.Errorf("file keys = %v, want %v", got, wantKeys)
		}
		for k, w := range want {
			if got := string(files[0][k]); got != w {
				t.Errorf("files[0].%s = %s, want %s", k, got, w)
			}
		}
	})
}

func TestWebhook_PostWithoutMessageIDIsDeliveryFailed(t *testing.T) {
	tests := []struct {
		name   string
		status int
		answer string
	}{
		{name: "204 no body", status: 204},
		{name: "200 empty body", status: 200},
		{name: "empty object", status: 200, answer: `{}`},
		{name: "empty id", status: 201, answer: `{"message_id":""}`},
		{name: "null id", status: 201, answer: `{"message_id":null}`},
		{name: "object id", status: 201, answer: `{"message_id":{"id":"x"}}`},
		{name: "not JSON", status: 200, answer: `<html>ok</html>`},
		{name: "larger than 64 KiB", status: 200, answer: `{"message_id":"x","pad":"` + strings.Repeat("a", 64<<10) + `"}`},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			f := newFakeTarget(t)
			f.setAnswer(func(w http.ResponseWriter, r *http.Request) {
				w.WriteHeader(tt.status)
				io.WriteString(w, tt.answer)
			})
			id, err := open(t, f.URL, nil).Send(t.Context(), adapter.Message{Text: "hi", Final: true, IdempotencyKey: "c:m"})
			if got := errCode(err); got != profile.CodeTargetDeliveryFailed {
				t.Fatalf("Send = %q, %v (code %q); want code %q", id, err, got, profile.CodeTargetDeliveryFailed)
			}
			if asProfile(t, err).Retryable {
				t.Error("Retryable = true, want false")
			}
		})
	}
}

func TestWebhook_PatchSendsWholeText(t *testing.T) {
	f := newFakeTarget(t)
	tg := open(t, f.URL, map[string]any{"streaming": "edit"})
	ed := mustEditor(t, tg)
	ctx := t.Context()

	id, err := tg.Send(ctx, adapter.Message{Text: "Hel", IdempotencyKey: "cch_1:m1"})
	if err != nil {
		t.Fatal(err)
	}
	if err := ed.Edit(ctx, id, adapter.Message{Text: "Hello, wor"}); err != nil {
		t.Fatalf("Edit: %v", err)
	}
	if err := ed.Edit(ctx, id, adapter.Message{Text: "Hello, world.", Files: []adapter.File{sampleFile}, Final: true}); err != nil {
		t.Fatalf("Edit final: %v", err)
	}

	reqs := f.requests()
	if len(reqs) != 3 {
		t.Fatalf("target got %d requests, want 3", len(reqs))
	}
	wantText := []string{`"Hello, wor"`, `"Hello, world."`}
	wantFinal := []string{"false", "true"}
	wantFiles := []int{0, 1}
	for i, r := range reqs[1:] {
		if r.Method != http.MethodPatch || r.RequestURI != "/messages/tm-1" {
			t.Errorf("edit %d: %s %s, want PATCH /messages/tm-1", i, r.Method, r.RequestURI)
		}
		body := decodeObject(t, r.Body)
		if got, want := keys(body), []string{"chat_id", "files", "final", "text"}; !slices.Equal(got, want) {
			t.Errorf("edit %d: body keys = %v, want %v", i, got, want)
		}
		if got := string(body["text"]); got != wantText[i] {
			t.Errorf("edit %d: text = %s, want the whole text %s", i, got, wantText[i])
		}
		if got := string(body["final"]); got != wantFinal[i] {
			t.Errorf("edit %d: final = %s, want %s", i, got, wantFinal[i])
		}
		var files []json.RawMessage
		if err := json.Unmarshal(body["files"], &files); err != nil || files == nil || len(files) != wantFiles[i] {
			t.Errorf("edit %d: files = %s, want an array of %d", i, body["files"], wantFiles[i])
		}
		if got := string(body["chat_id"]); got != `"room-1"` {
			t.Errorf("edit %d: chat_id = %s", i, got)
		}
	}
}

func TestWebhook_PatchEscapesTargetID(t *testing.T) {
	ids := []string{"plain-1", "a/b c", "..", ".", "q?x#y%z", "ünï", "$1:2@3"}
	for _, id := range ids {
		t.Run(id, func(t *testing.T) {
			f := newFakeTarget(t)
			ed := mustEditor(t, open(t, f.URL+"/hook/", nil))
			if err := ed.Edit(t.Context(), id, adapter.Message{Text: "x"}); err != nil {
				t.Fatalf("Edit(%q): %v", id, err)
			}
			r := f.only(t)
			seg, ok := strings.CutPrefix(r.RequestURI, "/hook/messages/")
			if !ok || strings.ContainsAny(seg, "/?#") {
				t.Fatalf("RequestURI = %q, want /hook/messages/<one escaped segment>", r.RequestURI)
			}
			if got, err := url.PathUnescape(seg); err != nil || got != id {
				t.Errorf("segment %q unescapes to %q (%v), want %q", seg, got, err, id)
			}
		})
	}
	t.Run("empty id is refused without a call", func(t *testing.T) {
		f := newFakeTarget(t)
		err := mustEditor(t, open(t, f.URL, nil)).Edit(t.Context(), "", adapter.Message{Text: "x"})
		if got := errCode(err); got != profile.CodeTargetDeliveryFailed {
			t.Errorf("Edit(\"\") code = %q, want %q", got, profile.CodeTargetDeliveryFailed)
		}
		if n := len(f.requests()); n != 0 {
			t.Errorf("target got %d requests, want 0", n)
		}
	})
}

func TestWebhook_URLPathAndQueryAreKept(t *testing.T) {
	f := newFakeTarget(t)
	tg := open(t, f.URL+"/hooks/bot%2F1?tenant=a%20b", nil)
	if _, err := tg.Send(t.Context(), adapter.Message{Text: "x", Final: true}); err != nil {
		t.Fatal(err)
	}
	if err := mustEditor(t, tg).Edit(t.Context(), "id/1", adapter.Message{Text: "x"}); err != nil {
		t.Fatal(err)
	}
	if err := mustShower(t, tg).ShowActivity(t.Context(), adapter.Activity{Status: "idle"}); err != nil {
		t.Fatal(err)
	}
	var got []string
	for _, r := range f.requests() {
		got = append(got, r.Method+" "+r.RequestURI)
	}
	want := []string{
		"POST /hooks/bot%2F1/messages?tenant=a%20b",
		"PATCH /hooks/bot%2F1/messages/id%2F1?tenant=a%20b",
		"POST /hooks/bot%2F1/activity?tenant=a%20b",
	}
	if !slices.Equal(got, want) {
		t.Errorf("requests =\n%q\nwant\n%q", got, want)
	}
}

// call is one of the three calls, made on a target of f.
type call struct {
	name string
	do   func(ctx context.Context, tg adapter.Target) error
}

var calls = []call{
	{name: "POST /messages", do: func(ctx context.Context, tg adapter.Target) error {
		_, err := tg.Send(ctx, adapter.Message{Text: "hi", Final: true, IdempotencyKey: "c:m"})
		return err
	}},
	{name: "PATCH /messages/{id}", do: func(ctx context.Context, tg adapter.Target) error {
		return tg.(adapter.Editor).Edit(ctx, "tm-1", adapter.Message{Text: "hi"})
	}},
	{name: "POST /activity", do: func(ctx context.Context, tg adapter.Target) error {
		return tg.(adapter.ActivityShower).ShowActivity(ctx, adapter.Activity{Status: "thinking"})
	}},
}

func TestWebhook_StatusMapping(t *testing.T) {
	const (
		ok          = ""
		rateLimited = profile.CodeTargetRateLimited
		unavailable = profile.CodeTargetUnavailable
		authFailed  = profile.CodeTargetAuthFailed
		failed      = profile.CodeTargetDeliveryFailed
	)
	tests := []struct {
		name string
		// status answered with body {"message_id":"tm-1"}; 0: see url/answer.
		status int
		// answer, if set, replaces the status answer.
		answer func(w http.ResponseWriter, r *http.Request)
		// refused: the URL points at a closed port.
		refused bool
		want    string
		// wantSend overrides want for POST /messages.
		wantSend *string
		// wantRetryAfter is the retry time the error names (adapter.RetryAfterOf).
		wantRetryAfter time.Duration
	}{
		{name: "200", status: 200, want: ok},
		{name: "201", status: 201, want: ok},
		{name: "204", status: 204, want: ok, wantSend: ptr(failed)}, // no body, so no message_id
		{name: "400", status: 400, want: failed},
		{name: "401", status: 401, want: authFailed},
		{name: "403", status: 403, want: authFailed},
		{name: "404", status: 404, want: failed},
		{name: "409", status: 409, want: failed},
		{name: "422", status: 422, want: failed},
		{name: "429", status: 429, want: rateLimited},
		{name: "429 with Retry-After", answer: func(w http.ResponseWriter, r *http.Request) {
			w.Header().Set("Retry-After", "7")
			w.WriteHeader(429)
		}, want: rateLimited, wantRetryAfter: 7 * time.Second},
		{name: "500", status: 500, want: unavailable},
		{name: "502", status: 502, want: unavailable},
		{name: "503", status: 503, want: unavailable},
		{name: "504", status: 504, want: unavailable},
		{name: "307 redirect is not followed", status: 307, want: failed},
		{name: "timeout", answer: func(w http.ResponseWriter, r *http.Request) {
			<-r.Context().Done() // outlives the 100ms timeout of the config
		}, want: unavailable},
		{name: "refused", refused: true, want: unavailable},
		{name: "reset", answer: func(w http.ResponseWriter, r *http.Request) {
			conn, _, err := http.NewResponseController(w).Hijack()
			if err != nil {
				panic(err)
			}
			if tc, ok := conn.(*net.TCPConn); ok {
				tc.SetLinger(0) // close with RST
			}
			conn.Close()
		}, want: unavailable},
	}
	retryable := map[string]bool{rateLimited: true, unavailable: true}

	for _, c := range calls {
		for _, tt := range tests {
			t.Run(c.name+"/"+tt.name, func(t *testing.T) {
				f := newFakeTarget(t)
				f.setAnswer(func(w http.ResponseWriter, r *http.Request) {
					if tt.answer != nil {
						tt.answer(w, r)
						return
					}
					if tt.status == 307 {
						w.Header().Set("Location", "/elsewhere")
					}
					w.WriteHeader(tt.status)
					io.WriteString(w, `{"message_id":"tm-1"}`)
				})
				u := f.URL
				if tt.refused {
					u = closedURL(t)
				}
				tg := open(t, u, map[string]any{"activity": "status", "timeout": "100ms"})

				start := time.Now()
				err := c.do(t.Context(), tg)
				want := tt.want
				if tt.wantSend != nil && c.name == "POST /messages" {
					want = *tt.wantSend
				}
				if got := errCode(err); got != want {
					t.Fatalf("error %v: code %q, want %q", err, got, want)
				}
				if err != nil {
					perr := asProfile(t, err)
					if perr.Retryable != retryable[want] {
						t.Errorf("Retryable = %v, want %v", perr.Retryable, retryable[want])
					}
					if tt.status != 0 && !strings.Contains(perr.Message, fmt.Sprint(tt.status)) {
						t.Errorf("Message %q does not name HTTP status %d", perr.Message, tt.status)
					}
				}
				if d, _ := adapter.RetryAfterOf(err); d != tt.wantRetryAfter {
					t.Errorf("retry after %s, want %s", d, tt.wantRetryAfter)
				}
				if d := time.Since(start); d > 5*time.Second {
					t.Errorf("call took %v; the per-call timeout is 100ms", d)
				}
				if !tt.refused {
					if n := len(f.requests()); n != 1 {
						t.Errorf("target got %d requests, want exactly 1 (no retry inside a call, no redirect)", n)
					}
				}
			})
		}
	}
}

func ptr[T any](v T) *T { return &v }

// closedURL is the URL of a loopback port nothing listens on.
func closedURL(t *testing.T) string {
	t.Helper()
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	addr := l.Addr().String()
	l.Close()
	return "http://" + addr
}

func TestWebhook_CallerCancellationIsWrapped(t *testing.T) {
	f := newFakeTarget(t)
	f.setAnswer(func(w http.ResponseWriter, r *http.Request) { <-r.Context().Done() })
	tg := open(t, f.URL, nil)
	ctx, cancel := context.WithCancel(t.Context())
	time.AfterFunc(50*time.Millisecond, cancel)

	_, err := tg.Send(ctx, adapter.Message{Text: "x", Final: true})
	if !errors.Is(err, context.Canceled) {
		t.Errorf("errors.Is(%v, context.Canceled) = false", err)
	}
	if got := errCode(err); got != profile.CodeTargetUnavailable {
		t.Errorf("code = %q, want %q", got, profile.CodeTargetUnavailable)
	}
}

func TestWebhook_ErrorsNeverContainSecretOrBody(t *testing.T) {
	const text = "private user text 8c1f"
	f := newFakeTarget(t)
	f.setAnswer(func(w http.ResponseWriter, r *http.Request) {
		body, _ := io.ReadAll(r.Body)
		w.WriteHeader(http.StatusBadRequest)
		fmt.Fprintf(w, "bad request %s secret=%s", body, testSecret)
	})
	tg := open(t, f.URL, nil)
	_, sendErr := tg.Send(t.Context(), adapter.Message{Text: text, Final: true, IdempotencyKey: "c:m"})
	editErr := mustEditor(t, tg).Edit(t.Context(), "tm-1", adapter.Message{Text: text})
	_, refusedErr := open(t, closedURL(t), nil).Send(t.Context(), adapter.Message{Text: text})

	for _, err := range []error{sendErr, editErr, refusedErr} {
		if err == nil {
			t.Fatal("want an error")
		}
		for _, s := range []string{err.Error(), asProfile(t, err).Message} {
			if strings.Contains(s, testSecret) || strings.Contains(s, text) || strings.Contains(s, "bad request") {
				t.Errorf("error %q leaks the secret, the request body or the answer", s)
			}
		}
	}
}

func TestWebhook_ActivityTyping(t *testing.T) {
	f := newFakeTarget(t)
	tg := open(t, f.URL, map[string]any{"activity": "typing"})
	if got := tg.Capabilities().Activity; got != adapter.ActivityTyping {
		t.Errorf("Capabilities().Activity = %q, want typing", got)
	}
	sh := mustShower(t, tg)
	in := []adapter.Activity{
		{Status: "thinking"}, {Status: "tool", ToolName: "web_search"}, {Status: "typing"}, {Status: "idle"},
	}
	for _, a := range in {
		if err := sh.ShowActivity(t.Context(), a); err != nil {
			t.Fatalf("ShowActivity(%+v): %v", a, err)
		}
	}
	want := []string{
		`{"chat_id":"room-1","status":"typing"}`,
		`{"chat_id":"room-1","status":"typing"}`,
		`{"chat_id":"room-1","status":"typing"}`,
		`{"chat_id":"room-1","status":"idle"}`,
	}
	assertActivityBodies(t, f, want)
}

func TestWebhook_ActivityStatus(t *testing.T) {
	f := newFakeTarget(t)
	tg := open(t, f.URL, map[string]any{"activity": "status"})
	if got := tg.Capabilities().Activity; got != adapter.ActivityStatus {
		t.Errorf("Capabilities().Activity = %q, want status", got)
	}
	sh := mustShower(t, tg)
	in := []adapter.Activity{
		{Status: "thinking"}, {Status: "tool", ToolName: "web_search"},
		{Status: "idle", ToolName: "stale"}, {Status: "typing"},
	}
	for _, a := range in {
		if err := sh.ShowActivity(t.Context(), a); err != nil {
			t.Fatalf("ShowActivity(%+v): %v", a, err)
		}
	}
	want := []string{
		`{"chat_id":"room-1","status":"thinking"}`,
		`{"chat_id":"room-1","status":"tool","tool_name":"web_search"}`,
		`{"chat_id":"room-1","status":"idle"}`,
		`{"chat_id":"room-1","status":"typing"}`,
	}
	assertActivityBodies(t, f, want)
}

func assertActivityBodies(t *testing.T, f *fakeTarget, want []string) {
	t.Helper()
	reqs := f.requests()
	if len(reqs) != len(want) {
		t.Fatalf("target got %d requests, want %d", len(reqs), len(want))
	}
	for i, r := range reqs {
		if r.Method != http.MethodPost || r.RequestURI != "/activity" {
			t.Errorf("request %d: %s %s, want POST /activity", i, r.Method, r.RequestURI)
		}
		if string(r.Body) != want[i] {
			t.Errorf("request %d: body %s, want %s", i, r.Body, want[i])
		}
	}
}

func TestWebhook_ActivityNone(t *testing.T) {
	f := newFakeTarget(t)
	tg := open(t, f.URL, map[string]any{"activity": "none"})
	if _, ok := adapter.ShowerOf(tg); ok {
		t.Errorf("activity none: the stages would show activity")
	}
	if got := tg.Capabilities().Activity; got != adapter.ActivityNone {
		t.Errorf("Capabilities().Activity = %q, want none", got)
	}
}

func TestWebhook_ActivityUnknownStatusIsNotSent(t *testing.T) {
	f := newFakeTarget(t)
	err := mustShower(t, open(t, f.URL, nil)).ShowActivity(t.Context(), adapter.Activity{Status: "dreaming"})
	if got := errCode(err); got != profile.CodeTargetDeliveryFailed {
		t.Errorf("code = %q, want %q", got, profile.CodeTargetDeliveryFailed)
	}
	if n := len(f.requests()); n != 0 {
		t.Errorf("target got %d requests, want 0", n)
	}
}

func TestWebhook_StreamingNone(t *testing.T) {
	f := newFakeTarget(t)
	tg := open(t, f.URL, map[string]any{"streaming": "none"})
	if _, ok := adapter.EditorOf(tg); ok {
		t.Errorf("streaming none: the stages would edit")
	}
	if got := tg.Capabilities().Streaming; got != adapter.StreamingNone {
		t.Errorf("Capabilities().Streaming = %q, want none", got)
	}
}

func TestWebhook_CapabilitiesFollowTheConfig(t *testing.T) {
	for _, streaming := range []adapter.Streaming{"edit", "none"} {
		for _, activity := range []adapter.ActivityMode{"status", "typing", "none"} {
			for _, settle := range []string{"", "dedupe", "lookup"} {
				t.Run(string(streaming)+"/"+string(activity)+"/"+settle, func(t *testing.T) {
					cfg := map[string]any{"streaming": streaming, "activity": activity}
					if settle != "" {
						cfg[settle] = true
					}
					tg := open(t, "http://127.0.0.1:9/hook", cfg)
					inDoubt := map[string]adapter.InDoubtRule{"dedupe": adapter.InDoubtDedupe, "lookup": adapter.InDoubtLookup}[settle]
					if inDoubt == "" {
						inDoubt = map[adapter.Streaming]adapter.InDoubtRule{"edit": adapter.InDoubtEdit, "none": adapter.InDoubtUnknown}[streaming]
					}
					want := adapter.Capabilities{Streaming: streaming, Activity: activity, Reply: adapter.ReplyNative, InDoubt: inDoubt}
					if got := tg.Capabilities(); got != want {
						t.Errorf("Capabilities() = %+v, want %+v", got, want)
					}
					if _, ok := adapter.EditorOf(tg); ok != (streaming == "edit") {
						t.Errorf("edits = %v with streaming %q", ok, streaming)
					}
					if _, ok := adapter.ShowerOf(tg); ok != (activity != "none") {
						t.Errorf("shows activity = %v with activity %q", ok, activity)
					}
					if _, ok := adapter.ReconcilerOf(tg); ok != (settle == "lookup") {
						t.Errorf("looks up = %v with %q", ok, settle)
					}
				})
			}
		}
	}
}

func TestWebhook_OpenDefaults(t *testing.T) {
	tg := open(t, "http://127.0.0.1:9/hook", nil)
	want := adapter.Capabilities{Streaming: adapter.StreamingEdit, Activity: adapter.ActivityTyping, Reply: adapter.ReplyNative, InDoubt: adapter.InDoubtEdit}
	if got := tg.Capabilities(); got != want {
		t.Errorf("default Capabilities() = %+v, want %+v", got, want)
	}
	pub, err := webhook.New(webhook.Options{}).Public(config("http://127.0.0.1:9/hook", nil))
	if err != nil {
		t.Fatal(err)
	}
	if got := string(decodeObject(t, pub)["timeout"]); got != `"10s"` {
		t.Errorf("default timeout = %s, want \"10s\"", got)
	}
}

func TestWebhook_Public_RemovesSecret(t *testing.T) {
	a := webhook.New(webhook.Options{})
	pub, err := a.Public(config("https://chat.example/hook?x=1&token=sekrit", map[string]any{"streaming": "none", "activity": "status", "timeout": "2s"}))
	if err != nil {
		t.Fatalf("Public: %v", err)
	}
	if strings.Contains(string(pub), testSecret) {
		t.Fatalf("Public = %s; it echoes the secret", pub)
	}
	got := decodeObject(t, pub)
	want := map[string]string{
		"url": `"https://chat.example/hook?token=redacted\u0026x=redacted"`, "chat_id": `"room-1"`,
		"streaming": `"none"`, "activity": `"status"`, "timeout": `"2s"`, "dedupe": `false`, "lookup": `false`, "signature": `"v1"`,
		"format": `"markdown"`,
	}
	if gk, wk := keys(got), slices.Sorted(maps.Keys(want)); !slices.Equal(gk, wk) {
		t.Errorf("Public keys = %v, want %v", gk, wk)
	}
	for k, w := range want {
		if string(got[k]) != w {
			t.Errorf("Public.%s = %s, want %s", k, got[k], w)
		}
	}

	_, err = a.Public(config("https://chat.example/hook", map[string]any{"secret": nil}))
	if got := errCode(err); got != profile.CodeInvalidDescriptor {
		t.Errorf("Public of a config without secret: code %q, want %q", got, profile.CodeInvalidDescriptor)
	}
}

func TestWebhook_OpenRejectsBadConfig(t *testing.T) {
	const u = "http://127.0.0.1:9/hook"
	tests := []struct {
		name      string
		config    string
		wantErr   string // profile code
		wantField string // named in the message
	}{
		{name: "missing config", config: ``, wantErr: profile.CodeInvalidDescriptor, wantField: "target.config"},
		{name: "null config", config: `null`, wantErr: profile.CodeInvalidDescriptor, wantField: "target.config"},
		{name: "not an object", config: `["x"]`, wantErr: profile.CodeInvalidDescriptor, wantField: "target.config"},
		{name: "trailing data", config: string(config(u, nil)) + `{}`, wantErr: profile.CodeInvalidDescriptor, wantField: "target.config"},
		{name: "unknown key", config: string(config(u, map[string]any{"token": "t"})), wantErr: profile.CodeInvalidDescriptor, wantField: "target.config.token"},
		{name: "missing url", config: string(config(u, map[string]any{"url": nil})), wantErr: profile.CodeInvalidDescriptor, wantField: "target.config.url"},
		{name: "url not a string", config: string(config(u, map[string]any{"url": 42})), wantErr: profile.CodeInvalidDescriptor, wantField: "target.config.url"},
		{name: "relative url", config: string(config("/hook", nil)), wantErr: profile.CodeInvalidDescriptor, wantField: "target.config.url"},
		{name: "ftp url", config: string(config("ftp://h/hook", nil)), wantErr: profile.CodeInvalidDescriptor, wantField: "target.config.url"},
		{name: "file url", config: string(config("file:///etc/passwd", nil)), wantErr: profile.CodeInvalidDescriptor, wantField: "target.config.url"},
		{name: "no host", config: string(config("http:///hook", nil)), wantErr: profile.CodeInvalidDescriptor, wantField: "target.config.url"},
		{name: "opaque", config: string(config("http:hook", nil)), wantErr: profile.CodeInvalidDescriptor, wantField: "target.config.url"},
		{name: "user info", config: string(config("http://u:p@h/hook", nil)), wantErr: profile.CodeInvalidDescriptor, wantField: "target.config.url"},
		{name: "fragment", config: string(config("http://h/hook#x", nil)), wantErr: profile.CodeInvalidDescriptor, wantField: "target.config.url"},
		{name: "unparsable url", config: string(config("http://h/%zz", nil)), wantErr: profile.CodeInvalidDescriptor, wantField: "target.config.url"},
		{name: "missing chat_id", config: string(config(u, map[string]any{"chat_id": nil})), wantErr: profile.CodeInvalidDescriptor, wantField: "target.config.chat_id"},
		{name: "empty chat_id", config: string(config(u, map[string]any{"chat_id": ""})), wantErr: profile.CodeInvalidDescriptor, wantField: "target.config.chat_id"},
		{name: "numeric chat_id", config: string(config(u, map[string]any{"chat_id": 7})), wantErr: profile.CodeInvalidDescriptor, wantField: "target.config.chat_id"},
		{name: "missing secret", config: string(config(u, map[string]any{"secret": nil})), wantErr: profile.CodeInvalidDescriptor, wantField: "target.config.secret"},
		{name: "empty secret", config: string(config(u, map[string]any{"secret": ""})), wantErr: profile.CodeInvalidDescriptor, wantField: "target.config.secret"},
		{name: "bad streaming", config: string(config(u, map[string]any{"streaming": "append"})), wantErr: profile.CodeInvalidDescriptor, wantField: "target.config.streaming"},
		{name: "streaming not a string", config: string(config(u, map[string]any{"streaming": true})), wantErr: profile.CodeInvalidDescriptor, wantField: "target.config.streaming"},
		{name: "bad activity", config: string(config(u, map[string]any{"activity": "thinking"})), wantErr: profile.CodeInvalidDescriptor, wantField: "target.config.activity"},
		{name: "bad timeout", config: string(config(u, map[string]any{"timeout": "10"})), wantErr: profile.CodeInvalidDescriptor, wantField: "target.config.timeout"},
		{name: "zero timeout", config: string(config(u, map[string]any{"timeout": "0s"})), wantErr: profile.CodeInvalidDescriptor, wantField: "target.config.timeout"},
		{name: "negative timeout", config: string(config(u, map[string]any{"timeout": "-1s"})), wantErr: profile.CodeInvalidDescriptor, wantField: "target.config.timeout"},
		{name: "huge timeout", config: string(config(u, map[string]any{"timeout": "1h"})), wantErr: profile.CodeInvalidDescriptor, wantField: "target.config.timeout"},
		{name: "numeric timeout", config: string(config(u, map[string]any{"timeout": 10})), wantErr: profile.CodeInvalidDescriptor, wantField: "target.config.timeout"},
		{name: "bad format", config: string(config(u, map[string]any{"format": "rich"})), wantErr: profile.CodeInvalidDescriptor, wantField: "target.config.format"},
		{name: "format not a string", config: string(config(u, map[string]any{"format": true})), wantErr: profile.CodeInvalidDescriptor, wantField: "target.config.format"},
		{name: "format in upper case", config: string(config(u, map[string]any{"format": "HTML"})), wantErr: profile.CodeInvalidDescriptor, wantField: "target.config.format"},
		{name: "valid minimal", config: string(config(u, nil))},
		{name: "valid full", config: string(config("https://h:8443/x/?a=b", map[string]any{"streaming": "none", "activity": "none", "timeout": "1m", "format": "html"}))},
		{name: "valid format markdown", config: string(config(u, map[string]any{"format": "markdown"}))},
		{name: "valid explicit nulls", config: string(config(u, map[string]any{"streaming": nil, "activity": nil}))},
	}
	a := webhook.New(webhook.Options{})
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			tg, err := a.Open(json.RawMessage(tt.config))
			if got := errCode(err); got != tt.wantErr {
				t.Fatalf("Open(%s) = %v, %v; want code %q", tt.config, tg, err, tt.wantErr)
			}
			if tt.wantErr == "" {
				if tg == nil {
					t.Fatal("Open returned a nil target")
				}
				return
			}
			perr := asProfile(t, err)
			if !strings.HasPrefix(perr.Message, tt.wantField+":") {
				t.Errorf("Message = %q, want it to name %s", perr.Message, tt.wantField)
			}
			if perr.Retryable {
				t.Error("Retryable = true, want false")
			}
			if strings.Contains(perr.Message, testSecret) {
				t.Errorf("Message %q echoes the secret", perr.Message)
			}
		})
	}
}

func TestWebhook_ConcurrentCallsShareOneAdapter(t *testing.T) {
	f := newFakeTarget(t)
	a := webhook.New(webhook.Options{})
	t.Cleanup(func() { a.Close() })
	tg, err := a.Open(config(f.URL, nil))
	if err != nil {
		t.Fatal(err)
	}
	const n = 64
	var wg sync.WaitGroup
	errs := make(chan error, n)
	for i := range n {
		wg.Go(func() {
			_, err := tg.Send(t.Context(), adapter.Message{Text: fmt.Sprint(i), Final: true, IdempotencyKey: fmt.Sprintf("c:%d", i)})
			errs <- err
		})
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		if err != nil {
			t.Error(err)
		}
	}
	if got := len(f.requests()); got != n {
		t.Errorf("target got %d requests, want %d", got, n)
	}
}

func TestWebhook_UsesGivenClient(t *testing.T) {
	f := newFakeTarget(t)
	var used bool
	client := &http.Client{Transport: roundTripFunc(func(r *http.Request) (*http.Response, error) {
		used = true
		return http.DefaultTransport.RoundTrip(r)
	})}
	tg, err := webhook.New(webhook.Options{Client: client}).Open(config(f.URL, nil))
	if err != nil {
		t.Fatal(err)
	}
	if _, err := tg.Send(t.Context(), adapter.Message{Text: "x", Final: true}); err != nil {
		t.Fatal(err)
	}
	if !used {
		t.Error("the client given in Options was not used")
	}
}

type roundTripFunc func(*http.Request) (*http.Response, error)

func (f roundTripFunc) RoundTrip(r *http.Request) (*http.Response, error) { return f(r) }

func TestWebhook_Name(t *testing.T) {
	if got := webhook.New(webhook.Options{}).Name(); got != "webhook" {
		t.Errorf("Name() = %q, want webhook", got)
	}
}

func TestWebhook_UntrustedCertificateIsDeliveryFailed(t *testing.T) {
	srv := httptest.NewTLSServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		io.WriteString(w, `{"message_id":"tm-1"}`)
	}))
	t.Cleanup(srv.Close)
	srv.Config.ErrorLog = log.New(io.Discard, "", 0) // the refused handshake is expected

	_, err := open(t, srv.URL, nil).Send(t.Context(), adapter.Message{Text: "x", Final: true})
	if got := errCode(err); got != profile.CodeTargetDeliveryFailed {
		t.Fatalf("error %v: code %q, want %q (a certificate problem does not heal by retrying)", err, got, profile.CodeTargetDeliveryFailed)
	}

	// The same server with its certificate trusted works.
	tg, err := webhook.New(webhook.Options{Client: srv.Client()}).Open(config(srv.URL, nil))
	if err != nil {
		t.Fatal(err)
	}
	if id, err := tg.Send(t.Context(), adapter.Message{Text: "x", Final: true}); err != nil || id != "tm-1" {
		t.Errorf("Send with a trusting client = %q, %v; want tm-1", id, err)
	}
}

// Lookup (config "lookup": true) is GET {url}/messages?idempotency_key=K, signed over the empty
// body: 200 tells what is shown, 404 that nothing is, anything else is a target error. Without
// the config no call is made.
func TestLookup(t *testing.T) {
	f := newFakeTarget(t)
	const key = "chan_1:msg 1&x"
	var status int
	f.setAnswer(func(w http.ResponseWriter, r *http.Request) {
		switch status {
		case http.StatusOK:
			w.Header().Set("Content-Type", "application/json")
			io.WriteString(w, `{"message_id":"tm-7","final":true,"text":"hello"}`)
		default:
			w.WriteHeader(status)
		}
	})
	lookup := func(tg adapter.Target) (adapter.Shown, bool, error) {
		t.Helper()
		r, ok := adapter.ReconcilerOf(tg)
		if !ok {
			t.Fatalf("%+v: the stages would not look up", tg.Capabilities())
		}
		return r.Lookup(context.Background(), key)
	}
	if _, ok := adapter.ReconcilerOf(open(t, f.URL+"/hook", nil)); ok {
		t.Fatal("without lookup: the stages would look up")
	}

	tg := open(t, f.URL+"/hook", map[string]any{"lookup": true, "streaming": "none"})
	status = http.StatusOK
	shown, found, err := lookup(tg)
	if err != nil || !found || shown != (adapter.Shown{ID: "tm-7", Final: true, Text: "hello"}) {
		t.Fatalf("200: %+v found=%v err=%v", shown, found, err)
	}
	req := f.requests()[0]
	if req.Method != http.MethodGet || req.Path != "/hook/messages" {
		t.Fatalf("call %s %s", req.Method, req.Path)
	}
	q, _ := url.ParseQuery(strings.SplitN(req.RequestURI, "?", 2)[1])
	if q.Get("idempotency_key") != key {
		t.Fatalf("idempotency_key %q, want %q", q.Get("idempotency_key"), key)
	}
	if !webhook.Verify([]byte(testSecret), nil, req.Header.Get(webhook.SignatureHeader)) {
		t.Fatalf("lookup not signed over the empty body: %q", req.Header.Get(webhook.SignatureHeader))
	}

	status = http.StatusNotFound
	if _, found, err := lookup(tg); err != nil || found {
		t.Fatalf("404: found=%v err=%v, want not found", found, err)
	}
	status = http.StatusServiceUnavailable
	if _, _, err := lookup(tg); profile.CodeOf(err) != profile.CodeTargetUnavailable {
		t.Fatalf("503: err %v, want target_unavailable", err)
	}
}

// edge-api §7.1: every call also carries X-Xim-Timestamp and X-Xim-Signature-V2 over
// "<timestamp>.<body>", beside the unchanged X-Xim-Signature.
func TestWebhook_CallsCarryV2Signature(t *testing.T) {
	f := newFakeTarget(t)
	tg := open(t, f.URL+"/hook", map[string]any{"streaming": "none"})
	if _, err := tg.Send(context.Background(), adapter.Message{Text: "hi", Final: true, IdempotencyKey: "c:m"}); err != nil {
		t.Fatal(err)
	}
	req := f.only(t)
	if !webhook.Verify([]byte(testSecret), req.Body, req.Header.Get(webhook.SignatureHeader)) {
		t.Fatal("V1 signature missing or wrong")
	}
	ts, v2 := req.Header.Get(webhook.TimestampHeader), req.Header.Get(webhook.SignatureV2Header)
	if !webhook.VerifyV2([]byte(testSecret), req.Body, ts, v2, time.Now()) {
		t.Fatalf("V2 signature missing or wrong: %q %q", ts, v2)
	}
}
