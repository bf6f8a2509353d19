package conformance

import (
	"context"
	"encoding/json"
	"io"
	"net"
	"net/http"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/ximd/ximd/handlers/adapter/webhook"
)

// call is one request ximd made to the target.
type call struct {
	Method, Path string
	Body         map[string]any
	// Signed: X-Xim-Signature and X-Xim-Signature-V2 (timestamp within 5 minutes) both verify
	// under the channel's secret; Unsigned says which did not.
	Signed   bool
	Unsigned string
	At       time.Time // received
	Answered time.Time // the answer's status line about to be written (zero until then)
	Status   int       // the answer's status (0 until then)
}

func (c call) text() string   { s, _ := c.Body["text"].(string); return s }
func (c call) final() bool    { b, _ := c.Body["final"].(bool); return b }
func (c call) chat() string   { s, _ := c.Body["chat_id"].(string); return s }
func (c call) status() string { s, _ := c.Body["status"].(string); return s }

// isPost is a POST {url}/messages (a new target message); isPatch an edit of one.
func (c call) isPost() bool {
	return c.Method == http.MethodPost && strings.HasSuffix(c.Path, "/messages")
}
func (c call) isPatch() bool {
	return c.Method == http.MethodPatch && strings.Contains(c.Path, "/messages/")
}
func (c call) isMessage() bool { return c.isPost() || c.isPatch() }
func (c call) isActivity() bool {
	return c.Method == http.MethodPost && strings.HasSuffix(c.Path, "/activity")
}

// files are the call's files[] items.
func (c call) files() []map[string]any {
	raw, _ := c.Body["files"].([]any)
	out := make([]map[string]any, 0, len(raw))
	for _, f := range raw {
		if m, ok := f.(map[string]any); ok {
			out = append(out, m)
		}
	}
	return out
}

// answer is how the target answers one call: a status, headers, after a delay.
type answer struct {
	Status int
	Header http.Header
	Delay  time.Duration
}

// target is the webhook target (edge-api §7.1) ximctl serves: it records every call by the
// chat_id of its body (each check binds its channels to their own chat_id), answers as the
// check asks, and serves files for user messages to download. Calls without a chat_id (none
// are expected) are recorded under "".
type target struct {
	secret []byte
	url    string // as advertised to ximd
	srv    *http.Server

	mu      sync.Mutex
	calls   map[string][]*call // by chat_id
	all     []*call
	answers map[string]func(call) answer
	files   map[string][]byte // path -> bytes
	ids     int
	changed chan struct{}
}

func newTarget(ln net.Listener, url string, secret []byte) *target {
	t := &target{secret: secret, url: url, calls: map[string][]*call{}, answers: map[string]func(call) answer{},
		files: map[string][]byte{}, changed: make(chan struct{})}
	t.srv = &http.Server{Handler: t, ReadHeaderTimeout: 10 * time.Second}
	go func() { _ = t.srv.Serve(ln) }()
	return t
}

func (t *target) close() { _ = t.srv.Close() }

// answerWith sets how calls for chat are answered (nil: 200 with a new message id).
func (t *target) answerWith(chat string, f func(call) answer) {
	t.mu.Lock()
	defer t.mu.Unlock()
	t.answers[chat] = f
}

// serveFile makes GET path answer b (a user's file for ximd to download).
func (t *target) serveFile(path string, b []byte) {
	t.mu.Lock()
	defer t.mu.Unlock()
	t.files[path] = b
}

func (t *target) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	if r.Method == http.MethodGet {
		t.mu.Lock()
		b, ok := t.files[r.URL.Path]
		t.mu.Unlock()
		if !ok {
			http.NotFound(w, r)
			return
		}
		w.Header().Set("Content-Type", "text/plain")
		_, _ = w.Write(b)
		return
	}
	raw, _ := io.ReadAll(io.LimitReader(r.Body, 64<<20))
	c := call{Method: r.Method, Path: r.URL.Path, At: time.Now()}
	_ = json.Unmarshal(raw, &c.Body)
	c.Signed, c.Unsigned = t.verify(raw, r.Header)
	rec := t.record(c)
	t.mu.Lock()
	f := t.answers[c.chat()]
	t.ids++
	id := "conformance-" + strconv.Itoa(t.ids)
	t.mu.Unlock()
	a := answer{Status: http.StatusOK}
	if f != nil {
		a = f(c)
	}
	if a.Delay > 0 {
		select {
		case <-time.After(a.Delay):
		case <-r.Context().Done():
		}
	}
	for k, v := range a.Header {
		w.Header()[k] = v
	}
	t.mu.Lock()
	rec.Status, rec.Answered = a.Status, time.Now()
	t.mu.Unlock()
	if c.isPost() && a.Status/100 == 2 {
		w.Header().Set("Content-Type", "application/json")
		w.WriteHeader(a.Status)
		_ = json.NewEncoder(w).Encode(map[string]string{"message_id": id})
		return
	}
	w.WriteHeader(a.Status)
}

// verify checks both signatures of edge-api §7.1.
func (t *target) verify(body []byte, h http.Header) (bool, string) {
	var missing []string
	if !webhook.Verify(t.secret, body, h.Get(webhook.SignatureHeader)) {
		missing = append(missing, webhook.SignatureHeader)
	}
	if !webhook.VerifyV2(t.secret, body, h.Get(webhook.TimestampHeader), h.Get(webhook.SignatureV2Header), time.Now()) {
		missing = append(missing, webhook.SignatureV2Header)
	}
	return len(missing) == 0, strings.Join(missing, ", ")
}

// record keeps c as it arrives; its answer is filled in later (under mu).
func (t *target) record(c call) *call {
	t.mu.Lock()
	defer t.mu.Unlock()
	rec := &c
	t.calls[c.chat()] = append(t.calls[c.chat()], rec)
	t.all = append(t.all, rec)
	close(t.changed)
	t.changed = make(chan struct{})
	return rec
}

func snapshot(calls []*call) []call {
	out := make([]call, len(calls))
	for i, c := range calls {
		out[i] = *c
	}
	return out
}

// of returns the calls for chat so far.
func (t *target) of(chat string) []call {
	t.mu.Lock()
	defer t.mu.Unlock()
	return snapshot(t.calls[chat])
}

// everything returns every call so far.
func (t *target) everything() []call {
	t.mu.Lock()
	defer t.mu.Unlock()
	return snapshot(t.all)
}

// await waits up to d until done accepts the calls for chat; it returns them and whether done
// did.
func (t *target) await(ctx context.Context, chat string, d time.Duration, done func([]call) bool) ([]call, bool) {
	deadline := time.NewTimer(d)
	defer deadline.Stop()
	for {
		t.mu.Lock()
		calls := snapshot(t.calls[chat])
		changed := t.changed
		t.mu.Unlock()
		if done(calls) {
			return calls, true
		}
		select {
		case <-changed:
		case <-deadline.C:
			return calls, false
		case <-ctx.Done():
			return calls, false
		}
	}
}

// messageCalls keeps the POST/PATCH message calls of calls; activityCalls the activity ones.
func messageCalls(calls []call) []call  { return filter(calls, call.isMessage) }
func activityCalls(calls []call) []call { return filter(calls, call.isActivity) }

func filter(calls []call, keep func(call) bool) []call {
	var out []call
	for _, c := range calls {
		if keep(c) {
			out = append(out, c)
		}
	}
	return out
}
