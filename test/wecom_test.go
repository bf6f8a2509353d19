package test

import (
	"bytes"
	"fmt"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/ximd/ximd/handlers/adapter/wecom"
	"github.com/ximd/ximd/handlers/adapter/wecom/wecomtest"
	"github.com/ximd/ximd/internal/testkit"
	"github.com/ximd/ximd/profile"
)

// openWeCom binds channel to a WeCom robot conversation through the real API.
func openWeCom(n *testkit.Node, channel string, cfg map[string]any) (int, []byte, error) {
	return n.Do(http.MethodPut, "/v1/channels/"+channel, map[string]any{
		"connection": map[string]any{"target_type": "im", "profiles": []string{"xagent.im.v2"}},
		"target":     map[string]any{"adapter": "wecom", "config": cfg},
	})
}

// The WeCom adapter end to end (edge-api §7.2.7) through /v1/ws against the fake long
// connection: a wrong secret is 422; a person's message comes in once however often WeCom calls
// it back; the status while xAgent thinks is a <think></think> frame replying to it, and the
// streamed answer is that one bubble ending finish: true, within the conversation's budget; a 30,000-byte final is split within 20,480 bytes a message; a person's
// encrypted file comes in decrypted.
func TestWeCom_EndToEnd(t *testing.T) {
	e := newEnv(t, envOptions{})
	fake := wecomtest.New()
	t.Cleanup(fake.Close)
	bot := fake.AddBot("Helper")
	conv := wecomtest.Single("alice")
	cfg := map[string]any{"bot_id": bot.ID, "secret": bot.Secret, "user_id": "alice", "ws_url": fake.URL()}
	if status, body, err := openWeCom(e.node, "wc", cfg); err != nil || status != http.StatusOK {
		t.Fatalf("PUT wecom channel: %d %s %v", status, body, err)
	} else if bytes.Contains(body, []byte(bot.Secret)) {
		t.Fatalf("the channel's representation shows the secret: %s", body)
	}
	bad := map[string]any{"bot_id": bot.ID, "secret": "wrong-secret", "user_id": "alice", "ws_url": fake.URL()}
	if status, body, _ := openWeCom(e.node, "wc-bad", bad); status != http.StatusUnprocessableEntity || bytes.Contains(body, []byte("wrong-secret")) {
		t.Fatalf("PUT with a wrong secret: %d %s, want 422", status, body)
	}

	// IM -> xAgent, once however often WeCom calls it back.
	msgid := fake.Say(bot, conv, "alice", "what is the weather?", false)
	uenv, um := userMessage(t, e.agent, wait)
	if uenv.ChannelID != "wc" || um.Text != "what is the weather?" || um.MessageID != wecom.MessageIDOf(bot.ID, msgid) {
		t.Fatalf("user message %s %+v", uenv.ChannelID, um)
	}
	ackUser(t, e.agent, uenv, map[string]any{"message_id": um.MessageID, "status": "accepted"})
	fake.Again(bot, msgid)

	// The status while xAgent thinks: a <think></think> frame replying to the message.
	e.sendTo("wc", profile.TypeActivity, map[string]any{"status": "thinking"})
	poll(t, "the thinking frame shown", func() bool {
		seen := fake.Messages(bot, conv)
		return len(seen) == 1 && seen[0].Text == "<think></think>" && !seen[0].Finished
	})

	// The streamed answer: the same bubble, finished with the final text.
	words := strings.Fields("It is sunny in Shenzhen today, with a light breeze from the sea and no rain expected.")
	for i, w := range words {
		e.sendTo("wc", profile.TypeDelta, delta("m_stream", i+1, w+" "))
		time.Sleep(40 * time.Millisecond)
	}
	final := strings.Join(words, " ")
	if a := e.ackOf(e.sendTo("wc", profile.TypeMessage, msg("m_stream", final))); a.Status != profile.AckAccepted {
		t.Fatalf("final: %+v", a)
	}
	seen := fake.Messages(bot, conv)
	if len(seen) != 1 || seen[0].Kind != "stream" || !seen[0].Finished || seen[0].Text != final || seen[0].ReplyTo != msgid {
		t.Fatalf("the person sees %+v, want one finished stream with the final text", seen)
	}
	if seen[0].Frames > 30 {
		t.Fatalf("%d frames, over the conversation's 30 a minute", seen[0].Frames)
	}

	// A 30,000-byte final: split, every part within 20,480 bytes.
	var b strings.Builder
	for i := 0; b.Len() < 30000; i++ {
		fmt.Fprintf(&b, "Paragraph %d of a long report.\n\n", i)
	}
	long := strings.TrimSpace(b.String())
	if a := e.ackOf(e.sendTo("wc", profile.TypeMessage, msg("m_long", long))); a.Status != profile.AckAccepted {
		t.Fatalf("long final: %+v", a)
	}
	seen = fake.Messages(bot, conv)[1:]
	var parts []string
	for _, m := range seen {
		if len(m.Text) > wecom.MaxContentBytes {
			t.Fatalf("a message of %d bytes", len(m.Text))
		}
		parts = append(parts, m.Text)
	}
	if len(parts) < 2 || strings.Join(strings.Fields(strings.Join(parts, " ")), " ") != strings.Join(strings.Fields(long), " ") {
		t.Fatalf("%d parts that do not make up the text", len(parts))
	}

	// A person's file, encrypted with its own aeskey, comes in decrypted.
	data := []byte("the quarterly figures, in confidence")
	fake.SayFile(bot, "alice", "figures.txt", data)
	uenv, um = userMessage(t, e.agent, wait)
	if len(um.Files) != 1 || um.Files[0].Filename != "figures.txt" {
		t.Fatalf("the agent got %+v, want only the file message (the repeated msgid passed once)", um)
	}
	if status, got, _ := e.node.Do(http.MethodGet, um.Files[0].DownloadURL, nil); status != http.StatusOK || !bytes.Equal(got, data) {
		t.Fatalf("the file in ximd's file store: %d, %q", status, got)
	}
	ackUser(t, e.agent, uenv, map[string]any{"message_id": um.MessageID, "status": "accepted"})
	e.quiet(time.Second)
}
