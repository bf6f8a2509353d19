package telegram

import (
	"bytes"
	"context"
	"crypto/sha256"
	"crypto/subtle"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"slices"
	"strconv"
	"time"

	"github.com/go-telegram/bot"
	"github.com/go-telegram/bot/models"

	"github.com/ximd/ximd/handlers/adapter"
	"github.com/ximd/ximd/profile"
)

var (
	_ adapter.Poller   = (*Adapter)(nil)
	_ adapter.Receiver = (*Adapter)(nil)
)

// MessageIDOf is the message_id of the user message of a Telegram message: the same chat and
// message always give the same message_id, whether it came by getUpdates or by the webhook, once
// or again.
func MessageIDOf(chatID int64, messageID int) string {
	sum := sha256.Sum256([]byte(strconv.FormatInt(chatID, 10) + ":" + strconv.Itoa(messageID)))
	return "tg_" + hex.EncodeToString(sum[:16])
}

// PollKey implements adapter.Poller: every channel of a bot that polls shares the bot's
// getUpdates loop (Telegram answers one getUpdates per bot at a time); "" with "inbound":
// "webhook".
func (a *Adapter) PollKey(ch adapter.Channel) string {
	return a.PollKeyOf(ch, func(c *config) bool { return c.inbound == InboundPolling }, (*config).botKey)
}

// Poll implements adapter.Poller: getUpdates long polls from the offset in the feed's cursor;
// each message of a person in one of the feed's chats becomes a user message of that chat's
// channel(s), its file copied into the Transfer Plane. The offset is saved after the batch
// before it is submitted, and Telegram forgets an update only when asked for the updates after
// it, so a restart reads at most the last batch again, which the message_id makes one message
// each.
func (a *Adapter) Poll(ctx context.Context, feed adapter.Feed) error {
	p, ok, err := a.StartPoll(feed)
	if !ok {
		return err
	}
	c := p.Account
	acc := a.account(c)
	cursor, err := feed.Cursor(ctx)
	if err != nil {
		return err
	}
	var offset int64
	if cursor != "" {
		if offset, err = strconv.ParseInt(cursor, 10, 64); err != nil {
			return fmt.Errorf("telegram: bad saved offset %q", cursor)
		}
	}
	routes := routesOf(p.Channels, c.botKey())
	for {
		updates, err := acc.getUpdates(ctx, offset, a.opts.PollTimeout)
		if err != nil {
			return err
		}
		next := offset
		for _, u := range updates {
			if u.Message != nil {
				if err := a.dispatch(ctx, acc, u.Message, routes, feed); err != nil {
					return err
				}
			}
			next = max(next, u.ID+1)
		}
		if next != offset {
			if err := feed.SaveCursor(ctx, strconv.FormatInt(next, 10)); err != nil {
				return err
			}
			offset = next
		}
	}
}

// routesOf maps the chats of a bot's channels to those channels.
func routesOf(chans []adapter.Channel, botKey string) map[int64][]adapter.Channel {
	routes := map[int64][]adapter.Channel{}
	for _, ch := range chans {
		c, err := parseConfig(ch.Target.Config)
		if err != nil || c.botKey() != botKey {
			continue
		}
		routes[c.chatID] = append(routes[c.chatID], ch)
	}
	return routes
}

// dispatch submits a message to the channels of its chat. The bot's own messages, service
// messages (members joining, pins, ...) and messages older than a channel's binding are not user
// messages.
func (a *Adapter) dispatch(ctx context.Context, acc *account, m *models.Message, routes map[int64][]adapter.Channel, in adapter.Inboxes) error {
	if m.From == nil || m.From.ID == acc.botID || !userContent(m) {
		return nil
	}
	for _, ch := range routes[m.Chat.ID] {
		if ch.Predates(int64(m.Date) * 1000) {
			continue
		}
		if _, err := a.receive(ctx, acc, m, ch.ID, in.Inbox(ch.ID)); err != nil {
			return err
		}
	}
	return nil
}

// userContent reports whether a message carries what a person said: text or a file.
func userContent(m *models.Message) bool {
	return m.Text != "" || m.Caption != "" || len(m.Photo) > 0 || m.Document != nil || m.Video != nil || m.Audio != nil || m.Voice != nil
}

// receive submits the user message of one Telegram message: [adapter.Accepted], or [adapter.Duplicate] when it
// was submitted already. A message the profile refuses is logged and skipped; any other failure
// is returned (the update is read again).
func (a *Adapter) receive(ctx context.Context, acc *account, m *models.Message, channel string, in adapter.Inbox) (adapter.Received, error) {
	msgID := MessageIDOf(m.Chat.ID, m.ID)
	if seen, err := in.Seen(ctx, msgID); err != nil || seen {
		return adapter.Duplicate, err
	}
	msg := profile.Message{MessageID: msgID, CreatedAt: int64(m.Date) * 1000, Text: m.Text}
	if msg.CreatedAt == 0 {
		msg.CreatedAt = time.Now().UnixMilli()
	}
	if msg.Text == "" {
		msg.Text = m.Caption
	}
	if f, ok := fileOf(m); ok { // too large, or gone: the message says so rather than vanish
		if err := adapter.FileOrNote(ctx, in, &msg, f.name, func() (profile.File, error) { return a.fetch(ctx, acc, f, in) }); err != nil {
			return "", err
		}
	}
	return adapter.Submit(ctx, in, msg, a.Logger, "telegram_message_refused", channel)
}

// inFile is the file of a user message.
type inFile struct {
	id, name, mime, typ string
	size                int64
}

// fileOf is a message's file: the largest size of a photo, or its document, video, audio or
// voice note.
func fileOf(m *models.Message) (inFile, bool) {
	switch {
	case len(m.Photo) > 0:
		p := slices.MaxFunc(m.Photo, func(x, y models.PhotoSize) int { return x.Width*x.Height - y.Width*y.Height })
		return inFile{id: p.FileID, name: "photo_" + strconv.Itoa(m.ID) + ".jpg", mime: "image/jpeg", typ: "image", size: int64(p.FileSize)}, true
	case m.Document != nil:
		return inFile{id: m.Document.FileID, name: orName(m.Document.FileName, "document", m.ID), mime: m.Document.MimeType, typ: "file", size: m.Document.FileSize}, true
	case m.Video != nil:
		return inFile{id: m.Video.FileID, name: orName(m.Video.FileName, "video", m.ID), mime: m.Video.MimeType, typ: "video", size: m.Video.FileSize}, true
	case m.Audio != nil:
		return inFile{id: m.Audio.FileID, name: orName(m.Audio.FileName, "audio", m.ID), mime: m.Audio.MimeType, typ: "audio", size: m.Audio.FileSize}, true
	case m.Voice != nil:
		return inFile{id: m.Voice.FileID, name: "voice_" + strconv.Itoa(m.ID) + ".ogg", mime: m.Voice.MimeType, typ: "audio", size: m.Voice.FileSize}, true
	}
	return inFile{}, false
}

func orName(name, kind string, id int) string {
	if name != "" {
		return name
	}
	return kind + "_" + strconv.Itoa(id)
}

// fetch copies a user's file into the Transfer Plane: getFile, then the download. A file past
// the Bot API's 20 MB download limit is refused without a call.
func (a *Adapter) fetch(ctx context.Context, acc *account, f inFile, in adapter.Inbox) (profile.File, error) {
	if f.size > MaxDownload {
		return profile.File{}, profile.Errorf(profile.CodeFileTooLarge, "larger than the %d MB a bot can download", MaxDownload>>20)
	}
	var tf *models.File
	err := acc.call(ctx, "getFile", 0, func(ctx context.Context) (err error) {
		tf, err = acc.bot.GetFile(ctx, &bot.GetFileParams{FileID: f.id})
		return err
	})
	var pe *profile.Error
	if errors.As(err, &pe) && pe.Code == profile.CodeTargetDeliveryFailed {
		return profile.File{}, profile.Errorf(profile.CodeFileDownloadFailed, "%s", pe.Message) // too big, or gone
	}
	if err != nil {
		return profile.File{}, err
	}
	body, err := acc.download(ctx, tf.FilePath)
	if err != nil {
		return profile.File{}, err
	}
	defer body.Close()
	mime := f.mime
	if mime == "" {
		mime = "application/octet-stream"
	}
	return in.PutFile(ctx, adapter.StoredFile{Type: f.typ, Filename: f.name, MimeType: mime}, body)
}

// getUpdates is one long poll (Bot API "getUpdates"): the updates after offset, waiting up to
// timeout for the first. Only messages are asked for.
func (acc *account) getUpdates(ctx context.Context, offset int64, timeout time.Duration) ([]models.Update, error) {
	body, _ := json.Marshal(map[string]any{"offset": offset, "timeout": int(timeout / time.Second), "allowed_updates": []string{"message"}})
	cctx, cancel := context.WithTimeout(ctx, timeout+15*time.Second)
	defer cancel()
	req, err := http.NewRequestWithContext(cctx, http.MethodPost, acc.apiURL+"/bot"+acc.token+"/getUpdates", bytes.NewReader(body))
	if err != nil {
		return nil, errors.New("telegram getUpdates: bad request URL")
	}
	req.Header.Set("Content-Type", "application/json")
	resp, err := acc.http.Do(req)
	if err != nil {
		if ctx.Err() != nil {
			return nil, ctx.Err()
		}
		return nil, fmt.Errorf("telegram getUpdates: %w", errors.Unwrap(err)) // the url.Error's URL holds the token
	}
	defer resp.Body.Close()
	var r struct {
		OK          bool            `json:"ok"`
		Result      []models.Update `json:"result"`
		ErrorCode   int             `json:"error_code"`
		Description string          `json:"description"`
		Parameters  struct {
			RetryAfter int `json:"retry_after"`
		} `json:"parameters"`
	}
	if err := json.NewDecoder(io.LimitReader(resp.Body, 64<<20)).Decode(&r); err != nil {
		return nil, fmt.Errorf("telegram getUpdates: status %d, unreadable answer", resp.StatusCode)
	}
	if !r.OK {
		if r.Parameters.RetryAfter > 0 {
			return nil, &adapter.RetryAfterError{After: time.Duration(r.Parameters.RetryAfter) * time.Second,
				Err: profile.Errorf(profile.CodeTargetRateLimited, "telegram getUpdates: %s", r.Description)}
		}
		return nil, fmt.Errorf("telegram getUpdates: %d %s", r.ErrorCode, r.Description)
	}
	return r.Result, nil
}

// errBadSecret answers a webhook call without the channel's secret token, and a call for a
// channel that is not open: the same answer, so the route tells nobody which channels exist.
var errBadSecret = profile.Errorf(profile.CodeUnauthorized, "bad or missing X-Telegram-Bot-Api-Secret-Token")

// Refusal implements adapter.Receiver.
func (a *Adapter) Refusal() error { return errBadSecret }

// updatesRoute is the URL setWebhook gives Telegram, for a channel with "inbound": "webhook"; a
// call carries the channel's secret token, compared in constant time.
var updatesRoute = adapter.Route[*config]{Path: "updates", Refusal: errBadSecret,
	Accept: func(r *http.Request, c *config) bool {
		return c.inbound == InboundWebhook &&
			subtle.ConstantTimeCompare([]byte(r.Header.Get("X-Telegram-Bot-Api-Secret-Token")), []byte(c.webhookSecret)) == 1
	}}

// Receive implements adapter.Receiver for POST /v1/targets/telegram/{channel}/updates, the URL
// setWebhook gave Telegram: the secret token is compared in constant time with the channel's
// webhook_secret, and the update's message is submitted to the channels of its chat among the
// bot's (a bot has one webhook, whichever of its channels set it last). 200 once it is durable;
// a failure that may pass is answered 503, and Telegram calls again.
func (a *Adapter) Receive(w http.ResponseWriter, r *http.Request, ch adapter.Channel, in adapter.Inboxes) (adapter.Received, error) {
	c, body, err := a.StartReceive(r, ch, updatesRoute)
	if err != nil {
		return "", err
	}
	var u models.Update
	if err := json.Unmarshal(body, &u); err != nil {
		return "", profile.Errorf(profile.CodeBadRequest, "not a Telegram update: %v", err)
	}
	outcome := adapter.Ignored
	if m := u.Message; m != nil && m.From != nil && m.From.ID != c.botID() && userContent(m) {
		acc := a.account(c)
		for _, route := range routesOf(in.Channels(), c.botKey())[m.Chat.ID] {
			if route.Predates(int64(m.Date) * 1000) {
				continue
			}
			if outcome, err = a.receive(r.Context(), acc, m, route.ID, in.Inbox(route.ID)); err != nil {
				a.Logger.Warn("telegram_update_failed", "channel", route.ID, "update_id", u.ID, "err", err)
				return "", profile.Errorf(profile.CodeUnavailable, "the update could not be stored; Telegram sends it again")
			}
		}
	}
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(http.StatusOK)
	_, _ = w.Write([]byte(`{}`))
	return outcome, nil
}
