package test

import (
	"bytes"
	"context"
	"fmt"
	"maps"
	"sync"
	"testing"
	"time"

	"github.com/ximd/ximd/handlers/adapter/telegram"
	"github.com/ximd/ximd/handlers/adapter/telegram/telegramtest"
	"github.com/ximd/ximd/test/faultkit"
)

// Edge-api §7.2.2 under kill -9: an all-in-one ximd (embedded NATS, persistent data dir) bound to
// a private chat of the Bot API fake is killed every 0.3–1.5 s and restarted while a person sends
// photos and xAgent answers with streamed (draft) answers, each retransmitted until acked. Every
// photo reaches xAgent under one message_id (the update offset is in JetStream, and an update
// read again is the same message), with its bytes in the file store; no answer is shown twice,
// and every answer acked accepted or duplicate is shown once. A direct final whose send a kill
// interrupted may be answered delivery_outcome_unknown (Telegram has no idempotency key).
// XIMD_TELEGRAM_FAULT_CYCLES (default 5) makes the run longer.
func TestTelegram_KillNineUserPhotosOnceAnswersNeverTwice(t *testing.T) {
	skipFaults(t)
	cycles := faultkit.Env(t, "XIMD_TELEGRAM_FAULT_CYCLES", 5)
	fake := telegramtest.New()
	t.Cleanup(fake.Close)
	fake.SetLimits(telegramtest.Limits{PerChatPerSecond: 1000, GroupPerMinute: 100000, EditsPerMinute: 100000, EphemeralPerSecond: 1000})
	bot := fake.AddBot("9001:fault-secret", "fault_bot")
	alice := fake.AddUser("Alice")
	chat := fake.AddChat("private", "", alice.ID)

	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	x := startAllInOne(t, ctx, "telegram")
	n := x.node
	cfg := map[string]any{"token": bot.Token, "chat_id": chat, "api_url": fake.URL(), "edits_per_minute": 600, "first_preview_words": 0}
	if status, body, err := openTelegram(n, "tg", cfg); err != nil || status != 200 {
		t.Fatalf("PUT telegram channel: %d %s %v", status, body, err)
	}

	killed, faults := x.killLoop(t, ctx, cycles, nil, nil)

	// The person sends photos as long as the kills go on.
	var mu sync.Mutex
	photos := map[string][]byte{} // message_id -> bytes
	posted := writeWhile(killed, 30*time.Millisecond, 100*time.Millisecond, func(i int) {
		data := []byte(fmt.Sprintf("photo %d %s", i, bytes.Repeat([]byte{byte(i)}, 512)))
		id := fake.PostFile(chat, alice, "photo", fmt.Sprintf("photo %d", i), "", data)
		mu.Lock()
		photos[telegram.MessageIDOf(chat, id)] = data
		mu.Unlock()
	})

	ag, acks, want := x.answerAndHear(t, ctx, "tg", "answer %d: streamed, then final", killed, posted, maps.Keys(photos))
	lost, strange, _ := ag.tally(want)
	shown := map[string]int{}
	for _, m := range fake.Messages(chat) {
		shown[m.Text]++
	}
	twice, missing, unknown, _ := answersShown(acks, shown)
	t.Logf("summary: test=TelegramKillNine cycles=%d faults=%d photos=%d photos_lost=%d photos_doubled=%d answers=%d outcome_unknown=%d shown_twice=%d missing=%d reconnects=%d",
		cycles, faults.Load(), len(want), lost, strange, len(acks), unknown, len(twice), len(missing), ag.reconnects)
	if lost > 0 || strange > 0 || len(twice) > 0 || len(missing) > 0 {
		t.Fatalf("photos lost %d, doubled %d; answers twice %v, missing %v\n%s", lost, strange, twice, missing, x.LogTail(40))
	}
	// Each photo's bytes are in the file store under the message that carried it.
	for mid, data := range photos {
		m := ag.messages[mid]
		if len(m.Files) != 1 {
			t.Fatalf("photo message %s carries %d files", mid, len(m.Files))
		}
		if status, got, err := n.Do("GET", m.Files[0].DownloadURL, nil); err != nil || status != 200 || !bytes.Equal(got, data) {
			t.Fatalf("photo %s in the file store: %d, %d bytes, %v", mid, status, len(got), err)
		}
	}
}
