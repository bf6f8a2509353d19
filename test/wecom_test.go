package test

import (
	"bytes"
	"crypto/rand"
	"encoding/base64"
	"encoding/json"
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

// openWeComChannel binds channel through the real API with the fake's endpoint and the robot's
// credentials added to cfg, and fails the test unless the PUT succeeds.
func openWeComChannel(t *testing.T, e *env, fake *wecomtest.Server, bot wecomtest.Bot, channel string, cfg map[string]any) {
	t.Helper()
	cfg["bot_id"], cfg["secret"], cfg["ws_url"] = bot.ID, bot.Secret, fake.URL()
	if status, body, err := openWeCom(e.node, channel, cfg); err != nil || status != http.StatusOK {
		t.Fatalf("PUT wecom channel %s: %d %s %v", channel, status, body, err)
	}
}

// wecomFrames are the fake's commands cmd, oldest first.
func wecomFrames(fake *wecomtest.Server, cmd string) []wecomtest.Frame {
	var out []wecomtest.Frame
	for _, f := range fake.Frames() {
		if f.Cmd == cmd {
			out = append(out, f)
		}
	}
	return out
}

// streamFrame is the stream of an aibot_respond_msg body.
type streamFrame struct {
	Stream struct {
		ID      string `json:"id"`
		Finish  bool   `json:"finish"`
		Content string `json:"content"`
	} `json:"stream"`
}

// A stream outlives its life (edge-api §7.2.7: 846608 after it): the previews past it change
// nothing, the final's finish frame is refused 846608 and the final goes as one proactive
// markdown message; the person sees the final text exactly once, and the stream bubble stays as
// it was. The fake's life is 2 s instead of WeCom's 6 minutes.
func TestWeCom_StreamPastItsLifeIsFinishedByOneProactiveMessage(t *testing.T) {
	t.Parallel()
	const life = 2 * time.Second
	e := newEnv(t, envOptions{})
	fake := wecomtest.New()
	t.Cleanup(fake.Close)
	fake.SetStreamLife(life)
	bot := fake.AddBot("Helper")
	conv := wecomtest.Single("bob")
	openWeComChannel(t, e, fake, bot, "wc", map[string]any{"user_id": "bob"})

	msgid := fake.Say(bot, conv, "bob", "summarise the annual report", false)
	uenv, um := userMessage(t, e.agent, wait)
	ackUser(t, e.agent, uenv, map[string]any{"message_id": um.MessageID, "status": "accepted"})

	// The answer streams into a bubble replying to the message.
	words := strings.Fields("Reading the annual report page by page")
	for i, w := range words {
		e.sendTo("wc", profile.TypeDelta, delta("m_slow", i+1, w+" "))
	}
	poll(t, "the stream bubble shown", func() bool {
		seen := fake.Messages(bot, conv)
		return len(seen) == 1 && seen[0].Kind == "stream" && seen[0].ReplyTo == msgid
	})
	first := wecomFrames(fake, "aibot_respond_msg")[0]
	if first.Errcode != 0 {
		t.Fatalf("the stream's first frame refused: %d", first.Errcode)
	}
	// Past the stream's life the fake refuses every frame, so the bubble cannot change any more.
	poll(t, "the stream's life over", func() bool { return time.Since(first.At) > life })
	bubble := fake.Messages(bot, conv)[0]

	// Previews past the life, then the final.
	more := strings.Fields("and the notes to the accounts")
	for i, w := range more {
		e.sendTo("wc", profile.TypeDelta, delta("m_slow", len(words)+i+1, w+" "))
	}
	final := "The report: revenue grew 12% and costs fell 3%."
	if a := e.ackOf(e.sendTo("wc", profile.TypeMessage, msg("m_slow", final))); a.Status != profile.AckAccepted {
		t.Fatalf("final past the stream's life: %+v, want accepted", a)
	}

	seen := fake.Messages(bot, conv)
	if len(seen) != 2 {
		t.Fatalf("the person sees %+v, want the stream bubble and one proactive message", seen)
	}
	if s := seen[0]; s.Kind != "stream" || s.Finished || s.Text != bubble.Text || s.Frames != bubble.Frames || s.ReplyTo != msgid {
		t.Fatalf("the stream bubble is now %+v, want it as it was at the end of its life: %+v", s, bubble)
	}
	if p := seen[1]; p.Kind != "markdown" || p.Text != final {
		t.Fatalf("the second message is %+v, want the final as a markdown message", p)
	}
	shown := 0
	for _, m := range seen {
		if m.Text == final {
			shown++
		}
	}
	if shown != 1 {
		t.Fatalf("the final text shown %d times, want once", shown)
	}

	// What the adapter did: the final's finish frame went to the stream and was refused 846608;
	// then one aibot_send_msg with the final.
	var finishes []wecomtest.Frame
	for _, f := range wecomFrames(fake, "aibot_respond_msg") {
		var b streamFrame
		if err := json.Unmarshal(f.Body, &b); err != nil {
			t.Fatal(err)
		}
		if b.Stream.ID != bubble.ID {
			t.Fatalf("a frame of stream %q, want only the bubble's %q", b.Stream.ID, bubble.ID)
		}
		if b.Stream.Finish {
			finishes = append(finishes, f)
		}
	}
	if len(finishes) != 1 || finishes[0].Errcode != 846608 {
		t.Fatalf("finish frames %+v, want one, refused 846608", finishes)
	}
	sends := wecomFrames(fake, "aibot_send_msg")
	if len(sends) != 1 || sends[0].Errcode != 0 || !sends[0].At.After(finishes[0].At) {
		t.Fatalf("aibot_send_msg %+v, want one after the refused finish frame", sends)
	}
}

// A group binding (chat_id, bot_name): a message mentioning the robot comes in once, without the
// leading "@Helper" WeCom keeps in the text, however often WeCom calls it back; the answer is a
// stream replying to it in the group.
func TestWeCom_GroupMentionComesInOnceWithoutTheMention(t *testing.T) {
	t.Parallel()
	e := newEnv(t, envOptions{})
	fake := wecomtest.New()
	t.Cleanup(fake.Close)
	bot := fake.AddBot("Helper")
	const chat = "wrkGroup42"
	group := wecomtest.Group(chat)
	openWeComChannel(t, e, fake, bot, "wcg", map[string]any{"chat_id": chat, "bot_name": "Helper"})

	msgid := fake.Say(bot, group, "carol", "what is the time?", true)
	uenv, um := userMessage(t, e.agent, wait)
	if uenv.ChannelID != "wcg" || um.Text != "what is the time?" || um.MessageID != wecom.MessageIDOf(bot.ID, msgid) {
		t.Fatalf("user message %s %+v, want %q without the mention", uenv.ChannelID, um, "what is the time?")
	}
	ackUser(t, e.agent, uenv, map[string]any{"message_id": um.MessageID, "status": "accepted"})

	// The answer reaches the group, replying to the message.
	answer := "It is ten past three."
	if a := e.ackOf(e.sendTo("wcg", profile.TypeMessage, msg("m_time", answer))); a.Status != profile.AckAccepted {
		t.Fatalf("final to the group: %+v", a)
	}
	seen := fake.Messages(bot, group)
	if len(seen) != 1 || seen[0].Kind != "stream" || !seen[0].Finished || seen[0].Text != answer || seen[0].ReplyTo != msgid {
		t.Fatalf("the group sees %+v, want one finished stream with the answer", seen)
	}
	if dm := fake.Messages(bot, wecomtest.Single("carol")); len(dm) != 0 {
		t.Fatalf("carol's single chat got %+v, want nothing", dm)
	}

	// WeCom calls the message back again, then a new message comes: the next message xAgent
	// gets is the new one (the poll loop handles callbacks in order), so the repeat passed.
	fake.Again(bot, msgid)
	next := fake.Say(bot, group, "dave", "and the date?", true)
	uenv, um = userMessage(t, e.agent, wait)
	if um.MessageID != wecom.MessageIDOf(bot.ID, next) || um.Text != "and the date?" {
		t.Fatalf("after the repeated callback the agent got %+v, want only the new message", um)
	}
	ackUser(t, e.agent, uenv, map[string]any{"message_id": um.MessageID, "status": "accepted"})
}

// A final with a file: its text finishes the stream replying to the person, and the file is
// uploaded in 512 KB chunks (aibot_upload_media_init/_chunk/_finish) and sent as a file message
// carrying exactly the bytes xAgent uploaded to ximd.
func TestWeCom_FileOutIsUploadedInChunks(t *testing.T) {
	t.Parallel()
	e := newEnv(t, envOptions{})
	fake := wecomtest.New()
	t.Cleanup(fake.Close)
	bot := fake.AddBot("Helper")
	conv := wecomtest.Single("erin")
	openWeComChannel(t, e, fake, bot, "wc", map[string]any{"user_id": "erin"})

	msgid := fake.Say(bot, conv, "erin", "send me the export", false)
	uenv, um := userMessage(t, e.agent, wait)
	ackUser(t, e.agent, uenv, map[string]any{"message_id": um.MessageID, "status": "accepted"})

	// 2.3 chunks of 512 KB: three chunks, the last one short.
	data := make([]byte, 2*wecom.ChunkBytes+wecom.ChunkBytes/3)
	if _, err := rand.Read(data); err != nil {
		t.Fatal(err)
	}
	ref := upload(t, e.node, "wc", "export.bin", data)
	if a := e.ackOf(e.sendTo("wc", profile.TypeMessage, map[string]any{"message_id": "m_export", "text": "Here is the export.",
		"files": []any{map[string]any{"type": "file", "file_ref": ref}}})); a.Status != profile.AckAccepted {
		t.Fatalf("final with a file: %+v", a)
	}

	seen := fake.Messages(bot, conv)
	if len(seen) != 2 || seen[0].Kind != "stream" || !seen[0].Finished || seen[0].Text != "Here is the export." || seen[0].ReplyTo != msgid {
		t.Fatalf("the person sees %+v, want the finished stream, then the file", seen)
	}
	if f := seen[1]; f.Kind != "file" || f.FileName != "export.bin" || !bytes.Equal(f.Data, data) {
		t.Fatalf("the file message: %s %q, %d bytes (equal: %v), want export.bin with the %d bytes uploaded",
			f.Kind, f.FileName, len(f.Data), bytes.Equal(f.Data, data), len(data))
	}

	// The upload: init for three chunks, chunks 0, 1, 2 of at most 512 KB, finish.
	inits, chunks, fins := wecomFrames(fake, "aibot_upload_media_init"), wecomFrames(fake, "aibot_upload_media_chunk"), wecomFrames(fake, "aibot_upload_media_finish")
	if len(inits) != 1 || len(chunks) != 3 || len(fins) != 1 {
		t.Fatalf("%d init, %d chunk, %d finish commands, want 1, 3, 1", len(inits), len(chunks), len(fins))
	}
	var init struct {
		Type        string `json:"type"`
		Filename    string `json:"filename"`
		TotalSize   int    `json:"total_size"`
		TotalChunks int    `json:"total_chunks"`
	}
	if err := json.Unmarshal(inits[0].Body, &init); err != nil || init.Type != "file" || init.Filename != "export.bin" || init.TotalSize != len(data) || init.TotalChunks != 3 {
		t.Fatalf("init %s (%v)", inits[0].Body, err)
	}
	var got []byte
	for i, c := range chunks {
		var b struct {
			Index int    `json:"chunk_index"`
			Data  string `json:"base64_data"`
		}
		if err := json.Unmarshal(c.Body, &b); err != nil || c.Errcode != 0 || b.Index != i {
			t.Fatalf("chunk %d: index %d, errcode %d (%v)", i, b.Index, c.Errcode, err)
		}
		part, err := base64.StdEncoding.DecodeString(b.Data)
		if err != nil || len(part) > wecom.ChunkBytes {
			t.Fatalf("chunk %d: %d bytes (%v), want at most %d", i, len(part), err, wecom.ChunkBytes)
		}
		got = append(got, part...)
	}
	if !bytes.Equal(got, data) {
		t.Fatalf("the chunks carry %d bytes, not the %d uploaded", len(got), len(data))
	}
	if fins[0].Errcode != 0 {
		t.Fatalf("finish refused: %d", fins[0].Errcode)
	}
}
