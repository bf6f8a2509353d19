package telegram

import (
	"context"
	"errors"
	"strconv"

	"github.com/go-telegram/bot"
	"github.com/go-telegram/bot/models"

	"github.com/ximd/ximd/handlers/adapter"
	"github.com/ximd/ximd/handlers/adapter/markdown"
	"github.com/ximd/ximd/profile"
)

// sentText is what an account remembers of a text it sent: the form a streamed message or a
// draft is shown in (so it keeps editing in the form that worked), and for a final its messages
// planned and the ids of those sent (so a retry goes on from the first not sent).
type sentText struct {
	form form
	plan []piece
	ids  []int
}

// Keys of sentText: a final by its idempotency key, a streamed message by its id, a draft by
// its message's key.
func finalKey(key string) string { return "final:" + key }
func msgKey(id int) string       { return "msg:" + strconv.Itoa(id) }
func draftKey(key string) string { return "draft:" + key }

// firstForm is the form a new text is tried in: rich, or HTML once the server said it has no
// rich messages.
func (acc *account) firstForm() form {
	acc.mu.Lock()
	defer acc.mu.Unlock()
	if acc.noRich {
		return formHTML
	}
	return formRich
}

// state returns the sentText of key, made (with form f) when there is none.
func (acc *account) state(key string, f form) sentText {
	acc.mu.Lock()
	defer acc.mu.Unlock()
	st, ok := acc.sent[key]
	if !ok {
		return sentText{form: f}
	}
	return sentText{form: st.form, plan: append([]piece(nil), st.plan...), ids: append([]int(nil), st.ids...)}
}

// save remembers st under key, forgetting the oldest key past maxSentKeys.
func (acc *account) save(key string, st sentText) {
	acc.mu.Lock()
	defer acc.mu.Unlock()
	if _, ok := acc.sent[key]; !ok {
		acc.order = append(acc.order, key)
		if len(acc.order) > maxSentKeys {
			delete(acc.sent, acc.order[0])
			acc.order = acc.order[1:]
		}
	}
	acc.sent[key] = &st
}

// fellBack counts and logs one fall-back to a simpler form; a server without rich messages is
// remembered, so the account's next texts start with HTML.
func (t *Target) fellBack(reason string) {
	if reason == "rich_unsupported" {
		t.acc.mu.Lock()
		t.acc.noRich = true
		t.acc.mu.Unlock()
	}
	t.a.Fallback(Name, reason)
}

// Send implements adapter.Sender: a final's text and files, or the first streamed part (as
// much as one message holds). The text goes as a rich message, else (refused) in HTML, else as
// plain text. The target message id is the first message's id. A split final retried after a
// failure goes on from the first part not sent.
func (t *Target) Send(ctx context.Context, m adapter.Message) (string, error) {
	if !m.Final {
		if err := t.acc.budget(ctx, t.cfg.chatID, t.cfg.interval(), false); err != nil {
			return "", err
		}
		for f := t.acc.firstForm(); ; f++ {
			id, err := t.sendPiece(ctx, piece{src: preview(m.Text, f), form: f}, m.ReplyTo)
			if reason := refusalOf(f, err); reason != "" && f < formPlain {
				t.fellBack(reason)
				continue
			}
			if err != nil {
				return "", err
			}
			t.acc.save(msgKey(id), sentText{form: f})
			return strconv.Itoa(id), nil
		}
	}
	ids, err := t.sendParts(ctx, m, 0, m.ReplyTo)
	if err != nil {
		return "", err
	}
	return strconv.Itoa(ids[0]), nil
}

// Edit implements adapter.Editor: the streamed message shows the text so far (as much as it
// holds), or the final: its first part in the message, the rest and the files as messages after
// it. The message keeps the form it was first shown in; refused, it falls back.
func (t *Target) Edit(ctx context.Context, targetMessageID string, m adapter.Message) error {
	id, err := strconv.Atoi(targetMessageID)
	if err != nil {
		return profile.Errorf(profile.CodeTargetDeliveryFailed, "telegram: target message id %q is not a message id", targetMessageID)
	}
	if !m.Final {
		if err := t.acc.budget(ctx, t.cfg.chatID, t.cfg.interval(), false); err != nil {
			return err
		}
		st := t.acc.state(msgKey(id), t.acc.firstForm())
		for f := st.form; ; f++ {
			err := t.editPiece(ctx, id, piece{src: preview(m.Text, f), form: f})
			if reason := refusalOf(f, err); reason != "" && f < formPlain {
				t.fellBack(reason)
				continue
			}
			if err == nil && f != st.form {
				t.acc.save(msgKey(id), sentText{form: f})
			}
			return err
		}
	}
	_, err = t.sendParts(ctx, m, id, "")
	return err
}

// sendParts delivers a final: its text as the messages its form holds, then its files (the text
// as the only file's caption where it fits). With edit != 0 the first part replaces that
// message's text, in the form the message shows. A part refused in its form is sent, once, in
// the next simpler form (split again where that form holds less). It returns the message ids.
func (t *Target) sendParts(ctx context.Context, m adapter.Message, edit int, replyTo string) ([]int, error) {
	key := finalKey(m.IdempotencyKey)
	start := t.acc.firstForm()
	if edit != 0 {
		start = t.acc.state(msgKey(edit), start).form
	}
	st := t.acc.state(key, start)
	if edit != 0 && len(st.ids) == 0 {
		st.plan = nil // a final edit not started: planned afresh from the message's form
	}
	caption := ""
	plain := markdown.Parse(m.Text).Plain()
	if len(m.Files) == 1 && edit == 0 && utf16Len(plain) <= MaxCaptionLength {
		caption = plain // the text rides on the file, as plain text (a caption has no rich form)
	}
	if st.plan == nil && caption == "" && (m.Text != "" || len(m.Files) == 0) {
		st.plan = split(m.Text, st.form)
	}
	for i := len(st.ids); i < len(st.plan); {
		p := st.plan[i]
		if err := t.acc.budget(ctx, t.cfg.chatID, t.cfg.interval(), true); err != nil {
			return nil, err
		}
		var id int
		var err error
		if i == 0 && edit != 0 {
			id, err = edit, t.editPiece(ctx, edit, p)
		} else {
			reply := ""
			if i == 0 {
				reply = replyTo
			}
			id, err = t.sendPiece(ctx, p, reply)
		}
		if reason := refusalOf(p.form, err); reason != "" && p.form < formPlain {
			t.fellBack(reason)
			simpler := split(p.src, p.form+1)
			st.plan = append(st.plan[:i:i], append(simpler, st.plan[i+1:]...)...)
			t.acc.save(key, st)
			continue
		}
		if err != nil {
			return nil, err
		}
		st.ids = append(st.ids, id)
		t.acc.save(key, st)
		i++
	}
	for i, f := range m.Files {
		if len(st.plan)+i < len(st.ids) {
			continue
		}
		if err := t.acc.budget(ctx, t.cfg.chatID, t.cfg.interval(), true); err != nil {
			return nil, err
		}
		reply := ""
		if len(st.plan) == 0 && i == 0 {
			reply = replyTo
		}
		id, err := t.sendFile(ctx, f, caption, reply)
		if err != nil {
			return nil, err
		}
		caption = ""
		st.ids = append(st.ids, id)
		t.acc.save(key, st)
	}
	if len(st.ids) == 0 {
		return nil, profile.Errorf(profile.CodeTargetDeliveryFailed, "telegram: a message with neither text nor files")
	}
	return st.ids, nil
}

// sendPiece sends one message: sendRichMessage, or sendMessage in HTML or plain text.
func (t *Target) sendPiece(ctx context.Context, p piece, replyTo string) (int, error) {
	body := rendered(p.src, p.form)
	if p.form == formRich {
		params := richParams{ChatID: t.cfg.chatID, MessageThreadID: t.cfg.threadID, RichMessage: inputRichMessage{Markdown: body, SkipEntityDetection: true}}
		if r := t.reply(replyTo); r != nil {
			params.ReplyParameters = &replyParameters{MessageID: r.MessageID, AllowSendingWithoutReply: true}
		}
		var msg models.Message
		err := t.acc.call(ctx, "sendRichMessage", t.cfg.chatID, func(ctx context.Context) error {
			return t.acc.raw(ctx, "sendRichMessage", params, &msg)
		})
		return msg.ID, err
	}
	params := &bot.SendMessageParams{ChatID: t.cfg.chatID, MessageThreadID: t.cfg.threadID, Text: body, ReplyParameters: t.reply(replyTo)}
	if p.form == formHTML {
		params.ParseMode = models.ParseModeHTML
	}
	var msg *models.Message
	err := t.acc.call(ctx, "sendMessage", t.cfg.chatID, func(ctx context.Context) (err error) { msg, err = t.acc.bot.SendMessage(ctx, params); return err })
	if err != nil {
		return 0, err
	}
	return msg.ID, nil
}

// editPiece replaces a message's content: editMessageText with rich_message, or with text in
// HTML or plain text. An edit that changes nothing is taken as applied.
func (t *Target) editPiece(ctx context.Context, id int, p piece) error {
	body := rendered(p.src, p.form)
	var err error
	if p.form == formRich {
		params := richParams{ChatID: t.cfg.chatID, MessageID: id, RichMessage: inputRichMessage{Markdown: body, SkipEntityDetection: true}}
		err = t.acc.call(ctx, "editMessageText", t.cfg.chatID, func(ctx context.Context) error {
			return t.acc.raw(ctx, "editMessageText", params, nil)
		})
	} else {
		params := &bot.EditMessageTextParams{ChatID: t.cfg.chatID, MessageID: id, Text: body}
		if p.form == formHTML {
			params.ParseMode = models.ParseModeHTML
		}
		err = t.acc.call(ctx, "editMessageText", t.cfg.chatID, func(ctx context.Context) error { _, err := t.acc.bot.EditMessageText(ctx, params); return err })
	}
	var pe *platformError
	if errors.As(err, &pe) && notModified(pe.desc) {
		return nil // it shows this content already (an edit applied again)
	}
	return err
}

// Draft implements adapter.Drafter: sendRichMessageDraft (else sendMessageDraft in HTML, else
// plain) with one draft id per message, so changes of one draft are animated; the draft keeps
// the form that worked.
func (t *Target) Draft(ctx context.Context, key, text string) error {
	dk := draftKey(key)
	st := t.acc.state(dk, t.acc.firstForm())
	id := draftID(key)
	for f := st.form; ; f++ {
		body := rendered(preview(text, f), f)
		var err error
		if f == formRich {
			params := richParams{ChatID: t.cfg.chatID, MessageThreadID: t.cfg.threadID, DraftID: id, RichMessage: inputRichMessage{Markdown: body, SkipEntityDetection: true}}
			err = t.acc.call(ctx, "sendRichMessageDraft", t.cfg.chatID, func(ctx context.Context) error {
				return t.acc.raw(ctx, "sendRichMessageDraft", params, nil)
			})
		} else {
			p := &bot.SendMessageDraftParams{ChatID: t.cfg.chatID, MessageThreadID: t.cfg.threadID, DraftID: strconv.FormatInt(id, 10), Text: body}
			if f == formHTML {
				p.ParseMode = models.ParseModeHTML
			}
			err = t.acc.call(ctx, "sendMessageDraft", t.cfg.chatID, func(ctx context.Context) error { _, err := t.acc.bot.SendMessageDraft(ctx, p); return err })
		}
		if reason := refusalOf(f, err); reason != "" && f < formPlain {
			t.fellBack(reason)
			continue
		}
		if err == nil && f != st.form {
			t.acc.save(dk, sentText{form: f})
		}
		return err
	}
}
