package node

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net/http"
	"time"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/ximd/ximd/handlers"
	"github.com/ximd/ximd/handlers/adapter"
	"github.com/ximd/ximd/handlers/adapter/webchat"
	"github.com/ximd/ximd/handlers/adapter/webchat/page"
	"github.com/ximd/ximd/pipeline/bots"
	"github.com/ximd/ximd/pipeline/channels"
	"github.com/ximd/ximd/pipeline/files"
	"github.com/ximd/ximd/profile"
	"github.com/ximd/ximd/subjects"
)

// The webchat target (handlers/adapter/webchat): its stream is provisioned with the others, its
// adapter is registered beside webhook, and gateways serve its pages.

// webchatStore bounds stream XIM_WEBCHAT: history lives as long as completed message_ids do.
func (n *Node) webchatStore() webchat.StoreConfig {
	return webchat.StoreConfig{MaxAge: n.cfg.Store.CompletedTTL, Replicas: n.cfg.Store.Replicas}
}

// provisionWebchat creates stream XIM_WEBCHAT (idempotent).
func (n *Node) provisionWebchat(ctx context.Context, js jetstream.JetStream) error {
	return webchat.Provision(ctx, js, n.webchatStore())
}

// webchatReady reports whether stream XIM_WEBCHAT exists (GET /readyz).
func webchatReady(ctx context.Context, js jetstream.JetStream) error {
	if _, err := js.Stream(ctx, subjects.StreamWebchat); err != nil {
		return fmt.Errorf("stream %s: %w", subjects.StreamWebchat, err)
	}
	return nil
}

// openWebchat returns the webchat adapter, and purges a channel's webchat history when the
// channel is deleted (P-STATE-7; every process does it, the purge is idempotent).
func (n *Node) openWebchat(js jetstream.JetStream, reg *channels.Registry) (*webchat.Adapter, error) {
	chat, err := webchat.New(webchat.Options{JetStream: js, Logger: n.logger.With("adapter", webchat.Name)})
	if err != nil {
		return nil, err
	}
	reg.OnChange(func(id string, open bool) {
		if open {
			return
		}
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer cancel()
		if err := chat.Store().PurgeChannel(ctx, id); err != nil && !errors.Is(err, jetstream.ErrStreamNotFound) {
			n.logger.Warn("webchat_purge_failed", "channel", id, "err", err)
		}
	})
	return chat, nil
}

// webchatPage builds the gateway's webchat routes; the page handler's Close ends its event
// streams (call it before the HTTP server shuts down).
func (n *Node) webchatPage(ctx context.Context, js jetstream.JetStream, reg *channels.Registry, adapters *adapter.Registry, fs *files.Store, outbox *handlers.Outbox, bots page.Bots, maxBody int64, log *slog.Logger) (*page.Handler, http.Handler, error) {
	a, ok := adapters.Lookup(webchat.Name)
	chat, isChat := a.(*webchat.Adapter)
	if !ok || !isChat {
		return nil, nil, errors.New("webchat adapter not registered")
	}
	key, err := page.LoadKey(ctx, js)
	if err != nil {
		return nil, nil, err
	}
	h := page.New(page.Config{PublicURL: n.cfg.PublicURL, MaxBodyBytes: maxBody, MaxFileBytes: n.cfg.MaxFileBytes,
		Quotas: page.Quotas{MaxStreams: n.cfg.WebchatMaxStreams, MessagesPerMinute: n.cfg.WebchatMessagesPerMinute, UploadBytesPerHour: n.cfg.WebchatUploadBytesPerHour}},
		reg, chat.Store(), page.NewSecrets(key), fs, outbox, profile.Default(), n.reg, log.With("adapter", webchat.Name))
	h.SetBots(bots)
	return h, http.HandlerFunc(h.Link), nil
}

// botPages are the bots and their admission, for the webchat bots' public pages.
type botPages struct {
	*bots.Registry
	*bots.Admitter
}
