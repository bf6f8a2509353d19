package webchat_test

import (
	"context"
	"encoding/json"
	"errors"
	"reflect"
	"strings"
	"testing"
	"time"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/ximd/ximd/handlers/adapter"
	"github.com/ximd/ximd/handlers/adapter/webchat"
	"github.com/ximd/ximd/pipeline/natstest"
	"github.com/ximd/ximd/profile"
	"github.com/ximd/ximd/subjects"
)

// runJS starts an in-process JetStream server and returns a JetStream on it.
func runJS(t testing.TB, provision bool) jetstream.JetStream {
	t.Helper()
	js := natstest.JetStream(t)
	if provision {
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		if err := webchat.Provision(ctx, js, webchat.StoreConfig{}); err != nil {
			t.Fatal(err)
		}
		// Provisioning twice is a no-op (every process provisions at start).
		if err := webchat.Provision(ctx, js, webchat.StoreConfig{}); err != nil {
			t.Fatal(err)
		}
	}
	return js
}

// open returns the webchat target of channel, bound as a worker binds it.
func open(t *testing.T, js jetstream.JetStream, channel string) *webchat.Target {
	t.Helper()
	a, err := webchat.New(webchat.Options{JetStream: js})
	if err != nil {
		t.Fatal(err)
	}
	src := webchat.WithChannelIDs(fakeChannels{channel: {ID: channel, Target: adapter.Binding{Adapter: webchat.Name, Config: json.RawMessage(`{"title":"T"}`)}}})
	ch, ok, err := src.Lookup(context.Background(), channel)
	if err != nil || !ok {
		t.Fatalf("lookup: %v %v", ok, err)
	}
	tg, err := a.Open(ch.Target.Config)
	if err != nil {
		t.Fatal(err)
	}
	return tg.(*webchat.Target)
}

type fakeChannels map[string]adapter.Channel

func (f fakeChannels) Lookup(_ context.Context, id string) (adapter.Channel, bool, error) {
	ch, ok := f[id]
	return ch, ok, nil
}

// items returns the stored state of a channel's item and how many messages its subject holds.
func item(t *testing.T, js jetstream.JetStream, channel, id string) (webchat.Item, uint64) {
	t.Helper()
	ctx := context.Background()
	it, _, found, err := webchat.NewStore(js).Get(ctx, channel, id)
	if err != nil || !found {
		t.Fatalf("item %s/%s: found %v, %v", channel, id, found, err)
	}
	st, err := js.Stream(ctx, subjects.StreamWebchat)
	if err != nil {
		t.Fatal(err)
	}
	info, err := st.Info(ctx)
	if err != nil {
		t.Fatal(err)
	}
	return it, info.State.LastSeq
}

func TestSendIsIdempotentOnKey(t *testing.T) {
	t.Parallel()
	js := runJS(t, true)
	tg := open(t, js, "room")
	ctx := context.Background()
	id, err := tg.Send(ctx, adapter.Message{Text: "first", IdempotencyKey: "room:m1"})
	if err != nil {
		t.Fatal(err)
	}
	_, seq := item(t, js, "room", id)
	// A retry after a crash: same key, other content. Same id, nothing new written or shown.
	again, err := tg.Send(ctx, adapter.Message{Text: "second", Final: true, IdempotencyKey: "room:m1"})
	if err != nil {
		t.Fatal(err)
	}
	if again != id {
		t.Fatalf("second Send returned %q, want %q", again, id)
	}
	it, seq2 := item(t, js, "room", id)
	if seq2 != seq || it.Text != "first" || it.Final {
		t.Fatalf("after the second Send: item %+v at seq %d (was %d): want unchanged", it, seq2, seq)
	}
	// Another key is another message; the same key on another channel too.
	other, err := tg.Send(ctx, adapter.Message{Text: "x", IdempotencyKey: "room:m2"})
	if err != nil || other == id {
		t.Fatalf("Send m2 = %q, %v: want a new id", other, err)
	}
	// A reply (capability reply native): the page quotes the message it replies to.
	reply, err := tg.Send(ctx, adapter.Message{Text: "yes", Final: true, IdempotencyKey: "room:tool:inv_1", ReplyTo: id})
	if err != nil {
		t.Fatal(err)
	}
	if it, _ := item(t, js, "room", reply); it.ReplyTo != id {
		t.Fatalf("reply item %+v: want reply_to %s", it, id)
	}
	if tg.Capabilities().Reply != adapter.ReplyNative {
		t.Fatalf("capabilities %+v: want reply native", tg.Capabilities())
	}
}

func TestLookupReconciles(t *testing.T) {
	t.Parallel()
	js := runJS(t, true)
	tg := open(t, js, "room")
	ctx := context.Background()
	const key = "room:asst_1"
	lookup := func(wantFound, wantFinal bool, wantID string) {
		t.Helper()
		// A fresh adapter, as after a restart: the answer comes from the stream alone.
		shown, found, err := open(t, js, "room").Lookup(ctx, key)
		if err != nil || found != wantFound || shown.Final != wantFinal || shown.ID != wantID {
			t.Fatalf("Lookup = %+v found=%v err=%v; want %q final=%v found=%v", shown, found, err, wantID, wantFinal, wantFound)
		}
	}
	lookup(false, false, "")
	id, err := tg.Send(ctx, adapter.Message{Text: "streamed", IdempotencyKey: key})
	if err != nil {
		t.Fatal(err)
	}
	lookup(true, false, id)
	if err := tg.Edit(ctx, id, adapter.Message{Text: "the final", Final: true,
		Files: []adapter.File{{Type: "image", FileRef: "file_1", Filename: "a.png", MimeType: "image/png", ByteSize: 3, URL: "http://x/files/refs/file_1?sig=s"}}}); err != nil {
		t.Fatal(err)
	}
	lookup(true, true, id)
	it, _ := item(t, js, "room", id)
	if it.Text != "the final" || !it.Final || len(it.Files) != 1 || it.Files[0].FileRef != "file_1" {
		t.Fatalf("final item %+v", it)
	}
	b, _ := json.Marshal(it)
	if strings.Contains(string(b), "sig=") {
		t.Fatalf("item %s holds the signed link; the page serves files itself", b)
	}
	// On another channel the key is unknown.
	if _, found, _ := open(t, js, "other").Lookup(ctx, key); found {
		t.Fatal("key found on another channel")
	}
}

func TestEdit(t *testing.T) {
	t.Parallel()
	js := runJS(t, true)
	tg := open(t, js, "room")
	ctx := context.Background()
	id, err := tg.Send(ctx, adapter.Message{Text: "a", IdempotencyKey: "room:m"})
	if err != nil {
		t.Fatal(err)
	}
	created, _ := item(t, js, "room", id)
	tests := []struct {
		name     string
		id       string
		msg      adapter.Message
		wantText string
		wantErr  string
	}{
		{name: "streamed part", id: id, msg: adapter.Message{Text: "a b"}, wantText: "a b"},
		{name: "final", id: id, msg: adapter.Message{Text: "a b c", Final: true}, wantText: "a b c"},
		{name: "late part after the final is ignored", id: id, msg: adapter.Message{Text: "a b"}, wantText: "a b c"},
		{name: "unknown message", id: "a000000000000000000000000", msg: adapter.Message{Text: "x"}, wantErr: profile.CodeTargetDeliveryFailed},
		{name: "not a webchat id", id: "target-1", msg: adapter.Message{Text: "x"}, wantErr: profile.CodeTargetDeliveryFailed},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			err := tg.Edit(ctx, tt.id, tt.msg)
			if tt.wantErr != "" {
				if !errors.Is(err, &profile.Error{Code: tt.wantErr}) {
					t.Fatalf("Edit = %v, want %s", err, tt.wantErr)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			it, _ := item(t, js, "room", tt.id)
			if it.Text != tt.wantText || it.Created != created.Created || it.Role != webchat.RoleAssistant {
				t.Fatalf("item %+v, want text %q created %d", it, tt.wantText, created.Created)
			}
		})
	}
}

func TestShowActivity(t *testing.T) {
	t.Parallel()
	js := runJS(t, true)
	tg := open(t, js, "room")
	for _, a := range []adapter.Activity{{Status: adapter.StatusThinking}, {Status: adapter.StatusTool, ToolName: "web_search"}, {Status: adapter.StatusIdle, ToolName: "ignored"}} {
		if err := tg.ShowActivity(context.Background(), a); err != nil {
			t.Fatal(err)
		}
		it, _ := item(t, js, "room", "status")
		want := a
		if a.Status != adapter.StatusTool {
			want.ToolName = ""
		}
		if it.Kind != webchat.KindStatus || it.Status != string(want.Status) || it.ToolName != want.ToolName {
			t.Fatalf("status item %+v, want %+v", it, want)
		}
	}
}

func TestFailures(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	t.Run("store not provisioned is target_unavailable, retryable", func(t *testing.T) {
		tg := open(t, runJS(t, false), "room")
		_, err := tg.Send(ctx, adapter.Message{Text: "a", IdempotencyKey: "room:m"})
		var pe *profile.Error
		if !errors.As(err, &pe) || pe.Code != profile.CodeTargetUnavailable || !pe.Retryable {
			t.Fatalf("Send = %v, want target_unavailable retryable", err)
		}
		if err := tg.ShowActivity(ctx, adapter.Activity{Status: adapter.StatusThinking}); !errors.Is(err, &profile.Error{Code: profile.CodeTargetUnavailable}) {
			t.Fatalf("ShowActivity = %v", err)
		}
	})
	t.Run("target not bound to its channel", func(t *testing.T) {
		a, _ := webchat.New(webchat.Options{JetStream: runJS(t, true)})
		tg, err := a.Open(json.RawMessage(`{}`))
		if err != nil {
			t.Fatal(err)
		}
		if _, err := tg.Send(ctx, adapter.Message{Text: "a", IdempotencyKey: "k"}); !errors.Is(err, &profile.Error{Code: profile.CodeTargetDeliveryFailed}) {
			t.Fatalf("Send = %v, want target_delivery_failed", err)
		}
	})
}

func TestPurgeChannel(t *testing.T) {
	t.Parallel()
	js := runJS(t, true)
	ctx := context.Background()
	ids := map[string]string{}
	for _, ch := range []string{"a", "b"} {
		id, err := open(t, js, ch).Send(ctx, adapter.Message{Text: "x", IdempotencyKey: ch + ":m"})
		if err != nil {
			t.Fatal(err)
		}
		ids[ch] = id
	}
	if err := webchat.NewStore(js).PurgeChannel(ctx, "a"); err != nil {
		t.Fatal(err)
	}
	if _, _, found, _ := webchat.NewStore(js).Get(ctx, "a", ids["a"]); found {
		t.Fatal("channel a's message survived its purge")
	}
	if _, _, found, _ := webchat.NewStore(js).Get(ctx, "b", ids["b"]); !found {
		t.Fatal("channel b's message was purged with a")
	}
}

func TestConfig(t *testing.T) {
	t.Parallel()
	tests := []struct {
		name    string
		config  string
		want    webchat.Config
		wantErr string
	}{
		{name: "empty", config: `{}`, want: webchat.Config{Title: webchat.DefaultTitle}},
		{name: "null", config: `null`, want: webchat.Config{Title: webchat.DefaultTitle}},
		{name: "title and secret", config: `{"title":"Support","secret":"0123456789abcdef"}`, want: webchat.Config{Title: "Support", Secret: "0123456789abcdef"}},
		{name: "stamped channel", config: `{"channel":"demo"}`, want: webchat.Config{Title: webchat.DefaultTitle, Channel: "demo"}},
		{name: "short secret", config: `{"secret":"short"}`, wantErr: "target.config.secret"},
		{name: "unknown key", config: `{"url":"http://x"}`, wantErr: "target.config.url"},
		{name: "title not a string", config: `{"title":3}`, wantErr: "target.config.title"},
		{name: "long title", config: `{"title":"` + strings.Repeat("x", 201) + `"}`, wantErr: "target.config.title"},
		{name: "not an object", config: `[]`, wantErr: "target.config"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got, err := webchat.ParseConfig(json.RawMessage(tt.config))
			if tt.wantErr != "" {
				var pe *profile.Error
				if !errors.As(err, &pe) || pe.Code != profile.CodeInvalidDescriptor || !strings.Contains(pe.Message, tt.wantErr) {
					t.Fatalf("ParseConfig(%s) = %v, want invalid_descriptor naming %s", tt.config, err, tt.wantErr)
				}
				if strings.Contains(err.Error(), "short") {
					t.Fatalf("error %q echoes the secret", err)
				}
				return
			}
			if err != nil || !reflect.DeepEqual(got, tt.want) {
				t.Fatalf("ParseConfig(%s) = %+v, %v; want %+v", tt.config, got, err, tt.want)
			}
		})
	}
	a, _ := webchat.New(webchat.Options{JetStream: runJS(t, false)})
	pub, err := a.Public(json.RawMessage(`{"title":"S","secret":"0123456789abcdef","channel":"demo"}`))
	if err != nil || strings.Contains(string(pub), "0123456789abcdef") || strings.Contains(string(pub), "demo") {
		t.Fatalf("Public = %s, %v: want no secret and no stamped channel", pub, err)
	}
}
