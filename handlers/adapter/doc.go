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
// This package imports no NATS and no HTTP; adapters live in
// sub-packages (webhook, webchat).
package adapter
