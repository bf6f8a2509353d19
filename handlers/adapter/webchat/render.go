package webchat

import (
	"encoding/json"
	"fmt"

	"github.com/ximd/ximd/handlers/adapter/markdown"
)

// ForPage is it as a page gets it (edge-api §7.3): an assistant message carries HTML, its
// Text rendered from Markdown by markdown.Parse(Text).HTML(markdown.Web) (only the Web
// dialect's tags and attributes, every text escaped, raw HTML shown as text, links http, https
// and mailto only); every other item carries none, whatever was stored. The page sets markup
// only from HTML, so a person's own messages, and anything not rendered here, stay text.
//
// A streamed part renders like any text (an open fence, a half-written "**" or a link without
// its ")" is shown safely), and a final renders exactly as a direct final of the same text.
func (it Item) ForPage() Item {
	it.HTML = ""
	if it.Kind == KindMessage && it.Role == RoleAssistant {
		it.HTML = markdown.Parse(it.Text).HTML(markdown.Web)
	}
	return it
}

// PageData is a stored item's JSON (a message of stream XIM_WEBCHAT) as an event's data for the
// page: decoded, passed through [Item.ForPage] and encoded again, so no stored field reaches
// the page unread. An undecodable item is an error: it is not sent.
func PageData(stored []byte) (Item, []byte, error) {
	var it Item
	if err := json.Unmarshal(stored, &it); err != nil {
		return Item{}, nil, fmt.Errorf("webchat item: %w", err)
	}
	it = it.ForPage()
	b, err := json.Marshal(it)
	if err != nil {
		return Item{}, nil, fmt.Errorf("webchat item: %w", err)
	}
	return it, b, nil
}
