package page

import (
	"context"
	"crypto/rand"
	"crypto/sha256"
	"encoding/base64"
	"encoding/hex"
	"html/template"
	"net/http"
	"net/url"
	"strings"
	"time"

	"github.com/ximd/ximd/handlers/adapter"
	"github.com/ximd/ximd/handlers/adapter/webchat"
	"github.com/ximd/ximd/profile"
)

// A webchat bot (edge-api §4.1) is a public page, GET /webchat/bots/{bot_id}, where each visitor
// has a direct conversation of their own: a random visitor secret in an HttpOnly cookie
// (VisitorCookie + "_" + bot id, for all of /webchat/) names it, as the conversation id
// VisitorConversation derives from it. The visitor's first message opens the conversation's
// channel (the bot's policy, max_per_minute); from then on the cookie, not a link's secret, admits
// the visitor to their channel's page routes (events, uploads, files). Every message the page
// posts goes through the bot (POST /webchat/bots/{bot_id}/messages), so a policy change reaches
// the open conversations too; the channel's quotas (XIM_WEBCHAT_*) hold per visitor.
const (
	VisitorCookie = "ximd_visitor"
	// VisitorHeader must be on a visitor's POST (a header another site's page cannot make a
	// browser send without CORS, which ximd does not grant), so the cookie cannot be ridden.
	VisitorHeader = "X-Webchat-Visitor"
	// visitorMaxAge is how long a browser keeps its visitor secret.
	visitorMaxAge = 365 * 24 * time.Hour
)

// Bots looks bots up (the bot registry) and admits what reaches them (the node's Admitter).
type Bots interface {
	Lookup(ctx context.Context, id string) (adapter.Bot, bool, error)
	adapter.Admitter
}

// SetBots serves webchat bots' public pages; without it, /webchat/bots/... is not found.
func (h *Handler) SetBots(b Bots) { h.bots = b }

// VisitorConversation is the conversation id of a bot's visitor with secret: a digest, so that
// the channel id (<bot>-v…, seen by operators and in logs) never holds the secret itself.
func VisitorConversation(bot, secret string) string {
	sum := sha256.Sum256([]byte("xim-webchat-visitor\x00" + bot + "\x00" + secret))
	return "v" + hex.EncodeToString(sum[:12])
}

func (h *Handler) botRoutes() *http.ServeMux {
	m := http.NewServeMux()
	m.HandleFunc("GET /webchat/bots/{bot}", h.botPage)
	m.HandleFunc("GET /webchat/bots/{bot}/app.js", h.asset("app.js", "text/javascript; charset=utf-8"))
	m.HandleFunc("GET /webchat/bots/{bot}/app.css", h.asset("app.css", "text/css; charset=utf-8"))
	m.HandleFunc("POST /webchat/bots/{bot}/session", h.botGuard(h.botSession))
	m.HandleFunc("POST /webchat/bots/{bot}/messages", h.botGuard(h.botPost))
	m.HandleFunc("/webchat/bots/", func(w http.ResponseWriter, r *http.Request) {
		writeError(w, http.StatusNotFound, profile.CodeNotFound, "no route "+r.Method+" "+r.URL.Path)
	})
	return m
}

// bot is the webchat bot of the URL, if there is one.
func (h *Handler) bot(r *http.Request) (adapter.Bot, webchat.Config, bool, error) {
	id := r.PathValue("bot")
	if h.bots == nil || !profile.ValidChannelID(id) || len(id) > 48 {
		return adapter.Bot{}, webchat.Config{}, false, nil
	}
	b, ok, err := h.bots.Lookup(r.Context(), id)
	if err != nil || !ok || b.Target.Adapter != webchat.Name {
		return adapter.Bot{}, webchat.Config{}, false, err
	}
	c, err := webchat.ParseConfig(b.Target.Config)
	return b, c, err == nil, nil
}

// botPage serves a bot's public page: framed only by the config's frame_ancestors.
func (h *Handler) botPage(w http.ResponseWriter, r *http.Request) {
	b, c, ok, err := h.bot(r)
	if err != nil {
		writeError(w, http.StatusServiceUnavailable, profile.CodeUnavailable, "bot registry unavailable")
		return
	}
	if !ok {
		writeError(w, http.StatusNotFound, profile.CodeNotFound, "no such page")
		return
	}
	ancestors := "'none'"
	if len(c.FrameAncestors) > 0 {
		ancestors = "'self' " + strings.Join(c.FrameAncestors, " ")
	}
	h.render(w, map[string]string{"Bot": b.ID, "Base": "/webchat/bots/" + b.ID}, ancestors)
}

// botGuard admits a visitor's POST: the bot is a webchat bot, the request carries VisitorHeader.
func (h *Handler) botGuard(next func(http.ResponseWriter, *http.Request, adapter.Bot, webchat.Config)) http.HandlerFunc {
	return func(w http.ResponseWriter, r *http.Request) {
		b, c, ok, err := h.bot(r)
		switch {
		case err != nil:
			writeError(w, http.StatusServiceUnavailable, profile.CodeUnavailable, "bot registry unavailable")
		case !ok:
			writeError(w, http.StatusNotFound, profile.CodeNotFound, "no such page")
		case r.Header.Get(VisitorHeader) == "":
			writeError(w, http.StatusForbidden, profile.CodeUnauthorized, "a visitor's request carries "+VisitorHeader)
		default:
			next(w, r, b, c)
		}
	}
}

// visitor is the request's visitor secret of bot ("" when it has none).
func visitor(r *http.Request, bot string) string {
	c, err := r.Cookie(VisitorCookie + "_" + bot)
	if err != nil || len(c.Value) < 16 || len(c.Value) > 64 {
		return ""
	}
	return c.Value
}

// botSession answers a page opening: the visitor's cookie (set when new), the page title and the
// visitor's channel when their conversation has one.
func (h *Handler) botSession(w http.ResponseWriter, r *http.Request, b adapter.Bot, c webchat.Config) {
	secret := visitor(r, b.ID)
	if secret == "" {
		var raw [16]byte
		_, _ = rand.Read(raw[:])
		secret = base64.RawURLEncoding.EncodeToString(raw[:])
		cookie := &http.Cookie{Name: VisitorCookie + "_" + b.ID, Value: secret, Path: "/webchat/", HttpOnly: true,
			MaxAge: int(visitorMaxAge / time.Second), SameSite: http.SameSiteLaxMode}
		if r.TLS != nil || strings.HasPrefix(h.cfg.PublicURL, "https://") {
			// Framed by another site, the page is a third party: its cookie must say so.
			cookie.Secure, cookie.SameSite, cookie.Partitioned = true, http.SameSiteNoneMode, true
		}
		http.SetCookie(w, cookie)
	}
	id := adapter.Conversation{Kind: adapter.Direct, ID: VisitorConversation(b.ID, secret)}.ChannelID(b.ID)
	answer := map[string]any{"title": c.Title, "channel": nil, "max_file_bytes": h.cfg.MaxFileBytes}
	if ch, ok, err := h.lookup(r.Context(), id); err == nil && ok && ch.Bot == b.ID {
		answer["channel"] = id
	}
	w.Header().Set("Cache-Control", "no-store")
	writeJSON(w, http.StatusOK, answer)
}

// botPost takes a visitor's message: the bot's policy admits it (the first opens the visitor's
// channel) or refuses it (202 {"refused", "message"}); an admitted one is taken as a channel
// page's message is, through the conversation's inbox.
func (h *Handler) botPost(w http.ResponseWriter, r *http.Request, b adapter.Bot, _ webchat.Config) {
	secret := visitor(r, b.ID)
	if secret == "" {
		writeError(w, http.StatusUnauthorized, profile.CodeUnauthorized, "no visitor cookie: open the page first")
		return
	}
	conv := VisitorConversation(b.ID, secret)
	arrival := adapter.Arrival{Conversation: adapter.Conversation{Kind: adapter.Direct, ID: conv, Title: "web visitor " + conv[1:9]},
		Author: adapter.Author{ID: conv, DisplayName: "web visitor " + conv[1:9]}}
	if retry := h.quotas.message(arrival.Conversation.ChannelID(b.ID)); retry > 0 {
		h.posted.WithLabelValues(profile.CodeRateLimited).Inc()
		tooMany(w, retry, "too many messages from this page (XIM_WEBCHAT_MESSAGES_PER_MINUTE)")
		return
	}
	adm, err := h.bots.Admit(r.Context(), b, arrival)
	if err != nil {
		h.logger.Error("webchat_bot_admit_failed", "bot", b.ID, "err", err)
		writeError(w, http.StatusServiceUnavailable, profile.CodeUnavailable, "the conversation could not be opened")
		return
	}
	if !adm.Admitted() {
		h.posted.WithLabelValues("refused_" + string(adm.Refused)).Inc()
		writeJSON(w, http.StatusAccepted, map[string]any{"refused": adm.Refused, "message": refusalText(adm.Refused)})
		return
	}
	status, code, msg := h.accept(w, r, adm.Channel, func(ctx context.Context, m profile.Message) error {
		_, err := adm.Inbox.Submit(ctx, m)
		return err
	}, map[string]any{"connector_channel_id": adm.Channel.ID})
	if code != "" {
		h.posted.WithLabelValues(code).Inc()
		writeError(w, status, code, msg)
	}
}

// refusalText says to a visitor why their message was not taken.
func refusalText(why adapter.Refusal) string {
	if why == adapter.RefusedRateLimited {
		return "Too many messages: please wait a minute."
	}
	return "This assistant is not taking conversations now."
}

// visitorsChannel is the channel of the request's URL when it is the conversation of the
// request's visitor (their cookie) with a webchat bot: for a POST only with VisitorHeader.
func (h *Handler) visitorsChannel(r *http.Request) (adapter.Channel, bool) {
	if r.Method != http.MethodGet && r.Header.Get(VisitorHeader) == "" {
		return adapter.Channel{}, false
	}
	ch, ok, err := h.lookup(r.Context(), r.PathValue("channel"))
	if err != nil || !ok || ch.Bot == "" || ch.Conversation == nil || ch.Target.Adapter != webchat.Name {
		return adapter.Channel{}, false
	}
	secret := visitor(r, ch.Bot)
	if secret == "" || !equal(VisitorConversation(ch.Bot, secret), ch.Conversation.ID) {
		return adapter.Channel{}, false
	}
	return ch, true
}

// BotLink serves GET /v1/bots/{id}/webchat (behind the bearer token): a webchat bot's public page
// link and an HTML snippet that embeds it (framing needs the page's origin in the bot's
// frame_ancestors).
func (h *Handler) BotLink(w http.ResponseWriter, r *http.Request) {
	id := r.PathValue("id")
	var b adapter.Bot
	ok := false
	if h.bots != nil && profile.ValidChannelID(id) {
		var err error
		if b, ok, err = h.bots.Lookup(r.Context(), id); err != nil {
			writeError(w, http.StatusServiceUnavailable, profile.CodeUnavailable, "bot registry unavailable")
			return
		}
	}
	if !ok || b.Target.Adapter != webchat.Name {
		writeError(w, http.StatusNotFound, profile.CodeBotNotFound, "bot "+id+" is not a webchat bot")
		return
	}
	c, _ := webchat.ParseConfig(b.Target.Config)
	path := "/webchat/bots/" + url.PathEscape(id)
	pageURL := h.cfg.PublicURL + path
	snippet := `<iframe src="` + template.HTMLEscapeString(pageURL) + `" title="` + template.HTMLEscapeString(c.Title) +
		`" style="border:0;width:100%;max-width:420px;height:600px" allow="clipboard-write"></iframe>`
	writeJSON(w, http.StatusOK, map[string]any{"bot_id": id, "page_url": pageURL, "page_path": path, "snippet": snippet,
		"frame_ancestors": c.FrameAncestors})
}
