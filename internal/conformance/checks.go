package conformance

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"net/url"
	"slices"
	"strings"
	"time"
)

// check is one row of the checklist: an id, the profile rule (or edge-api section, or
// section-11 question) it proves, what it proves, and how.
type check struct {
	id, rule, title string
	bind            bind // the channel run is given (noChannel: none)
	run             func(s *session, ch string) verdict
}

// bind is how a check's channel is bound to the target: its streaming and activity.
type bind struct{ streaming, activity string }

// The bindings the checks use.
var (
	noChannel  bind
	streamed   = bind{"edit", "none"}   // deltas displayed by edits, no activity
	withStatus = bind{"edit", "status"} // and activity shown as a status
	buffered   = bind{"none", "none"}   // nothing shown before the final
)

type verdict struct {
	status Status
	detail string
}

func pass(format string, a ...any) verdict { return verdict{Pass, fmt.Sprintf(format, a...)} }
func fail(format string, a ...any) verdict { return verdict{Fail, fmt.Sprintf(format, a...)} }
func skip(format string, a ...any) verdict { return verdict{Skip, fmt.Sprintf(format, a...)} }

// errored is the verdict of a step that could not be taken or saw nothing.
func errored(err error) verdict { return fail("%v", err) }

// checks is the checklist, in the order of the profile's section 11 and then the other rules
// observable through the edge API. Each check uses its own channels.
var checks = []check{
	{"card-declares", "P-DECL-1", "the Card declares target type im, profile xagent.im.v2 and the IM tools", noChannel, checkCard},
	{"descriptor-declares", "P-DECL-1", "an opened channel's Descriptor declares xagent.im.v2, no secret echoed", withStatus, checkDescriptor},
	{"descriptor-refusals", "P-DECL-2", "a Descriptor with a profile or target type the Card lacks is refused", noChannel, checkDescriptorRefusals},
	{"delta-then-final", "P-MSG-11", "deltas then a final: one target message, edited, ending with the final text", streamed, checkDeltaThenFinal},
	{"direct-final", "P-MSG-13", "a final with no delta: one target message with the final text", streamed, checkDirectFinal},
	{"retransmit-duplicate", "P-ACK-4", "a final sent again (new packet_id) is answered duplicate, target untouched", streamed, checkRetransmitDuplicate},
	{"retransmit-in-flight", "P-ACK-4", "a final sent again while the first is at the target: duplicate, shown once", streamed, checkRetransmitInFlight},
	{"idempotent-by-message-id", "P-MSG-9", "two finals with the same text and different message_ids are two messages", streamed, checkIdempotentByMessageID},
	{"message-id-conflict", "P-STATE-6", "another text or file list under a completed message_id: message_id_conflict", streamed, checkMessageIDConflict},
	{"ack-matches", "P-ACK-2", "each ack's reply_to, channel and message_id are its final's (P-ACK-1)", noChannel, checkAckMatches},
	{"no-text-before-final", "check-11.5", "streaming none: nothing shown before the final, then one message", buffered, checkNoTextBeforeFinal},
	{"delta-state-cleared", "P-STATE-5", "a message's delta buffer is open while it streams and cleared by its final", buffered, checkDeltaStateCleared},
	{"state-bounded", "P-STATE-4", "delta and completed state are bounded", noChannel, checkStateBounded},
	{"internal-keys-refused", "P-ID-2", "session_id, user_id, role... in a payload are refused as invalid_packet", withStatus, checkInternalKeysRefused},
	{"internal-keys-absent", "P-ID-2", "packets to xAgent carry only the profile's keys", streamed, checkInternalKeysAbsent},
	{"inbound-file-url", "P-MSG-6", "a user's file reaches xAgent as a downloadable download_url, bytes intact", streamed, checkInboundFile},
	{"outbound-file-upload", "P-MSG-7", "an uploaded file_ref in a final reaches the target as a signed link", streamed, checkOutboundFile},
	{"files-one-ack-unit", "P-MSG-12", "text and all files of a final go in one target message and one ack", streamed, checkFilesOneAckUnit},
	{"delta-carries-no-files", "P-DLT-5", "a delta with files is invalid_packet", streamed, checkDeltaNoFiles},
	{"session-sync-dropped", "P-SCOPE-3", "session sync, history and UI packets are dropped without a reply", withStatus, checkSessionSyncDropped},
	{"user-msg-pending", "P-STATE-1", "a user message stays pending until acked: sent again after no ack or retryable", streamed, checkUserMessagePending},
	{"user-msg-rejected", "P-STATE-3", "a user message rejected retryable:false is a visible failure, not re-sent", streamed, checkUserMessageRejected},
	{"reconnect-pending-only", "P-SCOPE-4", "after a reconnect pending user messages come, completed ones never", streamed, checkReconnect},
	{"activity-shown-cleared", "P-ACT-5", "thinking/tool shown; cleared by idle, the first displayed delta, the final", withStatus, checkActivityShown},
	{"activity-degraded", "P-ACT-4", "typing-only target: typing; none: nothing; the messages still go", noChannel, checkActivityDegraded},
	{"activity-invalid", "P-ACT-2", "an invalid chat.activity is invalid_packet and not shown", withStatus, checkActivityInvalid},
	{"delta-gap", "P-ERR-4", "a sequence gap is delta_sequence_gap; nothing after it shown; final in full", streamed, checkDeltaGap},
	{"delta-conflict", "P-ERR-4", "the same sequence with other text is delta_sequence_conflict, not shown", streamed, checkDeltaConflict},
	{"delta-retransmit-once", "P-DLT-2", "a delta sent twice is applied once", streamed, checkDeltaRetransmit},
	{"delta-after-final", "edge-5.2", "a delta for a completed message is ignored silently", streamed, checkDeltaAfterFinal},
	{"invalid-final", "P-ERR-3", "a final without text and files, with an unknown key or file type: invalid_packet", streamed, checkInvalidFinal},
	{"malformed-frame", "edge-5", "a frame that is not a packet is error invalid_packet; the connection goes on", streamed, checkMalformedFrame},
	{"unsupported-schema", "edge-5", "a packet of another schema is error unsupported_schema, not processed", streamed, checkUnsupportedSchema},
	{"channel-not-open", "P-ERR-2", "a packet for a channel that is not open gets error channel_not_open", noChannel, checkChannelNotOpen},
	{"accepted-after-target", "P-MSG-12", "accepted is sent only after the target answered", streamed, checkAcceptedAfterTarget},
	{"target-failure-codes", "P-ERR-5", "target 503/401/400: rejected with a stable code and retryable, never accepted", noChannel, checkTargetFailures},
	{"tool-invoke", "edge-8", "IM tools: one tool.result each, idempotent by invocation_id, errors coded", streamed, checkToolInvoke},
	{"tool-after-final", "edge-8", "a tool's message reaches the target after the finals sent before it", streamed, checkToolAfterFinal},
	{"token-required", "edge-2", "the API and the WebSocket refuse a missing token; user input a bad signature", noChannel, checkTokenRequired},
	{"channel-delete", "P-STATE-7", "a deleted channel is gone: 404, later packets channel_not_open", streamed, checkChannelDelete},
	{"bot-opens-channel", "edge-4.1", "a bot: a stranger's code, approval, channel.opened before the first chat.message", noChannel, checkBotOpensChannel},
	{"target-signatures", "edge-7.1", "every target call of the run carried valid V1 and V2 signatures", noChannel, checkTargetSignatures},
}

// finalAccepted sends a final and waits for its ack, which must be accepted.
func (s *session) finalAccepted(ch, msg, text string, refs ...string) (packet, error) {
	pkt, err := s.final(ch, msg, text, refs...)
	if err != nil {
		return packet{}, err
	}
	p, a, err := s.ackOf(ch, pkt, msg)
	if err != nil {
		return p, err
	}
	if a.Status != "accepted" {
		return p, fmt.Errorf("final %s answered %s %q, want accepted", msg, a, a.Message)
	}
	return p, nil
}

// --- section 11.1: declarations ---

func checkCard(s *session, _ string) verdict {
	status, body, err := s.do(http.MethodGet, "/v1/card", nil, "")
	if err != nil {
		return errored(err)
	}
	var card struct {
		Schema   string `json:"schema"`
		Supports struct {
			TargetTypes []string `json:"target_types"`
			Profiles    []string `json:"profiles"`
		} `json:"supports"`
		Tools []struct {
			Name        string          `json:"name"`
			Profile     string          `json:"profile"`
			InputSchema json.RawMessage `json:"input_schema"`
		} `json:"tools"`
	}
	if status != http.StatusOK || json.Unmarshal(body, &card) != nil {
		return fail("GET /v1/card: %d %s", status, oneLine(body))
	}
	switch {
	case card.Schema != "xagent.connector.card/v1":
		return fail("card schema %q, want xagent.connector.card/v1", card.Schema)
	case !slices.Contains(card.Supports.TargetTypes, "im"):
		return fail("card supports.target_types %v lacks im", card.Supports.TargetTypes)
	case !slices.Contains(card.Supports.Profiles, "xagent.im.v2"):
		return fail("card supports.profiles %v lacks xagent.im.v2", card.Supports.Profiles)
	}
	var names []string
	for _, t := range card.Tools {
		if t.Profile != "xagent.im.v2" || !bytes.HasPrefix(bytes.TrimSpace(t.InputSchema), []byte("{")) {
			return fail("card tool %s: profile %q, input_schema %s", t.Name, t.Profile, oneLine(t.InputSchema))
		}
		names = append(names, t.Name)
	}
	for _, want := range []string{"im.send_message", "im.reply_message", "im.send_file"} {
		if !slices.Contains(names, want) {
			return fail("card tools %v lack %s", names, want)
		}
	}
	return pass("GET /v1/card: supports im + xagent.im.v2; tools %s", strings.Join(names, ", "))
}

func checkDescriptor(s *session, ch string) verdict {
	status, body, err := s.put(ch, descriptor(ch, s.webhookConfig(ch, "edit", "status")))
	if err != nil {
		return errored(err)
	}
	if v, bad := s.badDescriptor("PUT", status, body); bad {
		return v
	}
	status, body, err = s.do(http.MethodGet, "/v1/channels/"+ch, nil, "")
	if err != nil {
		return errored(err)
	}
	if v, bad := s.badDescriptor("GET", status, body); bad {
		return v
	}
	return pass("PUT (twice) and GET /v1/channels: status open, connection.profiles [xagent.im.v2], no secret")
}

// badDescriptor checks a channel answer: 200, open, IM v2 declared, the secret not echoed.
func (s *session) badDescriptor(method string, status int, body []byte) (verdict, bool) {
	var got struct {
		Status     string `json:"status"`
		Connection struct {
			TargetType string   `json:"target_type"`
			Profiles   []string `json:"profiles"`
		} `json:"connection"`
	}
	switch {
	case status != http.StatusOK || json.Unmarshal(body, &got) != nil:
		return fail("%s /v1/channels: %d %s", method, status, oneLine(body)), true
	case got.Status != "open" || got.Connection.TargetType != "im" || !slices.Equal(got.Connection.Profiles, []string{"xagent.im.v2"}):
		return fail("%s /v1/channels: status %q, connection %s/%v, want open, im/[xagent.im.v2]", method, got.Status, got.Connection.TargetType, got.Connection.Profiles), true
	case bytes.Contains(body, []byte(s.secret)):
		return fail("%s /v1/channels echoes the webhook secret", method), true
	}
	return verdict{}, false
}

func checkDescriptorRefusals(s *session, _ string) verdict {
	ch := s.scratch("refused")
	cases := []struct {
		name       string
		connection map[string]any
		want       string
	}{
		{"profile", map[string]any{"target_type": "im", "profiles": []string{"xagent.im.v2", "xagent.browser-runtime.v1"}}, "profile_not_supported"},
		{"target type", map[string]any{"target_type": "browser", "profiles": []string{"xagent.im.v2"}}, "target_type_not_supported"},
	}
	for _, c := range cases {
		body := descriptor(ch, s.webhookConfig(ch, "edit", "none"))
		body["connection"] = c.connection
		status, resp, err := s.put(ch, body)
		if err != nil {
			return errored(err)
		}
		var e struct {
			Code string `json:"code"`
		}
		if status != http.StatusUnprocessableEntity || json.Unmarshal(resp, &e) != nil || e.Code != c.want {
			return fail("undeclared %s: PUT answered %d %s, want 422 %s", c.name, status, oneLine(resp), c.want)
		}
	}
	status, resp, err := s.do(http.MethodGet, "/v1/channels/"+ch, nil, "")
	if err != nil {
		return errored(err)
	}
	if status != http.StatusNotFound {
		return fail("a refused channel: GET answered %d %s, want 404", status, oneLine(resp))
	}
	return pass("browser-runtime profile: 422 profile_not_supported; target_type browser: 422 target_type_not_supported")
}

func checkTokenRequired(s *session, _ string) verdict {
	req, _ := http.NewRequestWithContext(s.ctx, http.MethodGet, "http://"+s.cfg.HTTPAddr+"/v1/card", nil)
	status, body, err := s.roundTrip(req)
	if err != nil {
		return errored(err)
	}
	if status != http.StatusUnauthorized || !strings.Contains(string(body), `"unauthorized"`) {
		return fail("GET /v1/card without a token: %d %s, want 401 unauthorized", status, oneLine(body))
	}
	req, _ = http.NewRequestWithContext(s.ctx, http.MethodGet, "http://"+s.cfg.HTTPAddr+"/v1/ws", nil)
	req.Header.Set("Connection", "Upgrade")
	req.Header.Set("Upgrade", "websocket")
	req.Header.Set("Sec-WebSocket-Version", "13")
	req.Header.Set("Sec-WebSocket-Key", "dGhlIHNhbXBsZSBub25jZQ==")
	req.Header.Set("Sec-WebSocket-Protocol", subprotocol)
	if status, body, err = s.roundTrip(req); err != nil {
		return errored(err)
	}
	if status != http.StatusUnauthorized {
		return fail("WebSocket upgrade without a token: %d %s, want 401", status, oneLine(body))
	}
	ch, err := s.channel("none", "none")
	if err != nil {
		return errored(err)
	}
	raw := []byte(`{"target_message_id":"forged","text":"forged"}`)
	if status, body, err = s.postSigned(ch, raw, "not-"+s.secret); err != nil {
		return errored(err)
	}
	if status != http.StatusUnauthorized {
		return fail("user input signed with another secret: %d %s, want 401", status, oneLine(body))
	}
	if p, came := s.quiet(ch, anyPacket); came {
		return fail("user input with a bad signature reached xAgent: %s", p.Type)
	}
	return pass("no token: GET /v1/card 401, /v1/ws 401; user input with a bad signature: 401, not sent")
}

// --- section 11.2: delta + final, direct final ---

func checkDeltaThenFinal(s *session, ch string) verdict {
	msg := s.newID("msg")
	// Each step waits until its text is displayed: deltas sent at once may be coalesced, and a
	// final that overtakes every display is rightly one POST.
	shown := ""
	for i, d := range []string{"Conformance ", "streams ", "this text"} {
		if _, err := s.delta(ch, msg, i+1, d); err != nil {
			return errored(err)
		}
		shown += d
		if _, ok := s.calls(ch, func(c []call) bool {
			return slices.ContainsFunc(messageCalls(c), func(c call) bool { return c.text() == shown })
		}); !ok {
			return fail("delta %d: %q not displayed within %s", i+1, shown, s.cfg.Wait)
		}
	}
	final := "Conformance streams this text, then finishes."
	if _, err := s.finalAccepted(ch, msg, final); err != nil {
		return errored(err)
	}
	calls := messageCalls(s.target.of(ch))
	posts := filter(calls, call.isPost)
	switch {
	case len(posts) != 1:
		return fail("3 deltas + final: %d target messages created (POST), want 1", len(posts))
	case !calls[0].isPost() || calls[0].final():
		return fail("first target call %s final:%t, want POST final:false", calls[0].Method, calls[0].final())
	}
	last := calls[len(calls)-1]
	if !last.isPatch() || !last.final() || last.text() != final {
		return fail("last target call %s final:%t text %q, want PATCH final:true with the final text", last.Method, last.final(), last.text())
	}
	return pass("3 deltas + final -> POST, %d PATCH (last final:true, final text)", len(calls)-1)
}

func checkDirectFinal(s *session, ch string) verdict {
	text := "A direct final, never streamed."
	if _, err := s.finalAccepted(ch, s.newID("msg"), text); err != nil {
		return errored(err)
	}
	calls := messageCalls(s.target.of(ch))
	if len(calls) != 1 || !calls[0].isPost() || !calls[0].final() || calls[0].text() != text {
		return fail("direct final: %s, want one POST final:true with its text", describe(calls))
	}
	return pass("final with no delta -> one POST final:true with its text, accepted")
}

// describe lists calls as "POST final:false, PATCH final:true".
func describe(calls []call) string {
	if len(calls) == 0 {
		return "no target call"
	}
	parts := make([]string, len(calls))
	for i, c := range calls {
		parts[i] = fmt.Sprintf("%s final:%t", c.Method, c.final())
	}
	return fmt.Sprintf("%d target calls (%s)", len(calls), strings.Join(parts, ", "))
}

// --- section 11.3: idempotency by message_id ---

func checkRetransmitDuplicate(s *session, ch string) verdict {
	msg, text := s.newID("msg"), "Sent twice, shown once."
	if _, err := s.finalAccepted(ch, msg, text); err != nil {
		return errored(err)
	}
	pkt, err := s.final(ch, msg, text)
	if err != nil {
		return errored(err)
	}
	p, a, err := s.ackOf(ch, pkt, msg)
	if err != nil {
		return errored(err)
	}
	if a.Status != "duplicate" || p.ReplyTo != pkt {
		return fail("retransmission answered %s (reply_to %s), want duplicate to %s", a, p.ReplyTo, pkt)
	}
	if calls := messageCalls(s.settled(ch)); len(calls) != 1 {
		return fail("retransmitted final: %s, want the first POST only", describe(calls))
	}
	return pass("same message_id, new packet_id -> duplicate; target called once")
}

func checkIdempotentByMessageID(s *session, ch string) verdict {
	text := "Same words, two messages."
	for range 2 {
		if _, err := s.finalAccepted(ch, s.newID("msg"), text); err != nil {
			return errored(err)
		}
	}
	if posts := filter(s.target.of(ch), call.isPost); len(posts) != 2 {
		return fail("two message_ids with one text: %d target messages, want 2", len(posts))
	}
	return pass("two message_ids, same text -> both accepted, two target messages")
}

func checkMessageIDConflict(s *session, ch string) verdict {
	msg, text := s.newID("msg"), "The original text."
	if _, err := s.finalAccepted(ch, msg, text); err != nil {
		return errored(err)
	}
	ref, err := s.upload(ch, "extra.txt", []byte("an extra file"))
	if err != nil {
		return errored(err)
	}
	for _, c := range []struct {
		what, text string
		refs       []string
	}{{"other text", "Another text.", nil}, {"same text + a file", text, []string{ref}}} {
		pkt, err := s.final(ch, msg, c.text, c.refs...)
		if err != nil {
			return errored(err)
		}
		_, a, err := s.ackOf(ch, pkt, msg)
		if err != nil {
			return errored(err)
		}
		if a.Status != "rejected" || a.Code != "message_id_conflict" || a.Retryable == nil || *a.Retryable {
			return fail("%s under a completed message_id: %s, want rejected message_id_conflict retryable:false", c.what, a)
		}
	}
	if calls := messageCalls(s.settled(ch)); len(calls) != 1 {
		return fail("conflicting finals touched the target: %s", describe(calls))
	}
	return pass("other text, other file list -> rejected message_id_conflict retryable:false; target untouched")
}

// --- section 11.4: acks match ---

func checkAckMatches(s *session, _ string) verdict {
	var chs [2]string
	for i := range chs {
		ch, err := s.channel("edit", "none")
		if err != nil {
			return errored(err)
		}
		chs[i] = ch
	}
	type sent struct{ ch, pkt, msg string }
	var all []sent
	for i := range 4 {
		ch, msg := chs[i%2], s.newID("msg")
		pkt, err := s.final(ch, msg, fmt.Sprintf("Message %d of four.", i+1))
		if err != nil {
			return errored(err)
		}
		all = append(all, sent{ch, pkt, msg})
	}
	for _, m := range all {
		p, a, err := s.ackOf(m.ch, m.pkt, m.msg)
		if err != nil {
			return errored(err)
		}
		switch {
		case p.ReplyTo != m.pkt:
			return fail("ack of %s: reply_to %q, want its packet_id %s", m.msg, p.ReplyTo, m.pkt)
		case p.ChannelID != m.ch:
			return fail("ack of %s: connector_channel_id %q, want %s", m.msg, p.ChannelID, m.ch)
		case a.MessageID != m.msg:
			return fail("ack replying to %s: message_id %q, want %s", m.pkt, a.MessageID, m.msg)
		case a.Status != "accepted":
			return fail("ack of %s: %s, want accepted", m.msg, a)
		}
	}
	return pass("4 finals on 2 channels, interleaved: each ack's reply_to, channel, message_id exact")
}

// --- section 11.5: no temporary text without streaming ---

func checkNoTextBeforeFinal(s *session, ch string) verdict {
	msg := s.newID("msg")
	for i, d := range []string{"Nothing ", "of this ", "shows early"} {
		if _, err := s.delta(ch, msg, i+1, d); err != nil {
			return errored(err)
		}
	}
	if calls := messageCalls(s.settled(ch)); len(calls) > 0 {
		return fail("streaming none: %s before the final, want none", describe(calls))
	}
	final := "Nothing of this shows early: only now."
	if _, err := s.finalAccepted(ch, msg, final); err != nil {
		return errored(err)
	}
	calls := messageCalls(s.target.of(ch))
	if len(calls) != 1 || !calls[0].isPost() || !calls[0].final() || calls[0].text() != final {
		return fail("streaming none, final: %s, want one POST final:true with the final text", describe(calls))
	}
	return pass("streaming none: 3 deltas -> nothing; final -> one POST final:true")
}

// --- section 11.6: bounded state ---

func checkDeltaStateCleared(s *session, ch string) verdict {
	msg := s.newID("msg")
	if _, err := s.delta(ch, msg, 1, "buffered "); err != nil {
		return errored(err)
	}
	if n, err := s.deltaBuffers(ch, 1); err != nil {
		return fail("after a delta: stats.open_delta_buffers %d, want 1 (%v)", n, err)
	}
	if _, err := s.finalAccepted(ch, msg, "buffered, then final"); err != nil {
		return errored(err)
	}
	if n, err := s.deltaBuffers(ch, 0); err != nil {
		return fail("after the final: stats.open_delta_buffers %d, want 0 (%v)", n, err)
	}
	return pass("GET /v1/channels stats.open_delta_buffers: 1 after a delta, 0 after its final")
}

// channelState is what GET /v1/channels/{id} says of a channel that the checks look at.
type channelState struct {
	Stats struct {
		OpenDeltaBuffers int `json:"open_delta_buffers"`
	} `json:"stats"`
	Failures []failure `json:"failures"`
}

// failure is one of a channel's recent terminal failures.
type failure struct {
	MessageID string `json:"message_id"`
	Code      string `json:"code"`
}

// untilState polls GET /v1/channels/{ch} until done accepts it (within Wait); it returns the
// last state read.
func (s *session) untilState(ch string, done func(channelState) bool) (channelState, error) {
	deadline := time.Now().Add(s.cfg.Wait)
	for {
		var st channelState
		status, body, err := s.do(http.MethodGet, "/v1/channels/"+ch, nil, "")
		if err != nil {
			return st, err
		}
		if status != http.StatusOK || json.Unmarshal(body, &st) != nil {
			return st, fmt.Errorf("GET /v1/channels/%s: %d %s", ch, status, oneLine(body))
		}
		if done(st) {
			return st, nil
		}
		if time.Now().After(deadline) {
			return st, fmt.Errorf("not within %s", s.cfg.Wait)
		}
		select {
		case <-time.After(50 * time.Millisecond):
		case <-s.ctx.Done():
			return st, s.ctx.Err()
		}
	}
}

// deltaBuffers waits until the channel's stats.open_delta_buffers is want.
func (s *session) deltaBuffers(ch string, want int) (int, error) {
	st, err := s.untilState(ch, func(st channelState) bool { return st.Stats.OpenDeltaBuffers == want })
	return st.Stats.OpenDeltaBuffers, err
}

func checkStateBounded(*session, string) verdict {
	return skip("bounds not observable from outside; see README Tunables: XIM_DELTA_TTL, XIM_MAX_DELTA_BUFFERS, XIM_MAX_DELTA_BYTES, XIM_COMPLETED_TTL, XIM_COMPLETED_MAX_BYTES")
}

// --- section 11.7: internal fields ---

var internalKeys = []string{"session_id", "user_connector_id", "user_id", "connector_id", "role"}

func checkInternalKeysRefused(s *session, ch string) verdict {
	for _, key := range internalKeys {
		msg := s.newID("msg")
		pkt, err := s.send(ch, "chat.message", map[string]any{"message_id": msg, "text": "smuggled", key: "x"})
		if err != nil {
			return errored(err)
		}
		_, a, err := s.ackOf(ch, pkt, msg)
		if err != nil {
			return errored(err)
		}
		if a.Status != "rejected" || a.Code != "invalid_packet" || !strings.Contains(a.Message, key) {
			return fail("final with %s: %s %q, want rejected invalid_packet naming %s", key, a, a.Message, key)
		}
	}
	for typ, payload := range map[string]map[string]any{
		"chat.message.delta": {"message_id": s.newID("msg"), "sequence": 1, "text": "x", "user_id": "u"},
		"chat.activity":      {"status": "thinking", "role": "assistant"},
	} {
		e, err := s.refusal(ch, func() (string, error) { return s.send(ch, typ, payload) })
		if err != nil {
			return errored(err)
		}
		if e.Code != "invalid_packet" {
			return fail("%s with an internal key: error %s, want invalid_packet", typ, e.Code)
		}
	}
	if calls := s.settled(ch); len(calls) > 0 {
		return fail("refused packets reached the target: %s", describe(calls))
	}
	return pass("%d finals, a delta, an activity with internal keys -> invalid_packet; target untouched", len(internalKeys))
}

var (
	envelopeKeys = []string{"schema", "packet_id", "reply_to", "connector_channel_id", "type", "time", "payload"}
	messageKeys  = []string{"message_id", "text", "files", "created_at"}
	fileKeys     = []string{"type", "file_ref", "filename", "mime_type", "byte_size", "expires_at", "download_url"}
	ackKeys      = []string{"message_id", "status", "code", "message", "retryable"}
)

// extraKey returns the first key of keys outside allowed.
func extraKey(keys []string, allowed []string) string {
	for _, k := range keys {
		if !slices.Contains(allowed, k) {
			return k
		}
	}
	return ""
}

func keysOf(m map[string]any) []string {
	out := make([]string, 0, len(m))
	for k := range m {
		out = append(out, k)
	}
	return out
}

func checkInternalKeysAbsent(s *session, ch string) verdict {
	p, err := s.userMessageIn(ch, "Hello from the target.", nil)
	if err != nil {
		return errored(err)
	}
	if err := s.ackUser(ch, p, "accepted"); err != nil {
		return errored(err)
	}
	ackPkt, err := s.finalAccepted(ch, s.newID("msg"), "An answer.")
	if err != nil {
		return errored(err)
	}
	for _, q := range []struct {
		what    string
		p       packet
		allowed []string
	}{{"user chat.message", p, messageKeys}, {"chat.message.ack", ackPkt, ackKeys}} {
		if k := extraKey(q.p.keys, envelopeKeys); k != "" {
			return fail("%s envelope carries %q", q.what, k)
		}
		if k := extraKey(keysOf(q.p.fields()), q.allowed); k != "" {
			return fail("%s payload carries %q", q.what, k)
		}
	}
	return pass("user chat.message and ack: envelope and payload keys all the profile's")
}

// userMessageIn posts a user message as the target and waits for it to reach xAgent.
func (s *session) userMessageIn(ch, text string, files []map[string]any) (packet, error) {
	msg, err := s.userMessage(ch, s.newID("tm"), text, files)
	if err != nil {
		return packet{}, err
	}
	return s.userMessageFor(ch, msg, "")
}

// userMessageFor waits for a chat.message of msg on ch, other than packet_id notPacket.
func (s *session) userMessageFor(ch, msg, notPacket string) (packet, error) {
	p, ok := s.agent.box(ch).within(s.ctx, s.cfg.Wait, func(p packet) bool {
		return p.Type == "chat.message" && p.str("message_id") == msg && p.PacketID != notPacket
	})
	if !ok {
		return p, fmt.Errorf("user message %s did not reach xAgent within %s", msg, s.cfg.Wait)
	}
	return p, nil
}

// ackUser acks a user message as xAgent (accepted or duplicate).
func (s *session) ackUser(ch string, p packet, status string) error {
	return s.answerUser(ch, p, map[string]any{"message_id": p.str("message_id"), "status": status})
}

// rejectUser rejects a user message as xAgent, with code invalid_packet.
func (s *session) rejectUser(ch string, p packet, retryable bool) error {
	return s.answerUser(ch, p, map[string]any{"message_id": p.str("message_id"), "status": "rejected", "code": "invalid_packet", "retryable": retryable})
}

func (s *session) answerUser(ch string, p packet, payload map[string]any) error {
	b, err := json.Marshal(map[string]any{"schema": "xagent.connector.packet/v1", "packet_id": s.newID("pkt"), "reply_to": p.PacketID,
		"connector_channel_id": ch, "type": "chat.message.ack", "time": time.Now().UnixMilli(), "payload": payload})
	if err != nil {
		return err
	}
	return s.agent.sendRaw(s.ctx, b)
}

// --- section 11.8: files ---

func checkInboundFile(s *session, ch string) verdict {
	path := "/files/" + randomHex(8) + "/note.txt"
	content := []byte("a user's file, " + randomHex(8))
	s.target.serveFile(path, content)
	p, err := s.userMessageIn(ch, "See the note.", []map[string]any{{"type": "file", "url": s.target.url + path, "filename": "note.txt", "mime_type": "text/plain"}})
	var refused *edgeError
	if errors.As(err, &refused) && refused.Code == "file_download_failed" {
		// ximd downloads user files from a host name only when it resolves to a public
		// address (its download guard); an internal target must be named by its IP.
		return fail("%v (if -target-url names an internal host, give its IP address instead)", err)
	}
	if err != nil {
		return errored(err)
	}
	if err := s.ackUser(ch, p, "accepted"); err != nil {
		return errored(err)
	}
	if bytes.Contains(p.Payload, []byte(s.target.url)) {
		return fail("the user message carries the target's file URL: %s", oneLine(p.Payload))
	}
	var m struct {
		Files []struct {
			Type        string `json:"type"`
			FileRef     string `json:"file_ref"`
			DownloadURL string `json:"download_url"`
		} `json:"files"`
	}
	if json.Unmarshal(p.Payload, &m) != nil || len(m.Files) != 1 || m.Files[0].FileRef == "" || m.Files[0].DownloadURL == "" {
		return fail("user message files: %s, want one item with file_ref and download_url", oneLine(p.Payload))
	}
	u := m.Files[0].DownloadURL
	if !strings.HasPrefix(u, "/") && !strings.HasPrefix(u, "http://") && !strings.HasPrefix(u, "https://") {
		return fail("download_url %q is neither relative nor http(s)", u)
	}
	if strings.HasPrefix(u, "/") {
		u = "http://" + s.cfg.HTTPAddr + u
	}
	status, body, err := s.do(http.MethodGet, strings.TrimPrefix(u, "http://"+s.cfg.HTTPAddr), nil, "")
	if err != nil {
		return errored(err)
	}
	if status != http.StatusOK || !bytes.Equal(body, content) {
		return fail("GET %s: %d, %d bytes, want 200 with the %d bytes the user sent", m.Files[0].DownloadURL, status, len(body), len(content))
	}
	return pass("user file -> download_url %s, GET with the token: the same %d bytes", clip(m.Files[0].DownloadURL, 24), len(content))
}

func clip(s string, n int) string {
	if len(s) <= n {
		return s
	}
	return s[:n-3] + "..."
}

func checkOutboundFile(s *session, ch string) verdict {
	content := []byte("an assistant's file, " + randomHex(8))
	ref, err := s.upload(ch, "report.txt", content)
	if err != nil {
		return errored(err)
	}
	if _, err := s.finalAccepted(ch, s.newID("msg"), "The report is attached.", ref); err != nil {
		return errored(err)
	}
	calls := messageCalls(s.target.of(ch))
	if len(calls) != 1 || len(calls[0].files()) != 1 {
		return fail("final with one file: %s, want one POST carrying it", describe(calls))
	}
	f := calls[0].files()[0]
	link, _ := f["url"].(string)
	u, err := url.Parse(link)
	if err != nil || (u.Scheme != "http" && u.Scheme != "https") || f["file_ref"] != ref || !strings.HasSuffix(u.Path, "/files/refs/"+ref) {
		return fail("target file item %v, want file_ref %s and an absolute link to /files/refs/%s", f, ref, ref)
	}
	// The link's host is XIM_PUBLIC_URL's, which need not be reachable from here: fetch its
	// path and query from the edge, without the token, as a signed link must work.
	req, _ := http.NewRequestWithContext(s.ctx, http.MethodGet, "http://"+s.cfg.HTTPAddr+u.RequestURI(), nil)
	status, body, err := s.roundTrip(req)
	if err != nil {
		return errored(err)
	}
	if status != http.StatusOK || !bytes.Equal(body, content) {
		return fail("signed link without the token: %d, %d bytes, want 200 with the %d bytes uploaded", status, len(body), len(content))
	}
	msg := s.newID("msg")
	pkt, err := s.final(ch, msg, "A file nobody uploaded.", "file_"+randomHex(16))
	if err != nil {
		return errored(err)
	}
	_, a, err := s.ackOf(ch, pkt, msg)
	if err != nil {
		return errored(err)
	}
	if a.Status != "rejected" || a.Code != "file_not_found" || a.Retryable == nil || *a.Retryable {
		return fail("final with an unknown file_ref: %s, want rejected file_not_found retryable:false", a)
	}
	return pass("upload -> file_ref -> final: target got a signed link, bytes intact; unknown ref: file_not_found")
}

func checkFilesOneAckUnit(s *session, ch string) verdict {
	var refs []string
	for i := range 2 {
		ref, err := s.upload(ch, fmt.Sprintf("part-%d.txt", i+1), []byte(fmt.Sprintf("part %d", i+1)))
		if err != nil {
			return errored(err)
		}
		refs = append(refs, ref)
	}
	msg := s.newID("msg")
	if _, err := s.delta(ch, msg, 1, "Two files "); err != nil {
		return errored(err)
	}
	text := "Two files follow, with this text."
	if _, err := s.finalAccepted(ch, msg, text, refs...); err != nil {
		return errored(err)
	}
	if p, came := s.quiet(ch, func(p packet) bool { return p.Type == "chat.message.ack" }); came {
		return fail("a second ack for the final: %s", oneLine(p.Payload))
	}
	calls := messageCalls(s.target.of(ch))
	for _, c := range calls[:len(calls)-1] {
		if len(c.files()) > 0 {
			return fail("files shown before the final (%s final:%t)", c.Method, c.final())
		}
	}
	last := calls[len(calls)-1]
	if !last.final() || last.text() != text || len(last.files()) != 2 {
		return fail("final call %s final:%t, %d files, text %q, want final:true with the text and both files", last.Method, last.final(), len(last.files()), last.text())
	}
	return pass("delta + final with text and 2 files: one final call carrying all, one ack")
}

func checkDeltaNoFiles(s *session, ch string) verdict {
	ref, err := s.upload(ch, "early.txt", []byte("too early"))
	if err != nil {
		return errored(err)
	}
	files := []map[string]any{{"type": "file", "file_ref": ref}}
	e, err := s.refusal(ch, func() (string, error) {
		return s.send(ch, "chat.message.delta", map[string]any{"message_id": s.newID("msg"), "sequence": 1, "text": "x", "files": files})
	})
	if err != nil {
		return errored(err)
	}
	if e.Code != "invalid_packet" {
		return fail("delta with files: error %s, want invalid_packet", e.Code)
	}
	if calls := s.settled(ch); len(calls) > 0 {
		return fail("a delta with files reached the target: %s", describe(calls))
	}
	return pass("delta with files -> error invalid_packet; target untouched")
}

// --- section 11.10: no session sync ---

func checkSessionSyncDropped(s *session, ch string) verdict {
	never := s.scratch("never")
	types := []string{"session.sync_request", "session.sync_message", "session.sync_end", "history.snapshot", "history.replay", "ui.projection"}
	for _, typ := range types {
		for _, c := range []string{ch, never} {
			if _, err := s.send(c, typ, map[string]any{"message_id": s.newID("msg"), "text": "history"}); err != nil {
				return errored(err)
			}
		}
	}
	for _, c := range []string{ch, never} {
		if p, came := s.quiet(c, anyPacket); came {
			return fail("%s answered with %s %s", p.ReplyTo, p.Type, oneLine(p.Payload))
		}
	}
	if calls := s.target.of(ch); len(calls) > 0 {
		return fail("dropped packets reached the target: %s", describe(calls))
	}
	if _, err := s.finalAccepted(ch, s.newID("msg"), "Still working."); err != nil {
		return fail("after the dropped packets: %v", err)
	}
	return pass("%d sync/history/UI types, open channel and not: no reply, target untouched", len(types))
}

// --- section 11.11: pending user messages and reconnects ---

func checkUserMessagePending(s *session, ch string) verdict {
	silent, err := s.userMessageIn(ch, "Nobody acks me.", nil)
	if err != nil {
		return errored(err)
	}
	refused, err := s.userMessageIn(ch, "Refused for now.", nil)
	if err != nil {
		return errored(err)
	}
	if err := s.rejectUser(ch, refused, true); err != nil {
		return errored(err)
	}
	for _, c := range []struct {
		what string
		p    packet
	}{{"no ack", silent}, {"rejected retryable:true", refused}} {
		again, err := s.userMessageFor(ch, c.p.str("message_id"), c.p.PacketID)
		if err != nil {
			return fail("%s: not sent again: %v", c.what, err)
		}
		if again.PacketID == c.p.PacketID {
			return fail("%s: sent again with the same packet_id", c.what)
		}
		if err := s.ackUser(ch, again, "accepted"); err != nil {
			return errored(err)
		}
	}
	msgs := []string{silent.str("message_id"), refused.str("message_id")}
	if p, came := s.quiet(ch, func(p packet) bool { return p.Type == "chat.message" && slices.Contains(msgs, p.str("message_id")) }); came {
		return fail("user message %s sent again after accepted", p.str("message_id"))
	}
	return pass("no ack, rejected retryable:true -> sent again (new packet_id); accepted -> not again")
}

func checkUserMessageRejected(s *session, ch string) verdict {
	p, err := s.userMessageIn(ch, "Refused for good.", nil)
	if err != nil {
		return errored(err)
	}
	if err := s.rejectUser(ch, p, false); err != nil {
		return errored(err)
	}
	msg := p.str("message_id")
	if _, err := s.untilState(ch, func(st channelState) bool {
		return slices.Contains(st.Failures, failure{MessageID: msg, Code: "invalid_packet"})
	}); err != nil {
		return fail("rejected retryable:false: %s not in GET /v1/channels failures: %v", msg, err)
	}
	if again, came := s.quiet(ch, func(q packet) bool { return q.Type == "chat.message" && q.str("message_id") == msg }); came {
		return fail("rejected retryable:false, yet sent again (%s)", again.PacketID)
	}
	return pass("rejected retryable:false -> in GET /v1/channels failures (invalid_packet), not sent again")
}

func checkReconnect(s *session, ch string) verdict {
	done, err := s.userMessageIn(ch, "Completed before the reconnect.", nil)
	if err != nil {
		return errored(err)
	}
	if err := s.ackUser(ch, done, "accepted"); err != nil {
		return errored(err)
	}
	// The ack must be taken before the connection goes: a final on the channel is answered
	// after it in the same stream of work, and is a cheap way to know ximd read the ack.
	if _, err := s.finalAccepted(ch, s.newID("msg"), "Reply before the reconnect."); err != nil {
		return errored(err)
	}
	s.agent.disconnect()
	pendingMsg, err := s.userMessage(ch, s.newID("tm"), "Sent while xAgent was away.", nil)
	if err != nil {
		return errored(err)
	}
	if err := s.agent.connect(s.ctx); err != nil {
		return errored(err)
	}
	p, err := s.userMessageFor(ch, pendingMsg, "")
	if err != nil {
		return fail("pending message after the reconnect: %v", err)
	}
	if err := s.ackUser(ch, p, "accepted"); err != nil {
		return errored(err)
	}
	if again, came := s.quiet(ch, func(q packet) bool { return q.Type == "chat.message" && q.str("message_id") == done.str("message_id") }); came {
		return fail("completed user message %s (acked accepted) sent again after the reconnect (%s)", done.str("message_id"), again.PacketID)
	}
	return pass("reconnect: the pending user message came; the accepted one did not")
}

// --- section 11.12: activity ---

func checkActivityShown(s *session, ch string) verdict {
	steps := []struct {
		what string
		send func() error
		want string // the status of the activity call it must cause
	}{
		{"thinking", func() error { _, err := s.activity(ch, map[string]any{"status": "thinking"}); return err }, "thinking"},
		{"tool web_search", func() error {
			_, err := s.activity(ch, map[string]any{"status": "tool", "tool_name": "web_search"})
			return err
		}, "tool"},
		{"idle", func() error { _, err := s.activity(ch, map[string]any{"status": "idle"}); return err }, "idle"},
		{"thinking", func() error { _, err := s.activity(ch, map[string]any{"status": "thinking"}); return err }, "thinking"},
		{"the first displayed delta", func() error { _, err := s.delta(ch, s.newID("msg"), 1, "Shown now"); return err }, "idle"},
		{"thinking", func() error { _, err := s.activity(ch, map[string]any{"status": "thinking"}); return err }, "thinking"},
		{"a final", func() error { _, err := s.finalAccepted(ch, s.newID("msg"), "Done thinking."); return err }, "idle"},
	}
	seen := 0
	for _, st := range steps {
		if err := st.send(); err != nil {
			return errored(err)
		}
		calls, ok := s.calls(ch, func(c []call) bool { return len(activityCalls(c)) > seen })
		act := activityCalls(calls)
		if !ok {
			if st.want == "idle" {
				return fail("%s did not clear the shown status (no idle call within %s)", st.what, s.cfg.Wait)
			}
			return fail("%s: no activity call within %s", st.what, s.cfg.Wait)
		}
		c := act[seen]
		seen = len(act)
		if c.status() != st.want {
			return fail("%s: activity call status %q, want %q", st.what, c.status(), st.want)
		}
		if st.want == "tool" && c.Body["tool_name"] != "web_search" {
			return fail("tool activity: tool_name %v, want web_search", c.Body["tool_name"])
		}
	}
	return pass("thinking, tool(web_search) shown; cleared (idle) by idle, first delta, final")
}

func checkActivityDegraded(s *session, _ string) verdict {
	typing, err := s.channel("edit", "typing")
	if err != nil {
		return errored(err)
	}
	none, err := s.channel("edit", "none")
	if err != nil {
		return errored(err)
	}
	for _, ch := range []string{typing, none} {
		for _, a := range []map[string]any{{"status": "thinking"}, {"status": "tool", "tool_name": "web_search"}} {
			if _, err := s.activity(ch, a); err != nil {
				return errored(err)
			}
		}
	}
	calls, ok := s.calls(typing, func(c []call) bool { return len(activityCalls(c)) > 0 })
	if !ok {
		return fail("activity typing: thinking shown by no call within %s", s.cfg.Wait)
	}
	for _, ch := range []string{typing, none} {
		if _, err := s.finalAccepted(ch, s.newID("msg"), "Answered without status."); err != nil {
			return errored(err)
		}
	}
	lastIdle := func(c []call) bool {
		act := activityCalls(c)
		return len(act) > 0 && act[len(act)-1].status() == "idle"
	}
	calls, _ = s.calls(typing, lastIdle)
	for _, c := range activityCalls(calls) {
		if (c.status() != "typing" && c.status() != "idle") || c.Body["tool_name"] != nil {
			return fail("activity typing: a call with status %q tool_name %v, want typing or idle only", c.status(), c.Body["tool_name"])
		}
	}
	if !lastIdle(calls) {
		return fail("activity typing: the final did not clear typing (no idle call after it)")
	}
	if act := activityCalls(s.settled(none)); len(act) > 0 {
		return fail("activity none: %d activity calls, want none", len(act))
	}
	return pass("typing target: thinking/tool -> typing, final -> idle; none: no call; both accepted")
}

func checkActivityInvalid(s *session, ch string) verdict {
	cases := []struct {
		what    string
		payload map[string]any
	}{
		{"tool without tool_name", map[string]any{"status": "tool"}},
		{"thinking with tool_name", map[string]any{"status": "thinking", "tool_name": "web_search"}},
		{"unknown status", map[string]any{"status": "sleeping"}},
		{"tool arguments", map[string]any{"status": "tool", "tool_name": "web_search", "arguments": `{"q":"secret"}`}},
		{"tool_name over 256 bytes", map[string]any{"status": "tool", "tool_name": strings.Repeat("t", 257)}},
	}
	for _, c := range cases {
		e, err := s.refusal(ch, func() (string, error) { return s.activity(ch, c.payload) })
		if err != nil {
			return fail("%s: %v", c.what, err)
		}
		if e.Code != "invalid_packet" {
			return fail("%s: error %s, want invalid_packet", c.what, e.Code)
		}
	}
	if act := activityCalls(s.settled(ch)); len(act) > 0 {
		return fail("an invalid activity was shown: status %q", act[0].status())
	}
	return pass("%d invalid activities (P-ACT-1/2/3) -> error invalid_packet; nothing shown", len(cases))
}

// --- deltas ---

func checkDeltaGap(s *session, ch string) verdict {
	msg := s.newID("msg")
	if _, err := s.delta(ch, msg, 1, "alpha "); err != nil {
		return errored(err)
	}
	if _, ok := s.calls(ch, func(c []call) bool { return len(messageCalls(c)) > 0 }); !ok {
		return fail("delta 1 not displayed within %s", s.cfg.Wait)
	}
	e, err := s.refusal(ch, func() (string, error) { return s.delta(ch, msg, 3, "gamma ") })
	if err != nil {
		return fail("sequence 3 after 1: %v", err)
	}
	if e.Code != "delta_sequence_gap" {
		return fail("sequence 3 after 1: error %s, want delta_sequence_gap", e.Code)
	}
	if _, err := s.delta(ch, msg, 4, "delta "); err != nil {
		return errored(err)
	}
	final := "alpha beta gamma delta: in full."
	if _, err := s.finalAccepted(ch, msg, final); err != nil {
		return errored(err)
	}
	calls := messageCalls(s.target.of(ch))
	for _, c := range calls[:len(calls)-1] {
		if strings.Contains(c.text(), "gamma") || strings.Contains(c.text(), "delta") {
			return fail("text after the gap was displayed: %s %q", c.Method, c.text())
		}
	}
	if last := calls[len(calls)-1]; !last.final() || last.text() != final {
		return fail("after a gap the final was not delivered in full: %s final:%t %q", last.Method, last.final(), last.text())
	}
	return pass("1, 3 -> delta_sequence_gap; 3 and 4 never shown; final in full, accepted")
}

func checkDeltaConflict(s *session, ch string) verdict {
	msg := s.newID("msg")
	if _, err := s.delta(ch, msg, 1, "one "); err != nil {
		return errored(err)
	}
	e, err := s.refusal(ch, func() (string, error) { return s.delta(ch, msg, 1, "uno ") })
	if err != nil {
		return errored(err)
	}
	if e.Code != "delta_sequence_conflict" {
		return fail("sequence 1 twice, other text: error %s, want delta_sequence_conflict", e.Code)
	}
	final := "one, and only one."
	if _, err := s.finalAccepted(ch, msg, final); err != nil {
		return errored(err)
	}
	for _, c := range messageCalls(s.target.of(ch)) {
		if strings.Contains(c.text(), "uno") {
			return fail("the conflicting delta was displayed: %s %q", c.Method, c.text())
		}
	}
	return pass("sequence 1 again with other text -> delta_sequence_conflict, not shown; final accepted")
}

func checkDeltaRetransmit(s *session, ch string) verdict {
	msg := s.newID("msg")
	for _, d := range []struct {
		seq  int
		text string
	}{{1, "ab "}, {1, "ab "}, {2, "cd"}} {
		if _, err := s.delta(ch, msg, d.seq, d.text); err != nil {
			return errored(err)
		}
	}
	calls, ok := s.calls(ch, func(c []call) bool {
		return slices.ContainsFunc(messageCalls(c), func(c call) bool { return c.text() == "ab cd" })
	})
	for _, c := range messageCalls(calls) {
		if strings.Contains(c.text(), "ab ab") {
			return fail("a retransmitted delta was applied twice: %s %q", c.Method, c.text())
		}
	}
	if !ok {
		return fail("deltas ab, ab (again), cd: display never showed %q (%s)", "ab cd", describe(messageCalls(calls)))
	}
	if p, came := s.quiet(ch, func(p packet) bool { return p.Type == "error" }); came {
		return fail("an identical retransmitted delta got an error: %s", oneLine(p.Payload))
	}
	if _, err := s.finalAccepted(ch, msg, "ab cd"); err != nil {
		return errored(err)
	}
	return pass("sequence 1 sent twice (same text), 2 -> shown %q, no error", "ab cd")
}

func checkDeltaAfterFinal(s *session, ch string) verdict {
	msg := s.newID("msg")
	if _, err := s.finalAccepted(ch, msg, "Complete."); err != nil {
		return errored(err)
	}
	if _, err := s.delta(ch, msg, 1, "late"); err != nil {
		return errored(err)
	}
	if p, came := s.quiet(ch, anyPacket); came {
		return fail("a late delta was answered: %s %s", p.Type, oneLine(p.Payload))
	}
	if calls := messageCalls(s.target.of(ch)); len(calls) != 1 {
		return fail("a late delta touched the target: %s", describe(calls))
	}
	return pass("delta for a completed message -> no reply, target untouched")
}

// --- errors ---

func checkInvalidFinal(s *session, ch string) verdict {
	cases := []struct {
		what    string
		payload map[string]any
		names   string // what the message must name
	}{
		{"no text, no files", map[string]any{"text": ""}, ""},
		{"an unknown key", map[string]any{"text": "x", "mood": "happy"}, "mood"},
		{"file type sticker", map[string]any{"files": []map[string]any{{"type": "sticker", "file_ref": "file_" + randomHex(16)}}}, "type"},
	}
	for _, c := range cases {
		msg := s.newID("msg")
		c.payload["message_id"] = msg
		pkt, err := s.send(ch, "chat.message", c.payload)
		if err != nil {
			return errored(err)
		}
		_, a, err := s.ackOf(ch, pkt, msg)
		if err != nil {
			return errored(err)
		}
		if a.Status != "rejected" || a.Code != "invalid_packet" || a.Retryable == nil || *a.Retryable || !strings.Contains(a.Message, c.names) {
			return fail("final with %s: %s %q, want rejected invalid_packet retryable:false naming %q", c.what, a, a.Message, c.names)
		}
	}
	e, err := s.refusal(ch, func() (string, error) { return s.send(ch, "chat.message", map[string]any{"text": "no message_id"}) })
	if err != nil {
		return errored(err)
	}
	if e.Code != "invalid_packet" {
		return fail("final without message_id: error %s, want invalid_packet", e.Code)
	}
	if calls := s.target.of(ch); len(calls) > 0 {
		return fail("an invalid final reached the target: %s", describe(calls))
	}
	return pass("%d invalid finals -> rejected invalid_packet; no message_id -> error invalid_packet", len(cases))
}

func checkChannelNotOpen(s *session, _ string) verdict {
	ch := s.scratch("closed")
	sends := []struct {
		typ  string
		send func() (string, error)
	}{
		{"chat.message", func() (string, error) { return s.final(ch, s.newID("msg"), "Nobody is there.") }},
		{"chat.message.delta", func() (string, error) { return s.delta(ch, s.newID("msg"), 1, "Nobody") }},
	}
	for _, c := range sends {
		e, err := s.refusal(ch, c.send)
		if err != nil {
			return errored(err)
		}
		if e.Code != "channel_not_open" {
			return fail("%s to a channel not open: error %s, want channel_not_open", c.typ, e.Code)
		}
	}
	if p, came := s.quiet(ch, anyPacket); came {
		return fail("besides the error: %s %s", p.Type, oneLine(p.Payload))
	}
	return pass("final and delta to a channel not open -> error channel_not_open (reply_to), no ack")
}

func checkAcceptedAfterTarget(s *session, ch string) verdict {
	const delay = 400 * time.Millisecond
	s.target.answerWith(ch, func(call) answer { return answer{Status: http.StatusOK, Delay: delay} })
	msg := s.newID("msg")
	p, err := s.finalAccepted(ch, msg, "Wait for the target.")
	if err != nil {
		return errored(err)
	}
	calls := messageCalls(s.target.of(ch))
	if len(calls) == 0 {
		return fail("accepted %s before the target answered (no call had reached it)", msg)
	}
	answered := calls[len(calls)-1].Answered
	if answered.IsZero() || p.at.Before(answered) {
		return fail("accepted %s before the target answered (it answers after %s)", msg, delay)
	}
	return pass("target answering after %s: accepted %s after its answer", delay, p.at.Sub(answered).Round(time.Millisecond))
}

func checkTargetFailures(s *session, _ string) verdict {
	cases := []struct {
		status    int
		header    http.Header
		code      string
		retryable bool
	}{
		// Retry-After beyond the longest retry budget (XIM_TARGET_RETRY_BUDGET is at most 1h):
		// the rejection comes at once instead of after the budget.
		{http.StatusServiceUnavailable, http.Header{"Retry-After": {"3601"}}, "target_unavailable", true},
		{http.StatusUnauthorized, nil, "target_auth_failed", false},
		{http.StatusBadRequest, nil, "target_delivery_failed", false},
	}
	var seen []string
	for _, c := range cases {
		ch, err := s.channel("edit", "none")
		if err != nil {
			return errored(err)
		}
		s.target.answerWith(ch, func(call) answer { return answer{Status: c.status, Header: c.header} })
		msg := s.newID("msg")
		pkt, err := s.final(ch, msg, "The target refuses this.")
		if err != nil {
			return errored(err)
		}
		_, a, err := s.ackOf(ch, pkt, msg)
		if err != nil {
			return errored(err)
		}
		if a.Status != "rejected" || a.Code != c.code || a.Retryable == nil || *a.Retryable != c.retryable {
			return fail("target answering %d: %s, want rejected %s retryable:%t", c.status, a, c.code, c.retryable)
		}
		seen = append(seen, fmt.Sprintf("%d %s", c.status, c.code))
	}
	return pass("target %s: rejected, retryable as the table says", strings.Join(seen, ", "))
}

func checkToolInvoke(s *session, ch string) verdict {
	invoke := func(inv, tool string, args map[string]any) (map[string]any, error) {
		pkt, err := s.send(ch, "tool.invoke", map[string]any{"invocation_id": inv, "tool": tool, "arguments": args})
		if err != nil {
			return nil, err
		}
		p, ok := s.agent.box(ch).within(s.ctx, s.cfg.Wait, func(p packet) bool { return p.ReplyTo == pkt })
		if !ok {
			return nil, fmt.Errorf("%s: no tool.result within %s", tool, s.cfg.Wait)
		}
		if p.Type != "tool.result" {
			return nil, fmt.Errorf("%s: answered %s %s", tool, p.Type, oneLine(p.Payload))
		}
		return p.fields(), nil
	}
	inv := s.newID("inv")
	args := map[string]any{"text": "Sent by a tool."}
	first, err := invoke(inv, "im.send_message", args)
	if err != nil {
		return errored(err)
	}
	result, _ := first["result"].(map[string]any)
	if first["ok"] != true || first["invocation_id"] != inv || result["target_message_id"] == nil {
		return fail("im.send_message: %v, want ok:true with a target_message_id", first)
	}
	posts := filter(s.target.of(ch), call.isPost)
	if len(posts) != 1 || posts[0].Body["idempotency_key"] != ch+":tool:"+inv {
		return fail("im.send_message: %s, want one POST with idempotency_key %s:tool:%s", describe(posts), ch, inv)
	}
	again, err := invoke(inv, "im.send_message", args)
	if err != nil {
		return errored(err)
	}
	if r2, _ := again["result"].(map[string]any); again["ok"] != true || r2["target_message_id"] != result["target_message_id"] {
		return fail("the same invocation again: %v, want the first result", again)
	}
	for _, c := range []struct {
		tool string
		args map[string]any
		code string
	}{{"im.delete_everything", map[string]any{}, "tool_not_supported"}, {"im.send_message", map[string]any{}, "invalid_arguments"}} {
		r, err := invoke(s.newID("inv"), c.tool, c.args)
		if err != nil {
			return errored(err)
		}
		e, _ := r["error"].(map[string]any)
		if r["ok"] != false || e["code"] != c.code {
			return fail("%s %v: %v, want ok:false %s", c.tool, c.args, r, c.code)
		}
	}
	if posts := filter(s.settled(ch), call.isPost); len(posts) != 1 {
		return fail("tool invocations: %s, want the first POST only", describe(posts))
	}
	return pass("im.send_message ok, same invocation: same result, no call; unknown tool, bad args coded")
}

func checkChannelDelete(s *session, ch string) verdict {
	if _, err := s.finalAccepted(ch, s.newID("msg"), "Before the delete."); err != nil {
		return errored(err)
	}
	status, body, err := s.do(http.MethodDelete, "/v1/channels/"+ch, nil, "")
	if err != nil {
		return errored(err)
	}
	if status != http.StatusNoContent {
		return fail("DELETE /v1/channels/%s: %d %s, want 204", ch, status, oneLine(body))
	}
	if status, body, err = s.do(http.MethodGet, "/v1/channels/"+ch, nil, ""); err != nil {
		return errored(err)
	}
	if status != http.StatusNotFound || !strings.Contains(string(body), "channel_not_open") {
		return fail("GET a deleted channel: %d %s, want 404 channel_not_open", status, oneLine(body))
	}
	e, err := s.refusal(ch, func() (string, error) { return s.final(ch, s.newID("msg"), "After the delete.") })
	if err != nil {
		return errored(err)
	}
	if e.Code != "channel_not_open" {
		return fail("final to a deleted channel: error %s, want channel_not_open", e.Code)
	}
	return pass("DELETE -> 204; GET -> 404 channel_not_open; a final -> error channel_not_open")
}

func checkTargetSignatures(s *session, _ string) verdict {
	if len(s.target.everything()) == 0 { // run alone (-only): make a call to look at
		ch, err := s.channel("edit", "status")
		if err != nil {
			return errored(err)
		}
		if _, err := s.activity(ch, map[string]any{"status": "thinking"}); err != nil {
			return errored(err)
		}
		if _, err := s.finalAccepted(ch, s.newID("msg"), "Signed."); err != nil {
			return errored(err)
		}
	}
	all := s.target.everything()
	for _, c := range all {
		if !c.Signed {
			return fail("%s %s (chat %s): %s did not verify", c.Method, c.Path, c.chat(), c.Unsigned)
		}
	}
	return pass("all %d target calls of the run: X-Xim-Signature and -V2 (timestamp) verify", len(all))
}

func checkRetransmitInFlight(s *session, ch string) verdict {
	const delay = 500 * time.Millisecond
	s.target.answerWith(ch, func(call) answer { return answer{Status: http.StatusOK, Delay: delay} })
	msg, text := s.newID("msg"), "Sent again while the first is on its way."
	first, err := s.final(ch, msg, text)
	if err != nil {
		return errored(err)
	}
	if _, ok := s.calls(ch, func(c []call) bool { return len(c) > 0 }); !ok {
		return fail("the final reached no target call within %s", s.cfg.Wait)
	}
	again, err := s.final(ch, msg, text)
	if err != nil {
		return errored(err)
	}
	got := map[string]string{}
	for _, pkt := range []string{first, again} {
		p, a, err := s.ackOf(ch, pkt, msg)
		if err != nil {
			return errored(err)
		}
		got[p.ReplyTo] = a.Status
	}
	if got[first] != "accepted" || got[again] != "duplicate" {
		return fail("first and in-flight retransmission answered %q and %q, want accepted and duplicate", got[first], got[again])
	}
	if calls := messageCalls(s.settled(ch)); len(calls) != 1 {
		return fail("a retransmission during the target call: %s, want one POST", describe(calls))
	}
	return pass("retransmitted while the target took %s: accepted, then duplicate; one POST", delay)
}

func checkToolAfterFinal(s *session, ch string) verdict {
	s.target.answerWith(ch, func(c call) answer {
		if c.Body["reply_to_target_message_id"] == nil && strings.Contains(c.text(), "final") {
			return answer{Status: http.StatusOK, Delay: 300 * time.Millisecond} // the final takes its time
		}
		return answer{Status: http.StatusOK}
	})
	msg := s.newID("msg")
	finalPkt, err := s.final(ch, msg, "The final comes first.")
	if err != nil {
		return errored(err)
	}
	toolPkt, err := s.send(ch, "tool.invoke", map[string]any{"invocation_id": s.newID("inv"), "tool": "im.send_message", "arguments": map[string]any{"text": "The tool comes second."}})
	if err != nil {
		return errored(err)
	}
	if _, a, err := s.ackOf(ch, finalPkt, msg); err != nil || a.Status != "accepted" {
		return fail("final: %s %v, want accepted", a, err)
	}
	if _, ok := s.agent.box(ch).within(s.ctx, s.cfg.Wait, func(p packet) bool { return p.ReplyTo == toolPkt }); !ok {
		return fail("no tool.result within %s", s.cfg.Wait)
	}
	posts := filter(s.target.of(ch), call.isPost)
	if len(posts) != 2 || !strings.Contains(posts[0].text(), "final") {
		return fail("target messages in the order %s, want the final, then the tool's", texts(posts))
	}
	return pass("final (target answering after 300ms), then tool.invoke: the target got them in that order")
}

// texts lists the calls' texts, quoted.
func texts(calls []call) string {
	out := make([]string, len(calls))
	for i, c := range calls {
		out[i] = fmt.Sprintf("%q", c.text())
	}
	return "[" + strings.Join(out, ", ") + "]"
}

func checkMalformedFrame(s *session, ch string) verdict {
	if err := s.agent.sendRaw(s.ctx, []byte(`{"this is": not json`)); err != nil {
		return errored(err)
	}
	// An error about a frame without a readable packet_id names no channel.
	p, ok := s.agent.box("").within(s.ctx, s.cfg.Wait, func(p packet) bool { return p.Type == "error" })
	if !ok {
		return fail("a frame that is not JSON: no error packet within %s", s.cfg.Wait)
	}
	if e := p.ack(); e.Code != "invalid_packet" {
		return fail("a frame that is not JSON: error %s, want invalid_packet", e.Code)
	}
	pkt := s.newID("pkt")
	if err := s.agent.sendRaw(s.ctx, []byte(`{"schema":"xagent.connector.packet/v1","packet_id":"`+pkt+`","connector_channel_id":"`+ch+`","time":1}`)); err != nil {
		return errored(err)
	}
	e, err := s.errorOf(ch, pkt)
	if err != nil {
		return fail("a packet without type: %v", err)
	}
	if e.Code != "invalid_packet" {
		return fail("a packet without type: error %s, want invalid_packet", e.Code)
	}
	if _, err := s.finalAccepted(ch, s.newID("msg"), "The connection goes on."); err != nil {
		return fail("after the malformed frames: %v", err)
	}
	return pass("not JSON, no type -> error invalid_packet (reply_to when readable); a final then accepted")
}

func checkUnsupportedSchema(s *session, ch string) verdict {
	pkt, msg := s.newID("pkt"), s.newID("msg")
	b, _ := json.Marshal(map[string]any{"schema": "xagent.connector.packet/v2", "packet_id": pkt, "connector_channel_id": ch,
		"type": "chat.message", "time": time.Now().UnixMilli(), "payload": map[string]any{"message_id": msg, "text": "From the future."}})
	if err := s.agent.sendRaw(s.ctx, b); err != nil {
		return errored(err)
	}
	e, err := s.errorOf(ch, pkt)
	if err != nil {
		return errored(err)
	}
	if e.Code != "unsupported_schema" {
		return fail("schema xagent.connector.packet/v2: error %s, want unsupported_schema", e.Code)
	}
	if calls := s.settled(ch); len(calls) > 0 {
		return fail("a packet of another schema reached the target: %s", describe(calls))
	}
	return pass("schema xagent.connector.packet/v2 -> error unsupported_schema; target untouched")
}
