// Package matrix is the `matrix` target adapter (edge-api §7.2.1): a channel bound to one Matrix
// room, and a bot bound to a Matrix account, through the client-server API
// (maunium.net/go/mautrix; no end-to-end encryption).
//
// Out: text as m.room.message m.text events (PUT …/send/m.room.message/{txnId}, the txnId derived
// from the idempotency key and part, so a repeated send is the same event), the agent's Markdown
// as org.matrix.custom.html in formatted_body with its plain text as body (edge-api §7.3; a
// homeserver refuses no HTML, so there is no fall-back); a streamed answer is one message edited
// in place (m.replace, both forms of the whole text in m.new_content); finals longer than
// MaxTextLength are split between blocks, within the event size; files are uploaded to the media repository and sent as
// m.image/m.video/m.audio/m.file; typing is a typing notification renewed while a status is shown;
// replies use m.relates_to.m.in_reply_to. In doubt, Lookup finds the bot's events by the
// org.ximd.idempotency_key they carry, so a final is never answered delivery_outcome_unknown.
//
// In: one /sync long-poll loop per account (homeserver and access token; PollKey "mx_" and a
// digest of the two), serving every channel PUT on that account and its bots. The cursor in KV
// xim_cursors holds the sync token and the rooms of the channels served when it was saved: a
// channel's room not among them (a channel PUT since) is read back with /messages from its binding
// on. A message's message_id is derived from its event id ("mx_" + 32 hex digits of its SHA-256),
// so an event read twice is one message. A formatted_body reaches the agent as its Markdown
// (MarkdownOf). With channels only, the sync filter names their rooms.
//
// # Bots
//
// A bot's config is a channel's without room_id ({"homeserver", "access_token"}, plus streaming,
// activity, first_preview_words for its channels); Bind names the room, and with no conversation
// the placeholder room !bot:ximd.invalid. ProbeBot checks the token with /account/whoami. The
// bot's /sync sees every room of the account:
//
//   - Invitations: the bot joins when a bot's policy admits the inviter. A direct invitation
//     (is_direct) is judged by Policy.Decide with the inviter as the author of a direct message;
//     a stranger under "pairing" is joined too, so the bot can answer with the code. Any other
//     invitation is a group's: joined unless groups is "closed" or allow_groups is set and does
//     not name the room. A joined direct room is added to the account's m.direct. An invitation
//     to an encrypted room (m.room.encryption in its invite state) is never joined; a refused
//     invitation is left as it is, and the bot leaves no room by itself.
//   - Kinds: a room in the account's m.direct, or of two joined members, is "direct" (titled with
//     the author's display name); any other is "group" (titled with its m.room.name). Scope
//     "thread" is served as "conversation": Matrix threads are not told apart.
//   - Keys: the room id, which is not token-safe, so the channel id is "<bot_id>-h_" and 26
//     characters of the base32 SHA-256 of the room id (adapter.Conversation.Key).
//   - Mentions: the account's user id in m.mentions.user_ids, its user id or its display name in
//     the room (a whole word, any case) in the body, or a reply to one of its events. The user id
//     and display name (with an '@' before and a ':' or ',' after) are removed from the text, and
//     a reply's quoted fallback lines.
//   - Authors: the account's own events are skipped. Matrix has no bot flag: another account is
//     a person, except that an m.notice (the message type the Matrix spec gives automated
//     senders, which must not be answered) or an event another ximd sent (it carries
//     org.ximd.idempotency_key) is a bot's, passed to Admit as from_bot.
//   - Messages written before the bot was put (less adapter.BindGrace) are not passed; a room a
//     channel PUT binds on the same account goes to that channel, never to the bot; an encrypted
//     room's messages are logged and skipped.
//
// docs/adapters/matrix.md says all of it.
package matrix
