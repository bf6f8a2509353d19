// Package webchat is the built-in browser chat target, selected by `"adapter": "webchat"`
// (docs/webchat.md). The "target system" is stream XIM_WEBCHAT, not process memory, so the
// adapter works when the workers that display messages and the gateways that serve the page
// are different processes:
//
//   - the worker-side [Target] (Send, Edit, ShowActivity, Lookup) writes the whole current
//     state of each assistant message, and the channel's status, as an [Item] on subject
//     xim.webchat.<channel>.<item>;
//   - the gateway-side page (package page) streams a channel's subjects to its browsers and
//     writes the user's messages there too; the stream keeps one message per subject, so it
//     holds each message's latest state: the channel's history.
//
// Capabilities: streaming "edit" (the bubble grows in place, the final replaces it) and
// activity "status" (thinking / tool name / idle as a status line).
//
// # Markdown
//
// The agent's text is Markdown, and the page shows it rendered (edge-api §7.3): the stream holds
// the text; the gateway sends each assistant message with its HTML ([Item.ForPage]:
// markdown.Parse(text).HTML(markdown.Web), an allow-list of tags and attributes, every text
// escaped, raw HTML as text, links http, https and mailto only, opened apart with rel="nofollow
// noopener noreferrer"), rendered anew for every streamed state, and the page sets markup only
// from it. A person's messages, and any html a stored item carries, reach the page as text.
//
// # Config
//
//		{ "adapter": "webchat", "config": { "title": "Support", "secret": "…" } }
//
//	  - title: the page's title (default "ximd webchat", at most 200 bytes).
//	  - secret: the page secret (16..256 bytes). Omitted: derived per channel opening from a
//	    cluster-wide key, see package page. Never logged or returned by the channels API.
//	  - channel: reserved; ximd stamps the channel id in ([WithChannelIDs]).
//
// # Idempotency and reconciliation
//
// An assistant message's target id is derived from its idempotency key ("<channel>:<message_id>"),
// and Send creates it with an expected-last-sequence of 0: a second Send with the same key
// returns the same id and writes nothing. [Target.Lookup] ([adapter.Reconciler]) reads the
// message's state: found, and whether the final was applied.
//
// # Errors
//
// A JetStream failure (stream unreachable, timeout) is target_unavailable (retryable). An edit
// of a message that no longer exists (expired or purged), or a target not bound to its
// channel, is target_delivery_failed.
package webchat
