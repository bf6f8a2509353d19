package test

import (
	"bytes"
	"net/http"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/ximd/ximd/handlers/adapter/feishu"
	"github.com/ximd/ximd/handlers/adapter/feishu/feishutest"
	"github.com/ximd/ximd/internal/testkit"
	"github.com/ximd/ximd/pipeline/node"
	"github.com/ximd/ximd/profile"
)

// openFeishu binds channel to a Feishu chat through the real API.
func openFeishu(n *testkit.Node, channel string, cfg map[string]any) (int, []byte, error) {
	return n.Do(http.MethodPut, "/v1/channels/"+channel, map[string]any{
		"connection": map[string]any{"target_type": "im", "profiles": []string{"xagent.im.v2"}},
		"target":     map[string]any{"adapter": "feishu", "config": cfg},
	})
}

func feishuConfig(fake *feishutest.Server, app feishutest.App, chat string, extra map[string]any) map[string]any {
	cfg := map[string]any{"app_id": app.ID, "app_secret": app.Secret, "chat_id": chat, "base_url": fake.URL()}
	for k, v := range extra {
		cfg[k] = v
	}
	return cfg
}

// The Feishu adapter end to end (edge-api §7.2.3) through /v1/ws against the open-platform
// fake: a streamed answer is one card, typed out and closed with the final text; a frequency-limit
// storm ends accepted with no call before the reset time; a person's messages come in by signed,
// encrypted events, once each however often Feishu delivers them, an image with its bytes; a
// forged or stale signature is 401; a config that cannot work is refused at PUT.
func TestFeishu_EndToEnd(t *testing.T) {
	addr := freeAddr(t)
	e := newEnv(t, envOptions{mutate: func(c *node.Config) {
		c.HTTPAddr, c.PublicURL = addr, "http://"+addr
		c.TargetRetryBudget = time.Minute
	}})
	fake := feishutest.New()
	t.Cleanup(fake.Close)
	app := fake.AddApp("cli_e2e", "e2e-app-secret", "ximd bot")
	alice := fake.AddUser("Alice")
	chat := fake.AddChat("p2p", "alice", alice)
	const token, key = "e2e-verification-token", "e2e-encrypt-key"
	cfg := feishuConfig(fake, app, chat, map[string]any{"verification_token": token, "encrypt_key": key})
	if status, body, err := openFeishu(e.node, "fs", cfg); err != nil || status != http.StatusOK {
		t.Fatalf("PUT feishu channel: %d %s %v", status, body, err)
	} else if bytes.Contains(body, []byte("e2e-app-secret")) || bytes.Contains(body, []byte(key)) || bytes.Contains(body, []byte(token)) {
		t.Fatalf("the channel's representation shows a secret: %s", body)
	}
	for name, bad := range map[string]map[string]any{
		"wrong secret": feishuConfig(fake, feishutest.App{ID: app.ID, Secret: "wrong"}, chat, nil),
		"unknown chat": feishuConfig(fake, app, "oc_nope", nil),
	} {
		if status, body, _ := openFeishu(e.node, "fs-bad", bad); status != http.StatusUnprocessableEntity || !bytes.Contains(body, []byte(profile.CodeTargetConfigInvalid)) {
			t.Fatalf("PUT with %s: %d %s, want 422 target_config_invalid", name, status, body)
		}
	}

	// A streamed answer: one card, its text growing with increasing sequences, streaming closed
	// with the final text.
	words := strings.Fields("Hello Alice, this answer streams into one card and ends with its final text.")
	for i, w := range words {
		e.sendTo("fs", profile.TypeDelta, delta("m_card", i+1, w+" "))
		time.Sleep(30 * time.Millisecond)
	}
	final := strings.Join(words, " ")
	if a := e.ackOf(e.sendTo("fs", profile.TypeMessage, msg("m_card", final))); a.Status != profile.AckAccepted {
		t.Fatalf("final: %+v", a)
	}
	shown := fake.Messages(chat)
	if len(shown) != 1 || shown[0].Card == nil || shown[0].Text != final {
		t.Fatalf("the chat shows %+v, want one card with the final text", shown)
	}
	card := shown[0].Card
	if card.Streaming || len(card.Updates) < 2 {
		t.Fatalf("card %+v: want several updates, streaming closed", card)
	}
	for i := 1; i < len(card.Updates); i++ {
		if card.Updates[i].Sequence <= card.Updates[i-1].Sequence {
			t.Fatalf("card sequences %d then %d", card.Updates[i-1].Sequence, card.Updates[i].Sequence)
		}
	}

	for _, c := range fake.Calls() {
		if c.Status == http.StatusTooManyRequests || c.Code == 99991400 {
			t.Fatalf("a call past the card's 10 updates a second: %+v", c)
		}
	}

	// A frequency-limit storm: no call before the reset time, then accepted.
	fake.FailNext(feishutest.RouteMessages, 3, http.StatusTooManyRequests, 99991400, "request trigger frequency limit", 1)
	start := time.Now()
	if a := e.ackOf(e.sendTo("fs", profile.TypeMessage, msg("m_storm", "after the storm"))); a.Status != profile.AckAccepted {
		t.Fatalf("final through a frequency-limit storm: %+v", a)
	}
	if took := time.Since(start); took < 3*time.Second || fake.EarlyCalls() != 0 {
		t.Fatalf("accepted after %s with %d calls before the reset time", took, fake.EarlyCalls())
	}
	if shown := fake.Messages(chat); len(shown) != 2 || shown[1].Text != "after the storm" {
		t.Fatalf("after the storm the chat shows %d messages", len(shown))
	}

	// IM -> xAgent: a message delivered three times reaches xAgent once; an image with its bytes.
	fake.SetEventURL(app.ID, "http://"+addr+"/v1/targets/feishu/fs/events", token, key)
	if got, err := fake.Challenge(app.ID); err != nil || got == "" {
		t.Fatalf("URL verification: %q %v", got, err)
	}
	fmID, eventID := fake.Post(chat, alice, "hi bot")
	uenv, um := userMessage(t, e.agent, wait)
	if uenv.ChannelID != "fs" || um.Text != "hi bot" || um.MessageID != feishu.MessageIDOf(fmID) {
		t.Fatalf("user message %s %+v", uenv.ChannelID, um)
	}
	ackUser(t, e.agent, uenv, map[string]any{"message_id": um.MessageID, "status": "accepted"})
	before := fake.EventDeliveries()
	fake.Redeliver(eventID)
	fake.Redeliver(eventID)
	poll(t, "both redeliveries answered", func() bool { return fake.EventDeliveries() >= before+2 })
	photo := bytes.Repeat([]byte("png!"), 500)
	fake.PostFile(chat, alice, "image", "photo.png", photo)
	uenv, um = userMessage(t, e.agent, wait)
	if len(um.Files) != 1 || um.Files[0].Type != "image" {
		t.Fatalf("after the redeliveries the agent got %+v, want only the image message", um)
	}
	if status, got, _ := e.node.Do(http.MethodGet, um.Files[0].DownloadURL, nil); status != http.StatusOK || !bytes.Equal(got, photo) {
		t.Fatalf("the image in ximd's file store: %d, %d bytes", status, len(got))
	}
	ackUser(t, e.agent, uenv, map[string]any{"message_id": um.MessageID, "status": "accepted"})

	// Forged and stale signatures: 401, nothing submitted.
	body := []byte(`{"encrypt":"AAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAA="}`)
	now := strconv.FormatInt(time.Now().Unix(), 10)
	stale := strconv.FormatInt(time.Now().Add(-10*time.Minute).Unix(), 10)
	for name, h := range map[string][2]string{
		"forged": {now, strings.Repeat("0", 64)},
		"stale":  {stale, feishutest.Signature(stale, "n", key, body)},
		"none":   {now, ""},
	} {
		req, _ := http.NewRequest(http.MethodPost, "http://"+addr+"/v1/targets/feishu/fs/events", bytes.NewReader(body))
		req.Header.Set("X-Lark-Request-Timestamp", h[0])
		req.Header.Set("X-Lark-Request-Nonce", "n")
		if h[1] != "" {
			req.Header.Set("X-Lark-Signature", h[1])
		}
		resp, err := http.DefaultClient.Do(req)
		if err != nil || resp.StatusCode != http.StatusUnauthorized {
			t.Fatalf("%s signature: %v %v, want 401", name, resp, err)
		}
		resp.Body.Close()
	}
	e.quiet(time.Second)
}

// Edge-api §7.2.3 under kill -9: a final whose send Feishu applied but whose answer never came
// (ximd killed meanwhile) is sent again after the restart with the same uuid, which Feishu keeps
// for an hour: the chat shows exactly one message and the final is accepted.
func TestFeishu_KillNineBetweenIntentAndOutcome(t *testing.T) {
	skipFaults(t)
	fake := feishutest.New()
	t.Cleanup(fake.Close)
	app := fake.AddApp("cli_kill", "kill-app-secret", "ximd bot")
	chat := fake.AddChat("p2p", "bob", fake.AddUser("Bob"))
	killBetweenIntentAndOutcome(t, "feishu", inDoubtPlatform{
		bind: func(n *testkit.Node) (int, []byte, error) {
			return openFeishu(n, "kd", feishuConfig(fake, app, chat, map[string]any{"streaming": "none"}))
		},
		hang: func(on bool) { fake.Hang(feishutest.RouteMessages, held(on)) },
		shown: func() (texts []string) {
			for _, m := range fake.Messages(chat) {
				texts = append(texts, m.Text)
			}
			return texts
		},
	})
}
