package feishu

import (
	"bytes"
	"context"
	"crypto/aes"
	"crypto/cipher"
	"crypto/sha256"
	"crypto/subtle"
	"encoding/base64"
	"encoding/hex"
	"encoding/json"
	"errors"
	"net/http"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/ximd/ximd/handlers/adapter"
	"github.com/ximd/ximd/profile"
)

// eventTimeout bounds the work on one event, which goes on after Feishu gave up waiting (its
// retry is then a duplicate).
const eventTimeout = time.Minute

// errRefused answers an event call that fails the checks, and one for a channel that is not
// open: the same answer, so the route tells nobody which channels exist.
var errRefused = profile.Errorf(profile.CodeUnauthorized, "bad or missing signature or verification token")

// Refusal implements adapter.Receiver.
func (a *Adapter) Refusal() error { return errRefused }

// eventsRoute is the event subscription's request URL, for a channel whose config takes events.
var eventsRoute = adapter.Route[*config]{Path: "events", Refusal: errRefused,
	Accept: func(_ *http.Request, c *config) bool { return c.events() }}

// MessageIDOf is the message_id of the user message of a Feishu message: the same message always
// gives the same message_id, so an event delivered again is a duplicate.
func MessageIDOf(feishuMessageID string) string {
	sum := sha256.Sum256([]byte(feishuMessageID))
	return "fs_" + hex.EncodeToString(sum[:16])
}

// callback is an event call's body once decrypted: an event (schema 2.0) or the URL verification.
type callback struct {
	Type      string `json:"type"`
	Challenge string `json:"challenge"`
	Token     string `json:"token"`
	Schema    string `json:"schema"`
	Header    struct {
		EventID   string `json:"event_id"`
		EventType string `json:"event_type"`
		Token     string `json:"token"`
		AppID     string `json:"app_id"`
	} `json:"header"`
	Event struct {
		Sender struct {
			SenderID struct {
				OpenID string `json:"open_id"`
			} `json:"sender_id"`
			SenderType string `json:"sender_type"`
		} `json:"sender"`
		Message struct {
			MessageID   string    `json:"message_id"`
			ChatID      string    `json:"chat_id"`
			ChatType    string    `json:"chat_type"`
			MessageType string    `json:"message_type"`
			Content     string    `json:"content"`
			CreateTime  string    `json:"create_time"`
			Mentions    []mention `json:"mentions"`
		} `json:"message"`
	} `json:"event"`
}

// Receive implements adapter.Receiver for POST /v1/targets/feishu/{channel}/events, the request
// URL of the app's event subscription. With an encrypt_key the body is decrypted and an event's
// X-Lark-Signature (SHA-256 of timestamp, nonce, key and body) is compared in constant time, its
// timestamp within SignatureWindow; with only a verification_token the body's token is compared.
// The URL verification is answered with its challenge. A person's message in one of the app's
// bound chats becomes a user message of that chat's channel; 200 once it is durable.
func (a *Adapter) Receive(w http.ResponseWriter, r *http.Request, ch adapter.Channel, in adapter.Inboxes) (adapter.Received, error) {
	c, body, err := a.StartReceive(r, ch, eventsRoute)
	if err != nil {
		return "", err
	}
	cb, answered, err := a.openEvent(w, r, c, body)
	if err != nil || answered != "" {
		return answered, err
	}
	outcome := adapter.Ignored
	if cb.Header.EventType == eventMessage && cb.Event.Sender.SenderType == senderUser {
		ctx, cancel := context.WithTimeout(context.WithoutCancel(r.Context()), eventTimeout)
		defer cancel()
		if outcome, err = a.toChannels(ctx, c, cb, in, "", a.channelsOf(in.Channels(), c.appKey(), cb.Event.Message.ChatID)); err != nil {
			return "", err
		}
	}
	writeJSON(w, map[string]string{})
	return outcome, nil
}

// Event calls' facts: the message event, and the sender type of a person.
const (
	eventMessage = "im.message.receive_v1"
	senderUser   = "user"
	// challenged is the outcome of a URL verification.
	challenged adapter.Received = "challenge"
)

// openEvent checks and opens an event call to a route with config c: the body decrypted (with
// an encrypt_key, which Feishu then uses for everything), the URL verification answered with
// its challenge (answered is then "challenge"), or the event's signature (with an encrypt_key)
// or verification token checked. A call that fails a check is errRefused.
func (a *Adapter) openEvent(w http.ResponseWriter, r *http.Request, c *config, body []byte) (cb callback, answered adapter.Received, err error) {
	plain := body
	var sealed struct {
		Encrypt string `json:"encrypt"`
	}
	if json.Unmarshal(body, &sealed) == nil && sealed.Encrypt != "" {
		if c.encryptKey == "" {
			return cb, "", errRefused
		}
		if plain, err = decrypt(c.encryptKey, sealed.Encrypt); err != nil {
			return cb, "", errRefused
		}
	} else if c.encryptKey != "" {
		return cb, "", errRefused // Feishu encrypts everything once a key is set
	}
	if err := json.Unmarshal(plain, &cb); err != nil {
		return cb, "", profile.Errorf(profile.CodeBadRequest, "not a Feishu event: %v", err)
	}
	if cb.Type == "url_verification" {
		if c.verificationToken != "" && !equal(cb.Token, c.verificationToken) {
			return cb, "", errRefused
		}
		writeJSON(w, map[string]string{"challenge": cb.Challenge})
		return cb, challenged, nil
	}
	switch {
	case c.encryptKey != "":
		if !a.signed(r, body, c.encryptKey) {
			return cb, "", errRefused
		}
	case !equal(cb.Header.Token, c.verificationToken):
		return cb, "", errRefused
	}
	return cb, "", nil
}

// toChannels submits a person's message event to each of the channels PUT for its chat that
// existed when it was written (self: the app's bot's open_id, whose mention is removed; "":
// unknown). A failure is unavailable: the event is not stored, and Feishu sends it again.
func (a *Adapter) toChannels(ctx context.Context, c *config, cb callback, in adapter.Inboxes, self string, chans []adapter.Channel) (adapter.Received, error) {
	outcome := adapter.Ignored
	msg := cb.Event.Message
	for _, bound := range chans {
		if created, err := strconv.ParseInt(msg.CreateTime, 10, 64); err == nil && bound.Predates(created) {
			continue
		}
		var err error
		if outcome, err = a.receive(ctx, c, cb, bound.ID, in.Inbox(bound.ID), self); err != nil {
			a.Logger.Warn("feishu_event_failed", "channel", bound.ID, "event_id", cb.Header.EventID, "err", err)
			return "", profile.Errorf(profile.CodeUnavailable, "the event could not be stored; Feishu sends it again")
		}
	}
	return outcome, nil
}

// channelsOf are the open channels of an app bound to a chat (one event URL serves the app).
func (a *Adapter) channelsOf(chans []adapter.Channel, appKey, chat string) []adapter.Channel {
	var out []adapter.Channel
	for _, ch := range chans {
		if c, err := parseConfig(ch.Target.Config); err == nil && c.appKey() == appKey && c.chatID == chat {
			out = append(out, ch)
		}
	}
	return out
}

// signed checks an event call's signature and its timestamp's freshness.
func (a *Adapter) signed(r *http.Request, body []byte, key string) bool {
	ts, nonce, sig := r.Header.Get("X-Lark-Request-Timestamp"), r.Header.Get("X-Lark-Request-Nonce"), r.Header.Get("X-Lark-Signature")
	secs, err := strconv.ParseInt(ts, 10, 64)
	if err != nil || sig == "" {
		return false
	}
	if d := time.Since(time.Unix(secs, 0)); d > a.window || d < -a.window {
		return false
	}
	h := sha256.New()
	h.Write([]byte(ts + nonce + key))
	h.Write(body)
	return equal(hex.EncodeToString(h.Sum(nil)), strings.ToLower(sig))
}

// decrypt opens an encrypted event: base64 of a 16-byte IV and the AES-256-CBC ciphertext
// (PKCS#7 padding), the key the SHA-256 of the encrypt key.
func decrypt(key, sealed string) ([]byte, error) {
	raw, err := base64.StdEncoding.DecodeString(sealed)
	if err != nil || len(raw) < 2*aes.BlockSize || len(raw)%aes.BlockSize != 0 {
		return nil, errors.New("not an encrypted event")
	}
	k := sha256.Sum256([]byte(key))
	block, err := aes.NewCipher(k[:])
	if err != nil {
		return nil, err
	}
	out := make([]byte, len(raw)-aes.BlockSize)
	cipher.NewCBCDecrypter(block, raw[:aes.BlockSize]).CryptBlocks(out, raw[aes.BlockSize:])
	pad := int(out[len(out)-1])
	if pad == 0 || pad > aes.BlockSize || !bytes.Equal(out[len(out)-pad:], bytes.Repeat([]byte{byte(pad)}, pad)) {
		return nil, errors.New("bad padding")
	}
	return out[:len(out)-pad], nil
}

func equal(a, b string) bool { return subtle.ConstantTimeCompare([]byte(a), []byte(b)) == 1 }

func writeJSON(w http.ResponseWriter, v any) {
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(http.StatusOK)
	_ = json.NewEncoder(w).Encode(v)
}

// receive submits the user message of one message event: [adapter.Accepted], or [adapter.Duplicate] when it was
// submitted already. A message the profile refuses is logged and skipped. The mention of self
// (the app's bot's open_id, "" when unknown) is removed from its text, and every other mention
// is written as "@" and the name.
func (a *Adapter) receive(ctx context.Context, c *config, cb callback, channel string, in adapter.Inbox, self string) (adapter.Received, error) {
	fm := cb.Event.Message
	msgID := MessageIDOf(fm.MessageID)
	if seen, err := in.Seen(ctx, msgID); err != nil || seen {
		return adapter.Duplicate, err
	}
	m := profile.Message{MessageID: msgID, CreatedAt: time.Now().UnixMilli()}
	if created, err := strconv.ParseInt(fm.CreateTime, 10, 64); err == nil && created > 0 {
		m.CreatedAt = created
	}
	var content struct {
		Text     string      `json:"text"`
		ImageKey string      `json:"image_key"`
		FileKey  string      `json:"file_key"`
		FileName string      `json:"file_name"`
		Title    string      `json:"title"`
		Content  [][]postRun `json:"content"`
	}
	_ = json.Unmarshal([]byte(fm.Content), &content)
	names := mentionNames(fm.Mentions, self)
	var file *inFile
	var images []string
	switch fm.MessageType {
	case "text":
		m.Text = names.text(content.Text)
	case "post":
		m.Text = postText(content.Title, content.Content, names)
		images = postImages(content.Content)
	case "image":
		file = &inFile{key: content.ImageKey, typ: "image", resource: "image", name: "image_" + content.ImageKey + ".png"}
	case "file", "audio", "media":
		typ := map[string]string{"file": "file", "audio": "audio", "media": "video"}[fm.MessageType]
		file = &inFile{key: content.FileKey, typ: typ, resource: "file", name: orName(content.FileName, fm.MessageType+"_"+content.FileKey)}
	default:
		return adapter.Ignored, nil // stickers, shares, system messages
	}
	files := make([]inFile, 0, len(images)+1)
	if file != nil {
		files = append(files, *file)
	}
	for _, key := range images {
		files = append(files, inFile{key: key, typ: "image", resource: "image", name: "image_" + key + ".png"})
	}
	for _, f := range files {
		if err := adapter.FileOrNote(ctx, in, &m, f.name, func() (profile.File, error) { return a.fetch(ctx, c, fm.MessageID, f, in) }); err != nil {
			return "", err
		}
	}
	return adapter.Submit(ctx, in, m, a.Logger, "feishu_message_refused", channel)
}

// inFile is the file of a user message.
type inFile struct{ key, typ, resource, name string }

// fetch copies a message's image or file (the message resource API) into the Transfer Plane.
func (a *Adapter) fetch(ctx context.Context, c *config, messageID string, f inFile, in adapter.Inbox) (profile.File, error) {
	body, mime, err := a.app(c).download(ctx, messageID, f.key, f.resource)
	if err != nil {
		return profile.File{}, err
	}
	defer body.Close()
	if mime == "" || strings.HasPrefix(mime, "application/json") {
		mime = "application/octet-stream"
	}
	return in.PutFile(ctx, adapter.StoredFile{Type: f.typ, Filename: f.name, MimeType: mime}, body)
}

// postRun is one element of a rich-text (post) message's line ("Receive message content",
// post): a text run with its style (bold, italic, underline, lineThrough), a link (a), a
// mention (at, user_id its key "@_user_N"), an image (img), a code block (code_block), Markdown
// (md), an emoji (emotion) or a rule (hr).
type postRun struct {
	Tag       string   `json:"tag"`
	Text      string   `json:"text"`
	Style     []string `json:"style"`
	Href      string   `json:"href"`
	UserID    string   `json:"user_id"`
	UserName  string   `json:"user_name"`
	ImageKey  string   `json:"image_key"`
	Language  string   `json:"language"`
	EmojiType string   `json:"emoji_type"`
}

// postText is a rich-text (post) message as Markdown (edge-api §7.3: a person's formatting
// reaches xAgent as the same Markdown): its title a heading, its lines as lines, bold, italic and
// lineThrough runs as **, _ and ~~ (underline has no Markdown: its text), links as [text](href),
// code blocks fenced with their language, md runs as written, mentions as names (the bot's own
// removed). Images are the message's files (postImages), not text.
func postText(title string, lines [][]postRun, names mentions) string {
	var b strings.Builder
	if t := strings.TrimSpace(title); t != "" {
		b.WriteString("# " + t + "\n")
	}
	for i, line := range lines {
		if i > 0 || b.Len() > 0 {
			b.WriteByte('\n')
		}
		for _, run := range line {
			switch run.Tag {
			case "at":
				switch {
				case names.known(run.UserID):
					b.WriteString(names.text(run.UserID))
				case run.UserName != "":
					b.WriteString("@" + run.UserName)
				}
			case "a":
				text := orName(run.Text, run.Href)
				if run.Href == "" {
					b.WriteString(styled(text, run.Style))
				} else {
					b.WriteString("[" + styled(text, run.Style) + "](" + run.Href + ")")
				}
			case "code_block":
				body := strings.TrimRight(run.Text, "\n")
				fence := "```"
				for strings.Contains(body, fence) {
					fence += "`"
				}
				if b.Len() > 0 && !strings.HasSuffix(b.String(), "\n") {
					b.WriteByte('\n')
				}
				b.WriteString(fence + strings.ToLower(run.Language) + "\n" + body + "\n" + fence)
			case "md":
				b.WriteString(run.Text)
			case "emotion":
				b.WriteString(":" + run.EmojiType + ":")
			case "hr":
				b.WriteString("\n---\n")
			case "img", "media":
			default:
				b.WriteString(styled(run.Text, run.Style))
			}
		}
	}
	if names.self {
		return strings.TrimSpace(b.String())
	}
	return b.String()
}

// styled is a text run with its emphasis, the markers around its words and its surrounding
// spaces outside them (Markdown does not close "**" after a space).
func styled(s string, style []string) string {
	core := strings.TrimSpace(s)
	if core == "" || len(style) == 0 {
		return s
	}
	lead := s[:strings.Index(s, core)]
	trail := s[len(lead)+len(core):]
	if slices.Contains(style, "lineThrough") {
		core = "~~" + core + "~~"
	}
	if slices.Contains(style, "italic") {
		core = "_" + core + "_"
	}
	if slices.Contains(style, "bold") {
		core = "**" + core + "**"
	}
	return lead + core + trail
}

// postImages are the image keys of a rich-text message's img runs.
func postImages(lines [][]postRun) []string {
	var keys []string
	for _, line := range lines {
		for _, run := range line {
			if run.Tag == "img" && run.ImageKey != "" {
				keys = append(keys, run.ImageKey)
			}
		}
	}
	return keys
}

// mention is one entry of an event message's mentions ("Receive message": key, id, name).
type mention struct {
	Key string `json:"key"`
	ID  struct {
		OpenID string `json:"open_id"`
	} `json:"id"`
	Name string `json:"name"`
}

// mentions rewrites the mention keys ("@_user_N") in a message's text: the bot's own removed,
// every other one written as "@" and the name.
type mentions struct {
	r    *strings.Replacer
	keys map[string]bool
	self bool // the message mentions the bot
}

// mentionNames are the rewrites of a message's mentions, self being the bot's open_id ("":
// unknown, every mention written as a name).
func mentionNames(ms []mention, self string) mentions {
	n := mentions{keys: map[string]bool{}}
	var pairs [][2]string
	for _, m := range ms {
		if m.Key == "" {
			continue
		}
		n.keys[m.Key] = true
		switch {
		case self != "" && m.ID.OpenID == self:
			n.self = true
			pairs = append(pairs, [2]string{m.Key + " ", ""}, [2]string{m.Key, ""})
		case m.Name != "":
			pairs = append(pairs, [2]string{m.Key, "@" + m.Name})
		}
	}
	if len(pairs) == 0 {
		return n
	}
	// "@_user_1" is a prefix of "@_user_10", and a Replacer tries its pairs in order: the longer
	// keys first.
	slices.SortStableFunc(pairs, func(a, b [2]string) int { return len(b[0]) - len(a[0]) })
	flat := make([]string, 0, 2*len(pairs))
	for _, p := range pairs {
		flat = append(flat, p[0], p[1])
	}
	n.r = strings.NewReplacer(flat...)
	return n
}

// known reports whether key is one of the message's mentions.
func (n mentions) known(key string) bool { return n.keys[key] }

// text is s with the mentions rewritten (and trimmed when the bot's mention was removed).
func (n mentions) text(s string) string {
	if n.r == nil {
		return s
	}
	s = n.r.Replace(s)
	if n.self {
		s = strings.TrimSpace(s)
	}
	return s
}

func orName(name, fallback string) string {
	if name != "" {
		return name
	}
	return fallback
}
