// Package target declares what the delivery stage needs from a target
// system: the adapter contract of edge-api §7.
//
// The contract is declared here, by its user, as small interfaces. Every
// bound target can create a message ([Sender]) and report its
// [Capabilities]. What only some targets can do is a separate optional
// interface that the delivery stage finds by type assertion, as in mautrix
// bridgev2:
//
//   - [Editor]: replace a message it created (capability streaming "edit").
//   - [ActivityShower]: show a temporary status (capability activity
//     "status" or "typing").
//
// A Target implements an optional interface exactly when its Capabilities
// say so, so the assertion tells the truth:
//
//	if ed, ok := t.(target.Editor); ok {
//		err = ed.Edit(ctx, id, m)
//	}
//
// An [Adapter] turns a channel's `target.config` JSON (the body of
// PUT /v1/channels/{id}, edge-api §4) into a Target; a [Registry] finds
// adapters by name.
//
// Errors returned by targets are *profile.Error values carrying one of the
// target codes (target_rate_limited, target_unavailable,
// target_auth_failed, target_delivery_failed) and their Retryable flag;
// callers find them with errors.As. Errors returned by [Adapter.Open] and
// [Adapter.Public] for a bad config are *profile.Error with code
// invalid_descriptor and a message naming the offending field.
//
// This package imports no NATS and no HTTP; adapters live in
// sub-packages (webhook).
package target
