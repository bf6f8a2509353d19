package adapter

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"sort"
	"strconv"
	"strings"
	"time"
	"unicode/utf8"
)

// Streaming is how a target shows a streamed answer (edge-api §7: the capability
// "streaming").
type Streaming string

// Streaming values.
const (
	// StreamingEdit: the target message is created on the first displayed
	// delta and then edited in place; the Target implements [Editor].
	StreamingEdit Streaming = "edit"
	// StreamingNone: deltas are buffered and the message is sent once, at
	// the final; the Target does not implement [Editor].
	StreamingNone Streaming = "none"
	// StreamingDraft: deltas are shown as a preview that is not a message (Telegram's
	// sendMessageDraft, in private chats): nothing is created or edited before the final, which
	// is then sent like a direct final; the Target implements [Drafter].
	StreamingDraft Streaming = "draft"
)

// ActivityMode is how a target shows chat.activity (edge-api §7: the capability "activity").
type ActivityMode string

// ActivityMode values.
const (
	// ActivityStatus: thinking and tool (with the tool name) are shown as
	// such; the Target implements [ActivityShower].
	ActivityStatus ActivityMode = "status"
	// ActivityTyping: thinking and tool are both degraded to a typing
	// indicator (profile P-ACT-4); the Target implements [ActivityShower].
	ActivityTyping ActivityMode = "typing"
	// ActivityNone: nothing is shown; the Target does not implement
	// [ActivityShower].
	ActivityNone ActivityMode = "none"
)

// ReplyMode is whether a target shows replies (the capability "reply").
type ReplyMode string

// ReplyMode values.
const (
	// ReplyNative: a message with [Message.ReplyTo] is shown as a reply to that message.
	ReplyNative ReplyMode = "native"
	// ReplyNone: the target has no replies; ReplyTo is ignored (im.reply_message then sends a
	// plain message and says so: "reply": "degraded").
	ReplyNone ReplyMode = "none"
)

// Status is an activity status passed to [ActivityShower.ShowActivity]. The first
// three are the profile's (P-ACT-1); StatusTyping is a plain typing
// indicator for callers that have nothing more specific to show.
type Status string

// Status values.
const (
	StatusThinking Status = "thinking"
	StatusTool     Status = "tool"
	StatusIdle     Status = "idle"
	StatusTyping   Status = "typing"
)

// InDoubtRule is how a target settles a delivery whose outcome a crash left unknown (an intent
// recorded, no outcome), without showing a message twice (edge-api §7.2).
type InDoubtRule string

// InDoubtRule values.
const (
	// InDoubtDedupe: the target shows at most one message per idempotency key (Matrix txnId,
	// Feishu uuid, a webhook target configured "dedupe"): the send runs again, within
	// InDoubtWindow of the first attempt.
	InDoubtDedupe InDoubtRule = "dedupe"
	// InDoubtLookup: the target finds a message by its idempotency key ([Reconciler]): found,
	// the final is applied (or known shown); absent, it is sent.
	InDoubtLookup InDoubtRule = "lookup"
	// InDoubtEdit: only a message whose streamed part was displayed (its id recorded) is
	// settled, by editing in the final; a direct final stays in doubt.
	InDoubtEdit InDoubtRule = "edit"
	// InDoubtUnknown: nothing can be settled: the final is answered delivery_outcome_unknown.
	InDoubtUnknown InDoubtRule = "unknown"
)

// Capabilities of a bound target (edge-api §7.2), as data: they are reported in the channel's
// API representation and decide what the stages call. A target's type may implement more than a
// channel's configuration lets it use: the stages call [Editor] only with Streaming
// [StreamingEdit], [ActivityShower] only with an Activity other than [ActivityNone], and
// [Reconciler] only with InDoubt [InDoubtLookup] (see [EditorOf], [ShowerOf], [ReconcilerOf]).
type Capabilities struct {
	// Streaming is [StreamingEdit], [StreamingDraft] or [StreamingNone].
	Streaming Streaming `json:"streaming"`
	// Activity is [ActivityStatus], [ActivityTyping] or [ActivityNone].
	Activity ActivityMode `json:"activity"`
	// Reply is [ReplyNative] or [ReplyNone].
	Reply ReplyMode `json:"reply"`
	// InDoubt is the rule that settles an interrupted delivery: [InDoubtDedupe],
	// [InDoubtLookup], [InDoubtEdit] or [InDoubtUnknown] ("" is read as InDoubtEdit with
	// Streaming edit, else InDoubtUnknown).
	InDoubt InDoubtRule `json:"in_doubt"`
	// InDoubtWindow bounds InDoubtDedupe: how long the platform remembers an idempotency key
	// (0: for as long as the message exists). Past it a resend could show a second copy, so
	// the delivery stays in doubt.
	InDoubtWindow time.Duration `json:"-"`
	// MaxTextLength is the most characters one platform message holds (0: no limit the
	// adapter knows of); the adapter splits a longer final (edge-api §7.2).
	MaxTextLength int `json:"max_text_length,omitempty"`
	// MinEditInterval is the least time between two edits of one message the platform
	// tolerates; the display loop waits at least this long, whatever XIM_EDIT_INTERVAL says.
	MinEditInterval time.Duration `json:"-"`
	// FirstPreviewWords: a streamed message is first shown once its text has this many words
	// (or four times as many characters, for scripts without spaces), so a push notification
	// does not show a fragment; 0 shows the first delta at once.
	FirstPreviewWords int `json:"first_preview_words,omitempty"`
	// ActivityRenewal is how often a shown status is shown again because the platform's
	// indicator expires by itself (Telegram's typing after 5 s); 0: it stays until cleared.
	ActivityRenewal time.Duration `json:"-"`
	// PreviewRenewal: a draft preview ([Drafter]) expires by itself (Telegram's after 30 s), so
	// while its message waits for more deltas it is shown again after this long without a
	// change; 0: it stays.
	PreviewRenewal time.Duration `json:"-"`
}

// PreviewReady reports whether a streamed text may be shown for the first time
// (FirstPreviewWords).
func (c Capabilities) PreviewReady(text string) bool {
	n := c.FirstPreviewWords
	return n <= 0 || len(strings.Fields(text)) >= n || utf8.RuneCountInString(text) >= 4*n
}

// InDoubtRule is c.InDoubt with its default applied.
func (c Capabilities) InDoubtRule() InDoubtRule {
	switch {
	case c.InDoubt != "":
		return c.InDoubt
	case c.Streaming == StreamingEdit:
		return InDoubtEdit
	default:
		return InDoubtUnknown
	}
}

// File is one file of a message as the target receives it.
type File struct {
	// Type is the profile's file type (e.g. "image", "file").
	Type string
	// FileRef is ximd's file reference.
	FileRef string
	// Filename is the display name.
	Filename string
	// MimeType is the media type of the bytes.
	MimeType string
	// ByteSize is the size of the bytes.
	ByteSize int64
	// URL is an absolute signed link to /files/refs/{file_ref} under
	// XIM_PUBLIC_URL, from which the target fetches the bytes.
	URL string
}

// Message is the whole content of one target message: on create, on every
// edit, and at the final. Text is always the whole text so far, never an
// increment.
type Message struct {
	// Text is the whole text so far.
	Text string
	// Files are the message's files; only a final carries them
	// (profile P-DLT-5).
	Files []File
	// Final is true for the final content of the message.
	Final bool
	// IdempotencyKey is "<connector_channel_id>:<message_id>" (a tool's message:
	// "<connector_channel_id>:tool:<invocation_id>"); set on create ([Sender.Send]), so a target
	// that has already created the message may answer with the same target message id.
	IdempotencyKey string
	// ReplyTo is the target message id this message replies to ("": none); only on create, and
	// only read by targets whose Capabilities().Reply is [ReplyNative].
	ReplyTo string
	// System marks a message of ximd's own, not the agent's (a bot's pairing answer): a target
	// that can tell its users so does (the webhook's "system": true).
	System bool
}

// Activity is a temporary status to show (profile §8).
type Activity struct {
	// Status is one of [StatusThinking], [StatusTool], [StatusTyping],
	// [StatusIdle]. StatusIdle clears a shown status.
	Status Status
	// ToolName names the tool when Status is [StatusTool]; ignored otherwise.
	ToolName string
}

// Sender is what every target can do: create a message, either final or, with Streaming
// [StreamingEdit], the first streamed part. It returns the target's id of the created message.
type Sender interface {
	Send(ctx context.Context, m Message) (targetMessageID string, err error)
}

// Editor replaces the whole text (and files) of a message the target created with Send. Called
// only with Streaming [StreamingEdit] ([EditorOf]).
type Editor interface {
	Edit(ctx context.Context, targetMessageID string, m Message) error
}

// Drafter shows the whole text so far of a streamed message as a preview that is not a message
// (Telegram's sendMessageDraft): nothing is created, so there is no id to record and nothing to
// settle after a crash; the final is sent with [Sender.Send]. key is the message's idempotency
// key, the same on every call of one message. Called only with Streaming [StreamingDraft]
// ([DrafterOf]).
type Drafter interface {
	Draft(ctx context.Context, key, text string) error
}

// ActivityShower shows a temporary status, degraded as the Activity capability says. A failure
// to show a status must never affect messages (profile P-ACT-6). Called only with an Activity
// other than [ActivityNone] ([ShowerOf]).
type ActivityShower interface {
	ShowActivity(ctx context.Context, a Activity) error
}

// Reconciler tells whether a message with this idempotency key ([Message.IdempotencyKey])
// exists and what it shows. A caller that does not know the outcome of an earlier Send or final
// Edit (a crash between the call and recording its result) asks it instead of giving up: found
// with Final and the final's text means the final is shown and must not be sent again; found
// otherwise means the message exists under its ID (a streamed part, or a Send whose outcome was
// lost) and the final can be applied with [Editor.Edit]; !found means nothing was shown and Send
// may run. It reads the target's own state, so its answer holds across ximd restarts for as
// long as the target keeps the message. Called only with InDoubt [InDoubtLookup]
// ([ReconcilerOf]).
type Reconciler interface {
	Lookup(ctx context.Context, idempotencyKey string) (shown Shown, found bool, err error)
}

// Shown is what a target shows of a message ([Reconciler]).
type Shown struct {
	// ID is the target's message id.
	ID string
	// Final reports whether the final content was applied.
	Final bool
	// Text is the message's text as shown ("" when the target does not tell).
	Text string
	// TextSHA256 is the hex SHA-256 of the whole final text, for a target that shows a long
	// text in parts and so cannot give it back whole ("": Text is the whole text).
	TextSHA256 string
}

// ShowsText reports whether s shows text: the same text, or the same digest.
func (s Shown) ShowsText(text string) bool {
	if s.TextSHA256 != "" {
		sum := sha256.Sum256([]byte(text))
		return s.TextSHA256 == hex.EncodeToString(sum[:])
	}
	return s.Text == text
}

// Target is one bound target instance: one channel's binding. It is safe for concurrent use.
type Target interface {
	Sender
	Capabilities() Capabilities
}

// EditorOf returns t's [Editor] when its capabilities stream by editing.
func EditorOf(t Target) (Editor, bool) {
	e, ok := t.(Editor)
	return e, ok && t.Capabilities().Streaming == StreamingEdit
}

// DrafterOf returns t's [Drafter] when its capabilities stream by drafts.
func DrafterOf(t Target) (Drafter, bool) {
	d, ok := t.(Drafter)
	return d, ok && t.Capabilities().Streaming == StreamingDraft
}

// ShowerOf returns t's [ActivityShower] when its capabilities show activity.
func ShowerOf(t Target) (ActivityShower, bool) {
	s, ok := t.(ActivityShower)
	a := t.Capabilities().Activity
	return s, ok && a != ActivityNone && a != ""
}

// ReconcilerOf returns t's [Reconciler] when its capabilities settle doubt by lookup.
func ReconcilerOf(t Target) (Reconciler, bool) {
	r, ok := t.(Reconciler)
	return r, ok && t.Capabilities().InDoubtRule() == InDoubtLookup
}

// Prober is optional: an adapter that checks a channel's binding against the platform (a call
// or a few) before the channel is bound to it, and tells the platform what it must know of the
// channel (Telegram's setWebhook with the channel's route). A config that cannot work (bad token,
// unknown room or chat, encrypted room, unreachable server) is a *profile.Error
// target_config_invalid naming why, and the PUT is answered 422 (edge-api §7.2). ch carries the
// channel's id and its binding.
type Prober interface {
	Probe(ctx context.Context, ch Channel) error
}

// FileSource gives adapters the bytes of a stored file (the Transfer Plane), for platforms that
// take uploads (Matrix media, Telegram multipart) rather than fetching a link.
type FileSource interface {
	Open(ctx context.Context, fileRef string) (StoredFile, io.ReadCloser, error)
}

// Opener builds targets from a channel's `target.config` JSON
// (edge-api §4).
type Opener interface {
	// Name is the value of `target.adapter` that selects this adapter.
	Name() string
	// Open validates config and returns a Target. A bad config is a
	// *profile.Error with code invalid_descriptor naming the field.
	Open(config json.RawMessage) (Target, error)
	// Public returns config with every secret removed, for the channels
	// API; it never echoes a secret. A bad config is an error as in Open.
	Public(config json.RawMessage) (json.RawMessage, error)
}

// Registry holds adapters by name. It is immutable after NewRegistry and
// safe for concurrent use.
type Registry struct {
	byName map[string]Opener
	names  []string
}

// NewRegistry returns a registry of the given adapters. It panics on a nil
// adapter, an empty name or two adapters of the same name: those are
// programming errors of the process's wiring, like a duplicate
// http.ServeMux pattern.
func NewRegistry(adapters ...Opener) *Registry {
	r := &Registry{byName: make(map[string]Opener, len(adapters))}
	for _, a := range adapters {
		if a == nil {
			panic("adapter: NewRegistry: nil adapter")
		}
		name := a.Name()
		if name == "" {
			panic("adapter: NewRegistry: adapter with empty name")
		}
		if _, dup := r.byName[name]; dup {
			panic(fmt.Sprintf("adapter: NewRegistry: duplicate adapter %q", name))
		}
		r.byName[name] = a
		r.names = append(r.names, name)
	}
	sort.Strings(r.names)
	return r
}

// Lookup returns the adapter called name.
func (r *Registry) Lookup(name string) (Opener, bool) {
	a, ok := r.byName[name]
	return a, ok
}

// Close closes every adapter that has a Close (its per-account clients, its own HTTP client),
// once nothing opens or calls targets any more (the node's workers and edge have stopped). It
// returns their errors joined.
func (r *Registry) Close() error {
	var errs []error
	for _, name := range r.names {
		if c, ok := r.byName[name].(interface{ Close() error }); ok {
			errs = append(errs, c.Close())
		}
	}
	return errors.Join(errs...)
}

// Names returns the names of all adapters, sorted. The slice is a copy.
func (r *Registry) Names() []string {
	return append([]string(nil), r.names...)
}

// RetryAfterError is a target call's failure that the platform asked to repeat no sooner than
// After (HTTP 429 or 503 with Retry-After, a platform's retry_after). It wraps the call's
// *profile.Error (target_rate_limited, target_unavailable). The delivery stage pauses that
// channel's lane for After: no call to the chat before then, and nothing else waits.
type RetryAfterError struct {
	After time.Duration
	Err   error
}

func (e *RetryAfterError) Error() string {
	return fmt.Sprintf("%v (retry after %s)", e.Err, e.After)
}

func (e *RetryAfterError) Unwrap() error { return e.Err }

// RetryAfterOf returns the wait err asks for, if it is (or wraps) a [RetryAfterError].
func RetryAfterOf(err error) (time.Duration, bool) {
	var ra *RetryAfterError
	if errors.As(err, &ra) && ra.After > 0 {
		return ra.After, true
	}
	return 0, false
}

// AmbiguousError is a target call's failure after which the platform may have applied the call
// all the same: a timeout, or a connection reset after the request was sent (edge-api §7.2). A
// failure before the request could reach the platform (refused, DNS) is certain and is not
// wrapped. It wraps the call's *profile.Error (target_unavailable). After an ambiguous Send, a
// target that can neither deduplicate nor look the message up is never sent the message again:
// its final is answered delivery_outcome_unknown.
type AmbiguousError struct{ Err error }

func (e *AmbiguousError) Error() string { return fmt.Sprintf("%v (outcome unknown)", e.Err) }

func (e *AmbiguousError) Unwrap() error { return e.Err }

// IsAmbiguous reports whether err is (or wraps) an [AmbiguousError].
func IsAmbiguous(err error) bool {
	var ae *AmbiguousError
	return errors.As(err, &ae)
}

// ResendSafe reports whether a Send that may have been applied can be made again without showing
// the message twice: the target deduplicates by idempotency key, or looks messages up.
func (c Capabilities) ResendSafe() bool {
	r := c.InDoubtRule()
	return r == InDoubtDedupe || r == InDoubtLookup
}

// MaxRetryAfter bounds a platform's retry-after: a longer one is taken as this long.
const MaxRetryAfter = time.Hour

// ParseRetryAfter reads an HTTP Retry-After value (delay-seconds or an HTTP-date, RFC 9110
// §10.2.3) relative to now; ok is false when v is empty or malformed. The result is capped at
// MaxRetryAfter.
func ParseRetryAfter(v string, now time.Time) (time.Duration, bool) {
	v = strings.TrimSpace(v)
	if v == "" {
		return 0, false
	}
	var d time.Duration
	if secs, err := strconv.ParseUint(v, 10, 32); err == nil {
		d = time.Duration(secs) * time.Second
	} else if at, err := http.ParseTime(v); err == nil {
		d = at.Sub(now)
	} else {
		return 0, false
	}
	return min(max(d, 0), MaxRetryAfter), true
}
