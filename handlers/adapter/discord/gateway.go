package discord

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"net/url"
	"sort"
	"strconv"
	"strings"
	"sync"

	"github.com/bwmarrin/discordgo"
	"github.com/gorilla/websocket"

	"github.com/ximd/ximd/handlers/adapter"
	"github.com/ximd/ximd/profile"
)

// discordEpoch is the Unix millisecond a snowflake's time counts from.
const discordEpoch = 1420070400000

// Bounds of the catch-up: a page of GET /channels/{id}/messages, and the conversations whose
// last seen message the cursor keeps (a bot's, beyond its bound channels; the oldest go first).
const (
	pageSize      = 100
	maxCursorKeep = 1000
	eventBuffer   = 1024
)

// snowflakeAt is the smallest snowflake of Unix millisecond ms.
func snowflakeAt(ms int64) string {
	if ms < discordEpoch {
		ms = discordEpoch
	}
	return strconv.FormatUint(uint64(ms-discordEpoch)<<22, 10)
}

// timeOf is the Unix millisecond of snowflake id (0 when id is none).
func timeOf(id string) int64 {
	n, err := strconv.ParseUint(id, 10, 64)
	if err != nil {
		return 0
	}
	return int64(n>>22) + discordEpoch
}

// after reports whether snowflake a is later than b.
func after(a, b string) bool {
	x, _ := strconv.ParseUint(a, 10, 64)
	y, _ := strconv.ParseUint(b, 10, 64)
	return x > y
}

// PollKey implements adapter.Poller: every channel takes its messages from its bot's gateway
// connection, one per token: the key names the token (a digest, never the token).
func (a *Adapter) PollKey(ch adapter.Channel) string {
	return a.PollKeyOf(ch, func(*config) bool { return true }, (*config).accountKey)
}

// Poll implements adapter.Poller: the token's gateway connection, with a catch-up of the
// conversations it serves after it is made. It returns when ctx ends, when the connection ends
// (the kit starts it again: a reconnect, with its catch-up), or at once for a token Discord
// refused (401, or close code 4004), which makes no more calls.
func (a *Adapter) Poll(ctx context.Context, feed adapter.Feed) error {
	g := &gateway{a: a, feed: feed, bound: map[string][]adapter.Channel{}}
	for _, ch := range feed.Channels() {
		c, err := parseConfig(ch.Target.Config)
		if err != nil {
			continue
		}
		if g.cfg == nil {
			g.cfg = c
		}
		g.bound[c.channelID] = append(g.bound[c.channelID], ch)
	}
	g.bots = feed.Bots()
	if g.cfg == nil {
		for _, b := range g.bots {
			if c, err := a.botConfig(b); err == nil {
				g.cfg = c
				break
			}
		}
	}
	if g.cfg == nil {
		return nil // nothing to read
	}
	g.acc = a.account(g.cfg)
	return g.run(ctx)
}

// gateway is one run of a token's connection.
type gateway struct {
	a     *Adapter
	acc   *account
	cfg   *config
	feed  adapter.Feed
	bound map[string][]adapter.Channel // Discord channel id -> the channels PUT for it
	bots  []adapter.Bot
	self  *discordgo.User

	cursor map[string]string // Discord channel id -> the last message id seen
	kinds  map[string]*discordgo.Channel
}

func (g *gateway) run(ctx context.Context) error {
	if g.acc.refused.Load() {
		return profile.Errorf(profile.CodeTargetAuthFailed, "discord: the bot token was refused; the gateway stays closed until the token is put again")
	}
	self, err := g.acc.me(ctx)
	if err != nil {
		return err
	}
	g.self = self
	if err := g.loadCursor(ctx); err != nil {
		return err
	}
	s, err := discordgo.New("Bot " + g.cfg.botToken)
	if err != nil {
		return err
	}
	s.Client = g.acc.s.Client
	s.Identify.Intents = g.acc.s.Identify.Intents
	s.ShouldReconnectOnError = false
	s.LogLevel = -1
	s.SyncEvents = true // events in the order they come
	s.StateEnabled = false
	events := make(chan *discordgo.Message, eventBuffer)
	closed := make(chan struct{})
	var once sync.Once
	s.AddHandler(func(_ *discordgo.Session, m *discordgo.MessageCreate) {
		select {
		case events <- m.Message:
		case <-closed:
		case <-ctx.Done():
		}
	})
	s.AddHandler(func(_ *discordgo.Session, _ *discordgo.Disconnect) { once.Do(func() { close(closed) }) })
	if err := s.Open(); err != nil {
		if websocket.IsCloseError(err, 4004) {
			g.acc.refused.Store(true)
			return profile.Errorf(profile.CodeTargetAuthFailed, "discord: the gateway refused the bot token (4004)")
		}
		return fmt.Errorf("discord gateway: %w", err)
	}
	defer func() {
		once.Do(func() { close(closed) })
		go s.Close() // the library waits a second for the close handshake
	}()
	if err := g.catchUp(ctx); err != nil {
		return err
	}
	for {
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-closed:
			return errors.New("discord gateway: connection closed")
		case m := <-events:
			if err := g.handle(ctx, m); err != nil {
				return err
			}
		}
	}
}

// loadCursor reads the last seen ids; a bound channel without one starts from its binding.
func (g *gateway) loadCursor(ctx context.Context) error {
	g.cursor = map[string]string{}
	raw, err := g.feed.Cursor(ctx)
	if err != nil {
		return err
	}
	if raw != "" {
		_ = json.Unmarshal([]byte(raw), &g.cursor) // an unreadable cursor starts from the bindings
	}
	for id, chans := range g.bound {
		since := chans[0].Since()
		for _, ch := range chans[1:] {
			since = min(since, ch.Since())
		}
		if g.cursor[id] == "" {
			g.cursor[id] = snowflakeAt(since)
		}
	}
	return nil
}

// saveCursor keeps the last seen ids of the conversations served, the newest maxCursorKeep.
func (g *gateway) saveCursor(ctx context.Context) error {
	if len(g.cursor) > maxCursorKeep {
		ids := make([]string, 0, len(g.cursor))
		for id := range g.cursor {
			if len(g.bound[id]) == 0 {
				ids = append(ids, id)
			}
		}
		sort.Slice(ids, func(i, j int) bool { return after(g.cursor[ids[j]], g.cursor[ids[i]]) })
		for _, id := range ids[:max(0, len(g.cursor)-maxCursorKeep)] {
			delete(g.cursor, id)
		}
	}
	raw, err := json.Marshal(g.cursor)
	if err != nil {
		return err
	}
	return g.feed.SaveCursor(ctx, string(raw))
}

// catchUp reads what each conversation in the cursor was sent after its last seen message
// (the gateway replays nothing across connections), oldest first.
func (g *gateway) catchUp(ctx context.Context) error {
	ids := make([]string, 0, len(g.cursor))
	for id := range g.cursor {
		ids = append(ids, id)
	}
	sort.Strings(ids)
	for _, id := range ids {
		for {
			var page []*discordgo.Message
			q := url.Values{"after": {g.cursor[id]}, "limit": {strconv.Itoa(pageSize)}}
			err := g.acc.call(ctx, request{method: http.MethodGet, path: "/channels/" + id + "/messages?" + q.Encode(), channel: id,
				route: "GET /channels/" + id + "/messages"}, &page)
			var ae *apiError
			if errors.As(err, &ae) && (ae.status == http.StatusNotFound || ae.status == http.StatusForbidden) {
				if len(g.bound[id]) == 0 {
					delete(g.cursor, id) // a conversation the bot left
				}
				break
			}
			if err != nil {
				return err
			}
			sort.Slice(page, func(i, j int) bool { return after(page[j].ID, page[i].ID) })
			for _, m := range page {
				if m.ChannelID == "" {
					m.ChannelID = id
				}
				if err := g.handle(ctx, m); err != nil {
					return err
				}
			}
			if len(page) < pageSize {
				break
			}
		}
	}
	return nil
}

// handle passes one message on: in a bound channel to that channel, else to the bots; then the
// cursor moves past it.
func (g *gateway) handle(ctx context.Context, m *discordgo.Message) error {
	if m == nil || m.Author == nil || m.ID == "" {
		return nil
	}
	if last, ok := g.cursor[m.ChannelID]; ok && !after(m.ID, last) {
		return nil // read already (the catch-up and the live event of one message)
	}
	own := m.Author.Bot || m.Author.ID == g.self.ID
	chans := g.bound[m.ChannelID]
	switch {
	case len(chans) > 0:
		for _, ch := range chans {
			if own || ch.Predates(timeOf(m.ID)) || !userMessage(m) {
				continue
			}
			if _, err := g.a.receive(ctx, m, m.Content, ch.ID, g.feed.Inbox(ch.ID)); err != nil {
				return err
			}
		}
	case len(g.bots) > 0:
		served, err := g.toBots(ctx, m, own)
		if err != nil || !served {
			return err
		}
	default:
		return nil
	}
	g.cursor[m.ChannelID] = m.ID
	return g.saveCursor(ctx)
}

// userMessage reports whether m is what a person writes (a default message or a reply), not a
// system message (a join, a pin, a thread created).
func userMessage(m *discordgo.Message) bool {
	return m.Type == discordgo.MessageTypeDefault || m.Type == discordgo.MessageTypeReply
}

// receive submits m as a user message of channel: its text and its attachments (each fetched
// from its signed URL at once, before it expires).
func (a *Adapter) receive(ctx context.Context, m *discordgo.Message, text, channel string, in adapter.Inbox) (adapter.Received, error) {
	if seen, err := in.Seen(ctx, m.ID); err != nil || seen {
		return adapter.Duplicate, err
	}
	pm := profile.Message{MessageID: m.ID, Text: text, CreatedAt: timeOf(m.ID)}
	for _, att := range m.Attachments {
		if att == nil {
			continue
		}
		if err := adapter.FileOrNote(ctx, in, &pm, att.Filename, func() (profile.File, error) {
			return a.fetch(ctx, att, in)
		}); err != nil {
			return "", err
		}
	}
	if pm.Text == "" && len(pm.Files) == 0 {
		return adapter.Ignored, nil
	}
	return adapter.Submit(ctx, in, pm, a.Logger, "discord_message_refused", channel)
}

// fetch copies an attachment from its URL into the Transfer Plane.
func (a *Adapter) fetch(ctx context.Context, att *discordgo.MessageAttachment, in adapter.Inbox) (profile.File, error) {
	if !strings.HasPrefix(att.URL, "https://") && !strings.HasPrefix(att.URL, "http://") {
		return profile.File{}, profile.Errorf(profile.CodeFileDownloadFailed, "not a file URL")
	}
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, att.URL, nil)
	if err != nil {
		return profile.File{}, profile.Errorf(profile.CodeFileDownloadFailed, "not a file URL")
	}
	resp, err := a.HTTPClient.Do(req)
	if err != nil {
		return profile.File{}, profile.Errorf(profile.CodeTargetUnavailable, "discord attachment download: %v", err)
	}
	defer resp.Body.Close()
	switch {
	case resp.StatusCode >= 500:
		return profile.File{}, profile.Errorf(profile.CodeTargetUnavailable, "discord attachment download: status %d", resp.StatusCode)
	case resp.StatusCode != http.StatusOK:
		return profile.File{}, profile.Errorf(profile.CodeFileDownloadFailed, "discord attachment download: status %d (its signed URL expired?)", resp.StatusCode)
	}
	mime := att.ContentType
	if mime == "" {
		mime = "application/octet-stream"
	}
	typ := "file"
	for _, t := range []string{"image", "video", "audio"} {
		if strings.HasPrefix(mime, t+"/") {
			typ = t
		}
	}
	return in.PutFile(ctx, adapter.StoredFile{Type: typ, Filename: att.Filename, MimeType: mime}, resp.Body)
}
