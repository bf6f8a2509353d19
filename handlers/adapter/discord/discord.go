// Package discord is the `discord` adapter (edge-api §7.2.5): a Discord bot user in a guild text
// channel, a thread or a DM channel, through the Discord API (REST v10) and its Gateway.
//
// Config (target.config): bot_token (required), channel_id (required for a channel; a bot's
// config names none), api_url (default https://discord.com/api/v10), gateway_url (default what
// GET {api_url}/gateway/bot answers), streaming ("edit" default, or "none"), activity ("typing"
// default, or "none"), first_preview_words (default 3).
//
// Capabilities: streaming edit or none, activity typing (POST /channels/{id}/typing shows for
// 10 s; renewed every 8 s), reply native (message_reference), files both ways,
// max_text_length 2000, in-doubt rule dedupe within the nonce window (5 minutes).
//
// Calls: a message is POST /channels/{id}/messages with content, allowed_mentions {"parse": []}
// (the agent never pings), a nonce of at most 25 characters derived from the idempotency key and
// the part's index, and enforce_nonce true, so a send repeated within Discord's window answers
// the message already made; an edit is PATCH /channels/{id}/messages/{message id} with the whole
// content and allowed_mentions again (Discord re-parses an edit's mentions). A final longer than
// 2,000 characters (as Discord counts them, after the Markdown form) is split between Markdown
// blocks into consecutive messages; a streamed preview past 2,000 rolls over into the next
// message. Files go as multipart payload_json + files[n], at most ten a message.
//
// Library: github.com/bwmarrin/discordgo v0.28.1. It speaks API v9 and its message structs have
// no nonce, so every REST call goes through its request helper (RequestWithLockedBucket, with the
// library's bucket lock) with this package's own bodies and URLs under api_url; its session's
// retry on 429 and its reconnect loop are off: a 429 answers a RetryAfterError (the channel, or
// the whole bot for a global limit, makes no call before Discord's retry_after), and the poll
// loop reconnects itself, stopping for good on a token Discord refused (401; the library would
// reconnect forever, even after close code 4004). Its gateway lookup is sent to api_url (or
// answered with gateway_url) by the account's HTTP transport, since the library's endpoints are
// package variables this adapter does not change.
//
// Errors: at a channel PUT, GET /users/@me and GET /channels/{id} (401, 404 / 10003 unknown
// channel, 403 / 50001 no access -> 422 target_config_invalid with the reason); later 401 ->
// target_auth_failed, 429 -> target_rate_limited, 5xx and timeouts -> target_unavailable (a
// timeout after the request went out in doubt), other 4xx -> target_delivery_failed with
// Discord's code and message.
//
// In: the Gateway (intents GUILDS, GUILD_MESSAGES, DIRECT_MESSAGES and the privileged
// MESSAGE_CONTENT), one connection per bot token (the poll key), MESSAGE_CREATE from a person
// in a bound channel -> a user message whose message_id is the message's id; after every
// (re)connect the bound channels' messages after the last one seen (kept in the feed's cursor)
// are read with GET /channels/{id}/messages?after=, so a restart loses nothing and doubles
// nothing. docs/adapters/discord.md says the rest.
package discord

import (
	"context"
	"errors"
	"net/http"
	"time"

	"github.com/ximd/ximd/handlers/adapter"
	"github.com/ximd/ximd/profile"
)

// Name is the adapter's name in `target.adapter`.
const Name = "discord"

// Adapter opens discord targets: one account (client, buckets, gateway) per bot token.
type Adapter struct {
	adapter.Platform[*config, publicConfig, *account]
}

// Options configure the adapter.
type Options struct {
	adapter.Common
}

var (
	_ adapter.Opener         = (*Adapter)(nil)
	_ adapter.Prober         = (*Adapter)(nil)
	_ adapter.Poller         = (*Adapter)(nil)
	_ adapter.Target         = (*Target)(nil)
	_ adapter.Editor         = (*Target)(nil)
	_ adapter.ActivityShower = (*Target)(nil)
)

// New returns the discord adapter.
func New(opts Options) *Adapter {
	a := &Adapter{}
	a.Init(Name, opts.Common, 30*time.Second, parseConfig, (*config).public, a.open)
	return a
}

func (a *Adapter) account(c *config) *account {
	return a.Accounts.Get(c.accountKey(), func() *account { return newAccount(c, a.HTTPClient) })
}

func (a *Adapter) open(c *config) (adapter.Target, error) {
	return &Target{a: a, acc: a.account(c), cfg: c}, nil
}

// Probe implements adapter.Prober: the token works (GET /users/@me, asked afresh, so a token
// refused before is tried again) and the bot sees the channel (GET /channels/{id}).
func (a *Adapter) Probe(ctx context.Context, ch adapter.Channel) error {
	c, err := parseConfig(ch.Target.Config)
	if err != nil {
		return err
	}
	acc := a.account(c)
	if err := acc.probeToken(ctx); err != nil {
		return err
	}
	if _, err := acc.channel(ctx, c.channelID); err != nil {
		return refused("the channel", err)
	}
	return nil
}

// probeToken asks GET /users/@me with the token, even one refused before (an operator's PUT
// is the one call that may find it working again).
func (acc *account) probeToken(ctx context.Context) error {
	acc.refused.Store(false)
	acc.mu.Lock()
	acc.self = nil
	acc.mu.Unlock()
	if _, err := acc.me(ctx); err != nil {
		return refused("the bot token", err)
	}
	return nil
}

// refused is a probe's failure as 422 target_config_invalid with the reason.
func refused(what string, err error) error {
	var ae *apiError
	pe := profile.AsError(err)
	switch {
	case pe.Code == profile.CodeTargetAuthFailed:
		return profile.Errorf(profile.CodeTargetConfigInvalid, "discord refused the bot token (401)")
	case errors.As(err, &ae) && (ae.status == http.StatusNotFound || ae.code == 10003):
		return profile.Errorf(profile.CodeTargetConfigInvalid, "discord: unknown channel (10003): check channel_id")
	case errors.As(err, &ae) && (ae.code == 50001 || ae.status == http.StatusForbidden):
		return profile.Errorf(profile.CodeTargetConfigInvalid, "discord: the bot has no access to the channel (50001): invite it, or give it View Channel")
	case errors.As(err, &ae) && ae.code == 50013:
		return profile.Errorf(profile.CodeTargetConfigInvalid, "discord: the bot lacks permissions in the channel (50013)")
	}
	return profile.Errorf(profile.CodeTargetConfigInvalid, "discord: checking %s failed: %s", what, pe.Message)
}

// Target is one channel's Discord channel.
type Target struct {
	a   *Adapter
	acc *account
	cfg *config
}

// Capabilities implements adapter.Target.
func (t *Target) Capabilities() adapter.Capabilities {
	c := adapter.Capabilities{Streaming: t.cfg.streaming, Activity: t.cfg.activity, Reply: adapter.ReplyNative,
		InDoubt: adapter.InDoubtDedupe, InDoubtWindow: NonceWindow, MaxTextLength: MaxTextLength,
		FirstPreviewWords: t.cfg.firstWords}
	if t.cfg.streaming == adapter.StreamingEdit {
		c.MinEditInterval = EditInterval
	}
	if t.cfg.activity == adapter.ActivityTyping {
		c.ActivityRenewal = TypingRenewal
	}
	return c
}

// ShowActivity implements adapter.ActivityShower: typing by POST /channels/{id}/typing (shown
// 10 s; the stage renews it every TypingRenewal). Discord has no call to stop it: idle sends
// nothing, and the indicator ends by itself or with the bot's next message.
func (t *Target) ShowActivity(ctx context.Context, a adapter.Activity) error {
	if a.Status == adapter.StatusIdle {
		return nil
	}
	id := t.cfg.channelID
	return t.acc.call(ctx, request{method: http.MethodPost, path: "/channels/" + id + "/typing", channel: id, route: "POST /channels/" + id + "/typing"}, nil)
}
