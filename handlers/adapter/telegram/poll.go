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
// channel(s), its file copied into the Transfer Plane, and a message of a chat no channel binds
// goes to the feed's bots (the bots of the same token share the loop). The offset is saved after
// the batch before it is submitted, and Telegram forgets an update only when asked for the
// updates after it, so a restart reads at most the last batch again, which the message_id makes
// one message each.
func (a *Adapter) Poll(ctx context.Context, feed adapter.Feed) error {
	c, err := a.pollAccount(feed)
	if c == nil {
		return err
	}
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
	s := a.servedOf(acc, c.botKey(), feed.Channels(), feed.Bots())
	for {
		updates, err := acc.getUpdates(ctx, offset, a.opts.PollTimeout)
		if err != nil {
			return err
		}
		next := offset
		for _, u := range updates {
			if u.Message != nil {
				if _, err := a.deliver(ctx, s, u.Message, feed); err != nil {
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

// pollAccount is the config of the token a feed polls: its first channel's, else its first
// bot's; nil when the feed serves neither (nothing to read).
func (a *Adapter) pollAccount(feed adapter.Feed) (*config, error) {
	p, ok, err := a.StartPoll(feed)
	if ok || err != nil {
		return p.Account, err
	}
	for _, b := range feed.Bots() {
		if c, err := a.botConfig(b); err == nil {
			return c, nil
		}
	}
	return nil, nil
}

// chatKey names what a channel PUT binds: a chat, or one forum topic of it (thread != 0).
type chatKey struct {
	chat   int64
	thread int
}

// served is what one poll loop or webhook call serves of one bot token: the chats (and topics)
// its channels PUT bind, and the bots of that token.
type served struct {
	acc    *account
	routes map[chatKey][]adapter.Channel
	bots   []adapter.Bot
}

// servedOf keeps, of chans and bots, those of the token botKey names.
func (a *Adapter) servedOf(acc *account, botKey string, chans []adapter.Channel, bots []adapter.Bot) served {
	s := served{acc: acc, routes: map[chatKey][]adapter.Channel{}}
	for _, ch := range chans {
		c, err := parseConfig(ch.Target.Config)
		if err != nil || c.botKey() != botKey {
			continue
		}
		k := chatKey{c.chatID, c.threadID}
		s.routes[k] = append(s.routes[k], ch)
	}
	for _, b := range bots {
		if c, err := a.botConfig(b); err == nil && c.botKey() == botKey && !slices.ContainsFunc(s.bots, func(o adapter.Bot) bool { return o.ID == b.ID }) {
			s.bots = append(s.bots, b)
		}
	}
	return s
}

// channelsOf are the channels PUT that a message belongs to: those of its chat, and those of its
// forum topic.
func (s served) channelsOf(m *models.Message) []adapter.Channel {
	chans := s.routes[chatKey{m.Chat.ID, 0}]
	if topic := topicOf(m); topic != 0 {
		chans = append(slices.Clip(chans), s.routes[chatKey{m.Chat.ID, topic}]...)
	}
	return chans
}

// deliver passes one message on: to the channels PUT for its chat or topic, which win over the
// bots; else to each bot of the token, whose policy admits it (opening its conversation's
// channel) or refuses it. The bot's own messages, service messages (members joining, pins, ...)
// and messages older than a channel's binding, or than the bot, are not user messages. It
// returns what became of the message (the last channel's outcome; [adapter.Ignored] when none
// took it). A bot's answer that can never be sent (a pairing code to a person who blocked the
// bot) is logged and the message skipped, so that one chat cannot stop the bot's updates.
func (a *Adapter) deliver(ctx context.Context, s served, m *models.Message, in adapter.Inboxes) (adapter.Received, error) {
	if m.From == nil || m.From.ID == s.acc.botID || !userContent(m) {
		return adapter.Ignored, nil
	}
	at := int64(m.Date) * 1000
	outcome := adapter.Ignored
	if chans := s.channelsOf(m); len(chans) > 0 {
		for _, ch := range chans {
			if ch.Predates(at) {
				continue
			}
			var err error
			if outcome, err = a.receive(ctx, s.acc, m, textOf(m), ch.ID, in.Inbox(ch.ID)); err != nil {
				return "", err
			}
		}
		return outcome, nil
	}
	for _, b := range s.bots {
		if b.Predates(at) {
			continue
		}
		username, err := s.acc.identity(ctx)
		if err != nil {
			return "", err
		}
		arrival, text, ok := arrivalOf(m, b, s.acc.botID, username)
		if !ok {
			continue
		}
		adm, err := in.Admit(ctx, b, arrival)
		var pe *profile.Error
		switch {
		case errors.As(err, &pe) && !pe.Retryable:
			a.Logger.Warn("telegram_bot_answer_failed", "bot", b.ID, "code", pe.Code, "err", pe.Message)
			continue
		case err != nil:
			return "", err
		case !adm.Admitted():
			continue
		}
		if outcome, err = a.receive(ctx, s.acc, m, text, adm.Channel.ID, adm.Inbox); err != nil {
			return "", err
		}
	}
	return outcome, nil
}

// userContent reports whether a message carries what a person said: text or a file.
func userContent(m *models.Message) bool {
	return m.Text != "" || m.Caption != "" || len(m.Photo) > 0 || m.Document != nil || m.Video != nil || m.Audio != nil || m.Voice != nil
}

// textOf is a message's text, or its file's caption, as Markdown with its formatting
// (markdownOf).
func textOf(m *models.Message) string {
	if m.Text != "" {
		return markdownOf(m.Text, m.Entities)
	}
	return markdownOf(m.Caption, m.CaptionEntities)
}

// receive submits the user message of one Telegram message, with text as its text:
// [adapter.Accepted], or [adapter.Duplicate] when it was submitted already. A message the
// profile refuses is logged and skipped; any other failure is returned (the update is read
// again).
func (a *Adapter) receive(ctx context.Context, acc *account, m *models.Message, text, channel string, in adapter.Inbox) (adapter.Received, error) {
	msgID := MessageIDOf(m.Chat.ID, m.ID)
	if seen, err := in.Seen(ctx, msgID); err != nil || seen {
		return adapter.Duplicate, err
	}
	msg := profile.Message{MessageID: msgID, CreatedAt: int64(m.Date) * 1000, Text: text}
	if msg.CreatedAt == 0 {
		msg.CreatedAt = time.Now().UnixMilli()
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
// bot's (a bot has one webhook, whichever of its channels set it last), or, in a chat none
// binds, to the token's bots. 200 once it is durable; a failure that may pass is answered 503,
// and Telegram calls again.
func (a *Adapter) Receive(w http.ResponseWriter, r *http.Request, ch adapter.Channel, in adapter.Inboxes) (adapter.Received, error) {
	c, body, err := a.StartReceive(r, ch, updatesRoute)
	if err != nil {
		return "", err
	}
	return a.receiveUpdate(w, r, c, body, in, nil)
}

// ReceiveBot implements adapter.BotReceiver for POST /v1/targets/telegram/bots/{bot_id}/updates,
// the URL setWebhook gave Telegram for a bot with "inbound": "webhook": the secret token is
// compared in constant time with the bot's webhook_secret; the update's message goes to the
// channels PUT for its chat, else to the token's bots, as Receive's.
func (a *Adapter) ReceiveBot(w http.ResponseWriter, r *http.Request, b adapter.Bot, in adapter.Inboxes) (adapter.Received, error) {
	if r.PathValue("path") != updatesRoute.Path {
		return "", profile.Errorf(profile.CodeNotFound, "no route %s %s", r.Method, r.URL.Path)
	}
	c, err := a.botConfig(b)
	if err != nil || !updatesRoute.Accept(r, c) {
		return "", errBadSecret
	}
	body, err := adapter.ReadBody(r)
	if err != nil {
		return "", err
	}
	return a.receiveUpdate(w, r, c, body, in, &b)
}

// receiveUpdate passes on the message of one update Telegram posted for c's token (and for bot,
// when the post was for a bot's route).
func (a *Adapter) receiveUpdate(w http.ResponseWriter, r *http.Request, c *config, body []byte, in adapter.Inboxes, bot *adapter.Bot) (adapter.Received, error) {
	var u models.Update
	if err := json.Unmarshal(body, &u); err != nil {
		return "", profile.Errorf(profile.CodeBadRequest, "not a Telegram update: %v", err)
	}
	outcome := adapter.Ignored
	if m := u.Message; m != nil {
		bots := in.Bots()
		if bot != nil {
			bots = append([]adapter.Bot{*bot}, bots...)
		}
		s := a.servedOf(a.account(c), c.botKey(), in.Channels(), bots)
		var err error
		if outcome, err = a.deliver(r.Context(), s, m, in); err != nil {
			a.Logger.Warn("telegram_update_failed", "update_id", u.ID, "err", err)
			return "", profile.Errorf(profile.CodeUnavailable, "the update could not be stored; Telegram sends it again")
		}
	}
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(http.StatusOK)
	_, _ = w.Write([]byte(`{}`))
	return outcome, nil
}
