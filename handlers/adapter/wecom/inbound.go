package wecom

import (
	"context"
	"encoding/json"
	"errors"
	"strings"
	"time"

	"github.com/ximd/ximd/handlers/adapter"
	"github.com/ximd/ximd/profile"
)

// inMsg is the body of an aibot_msg_callback (W-RX, W-LC) or aibot_event_callback (W-EV).
type inMsg struct {
	MsgID      string `json:"msgid"`
	AIBotID    string `json:"aibotid"`
	ChatID     string `json:"chatid"`
	ChatType   string `json:"chattype"` // single, group
	CreateTime int64  `json:"create_time"`
	From       struct {
		UserID string `json:"userid"`
	} `json:"from"`
	MsgType string  `json:"msgtype"` // text, image, mixed, voice, file, video, event
	Text    content `json:"text"`
	Voice   content `json:"voice"`
	Image   media   `json:"image"`
	File    media   `json:"file"`
	Video   media   `json:"video"`
	Mixed   struct {
		MsgItem []struct {
			MsgType string  `json:"msgtype"`
			Text    content `json:"text"`
			Image   media   `json:"image"`
		} `json:"msg_item"`
	} `json:"mixed"`
	Event struct {
		EventType string `json:"eventtype"`
	} `json:"event"`
}

type content struct {
	Content string `json:"content"`
}

type media struct {
	URL      string `json:"url"`
	AESKey   string `json:"aeskey"`
	FileName string `json:"filename"`
}

// conversation is the conversation a message was said in: the group's chatid, or the person's
// userid in a single chat (what aibot_send_msg's chatid takes).
func (m *inMsg) conversation() string {
	if m.ChatType == "group" {
		return m.ChatID
	}
	return m.From.UserID
}

// MessageIDOf is the message_id of the user message of a WeCom message: its msgid, so a callback
// made again is a duplicate.
func MessageIDOf(botID, msgID string) string { return "wc_" + digest(botID+":"+msgID) }

// MaxFileBytes bounds a person's file the adapter downloads.
const MaxFileBytes = 64 << 20

// PollKey implements adapter.Poller: the robot's long connection (every channel has one).
func (a *Adapter) PollKey(ch adapter.Channel) string {
	return a.PollKeyOf(ch, func(*config) bool { return true }, (*config).pollKey)
}

// Poll implements adapter.Poller: the robot's callbacks, from its one connection, into the
// channels of their conversations (and its bots) until ctx ends. The loop holds the connection:
// the robot's channels make their calls on it (hold.go). WeCom pushes callbacks and keeps
// no position to resume from, so the feed's cursor is not used.
func (a *Adapter) Poll(ctx context.Context, feed adapter.Feed) error {
	acct, err := a.pollAccount(feed)
	if acct == nil {
		return err
	}
	p := adapter.PollStart[*config]{Channels: feed.Channels(), Account: acct}
	cli, release := a.acquire(acct)
	defer release()
	unhold := func() {}
	if a.Relay != nil {
		unhold = a.Relay.Hold(acct.pollKey(), a.serve(cli, acct))
	}
	cli.polls.Add(1)
	for {
		select {
		case <-ctx.Done():
			unhold()
			cli.polls.Add(-1)
			if errors.Is(context.Cause(ctx), adapter.ErrPollMoved) {
				a.drain(feed, p, cli)
			}
			return ctx.Err()
		case cb := <-cli.inbox:
			a.handle(ctx, feed, p, cb)
		}
	}
}

// handOver bounds drain: the worker the robot moved to subscribes within it (it takes a poll
// key at most a second after the live set changed, or after it started and heard the others).
const handOver = 3 * time.Second

// drain passes on what the robot's connection still pushes after this poll loop ended because
// the robot moved to another worker (adapter.ErrPollMoved), until that worker subscribes the
// robot (a moment later), a poll loop here reads the connection again, or handOver passes:
// meanwhile WeCom pushes to this connection, and what it pushes would be lost (WeCom pushes a
// callback once).
func (a *Adapter) drain(feed adapter.Feed, p adapter.PollStart[*config], cli *client) {
	ctx, cancel := context.WithTimeout(context.Background(), handOver)
	defer cancel()
	cli.mu.Lock()
	takeovers := cli.takeovers
	cli.mu.Unlock()
	for cli.polls.Load() == 0 {
		select {
		case <-ctx.Done():
			return
		case <-takeovers:
			return
		case cb := <-cli.inbox:
			hctx, hcancel := context.WithTimeout(context.Background(), 10*time.Second)
			a.handle(hctx, feed, p, cb)
			hcancel()
		}
	}
}

// handle passes one callback on, trying again a few times when the inbox fails (WeCom does not
// call back again for a message it delivered).
func (a *Adapter) handle(ctx context.Context, feed adapter.Feed, p adapter.PollStart[*config], cb callback) {
	if cb.cmd != cmdMsg {
		return // events: entering a chat, card clicks, feedback, a takeover (conn.go)
	}
	var m inMsg
	if err := json.Unmarshal(cb.body, &m); err != nil || m.MsgID == "" {
		a.Logger.Warn("wecom_callback_unreadable", "bot_id", p.Account.botID)
		return
	}
	for try := 0; ; try++ {
		_, err := a.route(ctx, feed, p, m, cb.at)
		if err == nil || ctx.Err() != nil {
			return
		}
		if try == 4 {
			a.Logger.Error("wecom_message_lost", "bot_id", p.Account.botID, "err", err)
			return
		}
		select {
		case <-ctx.Done():
			return
		case <-time.After(time.Duration(1<<try) * 200 * time.Millisecond):
		}
	}
}

// route gives a message to the channel bound to its conversation, else to the robot's bots.
func (a *Adapter) route(ctx context.Context, feed adapter.Feed, p adapter.PollStart[*config], m inMsg, at time.Time) (adapter.Received, error) {
	conv := m.conversation()
	for _, ch := range p.Channels {
		c, err := parseConfig(ch.Target.Config)
		if err != nil || c.pollKey() != p.Account.pollKey() || c.conversation() != conv || (c.chatID != "") != (m.ChatType == "group") {
			continue
		}
		if ch.Predates(at.UnixMilli()) {
			return adapter.Ignored, nil
		}
		return a.receive(ctx, c, m, ch.ID, feed.Inbox(ch.ID), at)
	}
	return a.toBots(ctx, feed, p.Account, m, at)
}

// receive submits the user message of one callback.
func (a *Adapter) receive(ctx context.Context, c *config, im inMsg, channel string, in adapter.Inbox, at time.Time) (adapter.Received, error) {
	msgID := MessageIDOf(c.botID, im.MsgID)
	if seen, err := in.Seen(ctx, msgID); err != nil || seen {
		return adapter.Duplicate, err
	}
	m := profile.Message{MessageID: msgID, Text: a.text(c, im), CreatedAt: at.UnixMilli()}
	if im.CreateTime > 0 {
		m.CreatedAt = im.CreateTime * 1000
	}
	for _, f := range files(im) {
		if err := adapter.FileOrNote(ctx, in, &m, f.name, func() (profile.File, error) {
			data, err := download(ctx, a.HTTPClient, f.URL, f.AESKey, MaxFileBytes)
			if err != nil {
				return profile.File{}, err
			}
			return in.PutFile(ctx, adapter.StoredFile{Type: f.typ, Filename: f.name, MimeType: f.mime}, strings.NewReader(string(data)))
		}); err != nil {
			return "", err
		}
	}
	return adapter.Submit(ctx, in, m, a.Logger, "wecom_message_refused", channel)
}

// text is a message's text: a group's with the leading @mention of the robot removed.
func (a *Adapter) text(c *config, im inMsg) string {
	var t string
	switch im.MsgType {
	case "text":
		t = im.Text.Content
	case "voice":
		t = im.Voice.Content
	case "mixed":
		var parts []string
		for _, it := range im.Mixed.MsgItem {
			if it.MsgType == "text" {
				parts = append(parts, it.Text.Content)
			}
		}
		t = strings.Join(parts, "\n")
	}
	if im.ChatType == "group" {
		t, _ = stripMention(t, c.botName)
	}
	return t
}

// stripMention removes the leading "@BotName" of a group message (WeCom keeps it in the text):
// the configured name, or without one the leading @word. ok reports whether one was there.
func stripMention(t, name string) (string, bool) {
	s := strings.TrimLeft(t, " \u00a0")
	if !strings.HasPrefix(s, "@") {
		return t, false
	}
	if name != "" {
		if !strings.HasPrefix(s[1:], name) {
			return t, false
		}
		return strings.TrimLeft(s[1+len(name):], " \u00a0\u2005"), true
	}
	i := strings.IndexAny(s, " \u00a0\u2005\n")
	if i < 0 {
		return "", true
	}
	return strings.TrimLeft(s[i:], " \u00a0\u2005\n"), true
}

type inFile struct {
	media
	name, typ, mime string
}

// files are a message's files (image, file, video, a mixed message's images).
func files(im inMsg) []inFile {
	var out []inFile
	add := func(m media, typ, mime, def string) {
		if m.URL == "" {
			return
		}
		name := m.FileName
		if name == "" {
			name = def
		}
		out = append(out, inFile{media: m, name: name, typ: typ, mime: mime})
	}
	add(im.Image, "image", "image/jpeg", "image.jpg")
	add(im.File, "file", "application/octet-stream", "file")
	add(im.Video, "video", "video/mp4", "video.mp4")
	for i, it := range im.Mixed.MsgItem {
		if it.MsgType == "image" {
			add(it.Image, "image", "image/jpeg", "image"+string(rune('1'+i))+".jpg")
		}
	}
	return out
}
