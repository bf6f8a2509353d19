package matrix

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"slices"
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
	// syncTimelineLimit bounds the events one /sync returns; a gap beyond it is read back with
	// /messages, so none is skipped.
	syncTimelineLimit = 100
)

var _ adapter.Poller = (*Adapter)(nil)

// MessageIDOf is the message_id of the user message of a Matrix event: the same event always
// gives the same message, so a sync read twice (a restart, a handover) is one message.
func MessageIDOf(eventID id.EventID) string {
	sum := sha256.Sum256([]byte(eventID))
	return "mx_" + hex.EncodeToString(sum[:16])
}

// PollKey implements adapter.Poller: each channel syncs its own room (its key is its id), so a
// room bound or re-bound starts its own position and nothing else's.
func (a *Adapter) PollKey(ch adapter.Channel) string { return ch.ID }

// Poll implements adapter.Poller: /sync long-polls filtered to the channel's room, from the sync
// token in the feed's cursor (the first poll of a channel takes what was said from its binding
// on, adapter.BindGrace included: before it, the room was not the agent's). Each message event of someone other than the bot becomes a
// user message, its media copied into the Transfer Plane; the token is saved after the events
// before it are submitted, so a restart replays at most the last batch, which the message_id
// makes one message each.
func (a *Adapter) Poll(ctx context.Context, feed adapter.Feed) error {
	if n := len(feed.Channels()); n != 1 {
		return fmt.Errorf("matrix: a poll key serves one channel, not %d", n)
	}
	p, _, err := a.StartPoll(feed)
	if err != nil {
		return err
	}
	ch, c := p.Channels[0], p.Account
	in := feed.Inbox(ch.ID)
	acc, err := a.account(c)
	if err != nil {
		return err
	}
	room := id.RoomID(c.roomID)
	bot, err := acc.user(ctx)
	if err != nil {
		return mapErr("whoami", err)
	}
	filter, err := acc.roomFilter(ctx, room)
	if err != nil {
		return err
	}
	since, err := feed.Cursor(ctx)
	if err != nil {
		return err
	}
	log := a.Logger.With("channel", ch.ID)
	if since == "" {
		// The channel's first poll: what was said from its binding on is the agent's, the
		// initial sync's timeline read back as far as that.
		resp, err := acc.sync(ctx, 0, "", filter)
		if err != nil {
			return err
		}
		from := ch.Since()
		var events []*event.Event
		if joined := resp.Rooms.Join[room]; joined != nil {
			events = joined.Timeline.Events
			if joined.Timeline.Limited && joined.Timeline.PrevBatch != "" {
				back, err := acc.gap(ctx, room, joined.Timeline.PrevBatch, "", from)
				if err != nil {
					return err
				}
				events = append(back, events...)
			}
		}
		for _, ev := range events {
			if ev.Sender == bot || ev.Type != event.EventMessage || ev.Timestamp < from {
				continue
			}
			if err := a.receive(ctx, acc, ev, in, log); err != nil {
				return err
			}
		}
		if err := feed.SaveCursor(ctx, resp.NextBatch); err != nil {
			return err
		}
		since = resp.NextBatch
	}
	for {
		resp, err := acc.sync(ctx, a.sync, since, filter)
		if err != nil {
			return err
		}
		var events []*event.Event
		if joined := resp.Rooms.Join[room]; joined != nil { // nil: nothing new in the room
			events = joined.Timeline.Events
			if joined.Timeline.Limited && joined.Timeline.PrevBatch != "" {
				gap, err := acc.gap(ctx, room, joined.Timeline.PrevBatch, since, 0)
				if err != nil {
					return err
				}
				events = append(gap, events...)
			}
		}
		for _, ev := range events {
			if ev.Sender == bot || ev.Type != event.EventMessage {
				continue
			}
			if err := a.receive(ctx, acc, ev, in, log); err != nil {
				return err
			}
		}
		if err := feed.SaveCursor(ctx, resp.NextBatch); err != nil {
			return err
		}
		since = resp.NextBatch
	}
}

// receive submits the user message of one event (edits, redactions and unknown kinds are not
// messages). A message the profile refuses is logged and skipped; any other failure is returned
// (the batch is read again).
func (a *Adapter) receive(ctx context.Context, acc *account, ev *event.Event, in adapter.Inbox, log *slog.Logger) error {
	var c struct {
		MsgType   string `json:"msgtype"`
		Body      string `json:"body"`
		Filename  string `json:"filename"`
		URL       string `json:"url"`
		RelatesTo *struct {
			RelType string `json:"rel_type"`
		} `json:"m.relates_to"`
		Info struct {
			MimeType string `json:"mimetype"`
		} `json:"info"`
	}
	if json.Unmarshal(ev.Content.VeryRaw, &c) != nil || (c.RelatesTo != nil && c.RelatesTo.RelType == "m.replace") {
		return nil
	}
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

// roomFilter returns the id of the account's sync filter for room (created once per room).
func (acc *account) roomFilter(ctx context.Context, room id.RoomID) (string, error) {
	acc.mu.Lock()
	fid, ok := acc.filters[room]
	acc.mu.Unlock()
	if ok {
		return fid, nil
	}
	none := &mautrix.FilterPart{NotTypes: []event.Type{{Type: "*"}}}
	f := &mautrix.Filter{
		AccountData: none, Presence: none,
		Room: &mautrix.RoomFilter{
			Rooms:    []id.RoomID{room},
			Timeline: &mautrix.FilterPart{Types: []event.Type{event.EventMessage}, Limit: syncTimelineLimit},
			State:    none, Ephemeral: none, AccountData: none,
		},
	}
	var resp *mautrix.RespCreateFilter
	err := acc.call("filter", func() error {
		var err error
		resp, err = acc.cli.CreateFilter(ctx, f)
		return err
	})
	if err != nil {
		return "", err
	}
	acc.mu.Lock()
	if acc.filters == nil {
		acc.filters = map[id.RoomID]string{}
	}
	acc.filters[room] = resp.FilterID
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

// gap reads the room's message events back from a limited sync's prev_batch to the token to
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
