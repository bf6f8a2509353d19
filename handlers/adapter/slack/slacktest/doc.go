// Package slacktest is an in-process fake of Slack for tests of the Slack adapter: the Web API
// methods the adapter uses, Socket Mode and the Events API, as the Slack docs describe them
// (https://docs.slack.dev/reference/methods/…, "Socket Mode", "Events API", "Verifying requests
// from Slack", "Rate limits"), and a view of what a person in a channel sees.
//
// A test builds a workspace, hands [Server.URL] to slack-go, and acts as the people:
//
//	s := slacktest.New()
//	defer s.Close()
//	bot := s.AddBot("ximd")
//	ann := s.AddUser("Ann")
//	dm := s.AddChannel("im", "", ann)
//	api := slack.New(bot.Token, slack.OptionAPIURL(s.URL()), slack.OptionAppLevelToken(bot.AppToken))
//	s.SetSocketMode(true)                    // events go to socketmode.New(api)
//	ts, eventID := s.Post(dm, ann, "hello", "") // a message event for every bot member
//	// ... run the adapter ...
//	msgs := s.Messages(dm)                   // every message, text after updates and appends
//
// The contract:
//
//   - Web API at {URL}method ({URL} ends with "/api/"): form, JSON or multipart bodies; the
//     token as "Authorization: Bearer" or, except in JSON bodies, a token argument. Answers
//     are HTTP 200 {"ok":true,…} or {"ok":false,"error":"…"}, and HTTP 429 with Retry-After
//     and {"ok":false,"error":"ratelimited"} past a rate limit. An unknown method answers
//     unknown_method.
//   - Methods: auth.test, conversations.info, users.info, conversations.history,
//     conversations.replies, chat.postMessage, chat.update, chat.startStream, chat.appendStream,
//     chat.stopStream, assistant.threads.setStatus, files.getUploadURLExternal,
//     files.completeUploadExternal, apps.connections.open.
//   - Events: a person's message, and a bot's chat.postMessage, make a message event for every
//     bot member; a mention of a bot outside ims also makes an app_mention for it.
//   - Socket Mode: apps.connections.open gives a single-use ws:// URL on the fake; the
//     connection gets hello, then events_api envelopes; an envelope not acknowledged within
//     [Timing].AckTimeout is sent again with retry_attempt+1.
//   - Events API: with [Server.SetEventURL] and Socket Mode off, events are POSTed signed
//     (X-Slack-Signature v0) and retried with X-Slack-Retry-Num and X-Slack-Retry-Reason.
//   - Rate limits per method per app ([Limits]), per channel for posting; once a call got 429
//     with Retry-After N, calls to that budget in the next N seconds get 429 too and are
//     recorded as [Call.Early].
//   - Time: ts values, Call.At, statuses and rate limits follow [Server.SetClock]; delivery
//     timeouts, retries, pings and [Server.Hang] use real time, shortened by [Timing].
//
// The README lists, per behaviour, the Slack page it follows, the choices made where the docs
// are silent, and what is not modelled.
//
// The Server owns its goroutines (deliverers, sockets, pingers); [Server.Close] stops them
// and ends hung calls before it closes the listener.
package slacktest
