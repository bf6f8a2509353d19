package test

import (
	"bytes"
	"fmt"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/ximd/ximd/handlers/adapter/discord"
	"github.com/ximd/ximd/handlers/adapter/discord/discordtest"
	"github.com/ximd/ximd/internal/testkit"
	"github.com/ximd/ximd/pipeline/node"
	"github.com/ximd/ximd/profile"
)

// openDiscord binds channel to a Discord channel through the real API.
func openDiscord(n *testkit.Node, channel string, cfg map[string]any) (int, []byte, error) {
	return n.Do(http.MethodPut, "/v1/channels/"+channel, map[string]any{
		"connection": map[string]any{"target_type": "im", "profiles": []string{"xagent.im.v2"}},
		"target":     map[string]any{"adapter": "discord", "config": cfg},
	})
}

func discordConfig(fake *discordtest.Server, bot discordtest.User, ch string, extra map[string]any) map[string]any {
	cfg := map[string]any{"bot_token": bot.Token, "channel_id": ch, "api_url": fake.URL()}
	for k, v := range extra {
		cfg[k] = v
	}
	return cfg
}

// botMessages are the messages the bot wrote in ch, oldest first.
func botMessages(fake *discordtest.Server, bot discordtest.User, ch string) []discordtest.Message {
	var out []discordtest.Message
	for _, m := range fake.Messages(ch) {
		if m.Author.ID == bot.ID {
			out = append(out, m)
		}
	}
	return out
}

// messageCalls are the fake's creates and edits of messages in ch (the "messages" bucket).
func messageCalls(fake *discordtest.Server, ch string) []discordtest.Call {
	var out []discordtest.Call
	for _, c := range fake.Calls() {
		if (c.Method == http.MethodPost || c.Method == http.MethodPatch) && strings.HasPrefix(c.Path, "/api/v10/channels/"+ch+"/messages") {
			out = append(out, c)
		}
	}
	return out
}

// The Discord adapter end to end (edge-api §7.2.5) through /v1/ws against the Discord API fake
// with Discord's limits (5 creates and edits per 5 s per channel): typing shows while the agent
// thinks; a streamed answer is one message edited in place with no call refused 429 and fewer
// calls than deltas; a 5,000-character final is three messages of at most 2,000 characters; a
// file goes out as an attachment and a person's file comes in with its bytes; im.reply_message
// is a Discord reply; a person's message reaches xAgent once, across a gateway cut and a
// restart; a 429 storm ends accepted with no call before retry_after; a config that cannot work
// is refused at PUT without the token.
func TestDiscord_EndToEndGuildChannel(t *testing.T) {
	mutate := func(c *node.Config) { c.TargetRetryBudget = time.Minute } // a bucket is waited out
	e := newEnv(t, envOptions{mutate: mutate})
	fake := discordtest.New()
	t.Cleanup(fake.Close)
	bot := fake.AddBot("MTA.e2e-discord-secret-token", "ximd")
	alice := fake.AddUser("Alice")
	ch := fake.AddChannel("g1", bot, alice)
	status, body, err := openDiscord(e.node, "dc", discordConfig(fake, bot, ch, nil))
	if err != nil || status != http.StatusOK {
		t.Fatalf("PUT discord channel: %d %s %v", status, body, err)
	}
	if bytes.Contains(body, []byte(bot.Token)) {
		t.Fatalf("the channel's representation shows the bot token: %s", body)
	}
	other := fake.AddChannel("g2", fake.AddUser("Bob")) // the bot is not in it
	for name, cfg := range map[string]map[string]any{
		"bad token":       discordConfig(fake, discordtest.User{Token: "MTA.wrong"}, ch, nil),
		"unknown channel": discordConfig(fake, bot, "4242424242", nil),
		"no access":       discordConfig(fake, bot, other, nil),
	} {
		if status, body, _ := openDiscord(e.node, "dc-bad", cfg); status != http.StatusUnprocessableEntity || bytes.Contains(body, []byte(bot.Token)) {
			t.Fatalf("PUT with %s: %d %s, want 422 without the token", name, status, body)
		}
	}

	// Typing while the agent thinks.
	e.sendTo("dc", profile.TypeActivity, map[string]any{"status": "thinking"})
	poll(t, "typing shows", func() bool { return fake.Typing(ch) })

	// A streamed answer: one message edited in place, within the channel's bucket.
	var streamed strings.Builder
	deltas := 0
	for end := time.Now().Add(3 * time.Second); time.Now().Before(end); {
		deltas++
		part := fmt.Sprintf("word%d ", deltas)
		streamed.WriteString(part)
		e.sendTo("dc", profile.TypeDelta, delta("m_stream", deltas, part))
		time.Sleep(50 * time.Millisecond)
	}
	final := strings.TrimSpace(streamed.String()) + " done."
	if a := e.ackOf(e.sendTo("dc", profile.TypeMessage, msg("m_stream", final))); a.Status != profile.AckAccepted {
		t.Fatalf("streamed final: %+v", a)
	}
	answers := botMessages(fake, bot, ch)
	if len(answers) != 1 || answers[0].Content != final || answers[0].Edits < 1 || len(answers[0].Mentions) != 0 {
		t.Fatalf("the bot's messages %+v, want one edited in place to the final", answers)
	}
	calls := messageCalls(fake, ch)
	t.Logf("%d deltas shown with %d message calls (%d edits)", deltas, len(calls), answers[0].Edits)
	if len(calls) >= deltas/4 {
		t.Fatalf("%d message calls for %d deltas: not coalesced", len(calls), deltas)
	}

	// A 5,000-character final: three messages, each within 2,000 characters, in order.
	long := strings.TrimSpace(strings.Repeat("A sentence of the long answer, long enough to count. ", 96))
	if n := len(long); n < 4900 || n > 5100 {
		t.Fatalf("the long final has %d characters", n)
	}
	if a := e.ackOf(e.sendTo("dc", profile.TypeMessage, msg("m_long", long))); a.Status != profile.AckAccepted {
		t.Fatalf("long final: %+v", a)
	}
	parts := botMessages(fake, bot, ch)[1:]
	var joined []string
	for _, m := range parts {
		if n := len([]rune(m.Content)); n > discord.MaxTextLength {
			t.Fatalf("a message of %d characters", n)
		}
		joined = append(joined, m.Content)
	}
	if len(parts) != 3 || strings.Join(strings.Fields(strings.Join(joined, " ")), " ") != strings.Join(strings.Fields(long), " ") {
		t.Fatalf("the long final shows as %d messages", len(parts))
	}
	for _, c := range fake.Calls() {
		if c.Status == http.StatusTooManyRequests {
			t.Fatalf("a call answered 429 under Discord's limits: %s %s at %s", c.Method, c.Path, c.At.Format("05.000"))
		}
	}

	// A file out: the text, then the file as an attachment.
	fake.SetLimits(discordtest.Limits{Messages: 1000, Typing: 1000, Window: time.Second}) // the rest is not about buckets
	data := []byte("\x89PNG\r\n\x1a\n not really a png")
	ref := upload(t, e.node, "dc", "chart.png", data)
	if a := e.ackOf(e.sendTo("dc", profile.TypeMessage, map[string]any{"message_id": "m_file", "text": "the chart", "files": []any{map[string]any{"type": "image", "file_ref": ref}}})); a.Status != profile.AckAccepted {
		t.Fatalf("final with a file: %+v", a)
	}
	all := botMessages(fake, bot, ch)
	last := all[len(all)-1]
	if len(last.Files) != 1 || last.Files[0].Name != "chart.png" || !bytes.Equal(last.Files[0].Data, data) || all[len(all)-2].Content != "the chart" {
		t.Fatalf("the file shows as %+v after %q", last, all[len(all)-2].Content)
	}

	// A person's message in once; im.reply_message replies to it.
	q := fake.Post(ch, alice, "what about the chart?")
	uenv, um := userMessage(t, e.agent, wait)
	if uenv.ChannelID != "dc" || um.Text != "what about the chart?" || um.MessageID != q {
		t.Fatalf("user message %s %+v", uenv.ChannelID, um)
	}
	ackUser(t, e.agent, uenv, map[string]any{"message_id": um.MessageID, "status": "accepted"})
	r := invokeOn(e, "dc", "inv_reply", profile.ToolReplyMessage, map[string]any{"reply_to_target_message_id": q, "text": "it shows the trend"})
	all = botMessages(fake, bot, ch)
	if last = all[len(all)-1]; !r.OK || last.Content != "it shows the trend" || last.ReplyTo != q || last.Type != 19 || r.Result.TargetMessageID != last.ID {
		t.Fatalf("reply %+v shown as %+v", r, last)
	}

	// A person's file in: its bytes in ximd's file store.
	photo := bytes.Repeat([]byte("jpeg"), 1000)
	fid := fake.PostFile(ch, alice, "look", "photo.jpg", photo)
	uenv, um = userMessage(t, e.agent, wait)
	if um.MessageID != fid || um.Text != "look" || len(um.Files) != 1 || um.Files[0].Filename != "photo.jpg" {
		t.Fatalf("file message %+v", um)
	}
	if status, got, _ := e.node.Do(http.MethodGet, um.Files[0].DownloadURL, nil); status != http.StatusOK || !bytes.Equal(got, photo) {
		t.Fatalf("the file in ximd's file store: %d, %d bytes", status, len(got))
	}
	ackUser(t, e.agent, uenv, map[string]any{"message_id": um.MessageID, "status": "accepted"})

	// A gateway cut: the client reconnects and catches up, and nothing comes in twice.
	dials := fake.GatewayDials()
	fake.Disconnect()
	poll(t, "the gateway reconnected", func() bool { return fake.GatewayDials() > dials && fake.Connections(bot.Token) == 1 })
	e.quiet(time.Second)

	// A restart neither loses nor replays: a message written while ximd was down comes in once.
	e.agent.Close()
	if err := e.node.Stop(); err != nil {
		t.Fatal(err)
	}
	down := fake.Post(ch, alice, "written while you were away")
	e.start(mutate)
	e.connect()
	uenv, um = userMessage(t, e.agent, wait)
	if um.MessageID != down || um.Text != "written while you were away" {
		t.Fatalf("after the restart the agent got %+v, want only the message written meanwhile", um)
	}
	ackUser(t, e.agent, uenv, map[string]any{"message_id": um.MessageID, "status": "accepted"})
	e.quiet(time.Second)

	// A 429 storm: retried no sooner than retry_after (0.25 s each), then accepted.
	before := len(messageCalls(fake, ch))
	fake.FailNext("messages", 3, http.StatusTooManyRequests)
	if a := e.ackOf(e.sendTo("dc", profile.TypeMessage, msg("m_storm", "after the storm"))); a.Status != profile.AckAccepted {
		t.Fatalf("final through a 429 storm: %+v", a)
	}
	storm := messageCalls(fake, ch)[before:]
	if len(storm) != 4 || storm[3].Status != http.StatusOK {
		t.Fatalf("%d calls through the storm, want three 429 and one 200", len(storm))
	}
	for i := 1; i < len(storm); i++ {
		if gap := storm[i].At.Sub(storm[i-1].At); storm[i-1].Status == http.StatusTooManyRequests && gap < 250*time.Millisecond {
			t.Fatalf("call %d came %s after a 429 with retry_after 0.25 s", i, gap)
		}
	}
	if all = botMessages(fake, bot, ch); all[len(all)-1].Content != "after the storm" {
		t.Fatalf("after the storm the channel shows %q last", all[len(all)-1].Content)
	}
	e.quiet(time.Second)
}
