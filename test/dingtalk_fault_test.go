package test

import (
	"context"
	"fmt"
	"maps"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/ximd/ximd/handlers/adapter/dingtalk"
	"github.com/ximd/ximd/handlers/adapter/dingtalk/dingtalktest"
	"github.com/ximd/ximd/internal/testkit"
	"github.com/ximd/ximd/test/faultkit"
)

// Edge-api §7.2.6 under kill -9: an all-in-one ximd (embedded NATS, persistent data dir) bound
// to a person's one-to-one chat with an app's robot on the DingTalk fake is killed every
// 0.3–1.5 s and restarted while the person writes (Stream mode) and xAgent answers with streamed
// AI cards, each retransmitted until acked. Every third kill comes while DingTalk holds the
// answer of a card call it applied (between intent and outcome). Checked: no answer's card shown
// twice, every answer acked shown once with its final text, no card left PROCESSING or
// INPUTING, no card xAgent never sent, nothing answered delivery_outcome_unknown (DingTalk cards
// are settled by their outTrackId); every message the person wrote, those written while ximd
// was down included, reached xAgent, each under one message_id.
// XIMD_DINGTALK_FAULT_CYCLES (default 5) makes the run longer.
func TestFault_DingTalkKillNineCardsOnceNoneLost(t *testing.T) {
	skipFaults(t)
	cycles := faultkit.Env(t, "XIMD_DINGTALK_FAULT_CYCLES", 5)
	fake := dingtalktest.New()
	t.Cleanup(fake.Close)
	app, alice := fake.AddApp(), fake.AddUser("Alice")
	space := dingtalktest.DirectSpace(alice.StaffID)

	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	x := startAllInOne(t, ctx, "dingtalk")
	cfg := dingTalkConfig(fake, app, map[string]any{"user_id": alice.StaffID, "card_updates_per_second": 50, "first_preview_words": 1})
	if status, body, err := openDingTalk(x.node, "dt", cfg); err != nil || status != 200 {
		t.Fatalf("PUT dingtalk channel: %d %s %v", status, body, err)
	}

	var mu sync.Mutex
	written := map[string]string{} // message_id -> text
	whileDown := 0
	write := func(text string) {
		id := fake.Post(app, alice, "", text, false)
		mu.Lock()
		written[dingtalk.MessageIDOf(id)] = text
		mu.Unlock()
	}

	var inDoubt atomic.Int64
	killed, faults := x.killLoop(t, ctx, cycles, func(c int) {
		if c%3 == 2 {
			// DingTalk applies the next card call and holds its answer: the kill falls between
			// the intent and its outcome.
			fake.Hang("/v1.0/card/", time.Minute)
			if faultkit.Poll(5*time.Second, func() bool { return fake.Holding() > 0 }) {
				inDoubt.Add(1)
			}
		}
	}, func(c int) bool {
		fake.Hang("/v1.0/card/", 0)
		// The person writes while ximd is down.
		write(fmt.Sprintf("written while down %d", c))
		mu.Lock()
		whileDown++
		mu.Unlock()
		return true
	})

	// The person writes as long as the kills go on.
	posted := writeWhile(killed, 50*time.Millisecond, 150*time.Millisecond, func(i int) { write(fmt.Sprintf("question %d", i)) })

	ag, acks, want := x.answerAndHear(t, ctx, "dt", "answer %d: streamed into a card, then final", killed, posted, maps.Keys(written))

	// The person's messages: each reached xAgent, under its own message_id, with its text.
	lost, strange, repeated := ag.tally(want)
	wrong := 0
	for mid, text := range written {
		if ag.heard[mid] != 0 && ag.messages[mid].Text != text {
			wrong++
		}
	}

	// The cards: each answer on one card, FINISHED with its final text; no other card.
	finals := map[string]string{} // card text -> answer
	for text := range acks {
		finals[dingtalk.CardText(text)] = text
	}
	shown := map[string]int{}
	var unsettled, stray []string
	cards := fake.Cards(space)
	for _, c := range cards {
		if c.Status() != "3" {
			unsettled = append(unsettled, fmt.Sprintf("%s %q flowStatus %s", c.OutTrackID, c.Text(), c.Status()))
			continue
		}
		text, ok := finals[c.Text()]
		if !ok {
			stray = append(stray, fmt.Sprintf("%s %q", c.OutTrackID, c.Text()))
			continue
		}
		shown[text]++
	}
	twice, missing, unknown, _ := answersShown(acks, shown)
	t.Logf("summary: test=DingTalkKillNine cycles=%d faults=%d in_doubt_kills=%d written=%d written_while_down=%d user_lost=%d user_strange=%d user_wrong=%d user_redelivered=%d answers=%d cards=%d outcome_unknown=%d shown_twice=%d missing=%d unsettled=%d stray=%d reconnects=%d",
		cycles, faults.Load(), inDoubt.Load(), len(written), whileDown, lost, strange, wrong, repeated, len(acks), len(cards), unknown,
		len(twice), len(missing), len(unsettled), len(stray), ag.reconnects)
	if lost > 0 || strange > 0 || wrong > 0 || unknown > 0 || len(twice) > 0 || len(missing) > 0 || len(unsettled) > 0 || len(stray) > 0 {
		t.Fatalf("messages lost %d, strange %d, wrong %d; answers outcome_unknown %d, twice %v, missing %v; cards unsettled %v, stray %v\n%s",
			lost, strange, wrong, unknown, twice, missing, unsettled, stray, x.LogTail(40))
	}
	if whileDown == 0 {
		t.Fatal("no message was written while ximd was down")
	}
}

// Edge-api §7.2.6 in doubt: a direct final whose card DingTalk created but whose answer never
// came (ximd killed meanwhile) is sent again after the restart: the card its outTrackId names is
// brought to FINISHED, never created twice, and the final is accepted.
func TestDingTalk_KillNineBetweenIntentAndOutcome(t *testing.T) {
	skipFaults(t)
	fake := dingtalktest.New()
	t.Cleanup(fake.Close)
	app, bob := fake.AddApp(), fake.AddUser("Bob")
	killBetweenIntentAndOutcome(t, "dingtalk", inDoubtPlatform{
		bind: func(n *testkit.Node) (int, []byte, error) {
			return openDingTalk(n, "kd", dingTalkConfig(fake, app, map[string]any{"user_id": bob.StaffID, "streaming": "none"}))
		},
		hang: func(on bool) { fake.Hang("/v1.0/card/instances/createAndDeliver", held(on)) },
		shown: func() (texts []string) {
			for _, c := range fake.Cards(dingtalktest.DirectSpace(bob.StaffID)) {
				if c.Status() != "3" {
					texts = append(texts, "flowStatus "+c.Status()+": "+c.Text())
					continue
				}
				texts = append(texts, c.Text())
			}
			return texts
		},
	})
}
