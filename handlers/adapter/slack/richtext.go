package slack

import (
	"encoding/json"
	"strconv"
	"strings"
)

// A person's formatting reaches xAgent as Markdown (edge-api §7.3): a message event's rich_text
// blocks (Block Kit, "Rich text block": rich_text_section, rich_text_list, rich_text_preformatted,
// rich_text_quote, and their text, link, emoji, user, channel, usergroup and broadcast elements)
// are written as the same Markdown; a message without them keeps its text. Mentions stay Slack's
// "<@U…>", as in the text, so a bot's mention is found and removed the same way.

// richNode is a rich text element of any kind: the fields of each kind, read as one.
type richNode struct {
	Type      string          `json:"type"`
	Elements  []richNode      `json:"elements"`
	Style     json.RawMessage `json:"style"` // a list's "ordered"/"bullet", a run's {bold,…}
	Indent    int             `json:"indent"`
	Offset    int             `json:"offset"`
	Text      string          `json:"text"`
	URL       string          `json:"url"`
	Name      string          `json:"name"`
	Unicode   string          `json:"unicode"`
	UserID    string          `json:"user_id"`
	ChannelID string          `json:"channel_id"`
	GroupID   string          `json:"usergroup_id"`
	Range     string          `json:"range"`
}

// runStyle is a text run's style.
type runStyle struct {
	Bold   bool `json:"bold"`
	Italic bool `json:"italic"`
	Strike bool `json:"strike"`
	Code   bool `json:"code"`
}

// richMarkdown is the Markdown of a message's rich_text blocks; ok is false when it has none.
func richMarkdown(blocks json.RawMessage) (md string, ok bool) {
	var bs []richNode
	if len(blocks) == 0 || json.Unmarshal(blocks, &bs) != nil {
		return "", false
	}
	var w richWriter
	for _, b := range bs {
		if b.Type != "rich_text" {
			continue
		}
		ok = true
		for _, e := range b.Elements {
			w.block(e)
		}
	}
	return strings.TrimRight(w.b.String(), "\n"), ok
}

type richWriter struct {
	b    strings.Builder
	last string // the type of the block written last
}

// gap ends what was written with a blank line, so a block that follows starts a block of its own.
func (w *richWriter) gap() {
	s := w.b.String()
	switch {
	case s == "" || strings.HasSuffix(s, "\n\n"):
	case strings.HasSuffix(s, "\n"):
		w.b.WriteByte('\n')
	default:
		w.b.WriteString("\n\n")
	}
}

func (w *richWriter) block(e richNode) {
	defer func() { w.last = e.Type }()
	switch e.Type {
	case "rich_text_section":
		if w.last != "" && w.last != e.Type {
			w.gap()
		}
		w.b.WriteString(inlines(e.Elements))
	case "rich_text_preformatted":
		w.gap()
		body := strings.TrimRight(plainRuns(e.Elements), "\n")
		fence := "```"
		for strings.Contains(body, fence) {
			fence += "`"
		}
		w.b.WriteString(fence + "\n" + body + "\n" + fence + "\n\n")
	case "rich_text_quote":
		w.gap()
		for _, line := range strings.Split(strings.TrimRight(inlines(e.Elements), "\n"), "\n") {
			w.b.WriteString("> " + line + "\n")
		}
		w.b.WriteByte('\n')
	case "rich_text_list":
		var style string
		_ = json.Unmarshal(e.Style, &style)
		if w.last != e.Type {
			w.gap()
		}
		pad := strings.Repeat("    ", e.Indent)
		for i, item := range e.Elements {
			marker := "- "
			if style == "ordered" {
				marker = strconv.Itoa(e.Offset+i+1) + ". "
			}
			text := strings.ReplaceAll(strings.TrimRight(inlines(item.Elements), "\n"), "\n", "\n"+pad+strings.Repeat(" ", len(marker)))
			w.b.WriteString(pad + marker + text + "\n")
		}
	}
}

// plainRuns is the literal text of a preformatted block's runs.
func plainRuns(es []richNode) string {
	var b strings.Builder
	for _, e := range es {
		switch e.Type {
		case "link":
			b.WriteString(orName(e.Text, e.URL))
		default:
			b.WriteString(inline(e))
		}
	}
	return b.String()
}

// inlines is the Markdown of a section's runs.
func inlines(es []richNode) string {
	var b strings.Builder
	for _, e := range es {
		b.WriteString(inline(e))
	}
	return b.String()
}

func inline(e richNode) string {
	var st runStyle
	_ = json.Unmarshal(e.Style, &st)
	switch e.Type {
	case "text":
		return styled(e.Text, st)
	case "link":
		if e.Text == "" || e.Text == e.URL {
			return "<" + e.URL + ">"
		}
		return "[" + styled(e.Text, runStyle{Bold: st.Bold, Italic: st.Italic, Strike: st.Strike}) + "](" + e.URL + ")"
	case "emoji":
		if s, ok := emojiOf(e.Unicode); ok {
			return s
		}
		return ":" + e.Name + ":"
	case "user":
		return "<@" + e.UserID + ">"
	case "channel":
		return "<#" + e.ChannelID + ">"
	case "usergroup":
		return "<!subteam^" + e.GroupID + ">"
	case "broadcast":
		return "@" + e.Range
	case "date":
		return e.Text
	}
	return e.Text
}

// styled writes a run with its emphasis: the markers around its words, its surrounding spaces
// outside them (Markdown does not close "**" after a space).
func styled(s string, st runStyle) string {
	core := strings.TrimSpace(s)
	if core == "" {
		return s
	}
	lead := s[:strings.Index(s, core)]
	trail := s[len(lead)+len(core):]
	if st.Code {
		fence := "`"
		for strings.Contains(core, fence) {
			fence += "`"
		}
		pad := ""
		if strings.HasPrefix(core, "`") || strings.HasSuffix(core, "`") {
			pad = " "
		}
		core = fence + pad + core + pad + fence
	}
	if st.Strike {
		core = "~~" + core + "~~"
	}
	if st.Italic {
		core = "_" + core + "_"
	}
	if st.Bold {
		core = "**" + core + "**"
	}
	return lead + core + trail
}

// emojiOf is the character of an emoji's unicode field ("1f44d", "1f44d-1f3fb").
func emojiOf(code string) (string, bool) {
	if code == "" {
		return "", false
	}
	var b strings.Builder
	for _, h := range strings.Split(code, "-") {
		r, err := strconv.ParseUint(h, 16, 32)
		if err != nil || r > 0x10FFFF {
			return "", false
		}
		b.WriteRune(rune(r))
	}
	return b.String(), true
}

func orName(name, fallback string) string {
	if name != "" {
		return name
	}
	return fallback
}
