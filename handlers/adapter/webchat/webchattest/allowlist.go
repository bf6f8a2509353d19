// Package webchattest checks what reaches a webchat page (edge-api §7.3): the markup of an
// assistant message's html against the page's allow-list, read by an HTML5 tokenizer as a
// browser reads it, and the corpus of hostile Markdown the tests feed through every path.
package webchattest

import (
	"errors"
	"fmt"
	"io"
	"net/url"
	"regexp"
	"slices"
	"strings"

	"golang.org/x/net/html"
)

// Tags the page admits in a message's html, and whether each is void (no end tag).
var Tags = map[string]bool{
	"p": false, "h1": false, "h2": false, "h3": false, "h4": false, "h5": false, "h6": false,
	"ul": false, "ol": false, "li": false, "hr": true, "br": true,
	"pre": false, "code": false, "em": false, "strong": false, "del": false, "a": false,
	"blockquote": false, "table": false, "thead": false, "tbody": false, "tr": false, "th": false, "td": false,
}

// LinkRel is the rel every link carries: it opens apart and tells nothing of the page.
const LinkRel = "nofollow noopener noreferrer"

var (
	languageClass = regexp.MustCompile(`^language-[A-Za-z0-9_+#.-]{1,32}$`)
	digits        = regexp.MustCompile(`^[0-9]{1,9}$`)
)

// CheckHTML reports the first thing in s outside the page's allow-list: a tag not in [Tags], an
// attribute other than a's href (an absolute http, https or mailto URL), rel ([LinkRel]) and
// target ("_blank"), code's class ("language-…") and ol's start (digits); a comment, a doctype
// or an unbalanced tag. nil means s is only allowed markup and text.
func CheckHTML(s string) error {
	z := html.NewTokenizer(strings.NewReader(s))
	var open []string
	for {
		tt := z.Next()
		switch tt {
		case html.ErrorToken:
			if !errors.Is(z.Err(), io.EOF) {
				return z.Err()
			}
			if len(open) > 0 {
				return fmt.Errorf("unclosed <%s>", strings.Join(open, "> <"))
			}
			return nil
		case html.TextToken:
			continue
		case html.CommentToken, html.DoctypeToken:
			return fmt.Errorf("%s %q", tt, z.Raw())
		case html.StartTagToken, html.SelfClosingTagToken:
			tok := z.Token()
			void, ok := Tags[tok.Data]
			if !ok {
				return fmt.Errorf("tag <%s> not allowed: %q", tok.Data, z.Raw())
			}
			if err := checkAttrs(tok); err != nil {
				return err
			}
			if !void {
				open = append(open, tok.Data)
			}
		case html.EndTagToken:
			tok := z.Token()
			if len(open) == 0 || open[len(open)-1] != tok.Data {
				return fmt.Errorf("</%s> closes nothing open (open: %v)", tok.Data, open)
			}
			open = open[:len(open)-1]
		}
	}
}

func checkAttrs(tok html.Token) error {
	var names []string
	for _, a := range tok.Attr {
		names = append(names, a.Key)
		ok := false
		switch tok.Data + "." + a.Key {
		case "a.href":
			ok = safeLink(a.Val)
		case "a.rel":
			ok = a.Val == LinkRel
		case "a.target":
			ok = a.Val == "_blank"
		case "code.class":
			ok = languageClass.MatchString(a.Val)
		case "ol.start":
			ok = digits.MatchString(a.Val)
		}
		if !ok || a.Namespace != "" {
			return fmt.Errorf("attribute %s=%q not allowed on <%s>", a.Key, a.Val, tok.Data)
		}
	}
	if tok.Data == "a" && (!slices.Contains(names, "href") || !slices.Contains(names, "rel")) {
		return fmt.Errorf("a link without href or rel: %s", tok)
	}
	return nil
}

// safeLink: an absolute http(s) URL with a host, or a mailto URL, and nothing a browser would
// read otherwise (no control character or space that it strips before the scheme).
func safeLink(v string) bool {
	if strings.IndexFunc(v, func(r rune) bool { return r <= ' ' || r == 0x7f }) >= 0 {
		return false
	}
	u, err := url.Parse(v)
	if err != nil {
		return false
	}
	switch u.Scheme {
	case "http", "https":
		return u.Host != ""
	case "mailto":
		return u.Opaque != ""
	}
	return false
}

// Text is the text a browser shows of s (its text tokens, entities decoded, concatenated).
func Text(s string) string {
	z := html.NewTokenizer(strings.NewReader(s))
	var b strings.Builder
	for {
		switch z.Next() {
		case html.ErrorToken:
			return b.String()
		case html.TextToken:
			b.Write(z.Text())
		}
	}
}
