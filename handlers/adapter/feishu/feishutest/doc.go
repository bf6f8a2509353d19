// Package feishutest is an in-process fake of the Feishu (Lark) open platform for tests of the
// Feishu adapter: an [httptest.Server] that answers the OpenAPI endpoints the adapter uses as
// the open.feishu.cn documentation describes them, pushes im.message.receive_v1 events to an
// app's event URL, and shows a test what a person in a chat sees.
//
// A test builds the world, hands [Server.URL] to the adapter as its base URL, and acts as the
// people in the chats:
//
//	s := feishutest.New()
//	defer s.Close()
//	app := s.AddApp("cli_a1b2c3", "secret", "ximd")
//	ann := s.AddUser("Ann")
//	chat := s.AddChat("group", "Team", ann)
//	s.SetEventURL(app.ID, adapterURL, "verification-token", "encrypt-key")
//	s.Post(chat, ann, "hello")      // an encrypted, signed event to the adapter
//	// ... run the adapter with base URL s.URL(), app.ID and app.Secret ...
//	msgs := s.Messages(chat)        // what the bots sent, cards with their streamed text
//
// The contract:
//
//   - Paths as Feishu's, under /open-apis. Answers are {"code":0,"msg":"success","data":{...}}
//     or {"code":N,"msg":"...","error":{"log_id":"..."}} with the HTTP status the endpoint's
//     page documents (400 for most refusals); the token endpoint answers
//     {"code":0,"msg":"ok","tenant_access_token":"t-…","expire":7200}.
//   - Every endpoint but the token endpoint needs "Authorization: Bearer t-…"; a missing,
//     malformed, unknown or expired token answers 99991661, 99991671 or 99991663.
//   - Endpoints: tenant_access_token/internal; bot/v3 info; im/v1 messages (send, reply,
//     resources), chats (get), images and files (upload); cardkit/v1 cards (create, full update,
//     settings, element content). Other paths answer 404 with code 99991201.
//   - Rate limits ([Limits]): per app and API (HTTP 429, 99991400 with the
//     x-ogw-ratelimit-limit and x-ogw-ratelimit-reset headers), per card entity (likewise), and
//     per chat (HTTP 400, 230020). While a reset the fake gave runs, calls under that limit get
//     429 too and are recorded as [Call.Early].
//   - Events are POSTed as Feishu does: encrypted (AES-256-CBC) and signed (X-Lark-Signature)
//     when the app has an Encrypt Key, and retried unless answered HTTP 200 in time
//     ([EventRetry]); a person's message may mention people and bots
//     ([Server.PostMentioning]), and [Server.PostAsBot] delivers another bot's message, which
//     Feishu does not document, to test that it is never passed on.
//   - Time: token expiry, uuid deduplication, rate limits, card expiry and streaming timeout
//     follow the clock of [Server.SetClock]; [Server.Hang] and event delivery use real time.
//
// The README lists, per behaviour, the documentation page it follows, the choices made where
// the pages are silent, and what is not modelled.
//
// The Server owns its goroutines (event deliverers); [Server.Close] stops them and ends hung
// calls before it closes the listener.
package feishutest
