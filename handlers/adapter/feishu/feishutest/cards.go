package feishutest

import (
	"crypto/sha256"
	"encoding/json"
	"slices"
	"strings"
	"time"
	"unicode/utf8"
)

// Card limits ("Create card entity", "Stream update text", "Streaming card updates").
const (
	maxCardBytes      = 30 << 10            // "keep the card size within 30KB" (200860)
	maxCardElements   = 200                 // 300305
	maxStreamText     = 100000              // content: 1-100000 characters
	maxCardUUID       = 64                  // uuid: 1-64 characters
	maxSettings       = 100000              // settings: 1-100000 characters
	cardLifetime      = 14 * 24 * time.Hour // 200750: "valid for 14 days"
	streamingLifetime = 10 * time.Minute    // "closes automatically 10 minutes after it was last opened"
)

// cardState is a card entity, or the card of an interactive message sent as inline JSON
// (id ""). Guarded by Server.mu.
type cardState struct {
	id             string
	appID          string
	created        time.Time
	messageID      string
	streaming      bool
	streamingSince time.Time
	seq            int
	elements       []*cardElement
	updates        []CardUpdate
	uuids          map[string][32]byte // operation uuid -> digest of the request
}

type cardElement struct {
	id, tag, content string
}

// streamingAt reports whether the card is in streaming mode at now.
func (c *cardState) streamingAt(now time.Time) bool {
	return c.streaming && now.Before(c.streamingSince.Add(streamingLifetime))
}

// text is what a person reads: markdown elements and plain_text elements with an element_id.
func (c *cardState) text() string {
	var parts []string
	for _, e := range c.elements {
		if e.tag == "markdown" || (e.tag == "plain_text" && e.id != "") {
			parts = append(parts, e.content)
		}
	}
	return strings.Join(parts, "\n")
}

// element returns the element with an element_id, or nil.
func (c *cardState) element(id string) *cardElement {
	for _, e := range c.elements {
		if e.id == id {
			return e
		}
	}
	return nil
}

// view is the public copy of the card at now.
func (c *cardState) view(now time.Time) Card {
	v := Card{
		ID: c.id, AppID: c.appID, MessageID: c.messageID, Streaming: c.streamingAt(now),
		Text: c.text(), Sequence: c.seq, Updates: slices.Clone(c.updates),
	}
	for _, e := range c.elements {
		v.Elements = append(v.Elements, Element{ID: e.id, Tag: e.tag, Content: e.content})
	}
	return v
}

// record appends an accepted sequenced operation.
func (c *cardState) record(kind, elementID string, seq int, now time.Time) {
	c.seq = seq
	c.updates = append(c.updates, CardUpdate{
		Sequence: seq, Kind: kind, ElementID: elementID, Text: c.text(), Streaming: c.streamingAt(now), At: now,
	})
}

// setStreaming applies a config.streaming_mode value; turning it on starts the 10-minute
// streaming window again.
func (c *cardState) setStreaming(on bool, now time.Time) {
	c.streaming = on
	if on {
		c.streamingSince = now
	}
}

// cardError is why card JSON was refused: the CardKit code and message ("Create card
// entity" error codes), which the IM API wraps in 230099 ("Send message", 230099 sub-codes).
type cardError struct {
	code int
	msg  string
}

// cardKit is the CardKit answer of a refusal: its own code, except the card content errors
// Feishu reports as 230099 there too (the table limit).
func (ce *cardError) cardKit() *apiError {
	if ce.code == errTooManyTables.code {
		return cardContentError(ce.code, ce.msg)
	}
	return badRequest(ce.code, ce.msg)
}

// parsedCard is card JSON the fake understood.
type parsedCard struct {
	schema      string
	streaming   *bool
	updateMulti *bool
	elements    []*cardElement
}

// parseCard reads card JSON: the config, and every object with a "tag" under the body (JSON
// 2.0: body.elements; JSON 1.0: elements), in document order. v2Only refuses other schemas,
// as CardKit does.
func parseCard(data string, v2Only bool) (*parsedCard, *cardError) {
	if strings.TrimSpace(data) == "" {
		return nil, &cardError{300307, "The card DSL is empty"}
	}
	if len(data) > maxCardBytes {
		return nil, &cardError{200860, "Card content exceeds limit."}
	}
	var root map[string]any
	if !json.Valid([]byte(data)) || json.Unmarshal([]byte(data), &root) != nil || root == nil {
		return nil, &cardError{200220, "Failed to generate card content"}
	}
	p := &parsedCard{}
	p.schema, _ = root["schema"].(string)
	if v2Only && p.schema != "2.0" {
		return nil, &cardError{300303, "Only schema 2.0 is supported"}
	}
	if cfg, ok := root["config"].(map[string]any); ok {
		if b, ok := cfg["streaming_mode"].(bool); ok {
			p.streaming = &b
		}
		if b, ok := cfg["update_multi"].(bool); ok {
			p.updateMulti = &b
		}
	}
	var elems any
	if p.schema == "2.0" {
		if body, ok := root["body"].(map[string]any); ok {
			elems = body["elements"]
		}
	} else {
		elems = root["elements"]
	}
	walkElements(elems, func(obj map[string]any) {
		e := &cardElement{}
		e.tag, _ = obj["tag"].(string)
		e.id, _ = obj["element_id"].(string)
		e.content, _ = obj["content"].(string)
		p.elements = append(p.elements, e)
	})
	if p.updateMulti != nil && !*p.updateMulti {
		return nil, &cardError{300302, "update_multi property is false"}
	}
	if len(p.elements) > maxCardElements {
		return nil, &cardError{300305, "The number of card components exceeds 200"}
	}
	if ce := checkTables(p.elements); ce != nil {
		return nil, ce
	}
	seen := map[string]bool{}
	for _, e := range p.elements {
		if e.id == "" {
			continue
		}
		if seen[e.id] {
			return nil, &cardError{300301, "Duplicate element_id in card component."}
		}
		seen[e.id] = true
	}
	return p, nil
}

// walkElements calls fn for every object with a string "tag" in v, depth first, in order.
func walkElements(v any, fn func(map[string]any)) {
	switch t := v.(type) {
	case []any:
		for _, x := range t {
			walkElements(x, fn)
		}
	case map[string]any:
		if _, ok := t["tag"].(string); ok {
			fn(t)
		}
		keys := make([]string, 0, len(t))
		for k := range t {
			keys = append(keys, k)
		}
		slices.Sort(keys) // map order is random; nested fields come in a stable order
		for _, k := range keys {
			if k == "tag" || k == "element_id" || k == "content" {
				continue
			}
			walkElements(t[k], fn)
		}
	}
}

// invalidCardParam is CardKit's parameter error (10002).
func invalidCardParam(ext string) *apiError {
	msg := "Your request contains an invalid request parameter."
	if ext != "" {
		msg = "Your request contains an invalid request parameter, ext=" + ext + "."
	}
	return badRequest(10002, msg)
}

// createCard answers "Create card entity" (open.feishu.cn/document/cardkit-v1/card/create):
// type "card_json" with card JSON 2.0 data; answers {card_id}.
func (s *Server) createCard(q *request) (any, *apiError) {
	var in struct {
		Type string `json:"type"`
		Data string `json:"data"`
	}
	if err := json.Unmarshal(q.body, &in); err != nil {
		return nil, invalidCardParam("invalid request body")
	}
	switch in.Type {
	case "card_json":
	case "template":
		return nil, invalidCardParam("template cards are not modelled by feishutest")
	default:
		return nil, invalidCardParam("invalid type")
	}
	p, ce := parseCard(in.Data, true)
	if ce != nil {
		return nil, ce.cardKit()
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	now := s.Now()
	c := &cardState{id: randDigits(19), appID: q.app.ID, created: now, elements: p.elements, uuids: map[string][32]byte{}}
	if p.streaming != nil {
		c.setStreaming(*p.streaming, now)
	}
	s.cards[c.id] = c
	s.cardOrder = append(s.cardOrder, c.id)
	return map[string]string{"card_id": c.id}, nil
}

// cardOp is a sequenced CardKit operation's common fields.
type cardOp struct {
	UUID     string `json:"uuid"`
	Sequence *int64 `json:"sequence"`
}

// beginCardOpLocked checks what every sequenced operation on a card entity checks, in this
// order: the card exists (200740), belongs to the app (300311) and is younger than 14 days
// (200750); the uuid was not used for another request (200770); the sequence is a positive
// int32 (10002) greater than the card's last (300317). replay is true when the uuid was used
// for this same request before: the operation is answered as done and not applied again.
// s.mu is held.
func (s *Server) beginCardOpLocked(q *request, op cardOp, kind string, now time.Time) (c *cardState, replay bool, e *apiError) {
	c = s.cards[q.params[routeParamCardID]]
	if c == nil {
		return nil, false, badRequest(200740, "The card entity does not exist")
	}
	if c.appID != q.app.ID {
		return nil, false, badRequest(300311, "The current application does not have permission to update/use this card")
	}
	if !now.Before(c.created.Add(cardLifetime)) {
		return nil, false, badRequest(200750, "The card entity has expired")
	}
	if op.UUID != "" {
		if utf8.RuneCountInString(op.UUID) > maxCardUUID {
			return nil, false, invalidCardParam("uuid exceeds 64 characters")
		}
		digest := sha256.Sum256(append([]byte(kind+"\x00"+q.r.URL.Path+"\x00"), q.body...))
		if prev, seen := c.uuids[op.UUID]; seen {
			if prev == digest {
				return c, true, nil
			}
			return nil, false, badRequest(200770, "UUID conflict")
		}
	}
	if op.Sequence == nil || *op.Sequence < 1 || *op.Sequence > 2147483647 {
		return nil, false, invalidCardParam("invalid sequence")
	}
	if int(*op.Sequence) <= c.seq {
		return nil, false, badRequest(300317, "The sequence number for operating on the card did not increment consecutively")
	}
	return c, false, nil
}

// rememberUUID stores an applied operation's uuid. s.mu is held.
func (c *cardState) rememberUUID(q *request, uuid, kind string) {
	if uuid == "" {
		return
	}
	c.uuids[uuid] = sha256.Sum256(append([]byte(kind+"\x00"+q.r.URL.Path+"\x00"), q.body...))
}

// streamText answers "Stream update text" (open.feishu.cn/document/cardkit-v1/card-element/content):
// the full text of a markdown or plain_text element, in streaming mode only (300309, or 200850
// once the 10-minute streaming window ran out).
func (s *Server) streamText(q *request) (any, *apiError) {
	var in struct {
		cardOp
		Content *string `json:"content"`
	}
	if err := json.Unmarshal(q.body, &in); err != nil {
		return nil, invalidCardParam("invalid request body")
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	now := s.Now()
	c, replay, e := s.beginCardOpLocked(q, in.cardOp, "content", now)
	if e != nil || replay {
		return nil, e
	}
	if in.Content == nil || *in.Content == "" || utf8.RuneCountInString(*in.Content) > maxStreamText {
		return nil, invalidCardParam("content must be 1-100000 characters")
	}
	if !c.streaming {
		return nil, badRequest(300309, "Card streaming closed")
	}
	if !c.streamingAt(now) {
		return nil, badRequest(200850, "Card streaming timeout")
	}
	el := c.element(q.params[routeParamElemID])
	if el == nil {
		return nil, invalidCardParam("invalid element_id")
	}
	if el.tag != "markdown" && el.tag != "plain_text" {
		return nil, badRequest(300310, "Only update text")
	}
	was := el.content
	el.content = *in.Content
	ce := checkTables(c.elements)
	el.content = was
	if ce != nil {
		return nil, ce.cardKit()
	}
	if e := s.spendCardLocked(c.id, now); e != nil {
		return nil, e
	}
	el.content = *in.Content
	c.rememberUUID(q, in.UUID, "content")
	c.record("content", el.id, int(*in.Sequence), now)
	return struct{}{}, nil
}

// cardSettings answers "Update card configuration" (open.feishu.cn/document/cardkit-v1/card/settings):
// settings is a JSON string with config (streaming_mode, update_multi, ...) and card_link.
func (s *Server) cardSettings(q *request) (any, *apiError) {
	var in struct {
		cardOp
		Settings *string `json:"settings"`
	}
	if err := json.Unmarshal(q.body, &in); err != nil {
		return nil, invalidCardParam("invalid request body")
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	now := s.Now()
	c, replay, e := s.beginCardOpLocked(q, in.cardOp, "settings", now)
	if e != nil || replay {
		return nil, e
	}
	if in.Settings == nil || *in.Settings == "" || utf8.RuneCountInString(*in.Settings) > maxSettings {
		return nil, invalidCardParam("settings must be 1-100000 characters")
	}
	var settings struct {
		Config map[string]json.RawMessage `json:"config"`
	}
	if err := json.Unmarshal([]byte(*in.Settings), &settings); err != nil {
		return nil, badRequest(300122, "Failed to update card configuration")
	}
	var streaming, updateMulti *bool
	for key, dst := range map[string]**bool{"streaming_mode": &streaming, "update_multi": &updateMulti} {
		raw, ok := settings.Config[key]
		if !ok {
			continue
		}
		var b bool
		if err := json.Unmarshal(raw, &b); err != nil {
			return nil, badRequest(300122, "Failed to update card configuration")
		}
		*dst = &b
	}
	if updateMulti != nil && !*updateMulti {
		return nil, badRequest(300302, "update_multi property is false")
	}
	if e := s.spendCardLocked(c.id, now); e != nil {
		return nil, e
	}
	if streaming != nil {
		c.setStreaming(*streaming, now)
	}
	c.rememberUUID(q, in.UUID, "settings")
	c.record("settings", "", int(*in.Sequence), now)
	return struct{}{}, nil
}

// updateCard answers "Fully update card entity" (open.feishu.cn/document/cardkit-v1/card/update):
// {card:{type:"card_json", data}, uuid, sequence}. The new JSON replaces the elements and the
// config, so streaming_mode follows it (absent: off).
func (s *Server) updateCard(q *request) (any, *apiError) {
	var in struct {
		cardOp
		Card *struct {
			Type string `json:"type"`
			Data string `json:"data"`
		} `json:"card"`
	}
	if err := json.Unmarshal(q.body, &in); err != nil {
		return nil, invalidCardParam("invalid request body")
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	now := s.Now()
	c, replay, e := s.beginCardOpLocked(q, in.cardOp, "update", now)
	if e != nil || replay {
		return nil, e
	}
	if in.Card == nil || in.Card.Type != "card_json" {
		return nil, invalidCardParam("card.type must be card_json")
	}
	p, ce := parseCard(in.Card.Data, true)
	if ce != nil {
		return nil, ce.cardKit()
	}
	if e := s.spendCardLocked(c.id, now); e != nil {
		return nil, e
	}
	c.elements = p.elements
	c.setStreaming(p.streaming != nil && *p.streaming, now)
	c.rememberUUID(q, in.UUID, "update")
	c.record("update", "", int(*in.Sequence), now)
	return struct{}{}, nil
}

// cardContent reads the content of an interactive message: a card entity reference
// ({"type":"card","data":{"card_id"}}), a template (not modelled), or inline card JSON.
func cardContent(content string) (cardID string, template bool) {
	var ref struct {
		Type string `json:"type"`
		Data struct {
			CardID string `json:"card_id"`
		} `json:"data"`
	}
	if err := json.Unmarshal([]byte(content), &ref); err != nil {
		return "", false
	}
	switch ref.Type {
	case "card":
		return ref.Data.CardID, false
	case "template":
		return "", true
	}
	return "", false
}

// maxCardTables is how many tables a card holds: "单张卡片最多支持放置五个表格组件" ("表格组件": at
// most five table components a card). Feishu counts a markdown element's Markdown tables among
// them and refuses a card past it with 11310 "card table number over limit" (wrapped in 230099
// "Failed to create card content", as openclaw-lark#53 and openclaw#43690 quote Feishu).
const maxCardTables = 5

// errTooManyTables is the refusal of a card with more than maxCardTables tables.
var errTooManyTables = &cardError{11310, "card table number over limit; ErrorValue: table"}

// checkTables refuses elements whose markdown holds more tables than a card takes.
func checkTables(elements []*cardElement) *cardError {
	n := 0
	for _, e := range elements {
		if e.tag == "markdown" {
			n += markdownTables(e.content)
		}
	}
	if n > maxCardTables {
		return errTooManyTables
	}
	return nil
}

// markdownTables counts the GFM tables of a Markdown text as a renderer sees them: a line with a
// "|" followed by a delimiter row ("|---|:--:|"), outside fenced code.
func markdownTables(md string) int {
	lines := strings.Split(md, "\n")
	n, fence := 0, ""
	for i, l := range lines {
		t := strings.TrimSpace(l)
		switch {
		case fence != "":
			if strings.HasPrefix(t, fence) {
				fence = ""
			}
			continue
		case strings.HasPrefix(t, "```") || strings.HasPrefix(t, "~~~"):
			fence = t[:3]
			continue
		}
		if i+1 < len(lines) && strings.Contains(t, "|") && delimiterRow(lines[i+1]) {
			n++
		}
	}
	return n
}

// delimiterRow reports whether a line is a table's delimiter row: cells of dashes, each with an
// optional colon at either end.
func delimiterRow(l string) bool {
	t := strings.Trim(strings.TrimSpace(l), "|")
	if !strings.Contains(l, "-") || strings.TrimSpace(t) == "" {
		return false
	}
	for _, cell := range strings.Split(t, "|") {
		c := strings.Trim(strings.TrimSpace(cell), ":")
		if c == "" || strings.Trim(c, "-") != "" {
			return false
		}
	}
	return true
}
