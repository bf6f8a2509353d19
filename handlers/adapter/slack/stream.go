package slack

import (
	"context"
	"errors"
	"strings"

	"github.com/slack-go/slack"

	"github.com/ximd/ximd/handlers/adapter"
	"github.com/ximd/ximd/profile"
)

// startStream starts a native stream with the text so far (in the channel's thread, or the
// replied-to message's).
func (t *Target) startStream(ctx context.Context, m adapter.Message) (string, error) {
	text := formOf(preview(m.Text)).md
	opts := []slack.MsgOption{slack.MsgOptionMarkdownText(text), slack.MsgOptionMetadata(metadata(m.IdempotencyKey, 0, false, ""))}
	if th := t.thread(m.ReplyTo); th != "" {
		opts = append(opts, slack.MsgOptionTS(th))
		if team, user := t.recipient(ctx, th); user != "" {
			opts = append(opts, slack.MsgOptionRecipientTeamID(team), slack.MsgOptionRecipientUserID(user))
		}
	}
	var ts string
	err := t.ws.call(ctx, "chat.startStream", t.cfg.channelID, func(ctx context.Context) (err error) {
		_, ts, err = t.ws.api.StartStreamContext(ctx, t.cfg.channelID, opts...)
		return err
	})
	if err != nil {
		return "", err
	}
	t.ws.mu.Lock()
	t.ws.shown[ts] = text
	t.ws.mu.Unlock()
	return ts, nil
}

// recipient is who a stream in a thread outside a DM is for ("chat.startStream":
// recipient_user_id and recipient_team_id, "Required when streaming to channels"): the person
// who started the thread, in the bot's workspace; "" in a DM, or when it cannot be told (Slack
// then refuses the stream or not, as it sees fit).
func (t *Target) recipient(ctx context.Context, thread string) (team, user string) {
	l := t.ws.lookups
	if l.conversation(ctx, t.ws, t.cfg.channelID).im {
		return "", ""
	}
	me, err := t.ws.identity(ctx)
	if err != nil {
		return "", ""
	}
	return me.team, l.threadStarter(ctx, t.ws, t.cfg.channelID, thread)
}

// editStream applies a streamed message's text to its stream: the Markdown form of the text so
// far, of which what is new is appended, and the final stops the stream (its further parts and
// files follow, then the final mark). done is false when the message is not a stream this process
// can continue (it was stopped, or what it shows is unknown or not a prefix of the new form, as
// when a table completes): the caller then updates it whole, as a markdown block.
func (t *Target) editStream(ctx context.Context, ts string, m adapter.Message) (done bool, err error) {
	t.ws.mu.Lock()
	shown, known := t.ws.shown[ts]
	t.ws.mu.Unlock()
	parts := split(m.Text)
	src := preview(m.Text)
	if m.Final {
		src = parts[0]
	}
	text := formOf(src).md
	if !known {
		// Another process streamed it (a restart, a hand-over): what it shows tells.
		msg, found, err := t.find(ctx, func(msg slack.Message) bool { return msg.Timestamp == ts })
		if err != nil || !found {
			return false, err
		}
		shown = msg.Text
	}
	if !strings.HasPrefix(text, shown) {
		if m.Final {
			_ = t.stop(ctx, ts, "", nil) // whatever it shows is replaced by the update
			t.forget(ts)
		}
		return !m.Final, nil // a preview that cannot be appended waits for the final
	}
	more := text[len(shown):]
	if !m.Final {
		if more == "" {
			return true, nil
		}
		err := t.ws.call(ctx, "chat.appendStream", t.cfg.channelID, func(ctx context.Context) error {
			_, _, err := t.ws.api.AppendStreamContext(ctx, t.cfg.channelID, ts, slack.MsgOptionMarkdownText(more))
			return err
		})
		if err == nil {
			t.ws.mu.Lock()
			t.ws.shown[ts] = text
			t.ws.mu.Unlock()
		}
		if slackCode(err) == "message_not_in_streaming_state" || codeIs(err, "message_not_in_streaming_state") {
			return true, nil // stopped meanwhile: the final updates it
		}
		return true, err
	}
	whole := len(parts) == 1 && len(m.Files) == 0
	md := metadata(m.IdempotencyKey, 0, whole, m.Text)
	if err := t.stop(ctx, ts, more, &md); err != nil {
		if codeIs(err, "message_not_in_streaming_state") {
			t.forget(ts)
			return false, nil // stopped by an earlier attempt: the update applies the final
		}
		return true, err
	}
	t.forget(ts)
	if whole {
		return true, nil
	}
	return true, t.finish(ctx, ts, m, parts)
}

// forget drops what this process knew of a stream that is stopped.
func (t *Target) forget(ts string) {
	t.ws.mu.Lock()
	delete(t.ws.shown, ts)
	t.ws.mu.Unlock()
}

// stop ends a stream, appending text (if any) and setting its metadata (if any).
func (t *Target) stop(ctx context.Context, ts, text string, md *slack.SlackMetadata) error {
	var opts []slack.MsgOption
	if text != "" {
		opts = append(opts, slack.MsgOptionMarkdownText(text))
	}
	if md != nil {
		opts = append(opts, slack.MsgOptionMetadata(*md))
	}
	return t.ws.call(ctx, "chat.stopStream", t.cfg.channelID, func(ctx context.Context) error {
		_, _, err := t.ws.api.StopStreamContext(ctx, t.cfg.channelID, ts, opts...)
		return err
	})
}

// codeIs reports whether a mapped refusal carries Slack's error code.
func codeIs(err error, code string) bool {
	var pe *profile.Error
	return errors.As(err, &pe) && strings.HasSuffix(pe.Message, ": "+code)
}

// Lookup implements adapter.Reconciler: the newest LookupMessages messages of the conversation
// (its thread, with thread_ts) are read with their metadata for the first part of the message
// with this idempotency key.
func (t *Target) Lookup(ctx context.Context, key string) (adapter.Shown, bool, error) {
	msg, found, err := t.find(ctx, func(msg slack.Message) bool {
		p := msg.Metadata.EventPayload
		return msg.Metadata.EventType == MetadataEventType && p["idempotency_key"] == key && partOf(p) == 0
	})
	if err != nil || !found {
		return adapter.Shown{}, false, err
	}
	p := msg.Metadata.EventPayload
	final, _ := p["final"].(bool)
	sha, _ := p["text_sha256"].(string)
	return adapter.Shown{ID: msg.Timestamp, Final: final, Text: msg.Text, TextSHA256: sha}, true, nil
}

func partOf(p map[string]any) int {
	f, ok := p["part"].(float64)
	if !ok {
		return -1
	}
	return int(f)
}

// find reads the conversation (or its thread) newest first, up to LookupMessages, for the
// first message match accepts.
func (t *Target) find(ctx context.Context, match func(slack.Message) bool) (slack.Message, bool, error) {
	cursor := ""
	for read := 0; read < LookupMessages; {
		var msgs []slack.Message
		var next string
		err := t.ws.call(ctx, "conversations.history", t.cfg.channelID, func(ctx context.Context) error {
			if t.cfg.threadTS != "" {
				m, _, nc, err := t.ws.api.GetConversationRepliesContext(ctx, &slack.GetConversationRepliesParameters{
					ChannelID: t.cfg.channelID, Timestamp: t.cfg.threadTS, Cursor: cursor, Limit: 200, IncludeAllMetadata: true})
				msgs, next = m, nc
				return err
			}
			resp, err := t.ws.api.GetConversationHistoryContext(ctx, &slack.GetConversationHistoryParameters{
				ChannelID: t.cfg.channelID, Cursor: cursor, Limit: 200, IncludeAllMetadata: true})
			if err == nil {
				msgs, next = resp.Messages, resp.ResponseMetaData.NextCursor
			}
			return err
		})
		if err != nil {
			return slack.Message{}, false, err
		}
		for _, m := range msgs {
			if match(m) {
				return m, true, nil
			}
		}
		read += len(msgs)
		if next == "" || len(msgs) == 0 {
			break
		}
		cursor = next
	}
	return slack.Message{}, false, nil
}

// upload shares a file from the Transfer Plane in the conversation (files.getUploadURLExternal,
// the upload, files.completeUploadExternal) and returns its file id.
func (t *Target) upload(ctx context.Context, f adapter.File, thread string) (string, error) {
	if t.a.Files == nil {
		return "", profile.Errorf(profile.CodeTargetDeliveryFailed, "slack: no file store to read %s from", f.FileRef)
	}
	var id string
	err := t.ws.call(ctx, "files.completeUploadExternal", t.cfg.channelID, func(ctx context.Context) error {
		meta, rc, err := t.a.Files.Open(ctx, f.FileRef)
		if err != nil {
			return err
		}
		defer rc.Close()
		sum, err := t.ws.api.UploadFileContext(ctx, slack.UploadFileParameters{Reader: rc, FileSize: int(meta.ByteSize), Filename: f.Filename,
			Title: f.Filename, Channel: t.cfg.channelID, ThreadTimestamp: thread})
		if err != nil {
			return err
		}
		id = sum.ID
		return nil
	})
	var pe *profile.Error
	if errors.As(err, &pe) && pe.Code == profile.CodeFileNotFound {
		return "", pe
	}
	return id, err
}
