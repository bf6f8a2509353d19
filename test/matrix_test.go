package test

import (
	"bytes"
	"context"
	"encoding/json"
	"net/http"
	"strings"
	"testing"
	"time"

	"maunium.net/go/mautrix"
	"maunium.net/go/mautrix/event"
	"maunium.net/go/mautrix/id"

	"github.com/ximd/ximd/handlers/adapter/matrix"
	"github.com/ximd/ximd/internal/testkit"
	"github.com/ximd/ximd/profile"
	"github.com/ximd/ximd/test/dendrite"
)

// openMatrix binds channel to the room through the real API.
func openMatrix(n *testkit.Node, channel string, cfg map[string]any) (int, []byte, error) {
	return n.Do(http.MethodPut, "/v1/channels/"+channel, map[string]any{
		"connection": map[string]any{"target_type": "im", "profiles": []string{"xagent.im.v2"}},
		"target":     map[string]any{"adapter": "matrix", "config": cfg},
	})
}

// The Matrix adapter end to end (edge-api §7.2.1) against a real Dendrite, through /v1/ws: a
// streamed answer is one message edited in place to the final text; typing shows in the
// person's sync while the agent thinks and stops at the answer; a file reaches the room's media;
// im.reply_message replies; a config that cannot work is refused at PUT.
func TestMatrix_EndToEndAgainstDendrite(t *testing.T) {
	s := dendrite.Start(t, dendrite.Options{})
	bot, alice := s.Register(t, "bot"), s.Register(t, "alice")
	room := s.Room(t, bot, false, alice)
	e := newEnv(t, envOptions{})
	cfg := map[string]any{"homeserver": s.URL, "access_token": bot.Token, "room_id": string(room)}
	if status, body, err := openMatrix(e.node, "mx", cfg); err != nil || status != http.StatusOK {
		t.Fatalf("PUT matrix channel: %d %s %v", status, body, err)
	} else if bytes.Contains(body, []byte(bot.Token)) {
		t.Fatal("the channel's representation shows the access token")
	}
	bad := map[string]any{"homeserver": s.URL, "access_token": "wrong", "room_id": string(room)}
	if status, body, _ := openMatrix(e.node, "mx-bad", bad); status != http.StatusUnprocessableEntity || !bytes.Contains(body, []byte(profile.CodeTargetConfigInvalid)) {
		t.Fatalf("PUT with a bad token: %d %s, want 422 target_config_invalid", status, body)
	}

	// Typing while the agent thinks, seen by alice's sync.
	ctx := context.Background()
	typingSeen := alice.Typing(room, bot.ID)
	typing := func() bool { return typingSeen(t) }
	e.sendTo("mx", profile.TypeActivity, map[string]any{"status": "thinking"})
	poll(t, "alice sees the bot typing", typing)

	// A streamed answer: one message, edited to the final text.
	for i, part := range []string{"Hel", "lo, ", "Alice"} {
		e.sendTo("mx", profile.TypeDelta, delta("m_stream", i+1, part))
	}
	pid := e.sendTo("mx", profile.TypeMessage, msg("m_stream", "Hello, Alice. How can I help?"))
	if a := e.ackOf(pid); a.Status != profile.AckAccepted {
		t.Fatalf("final: %+v", a)
	}
	shown := alice.Messages(t, room)
	if len(shown) != 1 || shown[0].Body != "Hello, Alice. How can I help?" || shown[0].Sender != bot.ID {
		t.Fatalf("alice sees %+v, want one message with the final text", shown)
	}

	// The first preview waits for three words (first_preview_words), so the room's notification
	// never shows a fragment.
	for i, w := range []string{"One ", "two ", "three ", "four."} {
		e.sendTo("mx", profile.TypeDelta, delta("m_words", i+1, w))
		time.Sleep(30 * time.Millisecond) // each may be shown before the next comes
	}
	pid = e.sendTo("mx", profile.TypeMessage, msg("m_words", "One two three four."))
	if a := e.ackOf(pid); a.Status != profile.AckAccepted {
		t.Fatalf("final: %+v", a)
	}
	resp, err := alice.Client.Messages(ctx, room, "", "", mautrix.DirectionBackward, &mautrix.FilterPart{Types: []event.Type{event.EventMessage}}, 20)
	if err != nil {
		t.Fatal(err)
	}
	for _, ev := range resp.Chunk {
		var c struct {
			Body      string          `json:"body"`
			RelatesTo json.RawMessage `json:"m.relates_to"`
		}
		_ = json.Unmarshal(ev.Content.VeryRaw, &c)
		if strings.HasPrefix(c.Body, "One") && c.RelatesTo == nil && len(strings.Fields(c.Body)) < 3 {
			t.Fatalf("the message first appeared as %q: fewer than three words", c.Body)
		}
	}
	shown = alice.Messages(t, room)
	if len(shown) != 2 || shown[1].Body != "One two three four." {
		t.Fatalf("alice sees %+v", shown)
	}

	// A file, uploaded to ximd, reaches the room's media.
	data := []byte("\x89PNG\r\n\x1a\n not really a png")
	ref := upload(t, e.node, "mx", "chart.png", data)
	pid = e.sendTo("mx", profile.TypeMessage, map[string]any{"message_id": "m_file", "text": "the chart", "files": []any{map[string]any{"type": "image", "file_ref": ref}}})
	if a := e.ackOf(pid); a.Status != profile.AckAccepted {
		t.Fatalf("final with a file: %+v", a)
	}
	shown = alice.Messages(t, room)
	if len(shown) != 4 || shown[2].Body != "the chart" || shown[3].MsgType != "m.image" {
		t.Fatalf("alice sees %+v, want the text and the image", shown)
	}
	mxc, err := id.ParseContentURI(shown[3].URL)
	if err != nil {
		t.Fatal(err)
	}
	got, err := alice.Client.DownloadBytes(ctx, mxc)
	if err != nil || !bytes.Equal(got, data) {
		t.Fatalf("alice downloads %d bytes (%v), want the file's %d", len(got), err, len(data))
	}

	// im.reply_message: a Matrix reply to the first answer.
	r := invokeOn(e, "mx", "inv_reply", profile.ToolReplyMessage, map[string]any{"reply_to_target_message_id": string(shown[0].ID), "text": "more on that"})
	if !r.OK {
		t.Fatalf("reply: %+v", r)
	}
	shown = alice.Messages(t, room)
	last := shown[len(shown)-1]
	if last.Body != "more on that" || last.ReplyTo != string(shown[0].ID) || r.Result.TargetMessageID != string(last.ID) {
		t.Fatalf("reply shown as %+v (result %+v)", last, r)
	}
	poll(t, "the typing stops with the answer", func() bool { return !typing() })

	// IM -> xAgent: alice's message reaches the agent once, her image with it.
	sent, err := alice.Client.SendText(ctx, room, "hi bot")
	if err != nil {
		t.Fatal(err)
	}
	uenv, um := userMessage(t, e.agent, wait)
	if uenv.ChannelID != "mx" || um.Text != "hi bot" || um.MessageID != matrix.MessageIDOf(sent.EventID) {
		t.Fatalf("user message %s %+v", uenv.ChannelID, um)
	}
	ackUser(t, e.agent, uenv, map[string]any{"message_id": um.MessageID, "status": "accepted"})
	up, err := alice.Client.UploadBytes(ctx, data, "image/png")
	if err != nil {
		t.Fatal(err)
	}
	if _, err := alice.Client.SendMessageEvent(ctx, room, event.EventMessage, map[string]any{"msgtype": "m.image", "body": "photo.png", "url": up.ContentURI.String(), "info": map[string]any{"mimetype": "image/png"}}); err != nil {
		t.Fatal(err)
	}
	uenv, um = userMessage(t, e.agent, wait)
	if len(um.Files) != 1 || um.Files[0].Filename != "photo.png" || um.Files[0].Type != "image" {
		t.Fatalf("image message %+v", um)
	}
	if status, got, _ := e.node.Do(http.MethodGet, um.Files[0].DownloadURL, nil); status != http.StatusOK || !bytes.Equal(got, data) {
		t.Fatalf("the image in ximd's file store: %d, %d bytes", status, len(got))
	}
	ackUser(t, e.agent, uenv, map[string]any{"message_id": um.MessageID, "status": "accepted"})

	// A restart neither loses nor replays: the sync position is in JetStream.
	e.restart()
	after, err := alice.Client.SendText(ctx, room, "still there?")
	if err != nil {
		t.Fatal(err)
	}
	uenv, um = userMessage(t, e.agent, wait)
	if um.MessageID != matrix.MessageIDOf(after.EventID) || um.Text != "still there?" {
		t.Fatalf("after the restart the agent got %+v, want only the new message", um)
	}
	ackUser(t, e.agent, uenv, map[string]any{"message_id": um.MessageID, "status": "accepted"})
	e.quiet(time.Second)
}
