package conformance

import (
	"bytes"
	"encoding/json"
	"fmt"
	"net/http"
	"strings"
	"time"

	"github.com/ximd/ximd/handlers/adapter/webhook"
)

// checkBotOpensChannel (edge-api §4.1, §7.1): a webhook bot under pairing answers a stranger
// with a code (a system message at the target) and passes nothing to xAgent; once the code is
// approved, the stranger's next message opens channel <bot>-<conversation>, and xAgent gets its
// channel.opened before the chat.message; deleting the bot closes that channel.
func checkBotOpensChannel(s *session, _ string) verdict {
	bot := "conformance-" + s.run + "-bot"
	conv := "dm-" + s.run
	cfg := s.webhookConfig("", "none", "none")
	delete(cfg, "chat_id")
	status, body, err := s.do(http.MethodPut, "/v1/bots/"+bot, map[string]any{
		"connection": map[string]any{"target_type": "im", "profiles": []string{"xagent.im.v2"}},
		"target":     map[string]any{"adapter": "webhook", "config": cfg},
	}, "")
	if err != nil {
		return errored(err)
	}
	if status == http.StatusNotFound {
		return skip("this ximd has no bots (PUT /v1/bots: 404)")
	}
	if status != http.StatusOK {
		return fail("PUT /v1/bots/%s: %d %s", bot, status, oneLine(body))
	}
	defer func() { _, _, _ = s.do(http.MethodDelete, "/v1/bots/"+bot, nil, "") }()
	refused, err := s.postBot(bot, conv, "p1", "let me in")
	if err != nil {
		return errored(err)
	}
	if refused != "pairing_pending" {
		return fail("a stranger's first message: refused %q, want pairing_pending", refused)
	}
	calls, ok := s.target.await(s.ctx, conv, s.cfg.Wait, func(cs []call) bool { return len(cs) > 0 })
	if !ok || len(calls) != 1 || calls[0].Body["system"] != true || !calls[0].final() {
		return fail("the pairing answer at the target: %s, want one system final", describe(calls))
	}
	_, body, err = s.do(http.MethodGet, "/v1/bots/"+bot+"/pairings", nil, "")
	var list struct{ Pairings []struct{ Code string } }
	if err != nil || json.Unmarshal(body, &list) != nil || len(list.Pairings) != 1 || !strings.Contains(calls[0].text(), list.Pairings[0].Code) {
		return fail("pending pairings %s (err %v), the answer %q", oneLine(body), err, calls[0].text())
	}
	ch := bot + "-" + conv
	if p, seen := s.quiet(ch, func(packet) bool { return true }); seen {
		return fail("xAgent got %s on %s before the code was approved", p.Type, ch)
	}
	if status, body, err := s.do(http.MethodPost, "/v1/bots/"+bot+"/pairings/"+list.Pairings[0].Code, nil, ""); err != nil || status != http.StatusNoContent {
		return fail("approving the code: %d %s %v", status, oneLine(body), err)
	}
	if refused, err := s.postBot(bot, conv, "p2", "thank you"); err != nil || refused != "" {
		return fail("after approval: refused %q (%v)", refused, err)
	}
	opened, ok := s.agent.box(ch).within(s.ctx, s.cfg.Wait, func(p packet) bool { return p.Type == "channel.opened" || p.Type == "chat.message" })
	if !ok || opened.Type != "channel.opened" || opened.str("bot_id") != bot {
		return fail("the first packet on %s: %s (%v), want channel.opened of %s", ch, opened.Type, ok, bot)
	}
	msg, ok := s.agent.box(ch).within(s.ctx, s.cfg.Wait, func(p packet) bool { return p.Type == "chat.message" })
	if !ok || msg.str("text") != "thank you" {
		return fail("no chat.message on %s after its channel.opened", ch)
	}
	if err := s.ackUser(ch, msg, "accepted"); err != nil {
		return errored(err)
	}
	if status, _, err := s.do(http.MethodDelete, "/v1/bots/"+bot, nil, ""); err != nil || status != http.StatusNoContent {
		return fail("DELETE /v1/bots/%s: %d %v", bot, status, err)
	}
	if status, _, _ := s.do(http.MethodGet, "/v1/channels/"+ch, nil, ""); status != http.StatusNotFound {
		return fail("the deleted bot's channel %s: %d, want 404", ch, status)
	}
	return pass("stranger: one code at the target, nothing to xAgent; approved: channel.opened then chat.message on %s; bot deleted with it", ch)
}

// postBot posts a direct message of conv to bot's route as the target does, and returns the
// refusal's reason ("" when passed on).
func (s *session) postBot(bot, conv, targetMessageID, text string) (string, error) {
	raw, _ := json.Marshal(map[string]any{"conversation": map[string]any{"id": conv, "kind": "direct"},
		"sender": map[string]any{"id": "person-" + conv}, "target_message_id": targetMessageID, "text": text})
	req, err := http.NewRequestWithContext(s.ctx, http.MethodPost, "http://"+s.cfg.HTTPAddr+"/v1/targets/webhook/bots/"+bot+"/messages", bytes.NewReader(raw))
	if err != nil {
		return "", err
	}
	req.Header.Set("Content-Type", "application/json")
	req.Header.Set(webhook.SignatureHeader, webhook.Sign([]byte(s.secret), raw))
	ts, sig := webhook.SignV2([]byte(s.secret), raw, time.Now())
	req.Header.Set(webhook.TimestampHeader, ts)
	req.Header.Set(webhook.SignatureV2Header, sig)
	status, body, err := s.roundTrip(req)
	if err != nil {
		return "", err
	}
	var answer struct {
		Refused string `json:"refused"`
		Channel string `json:"connector_channel_id"`
	}
	if status != http.StatusAccepted || json.Unmarshal(body, &answer) != nil {
		return "", fmt.Errorf("POST bot %s: %d %s", bot, status, oneLine(body))
	}
	return answer.Refused, nil
}
