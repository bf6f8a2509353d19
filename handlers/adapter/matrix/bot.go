package matrix

import (
	"context"
	"encoding/json"
	"errors"
	"html"
	"slices"
	"strings"
	"unicode"
	"unicode/utf8"

	"maunium.net/go/mautrix"
	"maunium.net/go/mautrix/event"
	"maunium.net/go/mautrix/id"

	"github.com/ximd/ximd/handlers/adapter"
	"github.com/ximd/ximd/profile"
)

var (
	_ adapter.BotTaker  = (*Adapter)(nil)
	_ adapter.BotProber = (*Adapter)(nil)
)

// placeholderRoom is the room_id a bot's config is checked with (adapter.BotTaker.Bind with no
// conversation); no room has it (the server name is reserved, RFC 2606).
const placeholderRoom = "!bot:ximd.invalid"

// ConversationKeys implements adapter.BotTaker: a bot's config has no room_id.
func (a *Adapter) ConversationKeys() []string { return []string{"room_id"} }

// Bind implements adapter.BotTaker: the bot's config with room_id = the conversation's room.
func (a *Adapter) Bind(bot json.RawMessage, c adapter.Conversation) (json.RawMessage, error) {
	room := c.ID
	if room == "" {
		room = placeholderRoom
	}
	return adapter.BindConfig(bot, map[string]any{"room_id": room})
}

// ProbeBot implements adapter.BotProber: the access token works (/account/whoami).
func (a *Adapter) ProbeBot(ctx context.Context, b adapter.Bot) error {
	bound, err := a.Bind(b.Target.Config, adapter.Conversation{})
	if err != nil {
		return err
	}
	c, err := parseConfig(bound)
	if err != nil {
		return err
	}
	acc, err := a.account(c)
	if err != nil {
		return err
	}
	if _, err := acc.cli.Whoami(ctx); err != nil {
		return configInvalid("the access token does not work: %v", mapErr("whoami", err))
	}
	return nil
}

// invited accepts an invitation to room when a bot of the feed admits it: a direct invitation
// (is_direct) when the policy admits the inviter as the author of a direct message (a stranger
// under "pairing" too: the bot must be in the room to answer with a code), any other when the
// policy takes groups and allow_groups is empty or names the room. An encrypted room is not
// joined (ximd has no end-to-end encryption). A refused invitation is left as it is.
func (s *syncer) invited(ctx context.Context, room id.RoomID, inv *mautrix.SyncInvitedRoom) error {
	var inviter id.UserID
	direct, encrypted := false, false
	for _, ev := range inv.State.Events {
		switch ev.Type {
		case event.StateMember:
			var m event.MemberEventContent
			if ev.StateKey != nil && id.UserID(*ev.StateKey) == s.user && json.Unmarshal(ev.Content.VeryRaw, &m) == nil && m.Membership == event.MembershipInvite {
				inviter, direct = ev.Sender, m.IsDirect
			}
		case event.StateEncryption:
			encrypted = true
		}
	}
	log := s.log.With("room", room)
	switch {
	case inviter == "":
		return nil
	case encrypted:
		log.Warn("matrix_invite_encrypted", "err", "the room is encrypted; ximd does not support end-to-end encryption")
		return nil
	}
	kind := adapter.Group
	if direct {
		kind = adapter.Direct
	}
	if !slices.ContainsFunc(s.bots, func(b adapter.Bot) bool { return invitable(b.Conversations, kind, string(room), string(inviter)) }) {
		log.Info("matrix_invite_left", "kind", kind)
		return nil
	}
	err := s.acc.call("join", func() error {
		_, err := s.acc.cli.JoinRoomByID(ctx, room)
		return err
	})
	if err != nil {
		if transient(err) {
			return err // read again
		}
		log.Warn("matrix_join_failed", "err", err)
		return nil
	}
	log.Info("matrix_invite_accepted", "kind", kind)
	s.acc.forget(room)
	if direct {
		if err := s.acc.markDirect(ctx, inviter, room); err != nil {
			log.Warn("matrix_direct_not_marked", "err", err)
		}
	}
	return nil
}

// invitable reports whether policy p admits an invitation of this kind to room from inviter.
func invitable(p adapter.Policy, kind adapter.ConversationKind, room, inviter string) bool {
	if kind == adapter.Direct {
		d := p.Decide(adapter.Arrival{Conversation: adapter.Conversation{Kind: adapter.Direct, ID: room}, Author: adapter.Author{ID: inviter}})
		return d.Refused == "" || d.Pair
	}
	return p.Groups != adapter.GroupsClosed && (len(p.AllowGroups) == 0 || slices.Contains(p.AllowGroups, room))
}

// transient reports whether a call's failure may pass when made again (a rate limit, the
// homeserver unavailable): the sync's batch is then read again; any other (the room is gone, the
// bot was removed from it) will not, and the event is skipped.
func transient(err error) bool {
	var pe *profile.Error
	_, again := adapter.RetryAfterOf(err)
	return again || !errors.As(err, &pe) || pe.Code == profile.CodeTargetUnavailable
}

// botEvents passes each message event of room (a room no channel PUT binds) to the feed's bots:
// Admit decides on it; what it admits is submitted through the admission's inbox, as a
// channel's message is.
func (s *syncer) botEvents(ctx context.Context, room id.RoomID, events []*event.Event) error {
	for _, ev := range events {
		if ev.Sender == s.user || ev.Type != event.EventMessage {
			continue
		}
		c, ok := contentOf(ev)
		if !ok {
			continue
		}
		var takers []adapter.Bot
		for _, b := range s.bots {
			if !b.Predates(ev.Timestamp) {
				takers = append(takers, b)
			}
		}
		if len(takers) == 0 {
			continue
		}
		info, err := s.acc.room(ctx, room)
		if err != nil {
			if transient(err) {
				return err
			}
			s.log.Warn("matrix_room_unreadable", "room", room, "event_id", ev.ID, "err", err)
			continue
		}
		if info.encrypted {
			s.log.Warn("matrix_room_encrypted", "room", room, "event_id", ev.ID)
			continue
		}
		arrival, err := s.arrival(ctx, room, ev, c, info)
		if err != nil {
			return err
		}
		for _, b := range takers {
			adm, err := s.feed.Admit(ctx, b, arrival)
			if err != nil {
				return err
			}
			if !adm.Admitted() {
				continue
			}
			if err := s.a.receive(ctx, s.acc, ev, c, adm.Inbox, s.log.With("channel", adm.Channel.ID, "bot", b.ID)); err != nil {
				return err
			}
		}
	}
	return nil
}

// arrival is what a bot's policy sees of a message event: the room's kind (direct: in the
// account's m.direct, or of two members), its title (a direct room's: the author's name), the
// author (a bot when the event is an m.notice or was sent by ximd: Matrix has no bot flag), and
// whether it mentions the account (m.mentions, its user id or display name in the body, a reply
// to its event). The mention is removed from c's body.
func (s *syncer) arrival(ctx context.Context, room id.RoomID, ev *event.Event, c *msgContent, info *roomInfo) (adapter.Arrival, error) {
	kind := adapter.Group
	if s.acc.isDirect(room) || len(info.members) == 2 {
		kind = adapter.Direct
	}
	author := adapter.Author{ID: string(ev.Sender), DisplayName: info.members[ev.Sender],
		IsBot: c.MsgType == string(event.MsgNotice) || c.XimdKey != ""}
	title := info.name
	if kind == adapter.Direct {
		title = cmpOr(author.DisplayName, author.ID)
	}
	text := isText(c.MsgType)
	mentioned := c.Mentions != nil && slices.Contains(c.Mentions.UserIDs, s.user)
	if c.RelatesTo != nil && c.RelatesTo.InReplyTo != nil {
		if text && !c.formatted {
			c.Body = withoutReplyFallback(c.Body)
		}
		if !mentioned && kind == adapter.Group {
			var replied *event.Event
			err := s.acc.call("event", func() error {
				var err error
				replied, err = s.acc.cli.GetEvent(ctx, room, c.RelatesTo.InReplyTo.EventID)
				if errors.Is(err, mautrix.MNotFound) || errors.Is(err, mautrix.MForbidden) {
					return nil // redacted, or not visible: not a reply to the bot
				}
				return err
			})
			if err != nil && transient(err) {
				return adapter.Arrival{}, err
			}
			mentioned = err == nil && replied != nil && replied.Sender == s.user
		}
	}
	if text {
		var named bool
		names := []string{string(s.user), info.members[s.user]}
		if c.formatted { // the Markdown of a mention's text, escaped as text is
			names = append(names, MarkdownOf(html.EscapeString(string(s.user))), MarkdownOf(html.EscapeString(info.members[s.user])))
		}
		c.Body, named = withoutMention(c.Body, names...)
		mentioned = mentioned || named
	}
	return adapter.Arrival{Conversation: adapter.Conversation{Kind: kind, ID: string(room), Title: title}, Author: author, Mentioned: mentioned}, nil
}

func isText(msgtype string) bool {
	switch event.MessageType(msgtype) {
	case event.MsgText, event.MsgNotice, event.MsgEmote:
		return true
	}
	return false
}

func cmpOr(a, b string) string {
	if a != "" {
		return a
	}
	return b
}

// withoutMention is body without the account's mentions (its user id, its display name as a
// whole word, case-insensitive, with an '@' before it and a ':' or ',' after it, as clients
// write a mention pill in the plain body), and whether it had one.
func withoutMention(body string, names ...string) (string, bool) {
	found := false
	for _, name := range names {
		if name == "" {
			continue
		}
		var b strings.Builder
		last := 0
		for i := 0; i+len(name) <= len(body); {
			end := i + len(name)
			if !strings.EqualFold(body[i:end], name) || !wordEdge(body, i, end) {
				_, size := utf8.DecodeRuneInString(body[i:])
				i += size
				continue
			}
			start := i
			if start > 0 && body[start-1] == '@' {
				start--
			}
			for end < len(body) && (body[end] == ':' || body[end] == ',') {
				end++
			}
			if strings.HasSuffix(body[last:start], " ") && strings.HasPrefix(body[end:], " ") {
				end++ // one space where the mention was
			}
			b.WriteString(body[last:start])
			last, i, found = end, end, true
		}
		b.WriteString(body[last:])
		body = b.String()
	}
	if !found {
		return body, false
	}
	return strings.TrimSpace(body), true
}

// wordEdge reports whether body[i:end] is a whole word: no letter or digit just before or after.
func wordEdge(body string, i, end int) bool {
	inWord := func(r rune) bool { return unicode.IsLetter(r) || unicode.IsDigit(r) }
	before, _ := utf8.DecodeLastRuneInString(body[:i])
	after, _ := utf8.DecodeRuneInString(body[end:])
	return (i == 0 || !inWord(before)) && (end == len(body) || !inWord(after))
}

// withoutReplyFallback is a reply's body without the quoted lines older clients put before it.
func withoutReplyFallback(body string) string {
	if !strings.HasPrefix(body, "> ") {
		return body
	}
	lines := strings.Split(body, "\n")
	i := 0
	for i < len(lines) && strings.HasPrefix(lines[i], ">") {
		i++
	}
	return strings.TrimLeft(strings.Join(lines[i:], "\n"), "\n")
}

// roomInfo is what a bot knows of a room: its joined members (and their display names), its
// name, whether it is encrypted. Kept until an event changes one of them.
type roomInfo struct {
	members   map[id.UserID]string
	name      string
	encrypted bool
}

// room is the account's roomInfo of room (read once, until forget).
func (acc *account) room(ctx context.Context, room id.RoomID) (*roomInfo, error) {
	acc.mu.Lock()
	info := acc.rooms[room]
	acc.mu.Unlock()
	if info != nil {
		return info, nil
	}
	info = &roomInfo{members: map[id.UserID]string{}}
	err := acc.call("joined_members", func() error {
		resp, err := acc.cli.JoinedMembers(ctx, room)
		if err != nil {
			return err
		}
		for u, m := range resp.Joined {
			info.members[u] = m.DisplayName
		}
		return nil
	})
	if err != nil {
		return nil, err
	}
	var name event.RoomNameEventContent
	var enc event.EncryptionEventContent
	for _, st := range []struct {
		typ event.Type
		out any
	}{{event.StateRoomName, &name}, {event.StateEncryption, &enc}} {
		err := acc.call("state", func() error {
			err := acc.cli.StateEvent(ctx, room, st.typ, "", st.out)
			if errors.Is(err, mautrix.MNotFound) {
				return nil
			}
			return err
		})
		if err != nil {
			return nil, err
		}
	}
	info.name, info.encrypted = name.Name, enc.Algorithm != ""
	acc.mu.Lock()
	if acc.rooms == nil {
		acc.rooms = map[id.RoomID]*roomInfo{}
	}
	acc.rooms[room] = info
	acc.mu.Unlock()
	return info, nil
}

// forget drops what the account knows of room (its members, name or encryption changed).
func (acc *account) forget(room id.RoomID) {
	acc.mu.Lock()
	delete(acc.rooms, room)
	acc.mu.Unlock()
}

// setDirect takes the account's m.direct content (user -> their direct rooms).
func (acc *account) setDirect(raw json.RawMessage) {
	var c event.DirectChatsEventContent
	if json.Unmarshal(raw, &c) != nil {
		return
	}
	direct := map[id.RoomID]bool{}
	for _, rooms := range c {
		for _, r := range rooms {
			direct[r] = true
		}
	}
	acc.mu.Lock()
	acc.direct = direct
	acc.mu.Unlock()
}

func (acc *account) isDirect(room id.RoomID) bool {
	acc.mu.Lock()
	defer acc.mu.Unlock()
	return acc.direct[room]
}

// markDirect adds room, a direct room with user, to the account's m.direct, as a client does on
// joining a direct invitation: the room stays direct when more people join it.
func (acc *account) markDirect(ctx context.Context, user id.UserID, room id.RoomID) error {
	acc.mu.Lock()
	if acc.direct == nil {
		acc.direct = map[id.RoomID]bool{}
	}
	acc.direct[room] = true
	acc.mu.Unlock()
	c := event.DirectChatsEventContent{}
	err := acc.call("account_data", func() error {
		err := acc.cli.GetAccountData(ctx, event.AccountDataDirectChats.Type, &c)
		if errors.Is(err, mautrix.MNotFound) {
			return nil
		}
		return err
	})
	if err != nil {
		return err
	}
	if slices.Contains(c[user], room) {
		return nil
	}
	c[user] = append(c[user], room)
	return acc.call("account_data", func() error {
		return acc.cli.SetAccountData(ctx, event.AccountDataDirectChats.Type, c)
	})
}
