// Package wecom is the `wecom` target adapter (edge-api §7.2.7): a channel bound to one
// conversation of a WeCom (企业微信) intelligent robot (智能机器人), a group (chat_id) or a person's
// single chat (user_id), through the robot's long connection.
//
// WeCom publishes no Go SDK for the long connection (its SDKs are Node.js and Python, and no Go
// module of it is served by the module proxy), so the protocol is written here on
// github.com/coder/websocket and the standard library's AES: one WebSocket to ws_url per robot,
// subscribed with {"cmd":"aibot_subscribe","body":{"bot_id","secret"}}, a ping every 30 s (two
// unanswered: reconnect), reconnections 1 s doubling to 30 s; every command is answered with its
// req_id, and the next command of a req_id waits for the previous one's answer (conn.go).
//
// Out: an answer is a reply to the person's latest message in the conversation (the req_id of its
// aibot_msg_callback, 24 hours): aibot_respond_msg with a stream message {"id", "finish",
// "content"}, the stream id derived from the idempotency key, every frame the whole text so far
// and the final one finish: true. A stream takes frames for 6 minutes (846608 after that): a
// final past them, or with no message to reply to (the robot has not been written to since,
// streaming "none", a second answer to one message), is a proactive aibot_send_msg markdown
// message. Content is at most 20,480 bytes: a longer final is split between Markdown blocks
// (the rest as proactive messages). A conversation takes 30 replies and pushes a minute and
// 1,000 an hour: preview frames leave a reserve for finals and wait (RetryAfterError) when it
// is reached. Files go up in chunks (aibot_upload_media_init/_chunk/_finish) and out as file or
// image messages. In doubt, a streamed answer is settled by its stream id (a frame with the same
// id updates the one bubble); a proactive message has no key: delivery_outcome_unknown.
//
// Activity (activity.go): a <think></think> stream frame replying to the person's latest
// message while xAgent thinks; the answer streams into the same bubble.
//
// In: the same connection's aibot_msg_callback frames (a Poller keyed by the robot: one loop,
// one connection per robot, serving its channels and bots); WeCom asks no acknowledgement of a
// callback. The message_id is derived from msgid, so a callback WeCom makes again is a
// duplicate. Files come by URL, AES-256-CBC encrypted with their own aeskey (IV its first 16
// bytes, PKCS#7 to 32 bytes), and are decrypted into the Transfer Plane.
//
// One connection per robot across all workers (hold.go): the robot's poll loop holds it, and
// the channels' calls run there, relayed from other processes (adapter.Relay).
package wecom

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"strconv"
	"strings"
	"time"

	"github.com/ximd/ximd/handlers/adapter"
)

// Name is the adapter's name in a channel's target binding.
const Name = "wecom"

// Options configure the adapter.
type Options struct {
	// Common: the logger, the HTTP client (file downloads; default a 30 s timeout) and the file
	// source of a final's files (required for files out).
	adapter.Common
	// Timing of the long connection (defaults: WeCom's).
	Timing Timing
}

// Adapter binds channels to WeCom robot conversations. One client (one long connection) per
// robot is held by the robot's poll loop, in one process; every channel's calls run on it there
// (hold.go).
type Adapter struct {
	adapter.Platform[*config, publicConfig, *client]
	timing Timing
}

// New returns the adapter.
func New(opts Options) *Adapter {
	a := &Adapter{timing: opts.Timing}
	a.Init(Name, opts.Common, 30*time.Second, parseConfig, (*config).public, a.open)
	return a
}

func (a *Adapter) open(c *config) (adapter.Target, error) {
	return &Target{a: a, cfg: c}, nil
}

var (
	_ adapter.Target         = (*Target)(nil)
	_ adapter.Editor         = (*Target)(nil)
	_ adapter.ActivityShower = (*Target)(nil)
	_ adapter.Prober         = (*Adapter)(nil)
)

// Probe implements adapter.Prober: the robot's subscribe succeeds with its secret.
func (a *Adapter) Probe(ctx context.Context, ch adapter.Channel) error {
	c, err := parseConfig(ch.Target.Config)
	if err != nil {
		return err
	}
	return a.probe(ctx, c)
}

// Target is one channel's conversation. Its calls run on the robot's connection, in the process
// that holds it (hold.go); line is what they do there.
type Target struct {
	a   *Adapter
	cfg *config
}

// Send implements adapter.Sender: a stream's first frame or its only one (a final replying to
// the person's latest message), else a proactive message.
func (t *Target) Send(ctx context.Context, m adapter.Message) (string, error) {
	return t.a.call(ctx, t.cfg, call{Op: opSend, Message: &m})
}

// Edit implements adapter.Editor: the stream's next frame, or its final one.
func (t *Target) Edit(ctx context.Context, id string, m adapter.Message) error {
	_, err := t.a.call(ctx, t.cfg, call{Op: opEdit, ID: id, Message: &m})
	return err
}

// ShowActivity implements adapter.ActivityShower (activity.go).
func (t *Target) ShowActivity(ctx context.Context, act adapter.Activity) error {
	_, err := t.a.call(ctx, t.cfg, call{Op: opActivity, Activity: &act})
	return err
}

// line is one channel's conversation on the robot's connection cli.
type line struct {
	a   *Adapter
	cli *client
	cfg *config
}

// Capabilities implements adapter.Target.
func (t *Target) Capabilities() adapter.Capabilities {
	c := adapter.Capabilities{Streaming: adapter.StreamingEdit, Activity: adapter.ActivityStatus, Reply: adapter.ReplyNone,
		InDoubt: adapter.InDoubtEdit, MaxTextLength: MaxContentBytes, MinEditInterval: FrameInterval, FirstPreviewWords: t.cfg.firstWords}
	if t.cfg.streaming == adapter.StreamingNone {
		// No stream bubbles: no thinking bubble either (it would stay behind, empty, above
		// every proactive answer).
		c.Streaming, c.InDoubt, c.MinEditInterval, c.Activity = adapter.StreamingNone, adapter.InDoubtUnknown, 0, adapter.ActivityNone
	}
	return c
}

// FrameInterval spaces the frames of one stream: 20 a minute at most, leaving a third of the
// conversation's 30 for finals and pushes.
const FrameInterval = 3 * time.Second

// streamID is the stream id of the message with idempotency key key: the same on every attempt.
func streamID(key string) string {
	sum := sha256.Sum256([]byte(key))
	return "ximd_" + hex.EncodeToString(sum[:12])
}

// A target message id is "<stream id>@<req_id>" for an answer streamed as a reply ("<stream
// id>@" while it waits for nothing to reply to: its final goes proactive), and the req_id of
// the first aibot_send_msg (the stream id) for a proactive message.
func splitID(id string) (sid, reqID string) {
	sid, reqID, _ = strings.Cut(id, "@")
	return sid, reqID
}

// sendMessage is Target.Send on the connection.
func (l *line) sendMessage(ctx context.Context, m adapter.Message) (string, error) {
	sid := streamID(m.IdempotencyKey)
	if l.cfg.streaming == StreamingStream {
		if stream, req, ok := l.cli.takeReply(l.cfg.conversation(), sid); ok {
			return stream + "@" + req, l.streamed(ctx, stream, req, m)
		}
		if !m.Final {
			return sid + "@", nil // nothing to reply to: the final goes proactive
		}
	}
	return sid, l.proactive(ctx, sid, m)
}

// edit is Target.Edit on the connection.
func (l *line) edit(ctx context.Context, id string, m adapter.Message) error {
	sid, req := splitID(id)
	if req == "" {
		if !m.Final {
			return nil
		}
		return l.proactive(ctx, sid, m)
	}
	return l.streamed(ctx, sid, req, m)
}

// streamed sends a stream frame of m replying to req: a preview of the text so far, or the
// final (its first part finishing the stream; further parts and files proactive). A stream past
// its 6 minutes shows no more previews and its final goes proactive.
func (l *line) streamed(ctx context.Context, sid, req string, m adapter.Message) error {
	if m.Final && strings.TrimSpace(m.Text) == "" {
		return l.filesOnly(ctx, sid, req, m.Files)
	}
	if l.cli.streamAge(sid) > streamLife-10*time.Second {
		if !m.Final {
			return nil
		}
		return l.proactive(ctx, sid+"_late", m)
	}
	if !m.Final {
		err := l.frame(ctx, sid, req, preview(m.Text), false)
		if over(err) {
			l.cli.streamOver(sid)
			return nil // the rest shows at the final
		}
		return err
	}
	parts := split(m.Text)
	err := l.frame(ctx, sid, req, parts[0], true)
	if over(err) {
		l.cli.streamOver(sid)
		l.a.Logger.Info("wecom_stream_over", "bot_id", l.cfg.botID, "errcode", codeOf(err))
		return l.proactive(ctx, sid+"_late", m)
	}
	if err != nil {
		return err
	}
	return l.pushRest(ctx, sid, parts[1:], m.Files)
}

// over reports whether err says WeCom takes no more frames of the stream: its 6 minutes are over
// (846608) or its req_id is no longer answered (846605).
func over(err error) bool {
	c := codeOf(err)
	return c == errStreamExpired || c == errBadReqID
}

// filesOnly delivers a final without text replying to req: a bubble already shown (a thinking
// one) is finished empty, as a cleared thinking status finishes it, and the files follow as
// messages of their own; an empty stream message is never sent.
func (l *line) filesOnly(ctx context.Context, sid, req string, files []adapter.File) error {
	if l.cli.streamStarted(sid) && l.cli.streamAge(sid) <= streamLife-10*time.Second {
		if err := l.cli.budgeted(ctx, l.cfg.conversation(), true, false, cmdRespond, req, thinkFrame(sid, thinkContent(""), true)); err != nil && !over(err) {
			return err
		}
	}
	return l.pushRest(ctx, sid, nil, files)
}

// frame sends one stream frame: aibot_respond_msg with req and the stream's whole content.
func (l *line) frame(ctx context.Context, sid, req, text string, finish bool) error {
	body := map[string]any{"msgtype": "stream", "stream": map[string]any{"id": sid, "finish": finish, "content": render(text)}}
	return l.cli.budgeted(ctx, l.cfg.conversation(), finish, false, cmdRespond, req, body)
}

// proactive sends m as aibot_send_msg markdown messages (split), then its files; the first
// message's req_id is base, the others base_<n>.
func (l *line) proactive(ctx context.Context, base string, m adapter.Message) error {
	parts := split(m.Text)
	if strings.TrimSpace(m.Text) == "" {
		parts = nil
	}
	if len(parts) > 0 {
		if err := l.push(ctx, base, parts[0]); err != nil {
			return err
		}
		return l.pushRest(ctx, base, parts[1:], m.Files)
	}
	return l.pushRest(ctx, base, nil, m.Files)
}

// pushRest sends a message's further parts and its files as proactive messages.
func (l *line) pushRest(ctx context.Context, base string, parts []string, files []adapter.File) error {
	for i, p := range parts {
		if err := l.push(ctx, base+"_"+strconv.Itoa(i+1), p); err != nil {
			return err
		}
	}
	for i, f := range files {
		if err := l.sendFile(ctx, base+"_f"+strconv.Itoa(i), f); err != nil {
			return err
		}
	}
	return nil
}

// push sends one proactive markdown message.
func (l *line) push(ctx context.Context, reqID, text string) error {
	return l.send(ctx, reqID, map[string]any{"chatid": l.cfg.conversation(), "msgtype": "markdown", "markdown": map[string]any{"content": render(text)}})
}

// send is one aibot_send_msg within the conversation's budget.
func (l *line) send(ctx context.Context, reqID string, body map[string]any) error {
	return l.cli.budgeted(ctx, l.cfg.conversation(), true, false, cmdSend, reqID, body)
}

// errNoFiles: a final with files, and no file source to read them from.
var errNoFiles = errors.New("wecom: no file source")
