package test

import (
	"bytes"
	"context"
	"fmt"
	"maps"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/ximd/ximd/handlers/adapter/discord/discordtest"
	"github.com/ximd/ximd/test/faultkit"
)

// Edge-api §7.2.5 under kill -9: an all-in-one ximd (embedded NATS, persistent data dir) bound to
// a guild channel of the Discord fake is killed every 0.3–1.5 s and restarted while a person
// writes messages (every fourth with a file, and one more each time while ximd is down) and
// xAgent answers with streamed answers, each retransmitted until acked. Every person's message
// reaches xAgent under its one message_id (the gateway replays nothing; the catch-up after each
// connect reads from the last id seen, kept in JetStream), a file's bytes in the file store; no
// answer is shown twice, none is lost, no streamed preview is left behind beside its answer, and
// none is answered delivery_outcome_unknown: the whole run is inside Discord's nonce window, where
// a send repeated after a kill is the message already made.
// XIMD_DISCORD_FAULT_CYCLES (default 5) makes the run longer.
func TestFault_DiscordKillNineMessagesOnceAnswersNeverTwice(t *testing.T) {
	skipFaults(t)
	cycles := faultkit.Env(t, "XIMD_DISCORD_FAULT_CYCLES", 5)
	fake := discordtest.New()
	t.Cleanup(fake.Close)
	fake.SetLimits(discordtest.Limits{Messages: 100000, Typing: 100000, Window: time.Second})
	bot := fake.AddBot("MTA.fault-discord-secret", "fault_bot")
	alice := fake.AddUser("Alice")
	ch := fake.AddChannel("g1", bot, alice)

	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	x := startAllInOne(t, ctx, "discord")
	n := x.node
	if status, body, err := openDiscord(n, "dc", discordConfig(fake, bot, ch, map[string]any{"first_preview_words": 0})); err != nil || status != 200 {
		t.Fatalf("PUT discord channel: %d %s %v", status, body, err)
	}

	var mu sync.Mutex
	posted := map[string][]byte{} // message_id -> its file's bytes (nil: text only)
	post := func(i int, what string) {
		text := fmt.Sprintf("%s %d", what, i)
		var id string
		var data []byte
		if i%4 == 0 {
			data = []byte(fmt.Sprintf("file %d %s", i, bytes.Repeat([]byte{byte(i)}, 512)))
			id = fake.PostFile(ch, alice, text, fmt.Sprintf("f%d.bin", i), data)
		} else {
			id = fake.Post(ch, alice, text)
		}
		mu.Lock()
		posted[id] = data
		mu.Unlock()
	}

	var whileDown atomic.Int64
	killed, faults := x.killLoop(t, ctx, cycles, nil, func(c int) bool {
		post(100000+c, "written while ximd was down") // only the catch-up can bring it
		whileDown.Add(1)
		return true
	})

	// The person writes as long as the kills go on.
	writing := writeWhile(killed, 30*time.Millisecond, 100*time.Millisecond, func(i int) { post(i, "message") })

	ag, acks, want := x.answerAndHear(t, ctx, "dc", "answer %d: streamed, then final", killed, writing, maps.Keys(posted))
	lost, strange, again := ag.tally(want)
	shown := map[string]int{}
	leftovers := 0
	for _, m := range fake.Messages(ch) {
		if m.Author.ID != bot.ID {
			continue
		}
		if _, ok := acks[m.Content]; !ok {
			leftovers++ // a preview never settled to its answer
		}
		shown[m.Content]++
	}
	twice, missing, unknown, duplicate := answersShown(acks, shown)
	t.Logf("summary: test=DiscordKillNine cycles=%d faults=%d messages=%d while_down=%d messages_lost=%d messages_strange=%d redelivered=%d answers=%d acked_duplicate=%d outcome_unknown=%d shown_twice=%d missing=%d leftovers=%d reconnects=%d",
		cycles, faults.Load(), len(want), whileDown.Load(), lost, strange, again, len(acks), duplicate, unknown, len(twice), len(missing), leftovers, ag.reconnects)
	if lost > 0 || strange > 0 || len(twice) > 0 || len(missing) > 0 || unknown > 0 || leftovers > 0 {
		t.Fatalf("messages lost %d, strange %d; answers twice %v, missing %v, in doubt %d, previews left %d\n%s",
			lost, strange, twice, missing, unknown, leftovers, x.LogTail(40))
	}
	// Each file's bytes are in the file store under the message that carried it.
	for mid, data := range posted {
		m := ag.messages[mid]
		if data == nil {
			if len(m.Files) != 0 {
				t.Fatalf("text message %s carries %d files", mid, len(m.Files))
			}
			continue
		}
		if len(m.Files) != 1 {
			t.Fatalf("file message %s carries %d files", mid, len(m.Files))
		}
		if status, got, err := n.Do("GET", m.Files[0].DownloadURL, nil); err != nil || status != 200 || !bytes.Equal(got, data) {
			t.Fatalf("file %s in the file store: %d, %d bytes, %v", mid, status, len(got), err)
		}
	}
}
