package testkit

import (
	"encoding/json"
	"fmt"
	"io"
	"net"
	"net/http"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/ximd/ximd/handlers/adapter/webhook"
)

// Call is one request the webhook target received. SignatureOK: both its X-Xim-Signature and
// its X-Xim-Signature-V2 (with a timestamp within 5 minutes) verify.
type Call struct {
	Method, Path string
	Body         map[string]any
	Raw          []byte
	SignatureOK  bool
	At           time.Time
	// Key is the idempotency_key of the message the call belongs to (POST: from the body;
	// PATCH: of the POST that created the target message).
	Key string
}

// Text returns the call's "text".
func (c Call) Text() string { s, _ := c.Body["text"].(string); return s }

// Final returns the call's "final".
func (c Call) Final() bool { b, _ := c.Body["final"].(bool); return b }

// Target is a loopback webhook target (edge-api §7.1) that records calls. Answer decides each
// call's status (nil: 200 with a new message id).
type Target struct {
	Secret string
	URL    string // base url to put in the channel config

	srv     *http.Server
	ln      net.Listener
	ids     atomic.Int64
	mu      sync.Mutex
	calls   []Call
	notify  chan struct{}
	answer  func(c Call) int
	keys    sync.Map // target message id -> idempotency key
	onCall  func(c Call)
	discard bool
	// shown is what each idempotency key's message shows (for lookups), lookups counts them.
	shownMu sync.Mutex
	shown   map[string]shownMessage
	lookups atomic.Int64
}

// shownMessage is what the target shows of one message.
type shownMessage struct {
	ID    string `json:"message_id"`
	Final bool   `json:"final"`
	Text  string `json:"text"`
}

// TargetOptions configures NewTarget.
type TargetOptions struct {
	// Discard keeps no call bodies (load tests); OnCall still sees each call.
	Discard bool
	// OnCall is called for every call before it is answered.
	OnCall func(c Call)
	// Addr is the listen address (default 127.0.0.1:0).
	Addr string
}

// NewTarget starts a target on 127.0.0.1.
func NewTarget(secret string, opts TargetOptions) (*Target, error) {
	addr := opts.Addr
	if addr == "" {
		addr = "127.0.0.1:0"
	}
	ln, err := net.Listen("tcp", addr)
	if err != nil {
		return nil, err
	}
	t := &Target{Secret: secret, ln: ln, URL: "http://" + ln.Addr().String() + "/hook", notify: make(chan struct{}, 1), onCall: opts.OnCall, discard: opts.Discard,
		shown: map[string]shownMessage{}}
	t.srv = &http.Server{Handler: t}
	go t.srv.Serve(ln)
	return t, nil
}

// Close stops the target.
func (t *Target) Close() { _ = t.srv.Close() }

// SetAnswer sets the status function (nil: always 2xx).
func (t *Target) SetAnswer(f func(c Call) int) {
	t.mu.Lock()
	t.answer = f
	t.mu.Unlock()
}

// Lookups counts the lookups (GET /messages?idempotency_key=K) the target answered.
func (t *Target) Lookups() int64 { return t.lookups.Load() }

// lookup answers GET {url}/messages?idempotency_key=K (edge-api §7.1) from what the target shows.
func (t *Target) lookup(w http.ResponseWriter, r *http.Request) {
	if !webhook.Verify([]byte(t.Secret), nil, r.Header.Get("X-Xim-Signature")) {
		w.WriteHeader(http.StatusUnauthorized)
		return
	}
	t.lookups.Add(1)
	t.shownMu.Lock()
	m, ok := t.shown[r.URL.Query().Get("idempotency_key")]
	t.shownMu.Unlock()
	if !ok {
		w.WriteHeader(http.StatusNotFound)
		return
	}
	w.Header().Set("Content-Type", "application/json")
	_ = json.NewEncoder(w).Encode(m)
}

// show records what a message call the target answered 2xx shows.
func (t *Target) show(c Call, id string) {
	if c.Key == "" {
		return
	}
	t.shownMu.Lock()
	defer t.shownMu.Unlock()
	m := t.shown[c.Key]
	if id != "" {
		m.ID = id
	}
	m.Text, m.Final = c.Text(), c.Final()
	t.shown[c.Key] = m
}

func (t *Target) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	if r.Method == http.MethodGet && strings.TrimPrefix(r.URL.Path, "/hook") == "/messages" {
		t.lookup(w, r)
		return
	}
	raw, _ := io.ReadAll(r.Body)
	c := Call{Method: r.Method, Path: strings.TrimPrefix(r.URL.Path, "/hook"), Raw: raw, At: time.Now(),
		SignatureOK: webhook.Verify([]byte(t.Secret), raw, r.Header.Get(webhook.SignatureHeader)) &&
			webhook.VerifyV2([]byte(t.Secret), raw, r.Header.Get(webhook.TimestampHeader), r.Header.Get(webhook.SignatureV2Header), time.Now())}
	_ = json.Unmarshal(raw, &c.Body)
	var newID string
	if r.Method == http.MethodPost && c.Path == "/messages" {
		c.Key, _ = c.Body["idempotency_key"].(string)
		newID = fmt.Sprintf("tm-%d", t.ids.Add(1))
		t.keys.Store(newID, c.Key)
	} else if id, ok := strings.CutPrefix(c.Path, "/messages/"); ok {
		if k, ok := t.keys.Load(id); ok {
			c.Key = k.(string)
		}
	}
	if t.onCall != nil {
		t.onCall(c)
	}
	t.mu.Lock()
	answer := t.answer
	if !t.discard {
		t.calls = append(t.calls, c)
	}
	t.mu.Unlock()
	select {
	case t.notify <- struct{}{}:
	default:
	}
	status := http.StatusOK
	if answer != nil {
		status = answer(c)
	}
	if status >= 300 {
		w.WriteHeader(status)
		return
	}
	if strings.HasPrefix(c.Path, "/messages") {
		t.show(c, newID)
	}
	w.Header().Set("Content-Type", "application/json")
	if newID != "" {
		fmt.Fprintf(w, `{"message_id":%q}`, newID)
		return
	}
	w.WriteHeader(status)
}

// Calls returns a copy of the recorded calls.
func (t *Target) Calls() []Call {
	t.mu.Lock()
	defer t.mu.Unlock()
	return append([]Call(nil), t.calls...)
}

// MessageCalls returns the recorded calls to /messages (POST and PATCH), in order.
func (t *Target) MessageCalls() []Call {
	var out []Call
	for _, c := range t.Calls() {
		if strings.HasPrefix(c.Path, "/messages") {
			out = append(out, c)
		}
	}
	return out
}

// ActivityCalls returns the recorded /activity calls' statuses, in order.
func (t *Target) ActivityCalls() []string {
	var out []string
	for _, c := range t.Calls() {
		if c.Path == "/activity" {
			s, _ := c.Body["status"].(string)
			out = append(out, s)
		}
	}
	return out
}

// WaitFor polls the recorded calls until pred holds or the timeout passes.
func (t *Target) WaitFor(timeout time.Duration, pred func(calls []Call) bool) ([]Call, bool) {
	deadline := time.NewTimer(timeout)
	defer deadline.Stop()
	tick := time.NewTicker(5 * time.Millisecond)
	defer tick.Stop()
	for {
		calls := t.Calls()
		if pred(calls) {
			return calls, true
		}
		select {
		case <-deadline.C:
			return t.Calls(), false
		case <-t.notify:
		case <-tick.C:
		}
	}
}

// Config returns a webhook channel config for this target.
func (t *Target) Config(streaming, activity string) map[string]any {
	return map[string]any{"url": t.URL, "chat_id": "room-1", "secret": t.Secret, "streaming": streaming, "activity": activity}
}
