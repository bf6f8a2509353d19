package discord

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"io"
	"net/http"
	"strconv"
	"unicode/utf8"

	"github.com/bwmarrin/discordgo"

	"github.com/ximd/ximd/handlers/adapter"
	"github.com/ximd/ximd/handlers/adapter/markdown"
	"github.com/ximd/ximd/profile"
)

// messageBody is the JSON of a create or an edit (Create Message, Edit Message).
type messageBody struct {
	Content          string            `json:"content"`
	Nonce            string            `json:"nonce,omitempty"`
	EnforceNonce     bool              `json:"enforce_nonce,omitempty"`
	AllowedMentions  allowedMentions   `json:"allowed_mentions"`
	MessageReference *messageReference `json:"message_reference,omitempty"`
}

// allowedMentions with an empty parse list: nobody is pinged, whatever the text says.
type allowedMentions struct {
	Parse []string `json:"parse"`
}

type messageReference struct {
	MessageID       string `json:"message_id"`
	FailIfNotExists bool   `json:"fail_if_not_exists"`
}

// render is a Markdown text as a Discord message's content.
func render(src string) string { return markdown.Parse(src).Discord() }

// count is how many characters Discord counts of a Markdown text's content.
func count(src string) int { return utf8.RuneCountInString(render(src)) }

// contents are a text's messages: the Markdown split between blocks into parts whose content
// holds at most MaxTextLength characters, each rendered.
func contents(text string) []string {
	if text == "" {
		return nil
	}
	var out []string
	for _, p := range markdown.Split(text, MaxTextLength, count) {
		out = append(out, adapter.Truncate(render(p), MaxTextLength))
	}
	return out
}

// nonce is the nonce of part i of the message with key: 25 hex digits of a digest, the most a
// nonce holds.
func nonce(key string, i int) string {
	sum := sha256.Sum256([]byte(key + "\x00" + strconv.Itoa(i)))
	return hex.EncodeToString(sum[:])[:25]
}

// Send implements adapter.Sender: a final's text (in as many messages as it takes) and files,
// or the first streamed part. The target message id is the first message's id. A send made
// again (a retry, a restart within the nonce window) makes no second copy: each message's nonce
// is enforced, and a message that already existed with other content (a streamed preview) is
// edited to this one.
func (t *Target) Send(ctx context.Context, m adapter.Message) (string, error) {
	ps, err := t.deliver(ctx, m, "")
	if err != nil {
		return "", err
	}
	return ps[0].id, nil
}

// Edit implements adapter.Editor: the message (and the messages a preview rolled over into)
// shows the whole text so far; at the final, its parts and files.
func (t *Target) Edit(ctx context.Context, targetMessageID string, m adapter.Message) error {
	if !snowflake(targetMessageID) {
		return profile.Errorf(profile.CodeTargetDeliveryFailed, "discord: target message id %q is not a message id", targetMessageID)
	}
	_, err := t.deliver(ctx, m, targetMessageID)
	return err
}

// deliver shows m: its text's parts, each as the message of that index (edited when it exists
// with other content, created with the part's nonce when not), then, for a final, its files.
// first is the streamed message's id ("": a new message).
func (t *Target) deliver(ctx context.Context, m adapter.Message, first string) ([]part, error) {
	key := m.IdempotencyKey
	state := "key:" + key
	if first != "" {
		state = "msg:" + first
		if key == "" {
			key = state
		}
	}
	prior := t.acc.parts(state)
	if first != "" && (len(prior) == 0 || prior[0].id != first) {
		prior = []part{{id: first, content: "\x00unknown"}}
	}
	texts := contents(m.Text)
	if len(texts) == 0 && len(m.Files) == 0 {
		if !m.Final && first == "" {
			texts = []string{"…"}
		} else if first == "" {
			return nil, profile.Errorf(profile.CodeTargetDeliveryFailed, "discord: a message with neither text nor files")
		}
	}
	if !m.Final {
		if err := t.acc.budget(ctx, t.cfg.channelID, false); err != nil {
			return nil, err
		}
	}
	save := func() {
		t.acc.remember(state, prior)
		if first == "" && len(prior) > 0 {
			t.acc.remember("msg:"+prior[0].id, prior)
		}
	}
	for i, text := range texts {
		if i < len(prior) && prior[i].content == text {
			continue
		}
		if m.Final {
			if err := t.acc.budget(ctx, t.cfg.channelID, true); err != nil {
				return nil, err
			}
		}
		if i < len(prior) {
			if err := t.edit(ctx, prior[i].id, text); err != nil {
				return nil, err
			}
			prior[i].content = text
			save()
			continue
		}
		reply := ""
		if i == 0 {
			reply = m.ReplyTo
		}
		p, err := t.create(ctx, text, nonce(key, i), reply, nil)
		if err != nil {
			return nil, err
		}
		prior = append(prior, p)
		save()
	}
	if m.Final {
		for j := 0; j*MaxFilesPerMessage < len(m.Files); j++ {
			i := len(texts) + j
			if i < len(prior) {
				continue // sent before this retry
			}
			if err := t.acc.budget(ctx, t.cfg.channelID, true); err != nil {
				return nil, err
			}
			reply := ""
			if i == 0 {
				reply = m.ReplyTo
			}
			chunk := m.Files[j*MaxFilesPerMessage : min(len(m.Files), (j+1)*MaxFilesPerMessage)]
			p, err := t.create(ctx, "", nonce(key, i), reply, chunk)
			if err != nil {
				return nil, err
			}
			prior = append(prior, p)
			save()
		}
	}
	if len(prior) == 0 {
		return nil, profile.Errorf(profile.CodeTargetDeliveryFailed, "discord: nothing to show")
	}
	return prior, nil
}

// create makes one message with nonce enforced; a message already made with that nonce (a send
// repeated within the window) is answered instead, and edited when it shows other content.
func (t *Target) create(ctx context.Context, content, nonce, replyTo string, files []adapter.File) (part, error) {
	id := t.cfg.channelID
	body := messageBody{Content: content, Nonce: nonce, EnforceNonce: true, AllowedMentions: allowedMentions{Parse: []string{}}}
	if replyTo != "" && snowflake(replyTo) {
		body.MessageReference = &messageReference{MessageID: replyTo}
	}
	r := request{method: http.MethodPost, path: "/channels/" + id + "/messages", channel: id, route: "POST /channels/" + id + "/messages"}
	if len(files) > 0 {
		ctype, raw, closeAll, err := t.multipart(ctx, body, files)
		defer closeAll()
		if err != nil {
			return part{}, err
		}
		r.ctype, r.raw = ctype, raw
	} else {
		r.body = body
	}
	var msg discordgo.Message
	if err := t.acc.call(ctx, r, &msg); err != nil {
		return part{}, err
	}
	if msg.ID == "" {
		return part{}, &adapter.AmbiguousError{Err: profile.Errorf(profile.CodeTargetUnavailable, "discord: a created message without an id")}
	}
	if len(files) == 0 && msg.Content != content {
		if err := t.edit(ctx, msg.ID, content); err != nil {
			return part{}, err
		}
	}
	return part{id: msg.ID, content: content}, nil
}

// edit replaces a message's content, with allowed_mentions again.
func (t *Target) edit(ctx context.Context, messageID, content string) error {
	id := t.cfg.channelID
	body := messageBody{Content: content, AllowedMentions: allowedMentions{Parse: []string{}}}
	return t.acc.call(ctx, request{method: http.MethodPatch, path: "/channels/" + id + "/messages/" + messageID, channel: id,
		route: "PATCH /channels/" + id + "/messages", body: body}, nil)
}

// multipart is a create's body with files: payload_json and files[n] (read from the Transfer
// Plane; a file larger than Discord takes is refused before anything is sent).
func (t *Target) multipart(ctx context.Context, body messageBody, files []adapter.File) (string, []byte, func(), error) {
	var closers []io.Closer
	closeAll := func() {
		for _, c := range closers {
			_ = c.Close()
		}
	}
	if t.a.Files == nil {
		return "", nil, closeAll, profile.Errorf(profile.CodeTargetDeliveryFailed, "discord: no file store to read files from")
	}
	var dfs []*discordgo.File
	for _, f := range files {
		sf, rc, err := t.a.Files.Open(ctx, f.FileRef)
		if err != nil {
			return "", nil, closeAll, err
		}
		closers = append(closers, rc)
		if sf.ByteSize > MaxFileSize {
			return "", nil, closeAll, profile.Errorf(profile.CodeTargetDeliveryFailed, "discord: file %s is larger than %d bytes", f.Filename, MaxFileSize)
		}
		name := f.Filename
		if name == "" {
			name = sf.Filename
		}
		dfs = append(dfs, &discordgo.File{Name: name, ContentType: sf.MimeType, Reader: rc})
	}
	ctype, raw, err := discordgo.MultipartBodyWithJSON(body, dfs)
	if err != nil {
		return "", nil, closeAll, profile.Errorf(profile.CodeTargetDeliveryFailed, "discord: reading files: %v", err)
	}
	return ctype, raw, closeAll, nil
}
