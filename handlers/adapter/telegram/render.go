package telegram

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"slices"
	"strings"

	"github.com/go-telegram/bot"
	"github.com/yuin/goldmark"
	"github.com/yuin/goldmark/ast"
	"github.com/yuin/goldmark/extension"
	east "github.com/yuin/goldmark/extension/ast"
	"github.com/yuin/goldmark/text"

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
		src, blocks := richSource(s)
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
		s, _ := richSource(src)
		return s
	case formHTML:
		return markdown.Parse(src).HTML(markdown.Telegram)
	}
	return markdown.Parse(src).Plain()
}

// richParser reads the agent's Markdown as the markdown package does (CommonMark and GitHub's
// tables, strikethrough, autolinks and task lists), to find what Telegram's rich Markdown would
// read differently. It is a stopgap until the markdown package offers the rich form itself.
var richParser = goldmark.New(goldmark.WithExtensions(extension.Table, extension.Strikethrough, extension.Linkify, extension.TaskList)).Parser()

// richSource is the Markdown of a rich message for the agent's Markdown s, and the blocks it
// holds (blocks, list items and table rows, as Telegram counts them). Telegram's rich Markdown
// reads more than CommonMark: raw HTML, images (fetched and shown), "$" formulas, "||"
// spoilers, a line-leading "#tag" as a heading. Those are escaped with a backslash, so raw HTML
// shows as text, an image as its link, and "$5 and $10" as written (edge-api §7.3), as is a
// link that is not http(s) or mailto; what the agent wrote as Markdown stays as written.
func richSource(s string) (string, int) {
	src := []byte(s)
	doc := richParser.Parse(text.NewReader(src))
	var at []int // byte offsets to put a backslash before
	blocks := 0
	_ = ast.Walk(doc, func(n ast.Node, entering bool) (ast.WalkStatus, error) {
		if !entering {
			return ast.WalkContinue, nil
		}
		if n.Type() == ast.TypeBlock && n.Kind() != ast.KindDocument {
			switch n.(type) {
			case *ast.TextBlock, *east.TableCell:
			default:
				blocks++
			}
		}
		switch n := n.(type) {
		case *ast.HTMLBlock:
			lines := n.Lines()
			for i := range lines.Len() {
				seg := lines.At(i)
				at = append(at, offsetsOf(src, seg.Start, seg.Stop, "<")...)
			}
			if n.HasClosure() {
				at = append(at, offsetsOf(src, n.ClosureLine.Start, n.ClosureLine.Stop, "<")...)
			}
		case *ast.RawHTML:
			if n.Segments.Len() > 0 {
				at = append(at, n.Segments.At(0).Start)
			}
		case *ast.Image:
			if c, ok := n.FirstChild().(*ast.Text); ok && c.Segment.Start >= 2 && string(src[c.Segment.Start-2:c.Segment.Start]) == "![" {
				at = append(at, c.Segment.Start-2)
			}
		case *ast.Link:
			if c, ok := n.FirstChild().(*ast.Text); ok && !markdown.SafeURL(string(n.Destination)) && c.Segment.Start >= 1 && src[c.Segment.Start-1] == '[' {
				at = append(at, c.Segment.Start-1) // a link Telegram should not open: its text as written
			}
		case *ast.Text:
			seg := n.Segment
			at = append(at, offsetsOf(src, seg.Start, seg.Stop, "$|")...)
			if seg.Start < len(src) && src[seg.Start] == '#' && (seg.Start == 0 || src[seg.Start-1] == '\n') {
				at = append(at, seg.Start)
			}
		case *ast.CodeSpan, *ast.AutoLink:
			return ast.WalkSkipChildren, nil
		}
		return ast.WalkContinue, nil
	})
	if len(at) == 0 {
		return s, blocks
	}
	slices.Sort(at)
	var b strings.Builder
	last := 0
	for _, i := range at {
		if i < last || (i > 0 && src[i-1] == '\\') {
			continue
		}
		b.Write(src[last:i])
		b.WriteByte('\\')
		last = i
	}
	b.Write(src[last:])
	return b.String(), blocks
}

// offsetsOf are the offsets of the bytes of chars in src[from:to].
func offsetsOf(src []byte, from, to int, chars string) []int {
	var out []int
	for i := from; i < to && i < len(src); i++ {
		if strings.IndexByte(chars, src[i]) >= 0 {
			out = append(out, i)
		}
	}
	return out
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
