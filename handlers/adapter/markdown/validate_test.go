package markdown_test

import (
	"fmt"
	"io"
	"regexp"
	"strings"

	"golang.org/x/net/html"
)

// telegramTags are the tags of Telegram's HTML parse mode
// (https://core.telegram.org/bots/api#html-style), with the attributes each may carry.
var telegramTags = map[string]map[string]bool{
	"b": {}, "strong": {}, "i": {}, "em": {}, "u": {}, "ins": {}, "s": {}, "strike": {}, "del": {},
	"span": {"class": true}, "tg-spoiler": {}, "a": {"href": true}, "tg-emoji": {"emoji-id": true},
	"code": {"class": true}, "pre": {}, "blockquote": {"expandable": true},
}

// formatting are the entities that may contain and be part of any other, except pre and code
// (https://core.telegram.org/bots/api#formatting-options).
var formatting = map[string]bool{"b": true, "strong": true, "i": true, "em": true, "u": true, "ins": true,
	"s": true, "strike": true, "del": true, "span": true, "tg-spoiler": true}

var (
	entityRef   = regexp.MustCompile(`^&(lt|gt|amp|quot|#[0-9]{1,7}|#x[0-9a-fA-F]{1,6});`)
	telegramTag = regexp.MustCompile(`^<(/?)([a-z][a-z0-9-]*)((?:\s+[a-z-]+(?:="[^"<>]*")?)*)\s*>`)
	attrRe      = regexp.MustCompile(`([a-z-]+)(?:="([^"]*)")?`)
)

// validateTelegram checks s against Telegram's published HTML rules: only its tags and their
// attributes; "<", ">" and "&" only as tags and entities (named: &lt; &gt; &amp; &quot;); tags
// properly nested; a language only on a code inside pre; pre and code holding only text (pre
// one code), and never inside a formatting entity or a link; no link in a link; quotes not nested.
func validateTelegram(s string) error {
	var stack []string
	for i := 0; i < len(s); {
		switch s[i] {
		case '&':
			m := entityRef.FindString(s[i:])
			if m == "" {
				return fmt.Errorf("offset %d: bare or unknown entity %q", i, snippet(s, i))
			}
			i += len(m)
		case '>':
			return fmt.Errorf("offset %d: bare '>'", i)
		case '<':
			m := telegramTag.FindStringSubmatch(s[i:])
			if m == nil {
				return fmt.Errorf("offset %d: not a tag: %q", i, snippet(s, i))
			}
			closing, name, attrs := m[1] == "/", m[2], m[3]
			allowed, ok := telegramTags[name]
			if !ok {
				return fmt.Errorf("offset %d: tag %q is not Telegram's", i, name)
			}
			if closing {
				if attrs != "" || len(stack) == 0 || stack[len(stack)-1] != name {
					return fmt.Errorf("offset %d: </%s> does not close %v", i, name, stack)
				}
				stack = stack[:len(stack)-1]
				i += len(m[0])
				continue
			}
			parent := ""
			if len(stack) > 0 {
				parent = stack[len(stack)-1]
			}
			for _, a := range attrRe.FindAllStringSubmatch(attrs, -1) {
				if !allowed[a[1]] {
					return fmt.Errorf("offset %d: attribute %q on <%s>", i, a[1], name)
				}
				switch {
				case name == "a" && !hrefOK(html.UnescapeString(a[2])):
					return fmt.Errorf("offset %d: href %q", i, a[2])
				case name == "span" && a[2] != "tg-spoiler":
					return fmt.Errorf("offset %d: span class %q", i, a[2])
				case name == "code" && (parent != "pre" || !strings.HasPrefix(a[2], "language-")):
					return fmt.Errorf("offset %d: class %q on a code outside pre", i, a[2])
				}
			}
			if name == "a" && !strings.Contains(attrs, "href=") {
				return fmt.Errorf("offset %d: <a> without href", i)
			}
			for _, open := range stack {
				switch {
				case open == "pre" && !(name == "code" && parent == "pre"), open == "code":
					return fmt.Errorf("offset %d: <%s> inside <%s> (pre and code hold text only)", i, name, open)
				case (name == "pre" || name == "code") && (formatting[open] || open == "a"):
					return fmt.Errorf("offset %d: <%s> inside <%s> (pre and code are never part of another entity)", i, name, open)
				case name == "a" && open == "a":
					return fmt.Errorf("offset %d: a link in a link", i)
				case name == "blockquote":
					return fmt.Errorf("offset %d: a blockquote inside <%s>", i, open)
				}
			}
			if parent == "pre" && !strings.HasSuffix(strings.TrimSpace(s[:i]), "<pre>") {
				return fmt.Errorf("offset %d: a code that is not all of its pre", i)
			}
			stack = append(stack, name)
			i += len(m[0])
		default:
			i++
		}
	}
	if len(stack) > 0 {
		return fmt.Errorf("unclosed %v", stack)
	}
	return nil
}

// hrefOK: an href a browser (or Telegram) follows only to http(s) or mailto, whatever blanks or
// controls it holds (a browser drops them before reading the scheme).
func hrefOK(href string) bool {
	h := strings.Map(func(r rune) rune {
		if r <= ' ' || r == 0x7f {
			return -1
		}
		return r
	}, strings.ToLower(href))
	return strings.HasPrefix(h, "http://") || strings.HasPrefix(h, "https://") || strings.HasPrefix(h, "mailto:")
}

func snippet(s string, i int) string { return s[i:min(len(s), i+24)] }

// allowList is an HTML form's tags and the attributes each may carry (with a check of the value).
type allowList map[string]map[string]func(string) bool

var (
	anyValue    = func(string) bool { return true }
	languageCls = func(v string) bool { return strings.HasPrefix(v, "language-") && !strings.ContainsAny(v, " \"'<>") }
	alignment   = func(v string) bool { return v == "left" || v == "center" || v == "right" }
	number      = func(v string) bool { return regexp.MustCompile(`^[0-9]{1,9}$`).MatchString(v) }
)

// webAllow is the webchat page's allow-list (edge-api §7.3): the blocks and inline tags of
// Markdown, links to http(s) and mailto with the page's rel and target only.
var webAllow = allowList{
	"p": {}, "h1": {}, "h2": {}, "h3": {}, "h4": {}, "h5": {}, "h6": {}, "ul": {}, "ol": {"start": number}, "li": {},
	"hr": {}, "br": {}, "blockquote": {}, "pre": {}, "code": {"class": languageCls}, "em": {}, "strong": {}, "del": {},
	"table": {}, "thead": {}, "tbody": {}, "tr": {}, "th": {"align": alignment}, "td": {"align": alignment},
	"a": {"href": hrefOK, "rel": func(v string) bool { return v == "nofollow noopener noreferrer" }, "target": func(v string) bool { return v == "_blank" }},
}

// matrixAllow is the tags and attributes the Matrix client-server spec recommends
// (https://spec.matrix.org/latest/client-server-api/#mroommessage-msgtypes, m.text).
var matrixAllow = allowList{
	"del": {}, "h1": {}, "h2": {}, "h3": {}, "h4": {}, "h5": {}, "h6": {}, "blockquote": {}, "p": {},
	"a": {"href": hrefOK, "target": anyValue}, "ul": {}, "ol": {"start": number}, "sup": {}, "sub": {}, "li": {}, "b": {},
	"i": {}, "u": {}, "strong": {}, "em": {}, "s": {}, "code": {"class": languageCls}, "hr": {}, "br": {}, "div": {},
	"table": {}, "thead": {}, "tbody": {}, "tr": {}, "th": {}, "td": {}, "caption": {}, "pre": {}, "span": {},
	"details": {}, "summary": {},
}

// validateHTML tokenizes s as a browser does (golang.org/x/net/html) and checks that every tag
// and attribute is on the allow-list, every tag closed in order, and nothing else (a comment, a
// doctype) is there.
func validateHTML(s string, allow allowList) error {
	z := html.NewTokenizer(strings.NewReader(s))
	var stack []string
	for {
		tt := z.Next()
		tok := z.Token()
		switch tt {
		case html.ErrorToken:
			if z.Err() != io.EOF {
				return z.Err()
			}
			if len(stack) > 0 {
				return fmt.Errorf("unclosed %v", stack)
			}
			return nil
		case html.TextToken:
		case html.StartTagToken, html.SelfClosingTagToken:
			attrs, ok := allow[tok.Data]
			if !ok {
				return fmt.Errorf("tag <%s> is not allowed", tok.Data)
			}
			for _, a := range tok.Attr {
				check, ok := attrs[a.Key]
				if !ok || a.Namespace != "" {
					return fmt.Errorf("attribute %q on <%s> is not allowed", a.Key, tok.Data)
				}
				if !check(a.Val) {
					return fmt.Errorf("%s=%q on <%s> is not allowed", a.Key, a.Val, tok.Data)
				}
			}
			if tt == html.StartTagToken && tok.Data != "br" && tok.Data != "hr" {
				stack = append(stack, tok.Data)
			}
		case html.EndTagToken:
			if len(stack) == 0 || stack[len(stack)-1] != tok.Data {
				return fmt.Errorf("</%s> does not close %v", tok.Data, stack)
			}
			stack = stack[:len(stack)-1]
		default:
			return fmt.Errorf("%v token %q", tt, tok.String())
		}
	}
}
