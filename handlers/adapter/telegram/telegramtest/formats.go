package telegramtest

import (
	"fmt"
	"slices"
	"strconv"
	"strings"
	"unicode/utf16"

	"github.com/yuin/goldmark"
	"github.com/yuin/goldmark/ast"
	"github.com/yuin/goldmark/extension"
	east "github.com/yuin/goldmark/extension/ast"
	"github.com/yuin/goldmark/text"
	"github.com/yuin/goldmark/util"
)

// Rich message limits (Bot API 10.1 "Rich Message Limits"): characters of text after parsing,
// blocks (list items and table rows included), nesting depth, table columns.
const (
	maxRichText    = 32768
	maxRichBlocks  = 500
	maxRichDepth   = 16
	maxRichColumns = 20
)

// htmlTags are the tags of the HTML parse mode (Bot API "Formatting options", HTML style), each
// with the entity it makes.
var htmlTags = map[string]string{
	"b": "bold", "strong": "bold", "i": "italic", "em": "italic", "u": "underline", "ins": "underline",
	"s": "strikethrough", "strike": "strikethrough", "del": "strikethrough", "tg-spoiler": "spoiler",
	"span": "spoiler", "a": "text_link", "code": "code", "pre": "pre", "blockquote": "blockquote",
	"tg-emoji": "custom_emoji",
}

// htmlEntities are the named character references the HTML parse mode decodes ("All numerical
// HTML entities are supported. The API currently supports only the following named HTML
// entities: &lt;, &gt;, &amp; and &quot;"); any other "&" is text.
var htmlEntities = map[string]rune{"lt": '<', "gt": '>', "amp": '&', "quot": '"'}

// parseHTML reads a text in the HTML parse mode as the Bot API server does (its entity parser:
// tags, attributes, character references), answering its errors ("Bad Request: can't parse
// entities: …"). It returns the text and its entities, offsets in UTF-16 code units.
func parseHTML(s string) (string, []Entity, *apiError) {
	refuse := func(format string, args ...any) (string, []Entity, *apiError) {
		return "", nil, badRequest("can't parse entities: " + fmt.Sprintf(format, args...))
	}
	type open struct {
		tag    string
		at     int // UTF-16 offset in the text where it began
		url    string
		lang   string
		entity string
	}
	var out []uint16
	var stack []open
	var ents []Entity
	for i := 0; i < len(s); {
		c := s[i]
		switch {
		case c == '&':
			end := strings.IndexByte(s[i:], ';')
			if r, ok := charRef(s[i+1 : i+max(end, 1)]); end > 1 && ok {
				out = utf16.AppendRune(out, r)
				i += end + 1
				continue
			}
			out = append(out, '&')
			i++
		case c == '<' && i+1 < len(s) && s[i+1] == '/':
			end := strings.IndexByte(s[i:], '>')
			if end < 0 {
				return refuse("Unclosed end tag at byte offset %d", i)
			}
			name := strings.ToLower(strings.TrimSpace(s[i+2 : i+end]))
			if len(stack) == 0 {
				return refuse("Unexpected end tag at byte offset %d", i)
			}
			top := stack[len(stack)-1]
			if name != top.tag {
				return refuse("Unmatched end tag at byte offset %d, expected \"</%s>\", found \"</%s>\"", i, top.tag, name)
			}
			stack = stack[:len(stack)-1]
			if length := len(out) - top.at; length > 0 {
				if top.entity == "code" && len(stack) > 0 && stack[len(stack)-1].tag == "pre" && stack[len(stack)-1].at == top.at {
					stack[len(stack)-1].lang = top.lang // <pre><code class="language-x">: the pre's language
				} else {
					ents = append(ents, Entity{Type: top.entity, Offset: top.at, Length: length, URL: top.url, Language: top.lang})
				}
			}
			i += end + 1
		case c == '<':
			j := i + 1
			for j < len(s) && (isAlnum(s[j]) || s[j] == '-') {
				j++
			}
			name := strings.ToLower(s[i+1 : j])
			entity, ok := htmlTags[name]
			if !ok {
				return refuse("Unsupported start tag \"%s\" at byte offset %d", name, i)
			}
			end := strings.IndexByte(s[j:], '>')
			if end < 0 {
				return refuse("Unclosed start tag at byte offset %d", i)
			}
			attrs, err := parseAttrs(s[j : j+end])
			if err != "" {
				return refuse("%s in the tag \"%s\" at byte offset %d", err, name, i)
			}
			o := open{tag: name, at: len(out), entity: entity}
			switch name {
			case "a":
				o.url = attrs["href"]
				if o.url == "" {
					o.entity = "" // a link without href is its text
				}
			case "span":
				if attrs["class"] != "tg-spoiler" {
					return refuse("Tag \"span\" must have class \"tg-spoiler\" at byte offset %d", i)
				}
			case "code":
				o.lang = strings.TrimPrefix(attrs["class"], "language-")
			case "blockquote":
				if _, ok := attrs["expandable"]; ok {
					o.entity = "expandable_blockquote"
				}
			}
			stack = append(stack, o)
			i = j + end + 1
		default:
			r, size := rune(s[i]), 1
			if c >= 0x80 {
				r, size = decodeRune(s[i:])
			}
			out = utf16.AppendRune(out, r)
			i += size
		}
	}
	if len(stack) > 0 {
		return refuse("Can't find end tag corresponding to start tag \"%s\"", stack[len(stack)-1].tag)
	}
	var kept []Entity
	for _, e := range ents {
		if e.Type != "" {
			kept = append(kept, e)
		}
	}
	slices.SortStableFunc(kept, func(a, b Entity) int {
		if a.Offset != b.Offset {
			return a.Offset - b.Offset
		}
		return b.Length - a.Length
	})
	return trimEntities(out, kept)
}

// trimEntities strips leading and trailing whitespace from a parsed text, as Telegram does,
// moving and clipping the entities with it.
func trimEntities(units []uint16, ents []Entity) (string, []Entity, *apiError) {
	lead, end := 0, len(units)
	for lead < end && isSpace(units[lead]) {
		lead++
	}
	for end > lead && isSpace(units[end-1]) {
		end--
	}
	var out []Entity
	for _, e := range ents {
		from, to := max(e.Offset, lead)-lead, min(e.Offset+e.Length, end)-lead
		if to > from {
			e.Offset, e.Length = from, to-from
			out = append(out, e)
		}
	}
	return string(utf16.Decode(units[lead:end])), out, nil
}

func isSpace(u uint16) bool { return u == ' ' || u == '\n' || u == '\t' || u == '\r' }

func isAlnum(c byte) bool {
	return c >= 'a' && c <= 'z' || c >= 'A' && c <= 'Z' || c >= '0' && c <= '9'
}

func decodeRune(s string) (rune, int) {
	for _, r := range s {
		return r, len(string(r))
	}
	return 0, 1
}

// charRef decodes a character reference's name ("lt", "#60", "#x3C").
func charRef(name string) (rune, bool) {
	if r, ok := htmlEntities[name]; ok {
		return r, true
	}
	if rest, ok := strings.CutPrefix(name, "#"); ok {
		base := 10
		if r, ok := strings.CutPrefix(strings.ToLower(rest), "x"); ok {
			rest, base = r, 16
		}
		n, err := strconv.ParseUint(rest, base, 32)
		if err == nil && n > 0 && n <= 0x10FFFF {
			return rune(n), true
		}
	}
	return 0, false
}

// parseAttrs reads a start tag's attributes: name, name=value, name="value" or name='value'.
func parseAttrs(s string) (map[string]string, string) {
	attrs := map[string]string{}
	for i := 0; i < len(s); {
		if s[i] == ' ' || s[i] == '\n' || s[i] == '\t' || s[i] == '/' {
			i++
			continue
		}
		j := i
		for j < len(s) && (isAlnum(s[j]) || s[j] == '-' || s[j] == '_') {
			j++
		}
		if j == i {
			return nil, "Empty attribute name"
		}
		name := strings.ToLower(s[i:j])
		if j >= len(s) || s[j] != '=' {
			attrs[name] = ""
			i = j
			continue
		}
		j++
		var val string
		if j < len(s) && (s[j] == '"' || s[j] == '\'') {
			end := strings.IndexByte(s[j+1:], s[j])
			if end < 0 {
				return nil, "Unclosed value of an attribute"
			}
			val = s[j+1 : j+1+end]
			j += end + 2
		} else {
			k := j
			for k < len(s) && s[k] != ' ' {
				k++
			}
			val, j = s[j:k], k
		}
		decoded, _, _ := parseHTML(val) // character references in the value
		attrs[name] = decoded
		i = j
	}
	return attrs, ""
}

// richDoc is a rich message as the fake read its Markdown.
type richDoc struct {
	text   string   // the text a person reads
	blocks []string // the kinds of its top-level blocks ("heading", "paragraph", "list", "table", "pre", "blockquote", "divider")
	count  int      // blocks, list items and table rows
}

var richMarkdown = goldmark.New(goldmark.WithExtensions(extension.Table, extension.Strikethrough, extension.Linkify, extension.TaskList)).Parser()

// parseRich reads a rich message's Markdown (Bot API 10.1 "Rich Message Formatting Options":
// CommonMark with GitHub's tables, strikethrough and task lists; backslash escapes) and checks
// its limits with the server's descriptions (RICH_MESSAGE_EMPTY, RICH_MESSAGE_TEXT_TOO_LONG,
// RICH_MESSAGE_BLOCKS_TOO_MANY, RICH_MESSAGE_TABLE_COLS_TOO_MANY, RICH_MESSAGE_DEPTH_INVALID).
func parseRich(md string) (richDoc, *apiError) {
	if strings.TrimSpace(md) == "" {
		return richDoc{}, badRequest("RICH_MESSAGE_EMPTY")
	}
	src := []byte(md)
	doc := richMarkdown.Parse(text.NewReader(src))
	var d richDoc
	var b strings.Builder
	cols, depth := 0, 0
	var walk func(n ast.Node, level int)
	walk = func(n ast.Node, level int) {
		depth = max(depth, level)
		switch n := n.(type) {
		case *ast.Text:
			b.Write(util.UnescapePunctuations(n.Segment.Value(src)))
			if n.SoftLineBreak() || n.HardLineBreak() {
				b.WriteByte('\n')
			}
			return
		case *ast.String:
			b.Write(n.Value)
			return
		case *ast.CodeSpan:
			for c := n.FirstChild(); c != nil; c = c.NextSibling() {
				if t, ok := c.(*ast.Text); ok {
					b.Write(t.Segment.Value(src))
				}
			}
			return
		case *ast.AutoLink:
			b.Write(n.Label(src))
			return
		case *ast.RawHTML:
			for i := range n.Segments.Len() {
				seg := n.Segments.At(i)
				b.Write(seg.Value(src))
			}
			return
		case *ast.FencedCodeBlock, *ast.CodeBlock, *ast.HTMLBlock:
			lines := n.Lines()
			for i := range lines.Len() {
				seg := lines.At(i)
				b.Write(seg.Value(src))
			}
		case *east.TableRow, *east.TableHeader:
			cols = max(cols, n.ChildCount())
		case *east.TableCell:
			if n.PreviousSibling() != nil {
				b.WriteByte('\t')
			}
		}
		if n.Type() == ast.TypeBlock && n.Kind() != ast.KindDocument {
			if _, cell := n.(*east.TableCell); !cell {
				if _, tb := n.(*ast.TextBlock); !tb {
					d.count++
				}
			}
		}
		for c := n.FirstChild(); c != nil; c = c.NextSibling() {
			walk(c, level+1)
		}
		if n.Type() == ast.TypeBlock && !strings.HasSuffix(b.String(), "\n") && b.Len() > 0 {
			if _, cell := n.(*east.TableCell); !cell {
				b.WriteByte('\n')
			}
		}
	}
	for c := doc.FirstChild(); c != nil; c = c.NextSibling() {
		d.blocks = append(d.blocks, blockKind(c))
		walk(c, 1)
	}
	d.text = strings.TrimSpace(b.String())
	switch {
	case d.text == "":
		return richDoc{}, badRequest("RICH_MESSAGE_EMPTY")
	case utf16Len(d.text) > maxRichText:
		return richDoc{}, badRequest("RICH_MESSAGE_TEXT_TOO_LONG")
	case d.count > maxRichBlocks:
		return richDoc{}, badRequest("RICH_MESSAGE_BLOCKS_TOO_MANY")
	case cols > maxRichColumns:
		return richDoc{}, badRequest("RICH_MESSAGE_TABLE_COLS_TOO_MANY")
	case depth > maxRichDepth:
		return richDoc{}, badRequest("RICH_MESSAGE_DEPTH_INVALID")
	}
	return d, nil
}

// blockKind names a top-level block as the Bot API's RichBlock types do.
func blockKind(n ast.Node) string {
	switch n.(type) {
	case *ast.Heading:
		return "heading"
	case *ast.List:
		return "list"
	case *east.Table:
		return "table"
	case *ast.FencedCodeBlock, *ast.CodeBlock:
		return "pre"
	case *ast.Blockquote:
		return "blockquote"
	case *ast.ThematicBreak:
		return "divider"
	}
	return "paragraph"
}
