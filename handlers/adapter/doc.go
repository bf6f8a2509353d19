// Package adapter declares what the delivery stage needs from a target
// system: the adapter contract of edge-api §7.
//
// The contract is declared here, by its user. Every bound target can create a message
// ([Sender]) and reports its [Capabilities] as data: streaming, activity, reply, the in-doubt
// rule with its window, the platform's text limit and edit interval. The other calls are small
// interfaces a target's type implements ([Editor], [ActivityShower], [Reconciler]); the
// capabilities, which follow the channel's configuration, decide whether the stages use them,
// so one type serves every configuration:
//
//	if ed, ok := adapter.EditorOf(t); ok { // streaming "edit"
//		err = ed.Edit(ctx, id, m)
//	}
//
// A failure a platform asks to repeat no sooner than some time is a [RetryAfterError]: only that
// channel's lane waits that long.
//
// An [Opener] turns a channel's `target.config` JSON (the body of
// PUT /v1/channels/{id}, edge-api §4) into a Target; a [Registry] finds
// adapters by name.
//
// Errors returned by targets are *profile.Error values carrying one of the
// target codes (target_rate_limited, target_unavailable,
// target_auth_failed, target_delivery_failed) and their Retryable flag;
// callers find them with errors.As. Errors returned by [Opener.Open] and
// [Opener.Public] for a bad config are *profile.Error with code
// invalid_descriptor and a message naming the offending field. Every adapter decodes its config
// with the kit's [CheckConfig] (or [DecodeConfig]) and checks its fields with [ConfigCheck], so
// these errors are *[ConfigError] values: the field's path, what it takes and the problem, never
// the value.
//
// # The adapter kit
//
// What every adapter needs lives here once, so a new adapter writes its config, its platform
// calls and, where it has them, its poll or receive part:
//
//   - [Kit] is the [Opener] (Name, Open, Public) made from the adapter's name, its one parse
//     function (target.config to a validated config), the config's public form and how a
//     valid config opens a target; the adapter embeds it.
//   - [Platform] is what an adapter of a chat platform embeds: its Kit, the [Common] options
//     (Logger, HTTPClient, Files) with their [Common.Defaults], and [Clients], the per-account
//     client cache (one client per bot or app, keyed by a digest of its credentials, made once
//     under a lock, ended by Close; the node closes every adapter through [Registry.Close] when
//     it stops). The adapter's Options embed [Common]; its New calls [Platform.Init] and
//     defaults only its own options ([OrDefault]).
//   - [CheckConfig], [ConfigCheck] and [Enum]: the one config decoder (unknown fields and wrong
//     types found structurally, never by an error's text) and the checks adapters repeat
//     (required ids, base URLs, enums, bounded numbers).
//   - [BindGrace] with [Channel.Predates]: a platform message from before the channel's
//     binding is not passed on.
//   - The poll prologue: [Kit.PollKeyOf] (a channel's poll key from its config) and
//     [Kit.StartPoll] (the feed's channels and the account's config), so a [Poller] writes only
//     its loop.
//   - The receive prologue: [Kit.StartReceive] with the adapter's [Route] (its path, the
//     config's and the secret's check before the body is read, the refusal) and [ReadBody], so
//     a [Receiver] writes only what it does with the platform's call.
//   - [FileOrNote]: a user's file is fetched into the Transfer Plane through the [Inbox], or,
//     when it cannot be passed on, named in the text ([Unpassed]); [Submit] submits the message
//     and names the outcome ([Received]: [Accepted], [Duplicate], [Ignored] or a refusal's code).
//   - Bots (edge-api §4.1): an adapter that takes bots is a [BotTaker] (the config keys that
//     name a conversation, and [BotTaker.Bind] of a bot's config to one conversation, with
//     [BindConfig]), a [BotProber] where the platform has an identity call, and, for a platform
//     that posts a whole account's events to one URL, a [BotReceiver]. Its inbound part finds the
//     bots it serves in its [Inboxes] ([Bots]) and hands a message of a conversation no channel
//     PUT binds to [Admitter.Admit] as an [Arrival] (the [Conversation], its [Author], whether
//     the bot was mentioned, its mention removed from the text); the [Admission] is the inbox of
//     the conversation's channel, opened for it, or the [Refusal]. [Policy.Decide] is the
//     policy itself, as data; [adaptertest.RunBots] the cases every adapter passes.
//   - Rich text (edge-api §7.3): the agent's Markdown is parsed once by the sibling package
//     markdown and rendered in the platform's form; a form the platform refused is counted with
//     [Common.Fallback] ([RenderFallbacks]) before the next simpler form is sent.
//
// The vocabulary is typed: [Streaming], [ActivityMode], [ReplyMode] and [InDoubtRule] are the
// capabilities' values, [Status] an activity's; their JSON is the strings of edge-api §7.
//
// A platform adapter then reads:
//
//	type Adapter struct {
//		adapter.Platform[*config, publicConfig, *client]
//	}
//
//	type Options struct {
//		adapter.Common
//	}
//
//	func New(opts Options) *Adapter {
//		a := &Adapter{}
//		a.Init(Name, opts.Common, 30*time.Second, parseConfig, (*config).public, a.open)
//		return a
//	}
//
//	func (a *Adapter) open(c *config) (adapter.Target, error) {
//		return &Target{cli: a.Accounts.Get(c.accountKey(), func() *client { return newClient(c, a.HTTPClient) }), cfg: c}, nil
//	}
//
// This package imports no NATS; adapters live in sub-packages (webhook, webchat, matrix,
// telegram, feishu, slack).
package adapter
