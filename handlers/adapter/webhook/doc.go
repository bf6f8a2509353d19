// Package webhook is the generic HTTP target adapter of edge-api §7.1, the
// one outside test suites drive. It is selected by `"adapter": "webhook"`.
//
// # Config
//
// The `target.config` object of PUT /v1/channels/{id}:
//
//	{ "url": "http://127.0.0.1:9999/hook", "chat_id": "room-1", "secret": "s3cr3t",
//	  "streaming": "edit", "activity": "typing", "timeout": "10s" }
//
// Its fields:
//
//   - url (required): absolute http or https URL of the target; calls go to
//     {url}/messages, {url}/messages/{id} and {url}/activity (a trailing
//     slash is ignored, a query string is kept). It must not carry
//     user:password (that would be echoed by the channels API; use the
//     secret) nor a fragment.
//   - chat_id (required, non-empty): sent in every body.
//   - secret (required, non-empty): HMAC-SHA256 key of X-Xim-Signature.
//     Never logged, echoed or put in an error.
//   - streaming: "edit" (default) or "none". Every webhook target
//     implements PATCH, so streaming is on unless switched off.
//   - activity: "typing" (default), "status" or "none". Typing is the
//     safe degradation every target can show (profile P-ACT-4).
//   - timeout: Go duration string bounding each HTTP call, default "10s",
//     at most "5m".
//   - format: how the agent's Markdown reaches the target (edge-api §7.3):
//     "markdown" (default) sends "text" as the agent wrote it; "html" also
//     sends "html" in every message call (POST and PATCH, ximd's own
//     messages too, "" for a message without text): the text rendered by
//     markdown.Parse(text).HTML(markdown.Web), as the webchat page shows it
//     (only its tags and attributes, every text escaped, raw HTML shown as
//     text, links http, https and mailto only, with rel="nofollow noopener
//     noreferrer"). A streamed part renders safely, and the final renders
//     exactly as a direct final of the same text. "text" stays the Markdown.
//
// Keys match as encoding/json matches them (exactly, else ignoring case).
// Any other key, a wrong JSON type or a bad value is a *profile.Error with
// code invalid_descriptor whose message names the field
// ("target.config.url: ...").
//
// # Calls
//
// Every call has a JSON body, Content-Type: application/json and
// X-Xim-Signature: sha256=<hex HMAC-SHA256 of the raw body with secret>
// (see [Sign] and [Verify]).
//
//   - Send: POST {url}/messages with {"chat_id","text","files","final",
//     "idempotency_key"} (and "html" with format "html"), plus an Idempotency-Key header carrying the same
//     key. A 2xx answer must be {"message_id": "<target id>"} (a JSON
//     string, or a number whose literal becomes the id); anything else is
//     target_delivery_failed.
//   - Edit: PATCH {url}/messages/{target id} (the id path-escaped) with
//     {"chat_id","text","files","final"} (and "html"), text being the whole
//     text.
//   - ShowActivity: POST {url}/activity with {"chat_id","status"} and, for
//     status "tool" under activity "status", "tool_name".
//
// files is always an array ([] when there are none) of
// {"type","file_ref","filename","mime_type","byte_size","url"}.
//
// The capabilities follow the config: streaming "none" means the stages never edit, activity
// "none" that they never show activity, "lookup" that an interrupted delivery is settled by
// Lookup (in_doubt "lookup"), "dedupe" that it is sent again (in_doubt "dedupe"); without
// either, in_doubt is "edit" (streaming "edit") or "unknown". With activity "typing", thinking, tool and typing
// are sent as "typing" and idle as "idle"; with "status", thinking, tool
// (with tool_name) and idle are sent as such, typing as "typing".
//
// # Answers
//
// 2xx is success. 429 is target_rate_limited and 5xx, a timeout or any
// connection failure (refused, reset, DNS) is target_unavailable, both
// retryable. 401 and 403 are target_auth_failed; every other answer
// (other 4xx, 1xx, 3xx: the default client follows no redirect, so a
// signed POST is never replayed elsewhere) and a TLS certificate failure
// are target_delivery_failed, not retryable (Retryable is taken from the
// profile's code table, via profile.Errorf). Every error returned
// satisfies errors.As(err, new(*profile.Error)); its message names the
// call and the HTTP status, never the secret, the request body or the
// response body. A transport failure also wraps its cause, so
// errors.Is(err, context.Canceled) and errors.Is(err,
// context.DeadlineExceeded) work. At most 64 KiB of an answer is read.
//
// One [Adapter] shares one *http.Client (keep-alive, up to 256 idle
// connections per host) among all its targets.
package webhook
