package main

import (
	"bytes"
	"context"
	"encoding/json"
	"net/http"
	"strings"
	"testing"

	"github.com/ximd/ximd/handlers/adapter/webhook"
)

// ximctl pairings lists a bot's pending codes and approves one: the person is in the bot's
// allow_users afterwards; an unknown code is an error naming pairing_not_found.
func TestPairings_ListsAndApproves(t *testing.T) {
	n := startTestNode(t, nil)
	tg := startTarget(t)
	cfg := tg.Config("edit", "typing")
	delete(cfg, "chat_id")
	if status, b, _ := n.Do(http.MethodPut, "/v1/bots/tg1", map[string]any{
		"connection": map[string]any{"target_type": "im", "profiles": []string{"xagent.im.v2"}},
		"target":     map[string]any{"adapter": "webhook", "config": cfg},
	}); status != http.StatusOK {
		t.Fatalf("PUT bot: %d %s", status, b)
	}
	raw, _ := json.Marshal(map[string]any{"conversation": map[string]any{"id": "dm-ann", "kind": "direct"},
		"sender": map[string]any{"id": "ann", "display_name": "Ann"}, "target_message_id": "m1", "text": "hi"})
	req, _ := http.NewRequest(http.MethodPost, "http://"+n.Addr+"/v1/targets/webhook/bots/tg1/messages", bytes.NewReader(raw))
	req.Header.Set(webhook.SignatureHeader, webhook.Sign([]byte(tg.Secret), raw))
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()

	flags := []string{"-http", "http://" + n.Addr, "-token", n.Token, "-bot", "tg1"}
	var out, errOut bytes.Buffer
	if code := run(context.Background(), append([]string{"pairings"}, flags...), &out, &errOut); code != 0 {
		t.Fatalf("list: %d %s", code, errOut.String())
	}
	lines := strings.Split(strings.TrimSpace(out.String()), "\n")
	if len(lines) != 2 || !strings.HasPrefix(lines[0], "CODE") || !strings.Contains(lines[1], "ann") || !strings.Contains(lines[1], "Ann") {
		t.Fatalf("list:\n%s", out.String())
	}
	code := strings.Fields(lines[1])[0]
	out.Reset()
	if c := run(context.Background(), append([]string{"pairings", "-approve", "NOPE2345"}, flags...), &out, &errOut); c != 1 || !strings.Contains(errOut.String(), "pairing_not_found") {
		t.Fatalf("unknown code: %d %s", c, errOut.String())
	}
	if c := run(context.Background(), append([]string{"pairings", "-approve", code}, flags...), &out, &errOut); c != 0 || !strings.Contains(out.String(), "approved "+code) {
		t.Fatalf("approve: %d %s %s", c, out.String(), errOut.String())
	}
	_, b, _ := n.Do(http.MethodGet, "/v1/bots/tg1", nil)
	if !strings.Contains(string(b), `"allow_users":["ann"]`) {
		t.Fatalf("bot after approval: %s", b)
	}
}
