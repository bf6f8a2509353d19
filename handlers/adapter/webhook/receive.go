package webhook

import (
	"bytes"
	"context"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"io"
	"net/http"
	"net/url"
	"path"
	"time"

	"github.com/ximd/ximd/handlers/adapter"
	"github.com/ximd/ximd/handlers/adapter/download"
	"github.com/ximd/ximd/profile"
)

var _ adapter.Receiver = (*Adapter)(nil)

// MaxUserFiles is the most files a user message may carry (catalog.json message.files
// max_items); a post with more is refused before any download.
const MaxUserFiles = 256

// MessageIDOf derives the message_id of a target message: the same target_message_id always
// yields the same message_id, so a platform's redelivery is the same message (P-MSG-2).
func MessageIDOf(targetMessageID string) string {
	sum := sha256.Sum256([]byte(targetMessageID))
	return "wh_" + hex.EncodeToString(sum[:16])
}

// badSignature answers a post whose signature does not verify, and one for a channel that is not
// open for webhook input.
var badSignature = profile.Errorf(profile.CodeUnauthorized, "missing or wrong signature (%s, or %s with %s within %s) for this channel",
	SignatureHeader, SignatureV2Header, TimestampHeader, MaxSkew)

// wireUserMessage is the body a target posts (edge-api §7.1).
type wireUserMessage struct {
	TargetMessageID string         `json:"target_message_id"`
	Text            string         `json:"text"`
	Files           []wireUserFile `json:"files"`
}

// wireUserFile is a file of a posted user message: ximd downloads it from url.
type wireUserFile struct {
	Type     string `json:"type"`
	URL      string `json:"url"`
	Filename string `json:"filename"`
	MimeType string `json:"mime_type"`
}

// Refusal implements adapter.Receiver: an unknown channel is answered like a bad signature.
func (a *Adapter) Refusal() error { return badSignature }

// Receive implements adapter.Receiver for POST /v1/targets/webhook/{channel}/messages (edge-api
// §7.1, §5.4): a signed user message becomes a pending Connector -> xAgent chat.message, its
// files downloaded first (from the channel's hosts only) into the file store.
func (a *Adapter) Receive(w http.ResponseWriter, r *http.Request, ch adapter.Channel, inboxes adapter.Inboxes) (adapter.Received, error) {
	in := inboxes.Inbox(ch.ID)
	if r.PathValue("path") != "messages" {
		return "", profile.Errorf(profile.CodeNotFound, "no route %s %s", r.Method, r.URL.Path)
	}
	body, err := adapter.ReadBody(r)
	if err != nil {
		return "", err
	}
	cfg, err := a.InboundOf(ch.Target.Config)
	if err != nil {
		return "", err
	}
	if !cfg.Verify(body, r.Header, time.Now()) {
		return "", badSignature
	}
	var um wireUserMessage
	dec := json.NewDecoder(bytes.NewReader(body))
	dec.DisallowUnknownFields()
	if err := dec.Decode(&um); err != nil {
		return "", profile.Errorf(profile.CodeInvalidPacket, "body: %v", err)
	}
	return a.receive(r.Context(), w, ch, in, um, cfg.FileHosts, nil)
}

// receive submits a posted user message to channel ch through in, its files downloaded first
// (from hosts and the target's own host), and answers 202 {"message_id"} and the members of
// extra.
func (a *Adapter) receive(ctx context.Context, w http.ResponseWriter, ch adapter.Channel, in adapter.Inbox, um wireUserMessage, hosts []string, extra map[string]any) (adapter.Received, error) {
	if um.TargetMessageID == "" {
		return "", profile.Errorf(profile.CodeInvalidPacket, "target_message_id: required")
	}
	id := MessageIDOf(um.TargetMessageID)
	answer := map[string]any{"message_id": id}
	for k, v := range extra {
		answer[k] = v
	}
	if seen, err := in.Seen(ctx, id); err != nil {
		return "", profile.Errorf(profile.CodeUnavailable, "outbox unavailable")
	} else if seen {
		answer["duplicate"] = true
		writeAccepted(w, answer)
		return adapter.Duplicate, nil
	}
	if len(um.Files) > MaxUserFiles { // before any download
		return "", profile.Errorf(profile.CodeInvalidPacket, "files: at most %d (P-MSG-5)", MaxUserFiles)
	}
	msg := profile.Message{MessageID: id, Text: um.Text, CreatedAt: time.Now().UnixMilli()}
	for i, f := range um.Files {
		pf, err := a.download(ctx, i, f, hosts, in)
		if err != nil {
			for _, done := range msg.Files { // nothing of a refused message stays behind
				if derr := in.Discard(context.WithoutCancel(ctx), done.FileRef); derr != nil {
					a.log.Warn("file_discard_failed", "channel", ch.ID, "file_ref", done.FileRef, "err", derr)
				}
			}
			return "", err
		}
		msg.Files = append(msg.Files, pf)
	}
	if _, err := in.Submit(ctx, msg); err != nil {
		return "", err
	}
	writeAccepted(w, answer)
	return adapter.Accepted, nil
}

func writeAccepted(w http.ResponseWriter, v any) {
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(http.StatusAccepted)
	_ = json.NewEncoder(w).Encode(v)
}

// download copies one file of the target into the file store (P-MSG-6/8: xAgent gets ximd's own
// relative link, never the target's URL or credentials).
func (a *Adapter) download(ctx context.Context, i int, f wireUserFile, hosts []string, in adapter.Inbox) (profile.File, error) {
	if f.URL == "" {
		return profile.File{}, profile.Errorf(profile.CodeInvalidPacket, "files[%d].url: required", i)
	}
	if a.fetch == nil {
		return profile.File{}, profile.Errorf(profile.CodeFileDownloadFailed, "files[%d]: this gateway downloads no files", i)
	}
	name := f.Filename
	if u, err := url.Parse(f.URL); name == "" && err == nil {
		name = path.Base(u.Path)
	}
	var stored profile.File
	_, err := a.fetch.Fetch(ctx, f.URL, download.Allowed(hosts), func(r io.Reader, contentType string, _ int64) error {
		mime := f.MimeType
		if mime == "" {
			mime = contentType
		}
		var err error
		stored, err = in.PutFile(ctx, adapter.StoredFile{Type: f.Type, Filename: name, MimeType: mime}, r)
		return err
	})
	if err != nil {
		// Whatever went wrong (host, scheme, size, time, status), the contract's answer is one
		// code; the message says which file and why, never the URL's query.
		reason := err.Error()
		var pe *profile.Error
		if errors.As(err, &pe) {
			reason = pe.Message
		}
		return profile.File{}, profile.Errorf(profile.CodeFileDownloadFailed, "files[%d]: %s", i, reason)
	}
	return stored, nil
}
