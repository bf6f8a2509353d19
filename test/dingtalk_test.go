package test

import (
	"bytes"
	"net/http"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/ximd/ximd/handlers/adapter/dingtalk"
	"github.com/ximd/ximd/handlers/adapter/dingtalk/dingtalktest"
	"github.com/ximd/ximd/internal/testkit"
	"github.com/ximd/ximd/pipeline/node"
	"github.com/ximd/ximd/profile"
)

// openDingTalk binds channel to a DingTalk conversation through the real API.
func openDingTalk(n *testkit.Node, channel string, cfg map[string]any) (int, []byte, error) {
	return n.Do(http.MethodPut, "/v1/channels/"+channel, map[string]any{
		"connection": map[string]any{"target_type": "im", "profiles": []string{"xagent.im.v2"}},
		"target":     map[string]any{"adapter": "dingtalk", "config": cfg},
	})
}

func dingTalkConfig(fake *dingtalktest.Server, app dingtalktest.App, extra map[string]any) map[string]any {
	cfg := map[string]any{"client_id": app.ClientID, "client_secret": app.ClientSecret, "api_url": fake.URL(), "oapi_url": fake.URL()}
	for k, v := range extra {
		cfg[k] = v
	}
	return cfg
}

// streamingCalls are the times of the card/streaming calls DingTalk answered, and of its
// refusals (403).
func streamingCalls(fake *dingtalktest.Server) (ok, refused []time.Time) {
	for _, c := range fake.Calls() {
		if c.Path != "/v1.0/card/streaming" {
			continue
		}
		if c.Status == http.StatusForbidden {
			refused = append(refused, c.At)
		} else {
			ok = append(ok, c.At)
		}
	}
	return ok, refused
}

// The DingTalk adapter end to end (edge-api §7.2.6) through /v1/ws against the DingTalk fake,
// messages in by Stream mode: a streamed answer is one AI card that ends FINISHED with the final
// text, its updates within the app's budget; a storm of DingTalk's QPS refusals is waited out
// (no update within a second of a refusal) and the final accepted; a file goes out and one
// comes in; a group message mentioning the robot comes in once, a msgId pushed again is one
// message; a wrong secret is 422.
func TestDingTalk_EndToEnd(t *testing.T) {
	e := newEnv(t, envOptions{mutate: func(c *node.Config) { c.TargetRetryBudget = time.Minute }})
	fake := dingtalktest.New()
	t.Cleanup(fake.Close)
	app, alice, cid := fake.AddApp(), fake.AddUser("Alice"), fake.AddGroup()
	const budget = 4 // card updates a second
	cfg := dingTalkConfig(fake, app, map[string]any{"user_id": alice.StaffID, "card_updates_per_second": budget, "first_preview_words": 1})
	if status, body, err := openDingTalk(e.node, "dt", cfg); err != nil || status != http.StatusOK {
		t.Fatalf("PUT dingtalk channel: %d %s %v", status, body, err)
	} else if bytes.Contains(body, []byte(app.ClientSecret)) {
		t.Fatalf("the channel's representation shows the secret: %s", body)
	}
	if status, body, _ := openDingTalk(e.node, "dtg", dingTalkConfig(fake, app, map[string]any{"conversation_id": cid})); status != http.StatusOK {
		t.Fatalf("PUT dingtalk group channel: %d %s", status, body)
	}
	bad := dingTalkConfig(fake, dingtalktest.App{ClientID: app.ClientID, ClientSecret: "wrong-secret"}, map[string]any{"user_id": alice.StaffID})
	if status, body, _ := openDingTalk(e.node, "dt-bad", bad); status != http.StatusUnprocessableEntity || !bytes.Contains(body, []byte("target_config_invalid")) {
		t.Fatalf("PUT with a wrong secret: %d %s, want 422 target_config_invalid", status, body)
	}

	// A streamed answer: one card, PROCESSING -> INPUTING -> FINISHED, updates within the budget.
	words := strings.Fields("Sure Alice, this answer streams into one AI card and finishes with its final text.")
	for i, w := range words {
		e.sendTo("dt", profile.TypeDelta, delta("m_stream", i+1, w+" "))
		time.Sleep(40 * time.Millisecond)
	}
	final := strings.Join(words, " ")
	if a := e.ackOf(e.sendTo("dt", profile.TypeMessage, msg("m_stream", final))); a.Status != profile.AckAccepted {
		t.Fatalf("final: %+v", a)
	}
	cards := fake.Cards(dingtalktest.DirectSpace(alice.StaffID))
	if len(cards) != 1 || cards[0].OutTrackID != dingtalk.OutTrackID("dt:m_stream", 0) || cards[0].Text() != final ||
		!slices.Equal(cards[0].Statuses, []string{"1", "2", "3"}) || !cards[0].Finalized || cards[0].Streams < 2 {
		t.Fatalf("cards %+v, want one streamed card FINISHED with the final text", cards)
	}
	ok, _ := streamingCalls(fake)
	for i := 1; i < len(ok); i++ {
		if gap := ok[i].Sub(ok[i-1]); gap < time.Second/budget-50*time.Millisecond {
			t.Fatalf("card updates %s apart, the budget is %d a second", gap, budget)
		}
	}

	// A storm of QPS refusals: waited out, the final accepted, the card FINISHED.
	fake.FailNext("/v1.0/card/streaming", 3, http.StatusForbidden, dingtalktest.CodeQPS)
	for i, w := range strings.Fields("a second answer through the storm") {
		e.sendTo("dt", profile.TypeDelta, delta("m_storm", i+1, w+" "))
		time.Sleep(40 * time.Millisecond)
	}
	if a := e.ackOf(e.sendTo("dt", profile.TypeMessage, msg("m_storm", "a second answer, calm again"))); a.Status != profile.AckAccepted {
		t.Fatalf("final through a QPS storm: %+v", a)
	}
	ok, refused := streamingCalls(fake)
	if len(refused) != 3 {
		t.Fatalf("%d refusals, want the 3 injected", len(refused))
	}
	for _, r := range refused {
		for _, c := range ok {
			if c.After(r) && c.Sub(r) < 900*time.Millisecond {
				t.Fatalf("a card update %s after a QPS refusal", c.Sub(r))
			}
		}
	}
	cards = fake.Cards(dingtalktest.DirectSpace(alice.StaffID))
	if len(cards) != 2 || cards[1].Text() != "a second answer, calm again" || cards[1].Status() != "3" {
		t.Fatalf("cards %+v", cards)
	}

	// A file out: uploaded, then a robot image message.
	data := []byte("\x89PNG\r\n\x1a\n a chart")
	ref := upload(t, e.node, "dt", "chart.png", data)
	if a := e.ackOf(e.sendTo("dt", profile.TypeMessage, map[string]any{"message_id": "m_file", "text": "the chart", "files": []any{map[string]any{"type": "image", "file_ref": ref}}})); a.Status != profile.AckAccepted {
		t.Fatalf("final with a file: %+v", a)
	}
	if ms := fake.Messages(dingtalktest.DirectSpace(alice.StaffID)); len(ms) != 1 || ms[0].MsgKey != "sampleImageMsg" || !bytes.Equal(ms[0].Data, data) {
		t.Fatalf("robot messages %+v, want the image", ms)
	}

	// IM -> xAgent by Stream mode: a group message mentioning the robot, once, though pushed again.
	msgID := fake.Post(app, alice, cid, "what is on today?", true)
	uenv, um := userMessage(t, e.agent, wait)
	if uenv.ChannelID != "dtg" || um.Text != "what is on today?" || um.MessageID != dingtalk.MessageIDOf(msgID) {
		t.Fatalf("user message %s %+v", uenv.ChannelID, um)
	}
	ackUser(t, e.agent, uenv, map[string]any{"message_id": um.MessageID, "status": "accepted"})
	fake.Redeliver(app, msgID)
	poll(t, "the redelivery acknowledged", func() bool { return fake.Unacked(app) == 0 })
	// A file in, one-to-one.
	fileData := []byte("minutes of the meeting")
	fake.PostFile(app, alice, "minutes.txt", "text/plain", fileData)
	uenv, um = userMessage(t, e.agent, wait)
	if uenv.ChannelID != "dt" || len(um.Files) != 1 || um.Files[0].Filename != "minutes.txt" {
		t.Fatalf("after the redelivery the agent got %s %+v, want only the file message", uenv.ChannelID, um)
	}
	if status, got, _ := e.node.Do(http.MethodGet, um.Files[0].DownloadURL, nil); status != http.StatusOK || !bytes.Equal(got, fileData) {
		t.Fatalf("the file in ximd's file store: %d, %d bytes", status, len(got))
	}
	ackUser(t, e.agent, uenv, map[string]any{"message_id": um.MessageID, "status": "accepted"})
	e.quiet(time.Second)
}
