package adapter_test

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/ximd/ximd/handlers/adapter"
	"github.com/ximd/ximd/profile"
)

// kitConfig is a test adapter's validated config: an account's token and a chat.
type kitConfig struct{ Token, Chat string }

type kitPublic struct {
	Chat string `json:"chat"`
}

func parseKitConfig(raw json.RawMessage) (kitConfig, error) {
	var c kitConfig
	if err := adapter.DecodeConfig(raw, &c); err != nil {
		return c, err
	}
	if c.Chat == "" {
		return c, profile.Errorf(profile.CodeInvalidDescriptor, "target.config.Chat: required")
	}
	return c, nil
}

type kitTarget struct{ cfg kitConfig }

func (kitTarget) Send(context.Context, adapter.Message) (string, error) { return "1", nil }
func (kitTarget) Capabilities() adapter.Capabilities                    { return adapter.Capabilities{} }

func newKit() adapter.Kit[kitConfig, kitPublic] {
	return adapter.NewKit("kit", parseKitConfig, func(c kitConfig) kitPublic { return kitPublic{Chat: c.Chat} },
		func(c kitConfig) (adapter.Target, error) { return kitTarget{cfg: c}, nil })
}

func TestKit_OpenAndPublicFromOneParse(t *testing.T) {
	var k adapter.Opener = newKit()
	if k.Name() != "kit" {
		t.Fatalf("Name = %q", k.Name())
	}
	good := json.RawMessage(`{"Token":"s3cret","Chat":"c1"}`)
	tg, err := k.Open(good)
	if err != nil {
		t.Fatal(err)
	}
	if got := tg.(kitTarget).cfg; got != (kitConfig{Token: "s3cret", Chat: "c1"}) {
		t.Fatalf("Open gave the target %+v", got)
	}
	pub, err := k.Public(good)
	if err != nil || string(pub) != `{"chat":"c1"}` {
		t.Fatalf("Public = %s, %v; want the public form only, no secret", pub, err)
	}
	for _, bad := range []string{`{"Token":"s3cret"}`, `{"Chat":"c1","Nope":1}`, `null`} {
		_, oerr := k.Open(json.RawMessage(bad))
		_, perr := k.Public(json.RawMessage(bad))
		for _, err := range []error{oerr, perr} {
			if pe := profile.AsError(err); err == nil || pe.Code != profile.CodeInvalidDescriptor || strings.Contains(pe.Message, "s3cret") {
				t.Fatalf("%s: %v; want invalid_descriptor without the secret", bad, err)
			}
		}
	}
}

func TestKit_PollPrologue(t *testing.T) {
	k := newKit()
	key := func(c kitConfig) string { return "acct." + c.Chat }
	polled := func(c kitConfig) bool { return c.Token == "" }
	if got := k.PollKeyOf(adapter.Channel{Target: adapter.Binding{Config: json.RawMessage(`{}`)}}, polled, key); got != "" {
		t.Fatalf("PollKeyOf a bad config = %q; want \"\" (not polled)", got)
	}
	ch := adapter.Channel{ID: "ch1", Target: adapter.Binding{Config: json.RawMessage(`{"Chat":"c1"}`)}}
	if got := k.PollKeyOf(ch, polled, key); got != "acct.c1" {
		t.Fatalf("PollKeyOf = %q", got)
	}
	hooked := adapter.Channel{ID: "ch2", Target: adapter.Binding{Config: json.RawMessage(`{"Token":"t","Chat":"c2"}`)}}
	if got := k.PollKeyOf(hooked, polled, key); got != "" {
		t.Fatalf("PollKeyOf a channel that is not polled = %q; want \"\"", got)
	}

	if _, ok, err := k.StartPoll(feed{}); ok || err != nil {
		t.Fatalf("StartPoll of no channels = %v, %v; want nothing to read, no error", ok, err)
	}
	bad := adapter.Channel{ID: "ch0", Target: adapter.Binding{Config: json.RawMessage(`{}`)}}
	if _, ok, err := k.StartPoll(feed{chans: []adapter.Channel{bad, ch}}); ok || profile.AsError(err).Code != profile.CodeInvalidDescriptor {
		t.Fatalf("StartPoll with a bad first config = %v, %v; want its error", ok, err)
	}
	p, ok, err := k.StartPoll(feed{chans: []adapter.Channel{ch, bad}})
	if !ok || err != nil || p.Account.Chat != "c1" || len(p.Channels) != 2 {
		t.Fatalf("StartPoll = %+v, %v, %v; want both channels and the first's config", p, ok, err)
	}
}

func TestClients_OneClientPerAccount(t *testing.T) {
	var cs adapter.Clients[*closer] // the zero value is an empty cache
	var made atomic.Int32
	var wg sync.WaitGroup
	got := make([]*closer, 32)
	for i := range got {
		wg.Add(1)
		go func() {
			defer wg.Done()
			got[i] = cs.Get("a", func() *closer { made.Add(1); return &closer{} })
		}()
	}
	wg.Wait()
	if made.Load() != 1 {
		t.Fatalf("%d clients made for one account; want 1", made.Load())
	}
	for _, c := range got {
		if c != got[0] {
			t.Fatal("two channels of one account got different clients")
		}
	}
	if b := cs.Get("b", func() *closer { return &closer{} }); b == got[0] || cs.Len() != 2 {
		t.Fatalf("another account shares the client, or Len = %d", cs.Len())
	}
}

func TestClients_FailedCreateIsNotCached(t *testing.T) {
	var cs adapter.Clients[*closer]
	boom := errors.New("bad homeserver")
	if _, err := cs.TryGet("a", func() (*closer, error) { return nil, boom }); !errors.Is(err, boom) {
		t.Fatalf("TryGet = %v; want the create error", err)
	}
	c, err := cs.TryGet("a", func() (*closer, error) { return &closer{}, nil })
	if err != nil || c == nil || cs.Len() != 1 {
		t.Fatalf("TryGet after a failure = %v, %v; want a new client", c, err)
	}
}

func TestClients_CloseClosesAndForgets(t *testing.T) {
	var cs adapter.Clients[any]
	broken := errors.New("close failed")
	a, b := &closer{}, &closer{err: broken}
	cs.Get("a", func() any { return a })
	cs.Get("b", func() any { return b })
	cs.Get("c", func() any { return "no Close" })
	if err := cs.Close(); !errors.Is(err, broken) {
		t.Fatalf("Close = %v; want the failing client's error", err)
	}
	if !a.closed || !b.closed || cs.Len() != 0 {
		t.Fatalf("closed a=%v b=%v, %d left; want every client closed and forgotten", a.closed, b.closed, cs.Len())
	}
	if n := cs.Get("a", func() any { return &closer{} }); n == any(a) {
		t.Fatal("Get after Close gave the closed client")
	}
}

func TestCommon_Defaults(t *testing.T) {
	d := adapter.Common{}.Defaults(0)
	if d.Logger == nil || d.HTTPClient == nil || d.HTTPClient.Timeout != 0 {
		t.Fatalf("Defaults = %+v; want a logger and a client without an overall bound", d)
	}
	if d := (adapter.Common{}).Defaults(30e9); d.HTTPClient.Timeout != 30e9 {
		t.Fatalf("Timeout = %v", d.HTTPClient.Timeout)
	}
	hc := &http.Client{}
	if d := (adapter.Common{HTTPClient: hc}).Defaults(30e9); d.HTTPClient != hc {
		t.Fatal("a given client was replaced")
	}
}

func TestFileOrNote(t *testing.T) {
	ctx := context.Background()
	in := &inbox{}
	m := profile.Message{Text: "look"}
	put := func() (profile.File, error) { return profile.File{FileRef: "file_1"}, nil }
	if err := adapter.FileOrNote(ctx, in, &m, "a.png", put); err != nil || len(m.Files) != 1 || m.Text != "look" {
		t.Fatalf("a stored file: %v, %+v", err, m)
	}
	tooLarge := func() (profile.File, error) {
		return profile.File{}, profile.Errorf(profile.CodeFileTooLarge, "larger than 20 MB")
	}
	if err := adapter.FileOrNote(ctx, in, &m, "b.mov", tooLarge); err != nil || len(m.Files) != 1 ||
		m.Text != "look\n[b.mov: not passed on: larger than 20 MB]" {
		t.Fatalf("a file that cannot pass: %v, %+v; want it named in the text", err, m)
	}
	down := func() (profile.File, error) {
		return profile.File{}, profile.Errorf(profile.CodeTargetUnavailable, "platform down")
	}
	if err := adapter.FileOrNote(ctx, in, &m, "c.pdf", down); profile.AsError(err).Code != profile.CodeTargetUnavailable {
		t.Fatalf("a failure that may pass = %v; want it returned", err)
	}
	if len(in.discarded) != 1 || in.discarded[0] != "file_1" {
		t.Fatalf("discarded %v; want the message's stored file discarded", in.discarded)
	}
}

func TestReadBody(t *testing.T) {
	r := httptest.NewRequest(http.MethodPost, "/", strings.NewReader("hello"))
	if b, err := adapter.ReadBody(r); err != nil || string(b) != "hello" {
		t.Fatalf("ReadBody = %q, %v", b, err)
	}
	r = httptest.NewRequest(http.MethodPost, "/", bytes.NewReader(make([]byte, 100)))
	r.Body = http.MaxBytesReader(httptest.NewRecorder(), r.Body, 10)
	if _, err := adapter.ReadBody(r); profile.AsError(err).Code != profile.CodePacketTooLarge {
		t.Fatalf("ReadBody past the bound = %v; want packet_too_large", err)
	}
	r = httptest.NewRequest(http.MethodPost, "/", io.NopCloser(failing{}))
	if _, err := adapter.ReadBody(r); profile.AsError(err).Code != profile.CodeBadRequest {
		t.Fatalf("ReadBody of a broken body = %v; want bad_request", err)
	}
}

type closer struct {
	err    error
	closed bool
}

func (c *closer) Close() error { c.closed = true; return c.err }

type failing struct{}

func (failing) Read([]byte) (int, error) { return 0, errors.New("connection reset") }

type feed struct{ chans []adapter.Channel }

func (f feed) Channels() []adapter.Channel            { return f.chans }
func (feed) Inbox(string) adapter.Inbox               { return nil }
func (feed) Cursor(context.Context) (string, error)   { return "", nil }
func (feed) SaveCursor(context.Context, string) error { return nil }
func (feed) Bots() []adapter.Bot                      { return nil }
func (feed) Admit(context.Context, adapter.Bot, adapter.Arrival) (adapter.Admission, error) {
	return adapter.Admission{}, nil
}

type inbox struct{ discarded []string }

func (*inbox) Seen(context.Context, string) (bool, error) { return false, nil }
func (*inbox) PutFile(context.Context, adapter.StoredFile, io.Reader) (profile.File, error) {
	return profile.File{}, nil
}
func (*inbox) Submit(context.Context, profile.Message) (bool, error) { return true, nil }
func (in *inbox) Discard(_ context.Context, ref string) error {
	in.discarded = append(in.discarded, ref)
	return nil
}

func TestKit_ReceivePrologue(t *testing.T) {
	k := newKit()
	refusal := profile.Errorf(profile.CodeUnauthorized, "bad secret")
	rt := adapter.Route[kitConfig]{Path: "events", Refusal: refusal,
		Accept: func(r *http.Request, c kitConfig) bool { return r.Header.Get("X-Secret") == c.Token }}
	ch := adapter.Channel{ID: "ch1", Target: adapter.Binding{Config: json.RawMessage(`{"Token":"s3cret","Chat":"c1"}`)}}
	request := func(path, secret string, body io.Reader) *http.Request {
		r := httptest.NewRequest(http.MethodPost, "/v1/targets/kit/ch1/"+path, body)
		r.SetPathValue("path", path)
		r.Header.Set("X-Secret", secret)
		return r
	}
	if _, _, err := k.StartReceive(request("other", "s3cret", strings.NewReader("{}")), ch, rt); profile.AsError(err).Code != profile.CodeNotFound {
		t.Fatalf("another path = %v; want not_found", err)
	}
	// A refused request is answered before its body is read: an oversized body from someone
	// without the secret is a refusal, not packet_too_large.
	if _, _, err := k.StartReceive(request("events", "guess", io.NopCloser(failing{})), ch, rt); err != refusal {
		t.Fatalf("a wrong secret = %v; want the refusal", err)
	}
	bad := adapter.Channel{ID: "ch0", Target: adapter.Binding{Config: json.RawMessage(`{}`)}}
	if _, _, err := k.StartReceive(request("events", "", strings.NewReader("{}")), bad, rt); err != refusal {
		t.Fatalf("a config that does not parse = %v; want the refusal", err)
	}
	c, body, err := k.StartReceive(request("events", "s3cret", strings.NewReader(`{"x":1}`)), ch, rt)
	if err != nil || c.Chat != "c1" || string(body) != `{"x":1}` {
		t.Fatalf("StartReceive = %+v, %q, %v", c, body, err)
	}
}

// Recent keeps the last n keys: an older one is forgotten, a key added again is not doubled.
func TestRecent(t *testing.T) {
	r := adapter.NewRecent(2)
	r.Add("a")
	r.Add("b")
	r.Add("b")
	if !r.Has("a") || !r.Has("b") {
		t.Fatal("a key of the last two forgotten")
	}
	r.Add("c")
	if r.Has("a") || !r.Has("b") || !r.Has("c") {
		t.Fatalf("after a third key: a %v, b %v, c %v; want a forgotten", r.Has("a"), r.Has("b"), r.Has("c"))
	}
}

// lingerer is a client whose Close is seen from the linger timer's goroutine.
type lingerer struct{ closed atomic.Bool }

func (l *lingerer) Close() error { l.closed.Store(true); return nil }

// An acquired client is shared while used, kept for the linger after its last release (so the
// next use finds it), and closed and forgotten after it.
func TestClients_AcquireLingersThenCloses(t *testing.T) {
	var cs adapter.Clients[*lingerer]
	mk := func() *lingerer { return &lingerer{} }
	a, releaseA := cs.Acquire("k", 50*time.Millisecond, mk)
	b, releaseB := cs.Acquire("k", 50*time.Millisecond, mk)
	if a != b {
		t.Fatal("two uses of one account got two clients")
	}
	releaseA()
	releaseA() // a second call of one release is no second release
	time.Sleep(100 * time.Millisecond)
	if a.closed.Load() {
		t.Fatal("closed while still used")
	}
	releaseB()
	c, releaseC := cs.Acquire("k", 50*time.Millisecond, mk) // within the linger: the same client
	if c != a || a.closed.Load() {
		t.Fatal("acquired again within the linger, the client was not kept")
	}
	releaseC()
	deadline := time.Now().Add(5 * time.Second)
	for !a.closed.Load() || cs.Len() != 0 {
		if time.Now().After(deadline) {
			t.Fatalf("not closed and forgotten after the linger (closed %v, %d cached)", a.closed.Load(), cs.Len())
		}
		time.Sleep(5 * time.Millisecond)
	}
	if d, release := cs.Acquire("k", time.Minute, mk); d == a {
		t.Fatal("a closed client was given out again")
	} else {
		release()
		_ = cs.Close() // stops the linger; d is closed at once
		if !d.closed.Load() {
			t.Fatal("Close left a lingering client open")
		}
	}
}
