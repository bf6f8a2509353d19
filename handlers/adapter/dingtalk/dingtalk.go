// Package dingtalk is the `dingtalk` target adapter (edge-api §7.2.6): a channel bound to one
// conversation of an enterprise internal app's robot on the DingTalk open platform, a group
// (conversation_id, its openConversationId) or one person (user_id, their staff id).
//
// DingTalk's Go SDKs (github.com/open-dingtalk/dingtalk-stream-sdk-go,
// github.com/alibabacloud-go/dingtalk) are not served by the module proxy this project builds
// from, so the adapter makes DingTalk's documented HTTP calls itself with the kit's HTTP client,
// and speaks the Stream mode protocol over github.com/coder/websocket.
//
// Out: every message of ximd's is an AI card (the template card_template_id, parameters
// flowStatus and msgContent), addressed by an outTrackId derived from the message's idempotency
// key. With streaming "card" the first displayed delta creates and delivers the card
// (card/instances/createAndDeliver, callbackType STREAM, flowStatus "1", then "2" INPUTING), later
// deltas are card/streaming calls with the whole text (isFull) and a new guid each, and the final
// is one more streaming call with isFinalize and card/instances with flowStatus "3" FINISHED and
// the final text. A direct final, and streaming "none", is a card created FINISHED. Card updates
// of an app share a budget (card_updates_per_second); DingTalk's QPS refusals (403
// Forbidden.AccessDenied.QpsLimitForApi / …QpsLimitForAppkeyAndApi) pause the app's updates for a
// second and are a rate limit, never an error shown to the person. A text longer than
// MaxTextLength is split between Markdown blocks into consecutive cards (DingTalk shows longer
// cards blank). Files go out first: uploaded (oapi media/upload), then sampleImageMsg or
// sampleFile through the robot's group or one-to-one send.
//
// In doubt (edge-api §7.2): every send first updates the card its outTrackId names; an update of
// an existing card succeeds, so a card a crash left shown (INPUTING, or FINISHED) is brought to
// what the send carries, and only a card DingTalk does not know is created. The in-doubt rule is
// therefore "dedupe": no card twice, none left INPUTING, never delivery_outcome_unknown. A file
// sent before a crash that lost its card's outcome may be sent again (robot sends take no key).
//
// In: Stream mode (gateway/connections/open with the app's credentials, one WebSocket per app
// across all workers: a poll loop keyed by the app), each frame acknowledged once what it
// carries is durable; ping echoed, disconnect answered by a new connection. A robot message
// becomes a user message of the channel of its conversation (message_id from msgId, so a
// redelivery with a new messageId is a duplicate); files by downloadCode
// (robot/messageFiles/download).
//
// Bots (edge-api §4.1): a bot's config is a channel's without conversation_id and user_id;
// conversationType "1" is direct, keyed by the sender's staff id; "2" is group, keyed h_… of
// its conversationId. DingTalk passes a group's messages to the robot only when they @-mention
// it (isInAtList), with the mention already removed.
package dingtalk

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"encoding/json"
	"errors"
	"path"
	"strings"
	"time"

	"github.com/ximd/ximd/handlers/adapter"
	"github.com/ximd/ximd/handlers/adapter/markdown"
	"github.com/ximd/ximd/profile"
)

// Name is the adapter's name in a channel's target binding.
const Name = "dingtalk"

// Limits (docs/adapters/dingtalk.md).
const (
	// MaxTextLength is the most characters one card shows (longer cards show blank).
	MaxTextLength = 3000
	// MinEditInterval spaces the streaming updates of one card.
	MinEditInterval = 300 * time.Millisecond
	// recentSize bounds what the adapter remembers of handled messages and rolled-over cards.
	recentSize = 10000
)

// flowStatus values of the AI card.
const (
	flowProcessing = "1"
	flowInputing   = "2"
	flowFinished   = "3"
	flowFailed     = "5"
)

// Options configure the adapter.
type Options struct {
	// Common: the logger, the HTTP client (default: keep-alive, a 30 s timeout) and the file
	// source of a final's files (required for files out).
	adapter.Common
}

// Adapter binds channels to DingTalk conversations. One client per app (API host and
// credentials) is shared by every channel and bot of that app.
type Adapter struct {
	adapter.Platform[*config, publicConfig, *client]
	handled *adapter.Recent // what a bot handled: a message DingTalk pushes again is not admitted twice
	shown   *adapter.Recent // the rolled-over cards of streamed previews: full parts shown, last cards opened
}

var (
	_ adapter.Opener = (*Adapter)(nil)
	_ adapter.Prober = (*Adapter)(nil)
)

// New returns the adapter.
func New(opts Options) *Adapter {
	a := &Adapter{handled: adapter.NewRecent(recentSize), shown: adapter.NewRecent(recentSize)}
	a.Init(Name, opts.Common, 30*time.Second, parseConfig, (*config).public, a.open)
	return a
}

func (a *Adapter) client(c *config) *client {
	return a.Accounts.Get(c.appKey(), func() *client { return newClient(c, a.HTTPClient) })
}

func (a *Adapter) open(c *config) (adapter.Target, error) {
	return &Target{a: a, cfg: c, cli: a.client(c)}, nil
}

// Probe implements adapter.Prober: the app's credentials give an access token (asked afresh).
func (a *Adapter) Probe(ctx context.Context, ch adapter.Channel) error {
	c, err := parseConfig(ch.Target.Config)
	if err != nil {
		return err
	}
	return probe(ctx, a.client(c))
}

func probe(ctx context.Context, cli *client) error {
	if _, err := cli.accessToken(ctx, true); err != nil {
		var ae *apiError
		if errors.As(err, &ae) && ae.status < 500 {
			return profile.Errorf(profile.CodeTargetConfigInvalid, "dingtalk refused the app's credentials: %s", ae.code)
		}
		return mapError(err, "accessToken")
	}
	return nil
}

// Target is one channel's binding to a DingTalk conversation.
type Target struct {
	a   *Adapter
	cfg *config
	cli *client
}

var (
	_ adapter.Target = (*Target)(nil)
	_ adapter.Editor = (*Target)(nil)
)

// Capabilities implements adapter.Target.
func (t *Target) Capabilities() adapter.Capabilities {
	s := adapter.StreamingNone
	if t.cfg.streaming == StreamingCard {
		s = adapter.StreamingEdit
	}
	return adapter.Capabilities{Streaming: s, Activity: adapter.ActivityNone, Reply: adapter.ReplyNone,
		InDoubt: adapter.InDoubtDedupe, MaxTextLength: MaxTextLength,
		MinEditInterval: max(MinEditInterval, t.cli.every), FirstPreviewWords: t.cfg.firstWords}
}

// OutTrackID is the outTrackId of part (0 the first) of the message with the idempotency key.
func OutTrackID(key string, part int) string {
	id := "xim_" + digest(key)
	if part > 0 {
		id += "_" + itoa(part+1)
	}
	return id
}

func itoa(n int) string {
	b, _ := json.Marshal(n)
	return string(b)
}

// CardText is a text as an AI card shows it: the agent's Markdown written again from the one
// parse (tables kept, raw HTML as text, links to http(s) only).
func CardText(text string) string {
	return markdown.Parse(text).Feishu(1 << 20)
}

// cardParts is a final's text as consecutive cards, each within MaxTextLength.
func cardParts(text string) []string {
	return markdown.Split(CardText(text), MaxTextLength, nil)
}

// Send implements adapter.Sender: a final's files, then its cards (each brought to FINISHED
// with its text, created when DingTalk does not know its outTrackId); a streamed message's
// first part is its card, created PROCESSING and set INPUTING with the text so far. The target
// message id is the first card's outTrackId.
func (t *Target) Send(ctx context.Context, m adapter.Message) (string, error) {
	if m.IdempotencyKey == "" {
		m.IdempotencyKey = "rand:" + guid()
	}
	id := OutTrackID(m.IdempotencyKey, 0)
	if !m.Final {
		if err := t.open(ctx, id, adapter.Truncate(CardText(m.Text), MaxTextLength)); err != nil {
			return "", err
		}
		return id, nil
	}
	if err := t.sendFiles(ctx, m.Files); err != nil {
		return "", err
	}
	if err := t.finish(ctx, m.IdempotencyKey, cardParts(m.Text), 0); err != nil {
		return "", err
	}
	return id, nil
}

// open shows a streamed message's card id with text: created PROCESSING and set INPUTING, or,
// when DingTalk knows it already (a restart), set INPUTING with the text.
func (t *Target) open(ctx context.Context, id, text string) error {
	if ok, err := t.update(ctx, id, map[string]string{"flowStatus": flowInputing, "msgContent": text}); err != nil || ok {
		return err
	}
	if err := t.create(ctx, id, flowProcessing, text); err != nil {
		return err
	}
	_, err := t.update(ctx, id, map[string]string{"flowStatus": flowInputing})
	return err
}

// Edit implements adapter.Editor: a delta is a streaming update of the card with the whole text
// (past a card's limit it rolls over: preview); the final is one more streaming update with
// isFinalize, then its cards FINISHED. A final refused for good leaves the card FAILED, not
// INPUTING.
func (t *Target) Edit(ctx context.Context, id string, m adapter.Message) error {
	if !m.Final {
		return t.preview(ctx, id, m)
	}
	err := t.final(ctx, id, m)
	if _, wait := adapter.RetryAfterOf(err); err != nil && !wait && profile.AsError(err).Code == profile.CodeTargetDeliveryFailed {
		if _, ferr := t.update(ctx, id, map[string]string{"flowStatus": flowFailed}); ferr != nil {
			t.a.Logger.Warn("dingtalk_card_not_failed", "out_track_id", id, "err", ferr)
		}
	}
	return err
}

// final brings a streamed card to its final: the streaming call with isFinalize, the final's
// files, its cards FINISHED.
func (t *Target) final(ctx context.Context, id string, m adapter.Message) error {
	parts := cardParts(m.Text)
	if err := t.stream(ctx, id, parts[0], true); err != nil {
		if _, wait := adapter.RetryAfterOf(err); wait || profile.AsError(err).Code != profile.CodeTargetDeliveryFailed {
			return err
		}
		// A card that takes no more streaming (finished before a crash) is settled below.
	}
	if err := t.sendFiles(ctx, m.Files); err != nil {
		return err
	}
	if err := t.finished(ctx, id, parts[0]); err != nil {
		return err
	}
	if m.IdempotencyKey == "" || len(parts) == 1 {
		return nil
	}
	return t.finish(ctx, m.IdempotencyKey, parts, 1)
}

// preview shows a streamed text so far. Within one card it is one streaming update of the
// first; past it the preview rolls over into cards as the final will split it: each full part's
// card FINISHED with its text (once for each text), the last part streamed into its card, which
// is opened the first time. So only the card being written shows INPUTING.
func (t *Target) preview(ctx context.Context, id string, m adapter.Message) error {
	text := CardText(m.Text)
	parts := markdown.Split(text, MaxTextLength, nil)
	if len(parts) == 1 || m.IdempotencyKey == "" {
		return t.stream(ctx, id, adapter.Truncate(text, MaxTextLength), false)
	}
	last := len(parts) - 1
	for i, p := range parts[:last] {
		card := OutTrackID(m.IdempotencyKey, i)
		if shown := card + "\x00" + digest(p); !t.a.shown.Has(shown) {
			if err := t.finished(ctx, card, p); err != nil {
				return err
			}
			t.a.shown.Add(shown)
		}
	}
	card := OutTrackID(m.IdempotencyKey, last)
	if opened := card + "\x00open"; !t.a.shown.Has(opened) {
		if err := t.open(ctx, card, parts[last]); err != nil {
			return err
		}
		t.a.shown.Add(opened)
		return nil
	}
	return t.stream(ctx, card, parts[last], false)
}

// finish brings the cards of parts (from part from on) to FINISHED with their text, creating
// those DingTalk does not know.
func (t *Target) finish(ctx context.Context, key string, parts []string, from int) error {
	for i := from; i < len(parts); i++ {
		if err := t.finished(ctx, OutTrackID(key, i), parts[i]); err != nil {
			return err
		}
	}
	return nil
}

// finished brings the card id to FINISHED with text, created so when DingTalk does not know it.
func (t *Target) finished(ctx context.Context, id, text string) error {
	ok, err := t.update(ctx, id, map[string]string{"flowStatus": flowFinished, "msgContent": text})
	if err != nil || ok {
		return err
	}
	return t.create(ctx, id, flowFinished, text)
}

// create creates and delivers a card to the channel's conversation
// (POST /v1.0/card/instances/createAndDeliver).
func (t *Target) create(ctx context.Context, id, status, text string) error {
	c := t.cfg
	body := map[string]any{
		"cardTemplateId": c.template,
		"outTrackId":     id,
		"cardData":       map[string]any{"cardParamMap": map[string]string{"flowStatus": status, "msgContent": text}},
		"callbackType":   "STREAM",
		"openSpaceId":    c.openSpaceID(),
		"userIdType":     1,
	}
	if c.group() {
		body["imGroupOpenSpaceModel"] = map[string]any{"supportForward": true}
		body["imGroupOpenDeliverModel"] = map[string]any{"robotCode": c.robotCode}
	} else {
		body["imRobotOpenSpaceModel"] = map[string]any{"supportForward": true}
		body["imRobotOpenDeliverModel"] = map[string]any{"spaceType": "IM_ROBOT", "robotCode": c.robotCode}
	}
	var out struct {
		Success bool `json:"success"`
		Result  struct {
			DeliverResults []struct {
				Success  bool   `json:"success"`
				ErrorMsg string `json:"errorMsg"`
			} `json:"deliverResults"`
		} `json:"result"`
	}
	if err := t.cli.call(ctx, "POST", "/v1.0/card/instances/createAndDeliver", body, &out); err != nil {
		return err
	}
	for _, d := range out.Result.DeliverResults {
		if !d.Success {
			return profile.Errorf(profile.CodeTargetDeliveryFailed, "dingtalk card delivery: %s", d.ErrorMsg)
		}
	}
	if !out.Success {
		return profile.Errorf(profile.CodeTargetDeliveryFailed, "dingtalk card: not created")
	}
	return nil
}

// update sets parameters of the card id (PUT /v1.0/card/instances, updateCardDataByKey):
// ok is false when DingTalk does not know the card (an update of an unknown outTrackId fails).
func (t *Target) update(ctx context.Context, id string, params map[string]string) (bool, error) {
	body := map[string]any{"outTrackId": id, "cardData": map[string]any{"cardParamMap": params},
		"cardUpdateOptions": map[string]any{"updateCardDataByKey": true}}
	var out struct {
		Success bool `json:"success"`
		Result  bool `json:"result"`
	}
	err := t.cli.call(ctx, "PUT", "/v1.0/card/instances", body, &out)
	if pe := profile.AsError(err); err != nil && pe.Code == profile.CodeTargetDeliveryFailed {
		return false, nil // an unknown card
	} else if err != nil {
		return false, err
	}
	return out.Success && out.Result, nil
}

// stream is one streaming update of the card id's msgContent with the whole text
// (PUT /v1.0/card/streaming, a new guid each call), within the app's update budget.
func (t *Target) stream(ctx context.Context, id, text string, final bool) error {
	for {
		err := t.cli.budget()
		wait, limited := adapter.RetryAfterOf(err)
		if !limited || !final || wait > QPSPause {
			if err != nil {
				return err
			}
			break
		}
		// The final waits for its slot: it is never coalesced away.
		select {
		case <-ctx.Done():
			return mapError(ctx.Err(), "card/streaming")
		case <-time.After(wait):
		}
	}
	body := map[string]any{"outTrackId": id, "guid": guid(), "key": "msgContent", "content": text,
		"isFull": true, "isFinalize": final, "isError": false}
	err := t.cli.call(ctx, "PUT", "/v1.0/card/streaming", body, nil)
	if _, wait := adapter.RetryAfterOf(err); wait {
		t.cli.pause()
	}
	return err
}

// sendFiles sends each file as its own robot message: uploaded, then sampleImageMsg (images)
// or sampleFile.
func (t *Target) sendFiles(ctx context.Context, files []adapter.File) error {
	for _, f := range files {
		if t.a.Files == nil {
			return profile.Errorf(profile.CodeTargetDeliveryFailed, "dingtalk: no file source for files out")
		}
		sf, r, err := t.a.Files.Open(ctx, f.FileRef)
		if err != nil {
			return err
		}
		name := f.Filename
		if name == "" {
			name = sf.Filename
		}
		image := f.Type == "image" || strings.HasPrefix(f.MimeType, "image/")
		kind := "file"
		if image {
			kind = "image"
		}
		media, err := t.cli.upload(ctx, kind, name, r)
		r.Close()
		if err != nil {
			return err
		}
		key, param := "sampleFile", map[string]string{"mediaId": media, "fileName": name, "fileType": strings.TrimPrefix(path.Ext(name), ".")}
		if image {
			key, param = "sampleImageMsg", map[string]string{"photoURL": media}
		}
		if err := t.robotSend(ctx, key, param); err != nil {
			return err
		}
	}
	return nil
}

// robotSend sends one robot message (msgParam a JSON string) to the channel's conversation.
func (t *Target) robotSend(ctx context.Context, key string, param any) error {
	p, err := json.Marshal(param)
	if err != nil {
		return err
	}
	c := t.cfg
	if c.group() {
		body := map[string]any{"robotCode": c.robotCode, "openConversationId": c.conversationID, "msgKey": key, "msgParam": string(p)}
		return t.cli.call(ctx, "POST", "/v1.0/robot/groupMessages/send", body, nil)
	}
	body := map[string]any{"robotCode": c.robotCode, "userIds": []string{c.userID}, "msgKey": key, "msgParam": string(p)}
	var out struct {
		Invalid []string `json:"invalidStaffIdList"`
		Flow    []string `json:"flowControlledStaffIdList"`
	}
	if err := t.cli.call(ctx, "POST", "/v1.0/robot/oToMessages/batchSend", body, &out); err != nil {
		return err
	}
	switch {
	case len(out.Flow) > 0:
		return rateLimited(QPSPause, "dingtalk robot send: flow controlled")
	case len(out.Invalid) > 0:
		return profile.Errorf(profile.CodeTargetDeliveryFailed, "dingtalk robot send: the user is not a staff id of the app's organisation")
	}
	return nil
}

func guid() string {
	var b [16]byte
	_, _ = rand.Read(b[:])
	return hex.EncodeToString(b[:])
}
