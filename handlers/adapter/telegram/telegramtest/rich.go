package telegramtest

import (
	"encoding/json"
	"net/http"
)

// SetRich makes the server a Bot API server with rich messages (Bot API 10.1, the default) or
// one from before them: sendRichMessage and sendRichMessageDraft answer 404 Not Found, as any
// method the server does not know, and editMessageText does not read rich_message (an edit with
// only it has no text: "Bad Request: message text is empty").
func (s *Server) SetRich(on bool) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.noRich = !on
}

func (s *Server) richOn() bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	return !s.noRich
}

// wireInputRichMessage is InputRichMessage ("Exactly one of the fields html, markdown, or
// blocks must be used"); the fake reads markdown.
type wireInputRichMessage struct {
	Markdown            string          `json:"markdown"`
	HTML                string          `json:"html"`
	Blocks              json.RawMessage `json:"blocks"`
	SkipEntityDetection bool            `json:"skip_entity_detection"`
}

// readRich reads a rich_message parameter: its Markdown and what it shows. html and blocks are
// not modelled ("Bad Request: rich message must be non-empty" when markdown is missing).
func readRich(raw string) (string, richDoc, *apiError) {
	var in wireInputRichMessage
	if err := json.Unmarshal([]byte(raw), &in); err != nil {
		return "", richDoc{}, badRequest("can't parse InputRichMessage: " + err.Error())
	}
	if in.Markdown == "" {
		return "", richDoc{}, badRequest("rich message must be non-empty")
	}
	doc, e := parseRich(in.Markdown)
	return in.Markdown, doc, e
}

// sendRichMessage sends a rich message (Bot API 10.1): its Markdown read by parseRich.
func (s *Server) sendRichMessage(q *request) (any, *apiError) {
	if !s.richOn() {
		return nil, &apiError{code: http.StatusNotFound, desc: "Not Found"}
	}
	md, doc, e := readRich(q.p.str("rich_message"))
	if e != nil {
		return nil, e
	}
	return s.sendText(q, func(m *message) {
		m.text, m.rich, m.blocks = doc.text, md, doc.blocks
		m.setFormat("rich", nil)
	})
}

// sendRichMessageDraft streams a partial rich message in a private chat (Bot API 10.1), as
// sendMessageDraft does a text.
func (s *Server) sendRichMessageDraft(q *request) (any, *apiError) {
	if !s.richOn() {
		return nil, &apiError{code: http.StatusNotFound, desc: "Not Found"}
	}
	draftID, e := checkDraftID(q.p.str("draft_id"))
	if e != nil {
		return nil, e
	}
	md, doc, e := readRich(q.p.str("rich_message"))
	if e != nil {
		return nil, e
	}
	return s.sendDraft(q, Draft{DraftID: draftID, Text: doc.text, Form: "rich", Rich: md})
}

// setFormat records how a bot's message is shown: "rich", "html" or "" (plain), and the
// entities its text carries.
func (m *message) setFormat(form string, ents []Entity) {
	m.form = form
	if form != "rich" {
		m.rich, m.blocks = "", nil
	}
	m.entities = append([]Entity{}, ents...)
}
