package edge

import (
	"bytes"
	"context"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"net/url"
	"path"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/ximd/ximd/handlers"
	"github.com/ximd/ximd/handlers/target/download"
	"github.com/ximd/ximd/handlers/target/webhook"
	"github.com/ximd/ximd/pipeline/channels"
	"github.com/ximd/ximd/pipeline/files"
	"github.com/ximd/ximd/profile"
)

// InboundConfig configures the target webhook inbound route.
type InboundConfig struct {
	// MaxBodyBytes bounds a request body (XIM_MAX_PACKET_BYTES).
	MaxBodyBytes int64
}

// Inbound serves POST /v1/targets/webhook/{channel}/messages (edge-api §7.1, §5.4): a user
// message from the target becomes a pending Connector -> xAgent chat.message.
type Inbound struct {
	cfg      InboundConfig
	reg      *channels.Registry
	adapter  *webhook.Adapter
	catalog  *profile.Catalog
	files    *files.Store
	fetch    *download.Fetcher
	outbox   *handlers.Outbox
	received *prometheus.CounterVec
	logger   *slog.Logger
}

// NewInbound returns the inbound route.
func NewInbound(cfg InboundConfig, reg *channels.Registry, adapter *webhook.Adapter, cat *profile.Catalog, fs *files.Store, fetch *download.Fetcher, outbox *handlers.Outbox, prom prometheus.Registerer, logger *slog.Logger) *Inbound {
	if cfg.MaxBodyBytes <= 0 {
		cfg.MaxBodyBytes = 1 << 20
	}
	in := &Inbound{cfg: cfg, reg: reg, adapter: adapter, catalog: cat, files: fs, fetch: fetch, outbox: outbox, logger: logger,
		received: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "ximd_target_messages_total", Help: "User messages posted by targets, by outcome (accepted, duplicate, or the error code).",
		}, []string{"outcome"})}
	if prom != nil {
		prom.MustRegister(in.received)
	}
	return in
}

// ServeHTTP handles the route (mounted at /v1/targets/; no bearer token: the body is signed).
func (in *Inbound) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	mux := http.NewServeMux()
	mux.HandleFunc("POST /v1/targets/webhook/{channel}/messages", in.post)
	mux.ServeHTTP(w, r)
}

// wireUserMessage is the body a target posts.
type wireUserMessage struct {
	TargetMessageID string     `json:"target_message_id"`
	Text            string     `json:"text"`
	Files           []wireFile `json:"files"`
}

type wireFile struct {
	Type     string `json:"type"`
	URL      string `json:"url"`
	Filename string `json:"filename"`
	MimeType string `json:"mime_type"`
}

// MessageIDOf derives the message_id of a target message: the same target_message_id always
// yields the same message_id, so a platform's redelivery is the same message (P-MSG-2).
func MessageIDOf(targetMessageID string) string {
	sum := sha256.Sum256([]byte(targetMessageID))
	return "wh_" + hex.EncodeToString(sum[:16])
}

func (in *Inbound) post(w http.ResponseWriter, r *http.Request) {
	if err := in.accept(w, r); err != nil {
		pe := profile.AsError(err)
		in.received.WithLabelValues(pe.Code).Inc()
		if pe.Code == profile.CodeInternal || pe.Code == profile.CodeUnavailable {
			in.logger.Error("target_message_failed", "channel", r.PathValue("channel"), "err", err)
		}
		WriteError(w, pe)
	}
}

// badSignature answers a post whose signature does not verify, and one for a channel that is not
// open for webhook input.
var badSignature = profile.Errorf(profile.CodeUnauthorized, "missing or wrong signature (%s, or %s with %s within %s) for this channel",
	webhook.SignatureHeader, webhook.SignatureV2Header, webhook.TimestampHeader, webhook.MaxSkew)

// accept runs the route and writes the 202; a returned error is answered with its code.
func (in *Inbound) accept(w http.ResponseWriter, r *http.Request) error {
	channel := r.PathValue("channel")
	if !profile.ValidChannelID(channel) {
		return invalidID
	}
	ch, ok, err := in.reg.Lookup(r.Context(), channel)
	if err != nil {
		return profile.Errorf(profile.CodeUnavailable, "channel registry unavailable")
	}
	if !ok || ch.Target.Adapter != in.adapter.Name() {
		// Answered like a bad signature: the route tells nobody without the secret which
		// channels exist.
		return badSignature
	}
	body, err := io.ReadAll(http.MaxBytesReader(w, r.Body, in.cfg.MaxBodyBytes))
	if err != nil {
		return profile.Errorf(profile.CodePacketTooLarge, "body exceeds %d bytes", in.cfg.MaxBodyBytes)
	}
	cfg, err := in.adapter.InboundOf(ch.Target.Config)
	if err != nil {
		return err
	}
	if !cfg.Verify(body, r.Header, time.Now()) {
		return badSignature
	}
	var um wireUserMessage
	dec := json.NewDecoder(bytes.NewReader(body))
	dec.DisallowUnknownFields()
	if err := dec.Decode(&um); err != nil {
		return profile.Errorf(profile.CodeInvalidPacket, "body: %v", err)
	}
	if um.TargetMessageID == "" {
		return profile.Errorf(profile.CodeInvalidPacket, "target_message_id: required")
	}
	id := MessageIDOf(um.TargetMessageID)
	if exists, err := in.outbox.Exists(r.Context(), channel, id); err != nil {
		return profile.Errorf(profile.CodeUnavailable, "outbox unavailable")
	} else if exists {
		in.received.WithLabelValues("duplicate").Inc()
		writeJSON(w, http.StatusAccepted, map[string]any{"message_id": id, "duplicate": true})
		return nil
	}
	if len(um.Files) > maxUserFiles { // before any download
		return profile.Errorf(profile.CodeInvalidPacket, "files: at most %d (P-MSG-5)", maxUserFiles)
	}
	msg := profile.Message{MessageID: id, Text: um.Text, CreatedAt: time.Now().UnixMilli()}
	if err := in.store(r.Context(), channel, um, cfg.FileHosts, &msg); err != nil {
		return err
	}
	in.received.WithLabelValues("accepted").Inc()
	in.logger.Info("target_message_received", "channel", channel, "message_id", id, "files", len(msg.Files))
	writeJSON(w, http.StatusAccepted, map[string]any{"message_id": id})
	return nil
}

// maxUserFiles is the most files a user message may carry (catalog.json message.files max_items).
const maxUserFiles = 256

// store downloads the message's files into msg and submits it to the outbox; when anything
// fails, the files already stored for it are discarded (no orphans).
func (in *Inbound) store(ctx context.Context, channel string, um wireUserMessage, hosts []string, msg *profile.Message) (err error) {
	defer func() {
		if err == nil {
			return
		}
		for _, f := range msg.Files {
			if derr := in.files.Discard(context.WithoutCancel(ctx), f.FileRef); derr != nil {
				in.logger.Warn("file_discard_failed", "channel", channel, "file_ref", f.FileRef, "err", derr)
			}
		}
	}()
	for i, f := range um.Files {
		pf, err := in.download(ctx, channel, i, f, hosts)
		if err != nil {
			return err
		}
		msg.Files = append(msg.Files, pf)
	}
	raw, _ := json.Marshal(msg)
	if _, err := in.catalog.DecodeMessage(raw, profile.ToAgent); err != nil {
		return err
	}
	if _, err := in.outbox.Submit(ctx, channel, *msg); err != nil {
		return fmt.Errorf("submit: %w", err)
	}
	return nil
}

// download copies one file of the target into the file store (P-MSG-6/8: xAgent gets ximd's own
// relative link, never the target's URL or credentials).
func (in *Inbound) download(ctx context.Context, channel string, i int, f wireFile, hosts []string) (profile.File, error) {
	if f.URL == "" {
		return profile.File{}, profile.Errorf(profile.CodeInvalidPacket, "files[%d].url: required", i)
	}
	name := f.Filename
	if u, err := url.Parse(f.URL); name == "" && err == nil {
		name = path.Base(u.Path)
	}
	var stored files.Meta
	_, err := in.fetch.Fetch(ctx, f.URL, download.Allowed(hosts), func(r io.Reader, contentType string, _ int64) error {
		mime := f.MimeType
		if mime == "" {
			mime = contentType
		}
		var err error
		stored, err = in.files.Put(ctx, channel, files.Meta{Type: f.Type, Filename: name, MimeType: mime}, r)
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
	return profile.File{Type: stored.Type, FileRef: stored.FileRef, Filename: stored.Filename, MimeType: stored.MimeType,
		ByteSize: stored.ByteSize, ExpiresAt: stored.ExpiresAt, DownloadURL: files.RefPath(stored.FileRef)}, nil
}
