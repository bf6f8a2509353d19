// Package telegramtest is an in-process fake of the Telegram Bot API for tests of the Telegram
// adapter: an [httptest.Server] that answers the methods the adapter uses as the Bot API
// documents them (https://core.telegram.org/bots/api, https://core.telegram.org/bots/faq),
// with the descriptions the real server gives, and shows a test what a person in a chat sees.
//
// A test builds the world, hands [Server.URL] to the adapter as its api_url, and acts as the
// people in the chats:
//
//	s := telegramtest.New()
//	defer s.Close()
//	b := s.AddBot("123456:secret", "ximd_bot")
//	ann := s.AddUser("Ann")
//	chat := s.AddChat("private", "", ann.ID)
//	s.Post(chat, ann, "hello")             // an update for b, by getUpdates or its webhook
//	// ... run the adapter with api_url s.URL() and token b.Token ...
//	msgs := s.Messages(chat)               // what the bots sent, text after edits
//
// The contract:
//
//   - URLs as Telegram's: {URL}/bot<token>/<method> (method names case-insensitive) and
//     {URL}/file/bot<token>/<file_path>. Parameters come from the query string and from an
//     application/json, application/x-www-form-urlencoded or multipart/form-data body; in
//     JSON, a value that is not a string is taken as its JSON text, as the Bot API does.
//   - Answers are {"ok":true,"result":...} or {"ok":false,"error_code":N,"description":...}
//     with HTTP status N, and parameters.retry_after on 429.
//   - Methods: getMe, getChat, sendMessage, editMessageText, sendMessageDraft, sendRichMessage,
//     sendRichMessageDraft, sendChatAction,
//     sendPhoto, sendDocument, sendVideo, sendAudio, getFile, getUpdates, setWebhook,
//     deleteWebhook, getWebhookInfo. Any other method answers 404 Not Found.
//   - Formats: the HTML parse mode and rich messages' Markdown are read as Telegram reads them,
//     refusing what it refuses with its descriptions; a message records its form, entities and
//     blocks ([Message]); [Server.SetRich] makes a server from before rich messages.
//   - What bots see of a message: entities of mentions and bot commands (PostEntities for
//     others, such as text_mention), forum topics (AddForum, AddTopic, PostInTopic; sends take
//     message_thread_id), and other bots' messages under Bot-to-Bot Communication (PostAsBot,
//     SetBotToBot).
//   - Rate limits per bot and chat ([Limits]); once a call got 429 with retry_after N, every
//     call of that bot to that chat in the next N seconds gets 429 too and is recorded as
//     [Call.Early].
//   - Time: dates, the 24-hour update retention, typing status and rate limits follow the
//     clock of [Server.SetClock]; long-poll timeouts, [Server.Hang] and webhook back-off use
//     real time.
//
// The README lists, per behaviour, the Bot API page or section it follows and what is not
// modelled.
//
// The Server owns its goroutines (webhook deliverers); [Server.Close] stops them and ends
// pending long polls and hung calls before it closes the listener.
package telegramtest
