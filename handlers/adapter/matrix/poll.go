package matrix

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"log/slog"
	"slices"
	"strings"
	"time"

	"maunium.net/go/mautrix"
	"maunium.net/go/mautrix/event"
	"maunium.net/go/mautrix/id"

	"github.com/ximd/ximd/handlers/adapter"
	"github.com/ximd/ximd/profile"
)

// Sync settings (docs/adapters/matrix.md).
const (
	// SyncTimeout is how long one /sync long-poll waits for news (Options.SyncTimeout).
	SyncTimeout = 30 * time.Second
	// syncTimelineLimit bounds the events one /sync returns per room; a gap beyond it is read
	// back with /messages, so none is skipped.
	syncTimelineLimit = 100
)

var _ adapter.Poller = (*Adapter)(nil)

// MessageIDOf is the message_id of the user message of a Matrix event: the same event always
// gives the same message, so a sync read twice (a restart, a handover) is one message.
func MessageIDOf(eventID id.EventID) string {
	sum := sha256.Sum256([]byte(eventID))
	return "mx_" + hex.EncodeToString(sum[:16])
}

// PollKey implements adapter.Poller: every channel and bot of one account (homeserver and access
// token) shares the account's /sync loop, "mx_" and a digest of the two (never the token).
func (a *Adapter) PollKey(ch adapter.Channel) string {
	return a.PollKeyOf(ch, func(*config) bool { return true }, (*config).accountKey)
}

// accountKey names the account's sync loop (and its position in KV xim_cursors).
func (c *config) accountKey() string {
	sum := sha256.Sum256([]byte(c.homeserver + "\x00" + c.accessToken))
	return "mx_" + hex.EncodeToString(sum[:16])
}

// position is the feed's cursor: the sync token, and the rooms of the channels PUT that were
// served when it was saved (a channel's room not among them is read back from its binding on).
// A cursor that is not a JSON object is a bare sync token.
type position struct {
	Since string      `json:"since"`
	Rooms []id.RoomID `json:"rooms,omitempty"`
}

func parsePosition(cursor string) position {
	var p position
	if !strings.HasPrefix(cursor, "{") || json.Unmarshal([]byte(cursor), &p) != nil {
		return position{Since: cursor}
	}
	return p
}

// Poll implements adapter.Poller: one /sync long-poll loop per account, from the sync token in
// the feed's cursor. Each message event in the room of a channel PUT, from someone other than
// the account, becomes a user message of that channel (what was said from its binding on,
// adapter.BindGrace included: before it, the room was not the agent's), its media copied into
// the Transfer Plane. With bots, the sync sees every room of the account: an invitation is
// accepted when a bot's policy admits the inviter, and a message in a room no channel PUT binds
// goes to the bots' Admit (bot.go). The cursor is saved after the events before it are
// submitted, so a restart replays at most the last batch, which the message_id makes one
// message each.
func (a *Adapter) Poll(ctx context.Context, feed adapter.Feed) error {
	c, err := a.pollAccount(feed)
	if c == nil || err != nil {
		return err
	}
	acc, err := a.account(c)
	if err != nil {
		return err
	}
	user, err := acc.user(ctx)
	if err != nil {
		return mapErr("whoami", err)
	}
	s := &syncer{a: a, acc: acc, feed: feed, user: user, bots: feed.Bots(), rooms: map[id.RoomID][]adapter.Channel{},
		log: a.Logger.With("poll_key", c.accountKey())}
	for _, ch := range feed.Channels() {
		cc, err := parseConfig(ch.Target.Config)
		if err != nil {
			return err
		}
		s.rooms[id.RoomID(cc.roomID)] = append(s.rooms[id.RoomID(cc.roomID)], ch)
	}
	filter, err := acc.filter(ctx, s.filter())
	if err != nil {
		return err
	}
	cursor, err := feed.Cursor(ctx)
	if err != nil {
		return err
	}
	pos := parsePosition(cursor)
	since := pos.Since
	if since == "" {
		// The first poll of the account: the initial sync's timelines, read back as far as each
		// room's channels (or bots) go.
		resp, err := acc.sync(ctx, 0, "", filter)
		if err != nil {
			return err
		}
		if err := s.handle(ctx, resp, ""); err != nil {
			return err
		}
		since = resp.NextBatch
	} else {
		// Channels bound since the position was saved: their rooms from their binding on (what
		// the sync brings again is one message by its message_id).
		for room, chans := range s.rooms {
			if slices.Contains(pos.Rooms, room) {
				continue
			}
			back, err := acc.gap(ctx, room, "", "", earliest(chans))
			if err != nil {
				return err
			}
			if err := s.channelEvents(ctx, chans, back); err != nil {
				return err
			}
		}
	}
	if err := s.save(ctx, since); err != nil {
		return err
	}
	for {
		resp, err := acc.sync(ctx, a.sync, since, filter)
		if err != nil {
			return err
		}
		if err := s.handle(ctx, resp, since); err != nil {
			return err
		}
		if err := s.save(ctx, resp.NextBatch); err != nil {
			return err
		}
		since = resp.NextBatch
	}
}

// pollAccount is the account config of feed: its first channel's, else its first bot's (nil:
// nothing to poll).
func (a *Adapter) pollAccount(feed adapter.Feed) (*config, error) {
	if chans := feed.Channels(); len(chans) > 0 {
		return parseConfig(chans[0].Target.Config)
	}
	if bots := feed.Bots(); len(bots) > 0 {
		bound, err := a.Bind(bots[0].Target.Config, adapter.Conversation{})
		if err != nil {
			return nil, err
		}
		return parseConfig(bound)
	}
	return nil, nil
}

// earliest is the earliest Since of chans (Unix ms).
func earliest(chans []adapter.Channel) int64 {
	from := chans[0].Since()
	for _, ch := range chans[1:] {
		from = min(from, ch.Since())
	}
	return from
}

// syncer is one Poll's state: the account, the rooms of its channels PUT, its bots.
type syncer struct {
	a     *Adapter
	acc   *account
	feed  adapter.Feed
	user  id.UserID
	bots  []adapter.Bot
	rooms map[id.RoomID][]adapter.Channel
	log   *slog.Logger
}

// filter is the account's sync filter: message events of the channels' rooms; with bots, of
// every room, with what tells a room's kind (members, name, encryption, m.direct).
func (s *syncer) filter() *mautrix.Filter {
	none := &mautrix.FilterPart{NotTypes: []event.Type{{Type: "*"}}}
	if len(s.bots) == 0 {
		rooms := make([]id.RoomID, 0, len(s.rooms))
		for r := range s.rooms {
			rooms = append(rooms, r)
		}
		slices.Sort(rooms)
		return &mautrix.Filter{
			AccountData: none, Presence: none,
			Room: &mautrix.RoomFilter{
				Rooms:    rooms,
				Timeline: &mautrix.FilterPart{Types: []event.Type{event.EventMessage}, Limit: syncTimelineLimit},
				State:    none, Ephemeral: none, AccountData: none,
			},
		}
	}
	kinds := []event.Type{event.StateMember, event.StateRoomName, event.StateEncryption}
	return &mautrix.Filter{
		AccountData: &mautrix.FilterPart{Types: []event.Type{event.AccountDataDirectChats}}, Presence: none,
		Room: &mautrix.RoomFilter{
			Timeline: &mautrix.FilterPart{Types: append([]event.Type{event.EventMessage}, kinds...), Limit: syncTimelineLimit},
			State:    &mautrix.FilterPart{Types: kinds}, Ephemeral: none, AccountData: none,
		},
	}
}

// save saves the position since, with the rooms of the feed's channels.
func (s *syncer) save(ctx context.Context, since string) error {
	p := position{Since: since}
	for r := range s.rooms {
		p.Rooms = append(p.Rooms, r)
	}
	slices.Sort(p.Rooms)
	b, err := json.Marshal(p)
	if err != nil {
		return err
	}
	return s.feed.SaveCursor(ctx, string(b))
}

// handle passes on what one sync brought (since "": the initial sync): m.direct, invitations,
// and each joined room's message events, a limited timeline's gap read back first.
func (s *syncer) handle(ctx context.Context, resp *mautrix.RespSync, since string) error {
	if len(s.bots) > 0 {
		for _, ev := range resp.AccountData.Events {
			if ev.Type == event.AccountDataDirectChats {
				s.acc.setDirect(ev.Content.VeryRaw)
			}
		}
		for room, inv := range resp.Rooms.Invite {
			if err := s.invited(ctx, room, inv); err != nil {
				return err
			}
		}
	}
	for room, joined := range resp.Rooms.Join {
		chans, bound := s.rooms[room]
		if !bound && len(s.bots) == 0 {
			continue
		}
		for _, ev := range slices.Concat(joined.State.Events, joined.Timeline.Events) {
			if ev.Type != event.EventMessage {
				s.acc.forget(room) // members, name or encryption changed
			}
		}
		events := joined.Timeline.Events
		if joined.Timeline.Limited && joined.Timeline.PrevBatch != "" {
			var notBefore int64
			if since == "" {
				if bound {
					notBefore = earliest(chans)
				} else {
					notBefore = s.botsSince()
				}
			}
			gap, err := s.acc.gap(ctx, room, joined.Timeline.PrevBatch, since, notBefore)
			if err != nil {
				return err
			}
			events = append(gap, events...)
		}
		var err error
		if bound {
			err = s.channelEvents(ctx, chans, events)
		} else {
			err = s.botEvents(ctx, room, events)
		}
		if err != nil {
			return err
		}
	}
	return nil
}

// botsSince is the earliest time a bot of the feed takes messages from (Unix ms).
func (s *syncer) botsSince() int64 {
	from := s.bots[0].OpenedAt
	for _, b := range s.bots[1:] {
		from = min(from, b.OpenedAt)
	}
	return from - adapter.BindGrace.Milliseconds()
}

// channelEvents submits the user messages of events to each of chans (the channels PUT of their
// room), those written before a channel's binding left out.
func (s *syncer) channelEvents(ctx context.Context, chans []adapter.Channel, events []*event.Event) error {
	for _, ev := range events {
		if ev.Sender == s.user || ev.Type != event.EventMessage {
			continue
		}
		c, ok := contentOf(ev)
		if !ok {
			continue
		}
		for _, ch := range chans {
			if ch.Predates(ev.Timestamp) {
				continue
			}
			if err := s.a.receive(ctx, s.acc, ev, c, s.feed.Inbox(ch.ID), s.log.With("channel", ch.ID)); err != nil {
				return err
			}
		}
	}
	return nil
}

// msgContent is what a user message is made of in an m.room.message event.
type msgContent struct {
	MsgType       string `json:"msgtype"`
	Body          string `json:"body"`
	Format        string `json:"format"`
	FormattedBody string `json:"formatted_body"`
	// formatted: Body is the Markdown of FormattedBody (contentOf), which has no reply fallback.
	formatted bool
	Filename  string `json:"filename"`
	URL       string `json:"url"`
	RelatesTo *struct {
		RelType   string `json:"rel_type"`
		InReplyTo *struct {
			EventID id.EventID `json:"event_id"`
		} `json:"m.in_reply_to"`
	} `json:"m.relates_to"`
	Mentions *struct {
		UserIDs []id.UserID `json:"user_ids"`
	} `json:"m.mentions"`
	XimdKey string `json:"org.ximd.idempotency_key"`
	Info    struct {
		MimeType string `json:"mimetype"`
	} `json:"info"`
}

// contentOf is the content of a message event; false for an edit (m.replace), which is not a
// message of its own. A text with an org.matrix.custom.html formatted_body has its Markdown as
// its Body (MarkdownOf), so the agent reads the person's formatting (edge-api §7.3).
func contentOf(ev *event.Event) (*msgContent, bool) {
	var c msgContent
	if json.Unmarshal(ev.Content.VeryRaw, &c) != nil || (c.RelatesTo != nil && c.RelatesTo.RelType == "m.replace") {
		return nil, false
	}
	if isText(c.MsgType) && c.Format == FormatHTML && c.FormattedBody != "" {
		c.Body, c.formatted = MarkdownOf(c.FormattedBody), true
	}
	return &c, true
}

// receive submits the user message of one event's content (redactions and unknown kinds are
// not messages). A message the profile refuses is logged and skipped; any other failure is
// returned (the batch is read again).
func (a *Adapter) receive(ctx context.Context, acc *account, ev *event.Event, c *msgContent, in adapter.Inbox, log *slog.Logger) error {
	msgID := MessageIDOf(ev.ID)
	if seen, err := in.Seen(ctx, msgID); err != nil || seen {
		return err
	}
	m := profile.Message{MessageID: msgID, CreatedAt: ev.Timestamp}
	if m.CreatedAt == 0 {
		m.CreatedAt = time.Now().UnixMilli()
	}
	switch event.MessageType(c.MsgType) {
	case event.MsgText, event.MsgNotice, event.MsgEmote:
		m.Text = c.Body
	case event.MsgImage, event.MsgVideo, event.MsgAudio, event.MsgFile:
		name := c.Filename
		if name == "" {
			name = c.Body
		} else if c.Body != c.Filename {
			m.Text = c.Body // a caption
		}
		// A file too large, or gone, is named in the text: the message says so rather than vanish.
		if err := adapter.FileOrNote(ctx, in, &m, name, func() (profile.File, error) {
			return a.fetch(ctx, acc, c.URL, fileType(event.MessageType(c.MsgType)), name, c.Info.MimeType, in)
		}); err != nil {
			return err
		}
	default:
		return nil
	}
	_, err := in.Submit(ctx, m)
	var pe *profile.Error
	if errors.As(err, &pe) && !pe.Retryable {
		log.Warn("matrix_message_refused", "event_id", ev.ID, "message_id", msgID, "code", pe.Code, "err", pe.Message)
		return nil
	}
	return err
}

// fetch copies an event's media (authenticated media API) into the Transfer Plane.
func (a *Adapter) fetch(ctx context.Context, acc *account, mxc, typ, name, mime string, in adapter.Inbox) (profile.File, error) {
	uri, err := id.ParseContentURI(mxc)
	if err != nil || uri.IsEmpty() {
		return profile.File{}, profile.Errorf(profile.CodeFileDownloadFailed, "not an mxc:// URI")
	}
	var f profile.File
	err = acc.call("download", func() error {
		resp, err := acc.cli.Download(ctx, uri)
		if err != nil {
			return err
		}
		defer resp.Body.Close()
		if mime == "" {
			mime = resp.Header.Get("Content-Type")
		}
		f, err = in.PutFile(ctx, adapter.StoredFile{Type: typ, Filename: name, MimeType: mime}, resp.Body)
		return err
	})
	return f, err
}

func fileType(t event.MessageType) string {
	switch t {
	case event.MsgImage:
		return "image"
	case event.MsgVideo:
		return "video"
	case event.MsgAudio:
		return "audio"
	}
	return "file"
}

// filter returns the id of the account's sync filter f (created once per filter).
func (acc *account) filter(ctx context.Context, f *mautrix.Filter) (string, error) {
	raw, err := json.Marshal(f)
	if err != nil {
		return "", err
	}
	key := string(raw)
	acc.mu.Lock()
	fid, ok := acc.filters[key]
	acc.mu.Unlock()
	if ok {
		return fid, nil
	}
	var resp *mautrix.RespCreateFilter
	err = acc.call("filter", func() error {
		var err error
		resp, err = acc.cli.CreateFilter(ctx, f)
		return err
	})
	if err != nil {
		return "", err
	}
	acc.mu.Lock()
	if acc.filters == nil {
		acc.filters = map[string]string{}
	}
	acc.filters[key] = resp.FilterID
	acc.mu.Unlock()
	return resp.FilterID, nil
}

func (acc *account) sync(ctx context.Context, timeout time.Duration, since, filter string) (*mautrix.RespSync, error) {
	var resp *mautrix.RespSync
	err := acc.call("sync", func() error {
		var err error
		resp, err = acc.cli.SyncRequest(ctx, int(timeout/time.Millisecond), since, filter, false, event.PresenceOffline)
		return err
	})
	return resp, err
}

// gap reads the room's message events back from from ("": the room's newest) to the token to
// (or, with to "", to the first event older than notBefore, Unix ms), oldest first.
func (acc *account) gap(ctx context.Context, room id.RoomID, from, to string, notBefore int64) ([]*event.Event, error) {
	var out []*event.Event
	for range 100 { // at most 10,000 events
		var resp *mautrix.RespMessages
		err := acc.call("messages", func() error {
			var err error
			resp, err = acc.cli.Messages(ctx, room, from, to, mautrix.DirectionBackward, &mautrix.FilterPart{Types: []event.Type{event.EventMessage}}, 100)
			return err
		})
		if err != nil {
			return nil, err
		}
		out = append(out, resp.Chunk...)
		if resp.End == "" || len(resp.Chunk) == 0 || resp.Chunk[len(resp.Chunk)-1].Timestamp < notBefore {
			break
		}
		from = resp.End
	}
	slices.Reverse(out)
	return out, nil
}
