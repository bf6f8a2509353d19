// Package adaptertest is the universal adapter test suite (edge-api §7.2), in the spirit of
// Watermill's pubsub/tests: every adapter runs it against its platform (a real server where one
// runs here, else a fake that follows the platform's documentation) through a Setup that binds
// fresh chats and reads back what a person in them sees. What an adapter's capabilities do not
// claim is skipped, never passed silently: each skip names the capability.
package adaptertest

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"
	"unicode/utf8"

	"github.com/ximd/ximd/handlers/adapter"
	"github.com/ximd/ximd/profile"
)

// Seen is one message as a person in the chat sees it.
type Seen struct {
	// ID is the platform's id of the message (the target message id the adapter returned).
	ID string
	// Text is its text now (after edits).
	Text string
	// Files are its files' names and bytes.
	Files []SeenFile
	// ReplyTo is the id of the message it replies to ("": none).
	ReplyTo string
}

// SeenFile is a file of a seen message.
type SeenFile struct {
	Name string
	Data []byte
}

// Chat is one bound chat of the platform under test.
type Chat struct {
	// Config is the channel's target.config binding it to this chat.
	Config json.RawMessage
	// Messages returns what the chat shows of the bot, oldest first.
	Messages func(t *testing.T) []Seen
	// Previews returns the texts of the streamed previews the chat showed that are not
	// messages (Telegram drafts), oldest first. nil: the platform has none.
	Previews func(t *testing.T) []string
	// Activity returns whether the bot shows activity (typing, a status) now. nil: a person
	// cannot see it.
	Activity func(t *testing.T) bool
	// Post sends text as a person in the chat, with a file when file is not nil, and returns the
	// platform's id of the message. nil: the adapter takes no user messages by polling.
	Post func(t *testing.T, text string, file *SeenFile) string
	// Channel is the channel record the poller gets (ID, Target and OpenedAt set by the suite).
	Channel adapter.Channel
}

// Setup is an adapter under test and its platform.
type Setup struct {
	// Adapter is the adapter under test, built with Files as its adapter.FileSource.
	Adapter adapter.Opener
	// Files is the Transfer Plane the adapter reads files out of (NewFiles).
	Files *Files
	// NewChat binds a fresh chat with the given streaming and activity capability values.
	NewChat func(t *testing.T, streaming adapter.Streaming, activity adapter.ActivityMode) Chat
	// FileURL gives a stored file's URL for adapter.File.URL (adapters that pass links, like
	// webhook); nil: the adapter reads Files.
	FileURL func(ref string) string
	// SeenID maps a target message id the adapter returns to the id a person sees of that
	// message (Feishu: a card's handle holds the message id and the card's). nil: the same.
	SeenID func(targetID string) string
	// ForgetsConfirmed: the platform forgets what a poller has confirmed (Telegram forgets an
	// update once getUpdates asks for the ones after it; Slack an acknowledged Socket Mode
	// envelope), so a poller set back to an older position reads nothing again; the suite then
	// checks that nothing is doubled instead.
	ForgetsConfirmed bool
	// RateLimited returns a call that the platform rate-limits when made often enough (Matrix:
	// typing notifications). nil: the setup cannot make the platform rate-limit.
	RateLimited func(t *testing.T) func(ctx context.Context) error
}

func (s Setup) seenID(id string) string {
	if s.SeenID == nil {
		return id
	}
	return s.SeenID(id)
}

// Run runs the suite.
func Run(t *testing.T, s Setup) {
	t.Run("direct final is one message", func(t *testing.T) { directFinal(t, s) })
	t.Run("streamed message is one message ending with the final", func(t *testing.T) { streamed(t, s) })
	t.Run("draft previews, then one message", func(t *testing.T) { drafted(t, s) })
	t.Run("reply", func(t *testing.T) { reply(t, s) })
	t.Run("long final is split", func(t *testing.T) { longText(t, s) })
	t.Run("a long text with nothing to show is one refusal at most", func(t *testing.T) { longBlank(t, s) })
	t.Run("files out", func(t *testing.T) { filesOut(t, s) })
	t.Run("activity shown and cleared", func(t *testing.T) { activity(t, s) })
	t.Run("in-doubt rule", func(t *testing.T) { inDoubt(t, s) })
	t.Run("user messages in, once each", func(t *testing.T) { inbound(t, s) })
	t.Run("one poll loop serves the chats of one account", func(t *testing.T) { sharedKey(t, s) })
	t.Run("rate limit carries the platform's retry time", func(t *testing.T) { rateLimit(t, s) })
}

func rateLimit(t *testing.T, s Setup) {
	if s.RateLimited == nil {
		t.Skip("the setup cannot make the platform rate-limit")
	}
	call := s.RateLimited(t)
	ctx := ctx10(t)
	var limited error
	for i := 0; i < 200 && limited == nil; i++ {
		if err := call(ctx); err != nil {
			var pe *profile.Error
			if !errors.As(err, &pe) || pe.Code != profile.CodeTargetRateLimited {
				t.Fatalf("call %d: %v, want nil or target_rate_limited", i, err)
			}
			limited = err
		}
	}
	after, ok := adapter.RetryAfterOf(limited)
	if limited == nil || !ok || after <= 0 || after > adapter.MaxRetryAfter {
		t.Fatalf("rate limit %v: retry after %s (%v), want the platform's time", limited, after, ok)
	}
}

func open(t *testing.T, s Setup, streaming adapter.Streaming, activity adapter.ActivityMode) (adapter.Target, Chat) {
	t.Helper()
	chat := s.NewChat(t, streaming, activity)
	tg, err := s.Adapter.Open(chat.Config)
	if err != nil {
		t.Fatalf("Open: %v", err)
	}
	return tg, chat
}

// eventually polls cond for up to 10s (platforms show what they were told a little later).
func eventually(t *testing.T, what string, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(10 * time.Second)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("not within 10s: %s", what)
		}
		time.Sleep(20 * time.Millisecond)
	}
}

func ctx10(t *testing.T) context.Context {
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	t.Cleanup(cancel)
	return ctx
}

func describe(seen []Seen) string {
	var b strings.Builder
	for _, m := range seen {
		fmt.Fprintf(&b, "\n  %s %q files=%d reply_to=%s", m.ID, m.Text, len(m.Files), m.ReplyTo)
	}
	return b.String()
}

func directFinal(t *testing.T, s Setup) {
	tg, chat := open(t, s, adapter.StreamingNone, adapter.ActivityNone)
	id, err := tg.Send(ctx10(t), adapter.Message{Text: "hello from the suite", Final: true, IdempotencyKey: "suite:direct"})
	if err != nil || id == "" {
		t.Fatalf("Send: %q %v", id, err)
	}
	eventually(t, "one message with the text", func() bool {
		seen := chat.Messages(t)
		return len(seen) == 1 && seen[0].Text == "hello from the suite" && seen[0].ID == s.seenID(id)
	})
}

func streamed(t *testing.T, s Setup) {
	tg, chat := open(t, s, adapter.StreamingEdit, adapter.ActivityNone)
	ed, ok := adapter.EditorOf(tg)
	if !ok {
		t.Skip("capability streaming is not edit")
	}
	ctx := ctx10(t)
	key := "suite:streamed"
	var id string
	preview(t, func() (err error) {
		id, err = tg.Send(ctx, adapter.Message{Text: "Hel", IdempotencyKey: key})
		return err
	})
	for _, text := range []string{"Hello, ", "Hello, wor"} {
		preview(t, func() error { return ed.Edit(ctx, id, adapter.Message{Text: text, IdempotencyKey: key}) })
	}
	if err := ed.Edit(ctx, id, adapter.Message{Text: "Hello, world.", Final: true, IdempotencyKey: key}); err != nil {
		t.Fatal(err)
	}
	var seen []Seen
	eventually(t, "one message showing the final text", func() bool {
		seen = chat.Messages(t)
		return len(seen) == 1 && seen[0].ID == s.seenID(id) && seen[0].Text == "Hello, world."
	})
}

func drafted(t *testing.T, s Setup) {
	chat := s.NewChat(t, adapter.StreamingDraft, adapter.ActivityNone)
	tg, err := s.Adapter.Open(chat.Config)
	if pe := profile.AsError(err); err != nil && pe.Code == profile.CodeInvalidDescriptor && strings.Contains(pe.Message, "streaming") {
		t.Skipf("the adapter has no draft streaming: %s", pe.Message)
	} else if err != nil {
		t.Fatalf("Open: %v", err)
	}
	dr, ok := adapter.DrafterOf(tg)
	if !ok {
		t.Skip("capability streaming is not draft")
	}
	if chat.Previews == nil {
		t.Fatal("streaming draft, but the setup cannot see previews")
	}
	ctx := ctx10(t)
	key := "suite:drafted"
	for _, text := range []string{"Hel", "Hello, wor"} {
		preview(t, func() error { return dr.Draft(ctx, key, text) })
	}
	eventually(t, "both previews shown", func() bool { return len(chat.Previews(t)) == 2 })
	if p := chat.Previews(t); p[0] != "Hel" || p[1] != "Hello, wor" {
		t.Fatalf("previews %q", p)
	}
	if seen := chat.Messages(t); len(seen) != 0 {
		t.Fatalf("a draft created a message: %s", describe(seen))
	}
	id, err := tg.Send(ctx, adapter.Message{Text: "Hello, world.", Final: true, IdempotencyKey: key})
	if err != nil {
		t.Fatal(err)
	}
	eventually(t, "one message with the final text", func() bool {
		seen := chat.Messages(t)
		return len(seen) == 1 && seen[0].ID == s.seenID(id) && seen[0].Text == "Hello, world."
	})
}

// preview makes a display call as the assemble stage does: a refusal with a retry time (the
// platform's rate, or the chat's edit budget) is waited out and the call made again.
func preview(t *testing.T, call func() error) {
	t.Helper()
	deadline := time.Now().Add(10 * time.Second)
	for {
		err := call()
		after, wait := adapter.RetryAfterOf(err)
		if err == nil || !wait || time.Now().Add(after).After(deadline) {
			if err != nil {
				t.Fatal(err)
			}
			return
		}
		time.Sleep(after)
	}
}

func reply(t *testing.T, s Setup) {
	tg, chat := open(t, s, adapter.StreamingNone, adapter.ActivityNone)
	if tg.Capabilities().Reply != adapter.ReplyNative {
		t.Skip("capability reply is not native")
	}
	ctx := ctx10(t)
	first, err := tg.Send(ctx, adapter.Message{Text: "question?", Final: true, IdempotencyKey: "suite:q"})
	if err != nil {
		t.Fatal(err)
	}
	second, err := tg.Send(ctx, adapter.Message{Text: "answer.", Final: true, IdempotencyKey: "suite:a", ReplyTo: first})
	if err != nil {
		t.Fatal(err)
	}
	var seen []Seen
	eventually(t, "the second message replies to the first", func() bool {
		seen = chat.Messages(t)
		return len(seen) == 2 && seen[1].ID == s.seenID(second) && seen[1].ReplyTo == s.seenID(first) && seen[0].ReplyTo == ""
	})
}

func longText(t *testing.T, s Setup) {
	tg, chat := open(t, s, adapter.StreamingNone, adapter.ActivityNone)
	limit := tg.Capabilities().MaxTextLength
	if limit == 0 {
		t.Skip("no text limit (capability max_text_length 0)")
	}
	var b strings.Builder
	for i := 0; utf8.RuneCountInString(b.String()) < limit*5/2; i++ {
		fmt.Fprintf(&b, "Paragraph %d says something long enough to matter.\n\n", i)
	}
	text := strings.TrimSpace(b.String())
	if _, err := tg.Send(ctx10(t), adapter.Message{Text: text, Final: true, IdempotencyKey: "suite:long"}); err != nil {
		t.Fatal(err)
	}
	var seen []Seen
	eventually(t, "consecutive messages, each within the limit, making up the text", func() bool {
		seen = chat.Messages(t)
		if len(seen) < 3 {
			return false
		}
		var all []string
		for _, m := range seen {
			if utf8.RuneCountInString(m.Text) > limit {
				t.Fatalf("a part of %d characters, limit %d", utf8.RuneCountInString(m.Text), limit)
			}
			all = append(all, m.Text)
		}
		return strings.Join(strings.Fields(strings.Join(all, " ")), " ") == strings.Join(strings.Fields(text), " ")
	})
}

// longBlank: a final (or a preview) past the limit with nothing a person would see (blank
// lines, link definitions) is sent as a blank text within the limit is: shown empty or refused,
// one message at most, never a failure of the adapter itself.
func longBlank(t *testing.T, s Setup) {
	tg, chat := open(t, s, adapter.StreamingEdit, adapter.ActivityNone)
	limit := tg.Capabilities().MaxTextLength
	if limit == 0 {
		t.Skip("no text limit (capability max_text_length 0)")
	}
	blank := strings.Repeat(" \n", limit) + strings.Repeat("[ref]: https://example.com/\n", limit/20)
	if ed, ok := adapter.EditorOf(tg); ok {
		if id, err := tg.Send(ctx10(t), adapter.Message{Text: blank, IdempotencyKey: "suite:blank-preview"}); err == nil {
			_ = ed.Edit(ctx10(t), id, adapter.Message{Text: blank + " ", IdempotencyKey: "suite:blank-preview"})
		}
	}
	_, err := tg.Send(ctx10(t), adapter.Message{Text: blank, Final: true, IdempotencyKey: "suite:blank"})
	var pe *profile.Error
	if err != nil && !errors.As(err, &pe) {
		t.Fatalf("a blank final: %v, want nil or a profile error", err)
	}
	if n := len(chat.Messages(t)); n > 2 {
		t.Fatalf("%d messages for a blank preview and a blank final", n)
	}
}

func filesOut(t *testing.T, s Setup) {
	tg, chat := open(t, s, adapter.StreamingNone, adapter.ActivityNone)
	data := []byte("\x89PNG\r\n\x1a\n suite image bytes")
	sf := s.Files.Add("suite.png", "image/png", "image", data)
	f := adapter.File{Type: "image", FileRef: sf.FileRef, Filename: sf.Filename, MimeType: sf.MimeType, ByteSize: sf.ByteSize}
	if s.FileURL != nil {
		f.URL = s.FileURL(sf.FileRef)
	}
	if _, err := tg.Send(ctx10(t), adapter.Message{Text: "see the image", Final: true, Files: []adapter.File{f}, IdempotencyKey: "suite:file"}); err != nil {
		t.Fatal(err)
	}
	var seen []Seen
	eventually(t, "the text and the file's bytes", func() bool {
		seen = chat.Messages(t)
		var text bool
		var files []SeenFile
		for _, m := range seen {
			text = text || m.Text == "see the image"
			files = append(files, m.Files...)
		}
		return text && len(files) == 1 && files[0].Name == "suite.png" && bytes.Equal(files[0].Data, data)
	})
}

func activity(t *testing.T, s Setup) {
	tg, chat := open(t, s, adapter.StreamingNone, adapter.ActivityTyping)
	sh, ok := adapter.ShowerOf(tg)
	if !ok {
		t.Skip("capability activity is none")
	}
	if chat.Activity == nil {
		t.Skip("the platform does not let a person see activity")
	}
	ctx := ctx10(t)
	if err := sh.ShowActivity(ctx, adapter.Activity{Status: adapter.StatusThinking}); err != nil {
		t.Fatal(err)
	}
	eventually(t, "activity shown", func() bool { return chat.Activity(t) })
	if err := sh.ShowActivity(ctx, adapter.Activity{Status: adapter.StatusIdle}); err != nil {
		t.Fatal(err)
	}
	eventually(t, "activity cleared", func() bool { return !chat.Activity(t) })
}

func inDoubt(t *testing.T, s Setup) {
	tg, chat := open(t, s, adapter.StreamingEdit, adapter.ActivityNone)
	ctx := ctx10(t)
	key := "suite:doubt"
	switch rule := tg.Capabilities().InDoubtRule(); rule {
	case adapter.InDoubtDedupe:
		a, err := tg.Send(ctx, adapter.Message{Text: "once", Final: true, IdempotencyKey: key})
		if err != nil {
			t.Fatal(err)
		}
		b, err := tg.Send(ctx, adapter.Message{Text: "once", Final: true, IdempotencyKey: key})
		if err != nil || a != b {
			t.Fatalf("sent again: %q %v, want the first message %q", b, err, a)
		}
		time.Sleep(200 * time.Millisecond) // a second message would show by now
		if seen := chat.Messages(t); len(seen) != 1 {
			t.Fatalf("dedupe: the chat shows %s", describe(seen))
		}
	case adapter.InDoubtLookup:
		r, ok := adapter.ReconcilerOf(tg)
		if !ok {
			t.Fatal("in-doubt rule lookup without a Reconciler")
		}
		if _, found, err := r.Lookup(ctx, key); err != nil || found {
			t.Fatalf("before sending: found %v, %v", found, err)
		}
		id, err := tg.Send(ctx, adapter.Message{Text: "stream", IdempotencyKey: key})
		if err != nil {
			t.Fatal(err)
		}
		var shown adapter.Shown
		eventually(t, "found, not final", func() bool {
			var found bool
			shown, found, err = r.Lookup(ctx, key)
			return err == nil && found && shown.ID == id && !shown.Final
		})
		if ed, ok := adapter.EditorOf(tg); ok {
			if err := ed.Edit(ctx, id, adapter.Message{Text: "streamed, then final", Final: true, IdempotencyKey: key}); err != nil {
				t.Fatal(err)
			}
			eventually(t, "found final with its text", func() bool {
				var found bool
				shown, found, err = r.Lookup(ctx, key)
				return err == nil && found && shown.Final && shown.ShowsText("streamed, then final")
			})
		}
	default:
		t.Skipf("in-doubt rule %q: nothing the adapter settles", rule)
	}
}

func inbound(t *testing.T, s Setup) {
	poller, ok := s.Adapter.(adapter.Poller)
	if !ok {
		t.Skip("the adapter takes user messages by a route, not by polling")
	}
	chat := s.NewChat(t, adapter.StreamingNone, adapter.ActivityNone)
	if chat.Post == nil {
		t.Skip("the setup cannot post as a person")
	}
	ch := bind(s, chat)
	feed := NewFeed(s.Files, ch)
	in := feed.InboxOf(ch.ID)
	// Said after the binding, before the first poll: the agent's all the same.
	chat.Post(t, "said before the first poll", nil)
	stop := startPoll(t, poller, feed)
	eventually(t, "the message said before the first poll in", func() bool { return len(in.Messages()) == 1 })
	// The bot's own message is not a user message.
	tg, err := s.Adapter.Open(chat.Config)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := tg.Send(ctx10(t), adapter.Message{Text: "the bot speaks", Final: true, IdempotencyKey: "suite:own"}); err != nil {
		t.Fatal(err)
	}
	chat.Post(t, "hello bot", nil)
	eventually(t, "the messages in", func() bool { return len(in.Messages()) == 2 })
	if m := in.Messages(); m[0].Text != "said before the first poll" || m[1].Text != "hello bot" || m[1].MessageID == "" || m[0].MessageID == m[1].MessageID {
		t.Fatalf("user messages %+v", m)
	}
	data := []byte("a person's file")
	chat.Post(t, "", &SeenFile{Name: "notes.txt", Data: data})
	eventually(t, "the file in", func() bool { return len(in.Messages()) == 3 })
	if fs := in.Messages()[2].Files; len(fs) != 1 || !bytes.Equal(s.Files.Bytes(fs[0].FileRef), data) {
		t.Fatalf("file message %+v", in.Messages()[2])
	}
	// Restarted from its saved position: nothing again; then a new message, once.
	stop()
	stop = startPoll(t, poller, feed)
	chat.Post(t, "after restart", nil)
	eventually(t, "the new message in", func() bool { return len(in.Messages()) == 4 })
	// Read again from the first position (a handover, a lost save): the same messages, not new ones.
	stop()
	feed.SetCursor(feed.FirstCursor())
	stop = startPoll(t, poller, feed)
	want := 4
	if s.ForgetsConfirmed {
		chat.Post(t, "after going back", nil)
		want = 5
		eventually(t, "the next message in", func() bool { return len(in.Messages()) == want })
	} else {
		eventually(t, "the redelivered messages seen", func() bool { return in.Redelivered() >= 3 })
	}
	if got := in.Messages(); len(got) != want {
		t.Fatalf("after going back to the first position the inbox has %d messages, want %d", len(got), want)
	}
	stop()
}

// sharedKey: the chats of one account that share a poll key are read by one loop, each message
// into its own channel's inbox.
func sharedKey(t *testing.T, s Setup) {
	poller, ok := s.Adapter.(adapter.Poller)
	if !ok {
		t.Skip("the adapter takes user messages by a route, not by polling")
	}
	var chats [2]Chat
	var chans []adapter.Channel
	for i := range chats {
		chats[i] = s.NewChat(t, adapter.StreamingNone, adapter.ActivityNone)
		if chats[i].Post == nil {
			t.Skip("the setup cannot post as a person")
		}
		chans = append(chans, bind(s, chats[i]))
	}
	if poller.PollKey(chans[0]) != poller.PollKey(chans[1]) {
		t.Skip("each chat is polled on its own (its own poll key)")
	}
	feed := NewFeed(s.Files, chans...)
	stop := startPoll(t, poller, feed)
	defer stop()
	chats[1].Post(t, "in the second chat", nil)
	chats[0].Post(t, "in the first chat", nil)
	for i, want := range []string{"in the first chat", "in the second chat"} {
		in := feed.InboxOf(chans[i].ID)
		eventually(t, "the message in its chat's inbox", func() bool { return len(in.Messages()) >= 1 })
		if m := in.Messages(); len(m) != 1 || m[0].Text != want {
			t.Fatalf("chat %d received %+v, want only %q", i, m, want)
		}
	}
}

var channels atomic.Int64

// bind is the channel record of a chat as the registry holds it once bound: a fresh id, the
// adapter and config, opened now.
func bind(s Setup, chat Chat) adapter.Channel {
	ch := chat.Channel
	ch.ID = fmt.Sprintf("suite_%d", channels.Add(1))
	ch.Target = adapter.Binding{Adapter: s.Adapter.Name(), Config: chat.Config}
	ch.OpenedAt = time.Now().UnixMilli()
	return ch
}

func startPoll(t *testing.T, p adapter.Poller, feed *Feed) func() {
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- p.Poll(ctx, feed) }()
	var once sync.Once
	stop := func() {
		once.Do(func() {
			cancel()
			select {
			case err := <-done:
				if err != nil && !errors.Is(err, context.Canceled) && ctx.Err() == nil {
					t.Errorf("Poll: %v", err)
				}
			case <-time.After(10 * time.Second):
				t.Error("Poll did not end within 10s of its context")
			}
		})
	}
	t.Cleanup(stop)
	return stop
}

// Files is an in-memory Transfer Plane (adapter.FileSource) for the suite.
type Files struct {
	mu    sync.Mutex
	files map[string]storedFile
	n     int
}

type storedFile struct {
	meta adapter.StoredFile
	data []byte
}

// NewFiles returns an empty file store.
func NewFiles() *Files { return &Files{files: map[string]storedFile{}} }

// Add stores a file and returns its meta.
func (f *Files) Add(name, mime, typ string, data []byte) adapter.StoredFile {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.n++
	ref := fmt.Sprintf("file_%032x", f.n)
	m := adapter.StoredFile{FileRef: ref, Type: typ, Filename: name, MimeType: mime, ByteSize: int64(len(data))}
	f.files[ref] = storedFile{meta: m, data: append([]byte(nil), data...)}
	return m
}

// Open implements adapter.FileSource.
func (f *Files) Open(_ context.Context, ref string) (adapter.StoredFile, io.ReadCloser, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	sf, ok := f.files[ref]
	if !ok {
		return adapter.StoredFile{}, nil, profile.Errorf(profile.CodeFileNotFound, "%s", ref)
	}
	return sf.meta, io.NopCloser(bytes.NewReader(sf.data)), nil
}

// Bytes returns a stored file's bytes (nil when unknown).
func (f *Files) Bytes(ref string) []byte {
	f.mu.Lock()
	defer f.mu.Unlock()
	return f.files[ref].data
}

// Feed is an in-memory adapter.Feed: the channels of one poll key, an Inbox each, and a cursor
// that remembers the first position saved.
type Feed struct {
	chans   []adapter.Channel
	inboxes map[string]*Inbox
	files   *Files

	mu       sync.Mutex
	cursor   string
	first    string
	bots     []adapter.Bot
	arrivals []adapter.Arrival
	refused  map[adapter.Refusal]int
}

// NewFeed returns a feed of chans with empty inboxes storing files in files.
func NewFeed(files *Files, chans ...adapter.Channel) *Feed {
	f := &Feed{chans: chans, inboxes: map[string]*Inbox{}, files: files, refused: map[adapter.Refusal]int{}}
	for _, ch := range chans {
		f.inboxes[ch.ID] = NewInbox(files)
	}
	return f
}

func (f *Feed) Channels() []adapter.Channel { return f.chans }

func (f *Feed) Inbox(id string) adapter.Inbox {
	f.mu.Lock()
	defer f.mu.Unlock()
	return f.inboxes[id]
}

// InboxOf is the Inbox of one of the feed's channels (a bot's: of its conversation's channel,
// adapter.Conversation.ChannelID), nil before it has one.
func (f *Feed) InboxOf(id string) *Inbox {
	f.mu.Lock()
	defer f.mu.Unlock()
	return f.inboxes[id]
}

// AddBot makes the feed serve b too (before the Poll starts).
func (f *Feed) AddBot(b adapter.Bot) {
	f.mu.Lock()
	f.bots = append(f.bots, b)
	f.mu.Unlock()
}

func (f *Feed) Bots() []adapter.Bot {
	f.mu.Lock()
	defer f.mu.Unlock()
	return append([]adapter.Bot(nil), f.bots...)
}

// Admit applies the bot's policy (adapter.Policy.Decide) as the node does, without pairing
// codes or rate limits, and keeps what arrived: an admitted conversation's messages go to the
// inbox of its channel (InboxOf its ChannelID).
func (f *Feed) Admit(_ context.Context, b adapter.Bot, in adapter.Arrival) (adapter.Admission, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.arrivals = append(f.arrivals, in)
	if d := b.Conversations.Decide(in); d.Refused != "" {
		f.refused[d.Refused]++
		return adapter.Admission{Refused: d.Refused}, nil
	}
	id := in.Conversation.ChannelID(b.ID)
	inbox := f.inboxes[id]
	if inbox == nil {
		inbox = NewInbox(f.files)
		f.inboxes[id] = inbox
	}
	conv := in.Conversation
	return adapter.Admission{Channel: adapter.Channel{ID: id, Bot: b.ID, Conversation: &conv, Target: b.Target}, Inbox: inbox}, nil
}

// Arrivals are what reached the feed's bots, admitted or not, in order.
func (f *Feed) Arrivals() []adapter.Arrival {
	f.mu.Lock()
	defer f.mu.Unlock()
	return append([]adapter.Arrival(nil), f.arrivals...)
}

// Refused counts the arrivals refused for a reason.
func (f *Feed) Refused(why adapter.Refusal) int {
	f.mu.Lock()
	defer f.mu.Unlock()
	return f.refused[why]
}

func (f *Feed) Cursor(context.Context) (string, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	return f.cursor, nil
}

func (f *Feed) SaveCursor(_ context.Context, c string) error {
	f.mu.Lock()
	defer f.mu.Unlock()
	if f.first == "" {
		f.first = c
	}
	f.cursor = c
	return nil
}

// SetCursor moves the position (a lost save, another worker's older one).
func (f *Feed) SetCursor(c string) {
	f.mu.Lock()
	f.cursor = c
	f.mu.Unlock()
}

// FirstCursor is the first position saved.
func (f *Feed) FirstCursor() string {
	f.mu.Lock()
	defer f.mu.Unlock()
	return f.first
}

// Inbox is an in-memory adapter.Inbox: it keeps submitted messages and counts redeliveries (a
// submit of a message_id it has).
type Inbox struct {
	files *Files

	mu          sync.Mutex
	msgs        []profile.Message
	ids         map[string]bool
	redelivered int
}

// NewInbox returns an empty inbox storing files in files.
func NewInbox(files *Files) *Inbox { return &Inbox{files: files, ids: map[string]bool{}} }

func (in *Inbox) Seen(_ context.Context, id string) (bool, error) {
	in.mu.Lock()
	defer in.mu.Unlock()
	if in.ids[id] {
		in.redelivered++
	}
	return in.ids[id], nil
}

func (in *Inbox) PutFile(_ context.Context, f adapter.StoredFile, r io.Reader) (profile.File, error) {
	data, err := io.ReadAll(r)
	if err != nil {
		return profile.File{}, err
	}
	m := in.files.Add(f.Filename, f.MimeType, f.Type, data)
	return profile.File{Type: m.Type, FileRef: m.FileRef, Filename: m.Filename, MimeType: m.MimeType, ByteSize: m.ByteSize, DownloadURL: adapter.RefPath(m.FileRef)}, nil
}

func (in *Inbox) Submit(_ context.Context, m profile.Message) (bool, error) {
	raw, err := json.Marshal(m)
	if err != nil {
		return false, err
	}
	if _, err := profile.Default().DecodeMessage(raw, profile.ToAgent); err != nil {
		return false, err
	}
	in.mu.Lock()
	defer in.mu.Unlock()
	if in.ids[m.MessageID] {
		in.redelivered++
		return false, nil
	}
	in.ids[m.MessageID] = true
	in.msgs = append(in.msgs, m)
	return true, nil
}

// Discard forgets a stored file.
func (in *Inbox) Discard(_ context.Context, ref string) error {
	in.files.mu.Lock()
	delete(in.files.files, ref)
	in.files.mu.Unlock()
	return nil
}

// Messages returns the submitted messages in order.
func (in *Inbox) Messages() []profile.Message {
	in.mu.Lock()
	defer in.mu.Unlock()
	return append([]profile.Message(nil), in.msgs...)
}

// Redelivered counts messages read again.
func (in *Inbox) Redelivered() int {
	in.mu.Lock()
	defer in.mu.Unlock()
	return in.redelivered
}
