package telegram

import (
	"slices"
	"strings"
	"unicode/utf16"

	"github.com/go-telegram/bot/models"
)

// markdownOf is a person's message as the same Markdown (edge-api §7.3): its formatting entities
// (Bot API "MessageEntity", offsets and lengths in UTF-16 code units) written as Markdown around
// their text, and every other character that Markdown would read as markup escaped with a
// backslash, so the text means to xAgent what it showed in Telegram.
//
//	bold **x**   italic *x*   underline <u>x</u>   strikethrough ~~x~~   spoiler ||x||
//	code `x`     pre ```lang (a fenced block)       text_link [x](url)    url as written
//	blockquote and expandable_blockquote: "> " lines
//
// Mentions, hashtags, cashtags, commands, e-mail addresses and phone numbers are their text
// unescaped; other entities (text_mention, custom_emoji, …) their text. Entities Telegram nests
// properly (one inside the other); one that overlaps another or runs past the text is ignored.
func markdownOf(text string, entities []models.MessageEntity) string {
	units := utf16.Encode([]rune(text))
	var ents []models.MessageEntity
	for _, e := range entities {
		if e.Offset >= 0 && e.Length > 0 && e.Offset+e.Length <= len(units) && markup(e.Type) {
			ents = append(ents, e)
		}
	}
	slices.SortStableFunc(ents, func(a, b models.MessageEntity) int {
		if a.Offset != b.Offset {
			return a.Offset - b.Offset
		}
		return b.Length - a.Length // the outer one first
	})
	w := &mdWriter{units: units}
	w.span(0, len(units), ents, false)
	return w.b.String()
}

// markup reports whether an entity type is formatting that Markdown writes.
func markup(t models.MessageEntityType) bool {
	switch t {
	case models.MessageEntityTypeBold, models.MessageEntityTypeItalic, models.MessageEntityTypeUnderline,
		models.MessageEntityTypeStrikethrough, models.MessageEntityTypeSpoiler, models.MessageEntityTypeCode,
		models.MessageEntityTypePre, models.MessageEntityTypeTextLink, models.MessageEntityTypeURL,
		models.MessageEntityTypeBlockquote, models.MessageEntityTypeExpandableBlockquote:
		return true
	}
	return atom(t)
}

// atom reports whether an entity's text is written as it is, unescaped: a username, a hashtag,
// a command, an address (Markdown reads none of them as markup, and an escape would change them).
func atom(t models.MessageEntityType) bool {
	switch t {
	case models.MessageEntityTypeMention, models.MessageEntityTypeHashtag, models.MessageEntityTypeCashtag,
		models.MessageEntityTypeBotCommand, models.MessageEntityTypeEmail, models.MessageEntityTypePhoneNumber:
		return true
	}
	return false
}

type mdWriter struct {
	units []uint16
	b     strings.Builder
}

func (w *mdWriter) str(from, to int) string { return string(utf16.Decode(w.units[from:to])) }

// lineStart reports whether the next character written begins a line.
func (w *mdWriter) lineStart() bool {
	s := w.b.String()
	return s == "" || s[len(s)-1] == '\n'
}

// span writes units[from:to] with the entities ents (sorted, within the span); raw: no escaping
// (inside code).
func (w *mdWriter) span(from, to int, ents []models.MessageEntity, raw bool) {
	at := from
	for i := 0; i < len(ents); {
		e := ents[i]
		end := e.Offset + e.Length
		if e.Offset < at || end > to { // overlaps what was written: not Telegram's nesting
			i++
			continue
		}
		w.plain(at, e.Offset, raw)
		j := i + 1
		for j < len(ents) && ents[j].Offset < end {
			j++
		}
		w.entity(e, ents[i+1:j])
		at, i = end, j
	}
	w.plain(at, to, raw)
}

// entity writes one entity around its text (with the entities inside it).
func (w *mdWriter) entity(e models.MessageEntity, inner []models.MessageEntity) {
	from, to := e.Offset, e.Offset+e.Length
	wrap := func(open, close string) {
		w.b.WriteString(open)
		w.span(from, to, inner, false)
		w.b.WriteString(close)
	}
	switch e.Type {
	case models.MessageEntityTypeBold:
		wrap("**", "**")
	case models.MessageEntityTypeItalic:
		wrap("*", "*")
	case models.MessageEntityTypeUnderline:
		wrap("<u>", "</u>")
	case models.MessageEntityTypeStrikethrough:
		wrap("~~", "~~")
	case models.MessageEntityTypeSpoiler:
		wrap("||", "||")
	case models.MessageEntityTypeTextLink:
		w.b.WriteString("[")
		w.span(from, to, inner, false)
		w.b.WriteString("](" + linkEscaper.Replace(e.URL) + ")")
	case models.MessageEntityTypeURL:
		w.b.WriteString(w.str(from, to)) // linkified as written
	case models.MessageEntityTypeMention, models.MessageEntityTypeHashtag, models.MessageEntityTypeCashtag,
		models.MessageEntityTypeBotCommand, models.MessageEntityTypeEmail, models.MessageEntityTypePhoneNumber:
		w.b.WriteString(w.str(from, to))
	case models.MessageEntityTypeCode:
		code := w.str(from, to)
		ticks := strings.Repeat("`", longestRun(code, '`')+1)
		pad := ""
		if strings.HasPrefix(code, "`") || strings.HasSuffix(code, "`") {
			pad = " "
		}
		w.b.WriteString(ticks + pad + code + pad + ticks)
	case models.MessageEntityTypePre:
		code := strings.TrimSuffix(w.str(from, to), "\n")
		fence := strings.Repeat("`", max(3, longestRun(code, '`')+1))
		if !w.lineStart() {
			w.b.WriteString("\n")
		}
		w.b.WriteString(fence + e.Language + "\n" + code + "\n" + fence)
		if to < len(w.units) && w.units[to] != '\n' {
			w.b.WriteString("\n")
		}
	case models.MessageEntityTypeBlockquote, models.MessageEntityTypeExpandableBlockquote:
		q := &mdWriter{units: w.units}
		q.span(from, to, inner, false)
		if !w.lineStart() {
			w.b.WriteString("\n")
		}
		w.b.WriteString("> " + strings.ReplaceAll(strings.TrimRight(q.b.String(), "\n"), "\n", "\n> "))
		if to < len(w.units) && w.units[to] != '\n' {
			w.b.WriteString("\n")
		}
	default:
		wrap("", "")
	}
}

// linkEscaper escapes what would end a link destination early.
var linkEscaper = strings.NewReplacer(`\`, `\\`, "(", `\(`, ")", `\)`, " ", "%20", "<", "%3C", ">", "%3E")

func longestRun(s string, c rune) int {
	longest, run := 0, 0
	for _, r := range s {
		if r == c {
			run++
			longest = max(longest, run)
		} else {
			run = 0
		}
	}
	return longest
}

// plain writes units[from:to] as text: characters Markdown reads as markup escaped (inline
// markup anywhere; block markers at a line's start), unless raw.
func (w *mdWriter) plain(from, to int, raw bool) {
	s := w.str(from, to)
	if raw {
		w.b.WriteString(s)
		return
	}
	for _, r := range s {
		start := w.lineStart()
		switch {
		case strings.ContainsRune("\\`*_[]<~|", r):
			w.b.WriteByte('\\')
		case start && strings.ContainsRune("#>-+=", r):
			w.b.WriteByte('\\')
		case (r == '.' || r == ')') && orderedMarker(w.b.String()):
			w.b.WriteByte('\\')
		}
		w.b.WriteRune(r)
	}
}

// orderedMarker reports whether the current line so far is only digits (a "1." or "1)" would
// start an ordered list).
func orderedMarker(written string) bool {
	line := written[strings.LastIndexByte(written, '\n')+1:]
	if line == "" || len(line) > 9 {
		return false
	}
	for _, c := range line {
		if c < '0' || c > '9' {
			return false
		}
	}
	return true
}
