// Package page serves the webchat target's browser page from a gateway: the HTML/CSS/JS
// (embedded, no build step), the channel's items as Server-Sent Events with history replay,
// and the user's messages and files, which take the same send path as the webhook inbound
// route (file store, then the outbox: a user chat.message pending until xAgent acks it).
//
// Routes (no bearer token). The page itself holds nothing of the channel and is served to
// anyone; every other route needs the channel's page secret in the X-Webchat-Key header, or (a
// GET only) in the HttpOnly cookie POST /session sets. The link carries the secret in its
// fragment (/webchat/{channel}#k=…), never in a query string, so no request line, access log,
// proxy or Referer ever holds it.
//
//	GET  /webchat/{channel}               the page
//	POST /webchat/{channel}/session       secret in the header -> 204, cookie ximd_webchat (HttpOnly, SameSite=Strict, Path /webchat/{channel}/)
//	GET  /webchat/{channel}/info          {"connector_channel_id","title","max_file_bytes"}
//	GET  /webchat/{channel}/events        text/event-stream: history, `ready`, then live items (webchat.PageData: an assistant message with its Markdown rendered as html)
//	POST /webchat/{channel}/uploads       multipart "file" -> 201 file store meta
//	POST /webchat/{channel}/messages      {"client_id","text","file_refs"} -> 202 {"message_id","id"}
//	GET  /webchat/{channel}/files/{ref}   a file of the channel
//
// and, behind the bearer token, GET /v1/channels/{id}/webchat -> {"page_url","page_path"}: the
// only place a page secret leaves ximd. A missing secret is 401, a wrong one 403 (also for a
// channel that is not an open webchat channel, so a page learns nothing about other channels).
// Secrets are compared in constant time and never logged.
package page
