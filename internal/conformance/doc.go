// Package conformance is the IM v2 profile's checklist as a program: `ximctl conformance`.
//
// [Run] plays xAgent (WebSocket /v1/ws) and the target system (a webhook target it serves,
// edge-api §7.1) against a running ximd, through the edge API alone, and runs one check per
// section-11 question of the profile and per rule observable from outside ([Checks] lists them:
// id, rule, what each proves). Each check opens its own scratch channels, bound to that target
// with their own chat_id, and they are deleted before Run returns, also when its context is
// cancelled. Checks run one at a time, in order; a check passes when it saw the rule hold,
// fails when it saw it broken or did not see what must happen within Config.Wait, and is
// skipped, with the reason and where the bound is documented, when the rule cannot be observed
// from outside.
//
// The checks know the edge only by its contract: packets are decoded loosely (so a key that
// should not be there is seen), acks are found by reply_to or message_id (so a wrong reply_to
// is reported, not waited for), and target calls are recorded as they arrive with when they
// were answered. The package's tests run every check against a real ximd and each against an
// edge broken on purpose, which must fail it.
package conformance
