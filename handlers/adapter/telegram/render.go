package telegram

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"strings"

	"github.com/go-telegram/bot"

	"github.com/ximd/ximd/handlers/adapter/markdown"
)

// form is how a text is shown in Telegram, richest first (edge-api §7.3): a rich message, the
// HTML parse mode with Telegram's tags, plain text. A refused form falls back to the next.
type form int

const (
	formRich form = iota
	formHTML
	formPlain
)

func (f form) String() string { return [...]string{"rich", "html", "plain"}[f] }

// limit is the most a message of the form holds, as count measures it.
func (f form) limit() int {
	if f == formRich {
		return MaxTextLength
	}
	return MaxPlainTextLength
}

// count measures a Markdown text as Telegram counts it in the form: for a rich message, the
// UTF-16 length of the Markdown sent (an upper bound of the text Telegram counts after its own
// parsing), or its blocks weighed so that MaxRichBlocks of them fill a message, whichever is
// more; for HTML and plain text, the UTF-16 length of the plain text (an upper bound of the
// text after entity parsing: the plain form spells links out).
func (f form) count(s string) int {
	if f == formRich {
		src, blocks := markdown.Parse(s).TelegramRich()
		return max(utf16Len(src), blocks*blockWeight)
	}
	return utf16Len(markdown.Parse(s).Plain())
}

// blockWeight is what one block costs against MaxTextLength: MaxRichBlocks blocks fill it.
const blockWeight = (MaxTextLength + MaxRichBlocks - 1) / MaxRichBlocks

// piece is one message of a final: the Markdown it shows, and the form it is sent in.
type piece struct {
	src  string
	form form
}

// split cuts a Markdown text into the messages of form f (between blocks: markdown.Split), each
// within f's limit as f counts it.
func split(text string, f form) []piece {
	limit := f.limit()
	for {
		parts := markdown.Split(text, limit, f.count)
		longest := 0
		for _, p := range parts {
			longest = max(longest, f.count(p))
		}
		if longest <= f.limit() || limit < 64 {
			out := make([]piece, len(parts))
			for i, p := range parts {
				out[i] = piece{src: p, form: f}
			}
			return out
		}
		limit = limit*f.limit()/longest - 8 // fewer characters where they weigh more
	}
}

// preview is the part of a streamed text that a message of form f shows: all of it, or its
// first part and "…".
func preview(text string, f form) string {
	if f.count(text) <= f.limit() {
		return text
	}
	return split(text, f)[0].src + "\n\n…"
}

// rendered is what a call carries for a piece of Markdown in form f: the rich message's Markdown,
// the HTML (Telegram's tags only) or the plain text.
func rendered(src string, f form) string {
	switch f {
	case formRich:
		s, _ := markdown.Parse(src).TelegramRich()
		return s
	case formHTML:
		return markdown.Parse(src).HTML(markdown.Telegram)
	}
	return markdown.Parse(src).Plain()
}

// refusalOf is the reason of a definite refusal of form f by Telegram, "" when the answer is not
// one: a rich message refused by a server without rich messages (404 for the method, or an edit
// whose rich_message the server did not read: "message text is empty") is "rich_unsupported";
// one refused by the rich parser or its limits (400 RICH_MESSAGE_…, "can't parse …") is
// "rich_refused"; HTML refused by the entity parser (400 "can't parse entities") is
// "html_refused". Telegram tells these apart only by its descriptions (Bot API "Making
// requests": error_code and description), so this is the one place that reads them.
func refusalOf(f form, err error) string {
	var pe *platformError
	if !errors.As(err, &pe) {
		return ""
	}
	desc := strings.ToLower(pe.desc)
	switch f {
	case formRich:
		switch {
		case pe.status == http.StatusNotFound:
			return "rich_unsupported"
		case pe.status != http.StatusBadRequest:
		case strings.Contains(desc, "rich_message_") || strings.Contains(desc, "can't parse"):
			return "rich_refused"
		case strings.Contains(desc, "message text is empty"):
			return "rich_unsupported"
		}
	case formHTML:
		if pe.status == http.StatusBadRequest && strings.Contains(desc, "can't parse entities") {
			return "html_refused"
		}
	}
	return ""
}

// platformError is a call Telegram answered with a client error (4xx other than 401 and 429):
// its status and description, and the error it maps to.
type platformError struct {
	status int
	desc   string
	err    error
}

func (e *platformError) Error() string { return e.err.Error() }
func (e *platformError) Unwrap() error { return e.err }

// inputRichMessage is the Bot API's InputRichMessage with Markdown (Bot API 10.1).
type inputRichMessage struct {
	Markdown string `json:"markdown"`
	// SkipEntityDetection: the agent's text shows as written, no "$USD" cashtag or card number
	// found in it.
	SkipEntityDetection bool `json:"skip_entity_detection"`
}

// richParams are the parameters of sendRichMessage, sendRichMessageDraft and editMessageText
// with rich_message that the adapter sends.
type richParams struct {
	ChatID          int64            `json:"chat_id"`
	MessageThreadID int              `json:"message_thread_id,omitempty"`
	MessageID       int              `json:"message_id,omitempty"`
	DraftID         int64            `json:"draft_id,omitempty"`
	RichMessage     inputRichMessage `json:"rich_message"`
	ReplyParameters *replyParameters `json:"reply_parameters,omitempty"`
}

type replyParameters struct {
	MessageID                int  `json:"message_id"`
	AllowSendingWithoutReply bool `json:"allow_sending_without_reply,omitempty"`
}

// raw calls a Bot API method the library (v1.19.0) does not have, on the bot's HTTP client, with
// a JSON body: the rich message methods of Bot API 10.1. Its errors are the library's, so
// account.call maps them alike. dest receives the result (nil: ignored).
func (acc *account) raw(ctx context.Context, method string, params, dest any) error {
	body, err := json.Marshal(params)
	if err != nil {
		return fmt.Errorf("telegram %s: %w", method, err)
	}
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, acc.apiURL+"/bot"+acc.token+"/"+method, bytes.NewReader(body))
	if err != nil {
		return fmt.Errorf("telegram %s: bad request URL", method)
	}
	req.Header.Set("Content-Type", "application/json")
	resp, err := tracingClient{acc.http}.Do(req)
	if err != nil {
		return fmt.Errorf("error do request for method %s, %w", method, errors.Unwrap(err)) // the url.Error's URL holds the token
	}
	defer resp.Body.Close()
	var r struct {
		OK          bool            `json:"ok"`
		Result      json.RawMessage `json:"result"`
		ErrorCode   int             `json:"error_code"`
		Description string          `json:"description"`
		Parameters  struct {
			RetryAfter int `json:"retry_after"`
		} `json:"parameters"`
	}
	if err := json.NewDecoder(io.LimitReader(resp.Body, 16<<20)).Decode(&r); err != nil {
		return fmt.Errorf("error decode response body for method %s, status %d", method, resp.StatusCode)
	}
	if !r.OK {
		switch r.ErrorCode {
		case http.StatusTooManyRequests:
			return &bot.TooManyRequestsError{Message: fmt.Sprintf("%s, %s", bot.ErrorTooManyRequests, r.Description), RetryAfter: r.Parameters.RetryAfter}
		case http.StatusUnauthorized:
			return fmt.Errorf("%w, %s", bot.ErrorUnauthorized, r.Description)
		case http.StatusForbidden:
			return fmt.Errorf("%w, %s", bot.ErrorForbidden, r.Description)
		case http.StatusNotFound:
			return fmt.Errorf("%w, %s", bot.ErrorNotFound, r.Description)
		case http.StatusBadRequest:
			return fmt.Errorf("%w, %s", bot.ErrorBadRequest, r.Description)
		}
		return fmt.Errorf("error response from telegram for method %s, %d %s", method, r.ErrorCode, r.Description)
	}
	if dest != nil {
		if err := json.Unmarshal(r.Result, dest); err != nil {
			return fmt.Errorf("error decode response result for method %s", method)
		}
	}
	return nil
}

// notModified reports Telegram's answer to an edit that changes nothing ("message is not
// modified: …"), which is an edit already applied.
func notModified(desc string) bool {
	return strings.Contains(strings.ToLower(desc), "message is not modified")
}
