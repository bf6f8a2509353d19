package test

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"iter"
	"math/rand/v2"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
	"maunium.net/go/mautrix/id"

	"github.com/ximd/ximd/handlers/adapter/matrix"
	"github.com/ximd/ximd/internal/testkit"
	"github.com/ximd/ximd/profile"
	"github.com/ximd/ximd/subjects"
	"github.com/ximd/ximd/test/dendrite"
	"github.com/ximd/ximd/test/faultkit"
)

// Edge-api §7.2 against a real homeserver: kill -9 of ximd at random moments loses nothing and
// doubles nothing. An all-in-one ximd (embedded NATS, persistent data dir) bound to a Dendrite
// room is killed every 0.3–1.5 s and restarted while xAgent streams and sends answers (each
// retransmitted with its message_id until acked) and a person in the room writes. In the end the
// room shows every answer exactly once with its final text, no answer was refused as
// delivery_outcome_unknown (Matrix settles doubt by txnId and lookup), and xAgent got every one
// of the person's messages. XIMD_MATRIX_FAULT_CYCLES (default 6) and XIMD_MATRIX_FAULT_MESSAGES
// (default 20: answers and questions go on while the kills do) make the run longer.
func TestMatrix_KillNineNeverTwiceNeverLost(t *testing.T) {
	skipFaults(t)
	cycles := faultkit.Env(t, "XIMD_MATRIX_FAULT_CYCLES", 6)
	nMessages := faultkit.Env(t, "XIMD_MATRIX_FAULT_MESSAGES", 20)
	hs := dendrite.Start(t, dendrite.Options{})
	bot, alice := hs.Register(t, "bot"), hs.Register(t, "alice")
	room := hs.Room(t, bot, false, alice)

	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	x := startAllInOne(t, ctx, "matrix")
	n, dir := x.node, x.dir
	if status, body, err := openMatrix(n, "mx", map[string]any{"homeserver": hs.URL, "access_token": bot.Token, "room_id": string(room)}); err != nil || status != 200 {
		t.Fatalf("PUT matrix channel: %d %s %v", status, body, err)
	}

	// The killer.
	var faults atomic.Int64
	killed := make(chan struct{})
	go func() {
		defer close(killed)
		for c := 0; c < cycles && ctx.Err() == nil; c++ {
			time.Sleep(time.Duration(300+rand.IntN(1200)) * time.Millisecond)
			if err := x.Kill(); err != nil {
				t.Error(err)
				return
			}
			faults.Add(1)
			if err := x.Restart(ctx); err != nil {
				t.Error(err)
				return
			}
		}
	}()

	// The person writes while xAgent answers, as long as the kills go on.
	var mu sync.Mutex
	var asked []id.EventID
	posted := make(chan struct{})
	go func() {
		defer close(posted)
		for i := 0; i < nMessages || !faultkit.Closed(killed); i++ {
			resp, err := alice.Client.SendText(ctx, room, fmt.Sprintf("question %d", i))
			if err != nil {
				t.Error(err)
				return
			}
			mu.Lock()
			asked = append(asked, resp.EventID)
			mu.Unlock()
			time.Sleep(time.Duration(20+rand.IntN(60)) * time.Millisecond)
		}
	}()

	ag := x.agent(t)
	defer ag.close()
	var unknown, duplicates int
	answers := 0
	for i := 0; i < nMessages || !faultkit.Closed(killed); i++ { // answers while the kills go on
		answers++
		switch ag.answer(ctx, "mx", fmt.Sprintf("m_%03d", i), fmt.Sprintf("answer %d: streamed, then final", i), i%2 == 0) {
		case profile.AckDuplicate:
			duplicates++ // delivered before a kill, its ack lost: answered again, not shown again
		case profile.CodeDeliveryOutcomeUnknown:
			unknown++
		}
	}
	<-killed
	<-posted
	// Every question reaches xAgent (each acked; re-sends of one message_id are allowed).
	mu.Lock()
	want := map[string]bool{}
	for _, ev := range asked {
		want[matrix.MessageIDOf(ev)] = true
	}
	mu.Unlock()
	ag.hearAll(ctx, want)
	lost := 0
	for i, ev := range asked {
		if ag.heard[matrix.MessageIDOf(ev)] == 0 {
			lost++
			t.Logf("question %d (%s, %s) never reached xAgent", i, ev, matrix.MessageIDOf(ev))
		}
	}
	strange := 0
	for mid := range ag.heard {
		if !want[mid] {
			strange++ // a message_id no question gives: a second message for one event
		}
	}

	// The room: every answer exactly once, with its final text. Dendrite's /messages lags its
	// sends by a few milliseconds (the sync API is fed asynchronously): read until it settles.
	var shownTwice, missing []string
	var shown map[string]int
	for deadline := time.Now().Add(10 * time.Second); ; {
		shown, shownTwice, missing = map[string]int{}, nil, nil
		for _, m := range alice.Messages(t, room) {
			if m.Sender == bot.ID {
				shown[m.Body]++
			}
		}
		for i := 0; i < answers; i++ {
			text := fmt.Sprintf("answer %d: streamed, then final", i)
			switch shown[text] {
			case 1:
			case 0:
				missing = append(missing, text)
			default:
				shownTwice = append(shownTwice, text)
			}
			delete(shown, text)
		}
		if len(missing) == 0 || time.Now().After(deadline) {
			break
		}
		time.Sleep(100 * time.Millisecond)
	}
	// Dendrite's /messages sometimes never lists an event its roomserver stored (its sync API is
	// fed asynchronously): an answer missing there is looked up by the id ximd recorded for it.
	var unindexed []string
	missing, unindexed = inRoomserver(t, dir, alice, room, missing)
	t.Logf("summary: test=MatrixKillNine cycles=%d faults=%d answers=%d questions=%d answers_acked_duplicate=%d outcome_unknown=%d shown_twice=%d missing=%d unindexed_by_homeserver=%d other_bodies=%d questions_lost=%d questions_doubled=%d reconnects=%d",
		cycles, faults.Load(), answers, len(want), duplicates, unknown, len(shownTwice), len(missing), len(unindexed), len(shown), lost, strange, ag.reconnects)
	if unknown > 0 || len(shownTwice) > 0 || len(missing) > 0 || len(shown) > 0 || lost > 0 || strange > 0 {
		t.Fatalf("twice %v, missing %v, other bodies %v, %d unknown, %d questions lost, %d doubled\n%s", shownTwice, missing, shown, unknown, lost, strange, x.LogTail(40))
	}
}

// inRoomserver splits the answers missing from /messages into those the homeserver has not
// (still missing) and those whose first event it has under the event id ximd recorded
// (unindexed), reading the records from the running ximd's NATS.
func inRoomserver(t *testing.T, dir string, u *dendrite.User, room id.RoomID, missing []string) (still, unindexed []string) {
	if len(missing) == 0 {
		return nil, nil
	}
	raw, _ := os.ReadFile(filepath.Join(dir, "data", "nats.url"))
	auth, err := nats.NkeyOptionFromSeed(filepath.Join(dir, "data", "nats.nk"))
	if err != nil {
		t.Fatal(err)
	}
	nc, err := nats.Connect(strings.TrimSpace(string(raw)), auth)
	if err != nil {
		t.Fatal(err)
	}
	defer nc.Close()
	js, _ := jetstream.New(nc)
	kv, err := js.KeyValue(context.Background(), subjects.BucketMessages)
	if err != nil {
		t.Fatal(err)
	}
	for _, text := range missing {
		var i int
		_, _ = fmt.Sscanf(text, "answer %d:", &i)
		e, err := kv.Get(context.Background(), fmt.Sprintf("mx.m_%03d", i))
		var rec struct {
			TargetMessageID id.EventID `json:"target_message_id"`
		}
		if err == nil {
			_ = json.Unmarshal(e.Value(), &rec)
		}
		if rec.TargetMessageID == "" {
			still = append(still, text)
			continue
		}
		// The message's first event, under the id ximd recorded and carrying its key (a streamed
		// message's final is an edit of it, whose id ximd does not keep).
		ev, err := u.Client.GetEvent(context.Background(), room, rec.TargetMessageID)
		if err != nil || !strings.Contains(string(ev.Content.VeryRaw), fmt.Sprintf(`"mx:m_%03d"`, i)) {
			still = append(still, text)
			continue
		}
		unindexed = append(unindexed, text)
	}
	return still, unindexed
}

// allInOne is an all-in-one ximd process (embedded NATS, a persistent data dir) for kill -9
// tests: its binary, address, node handle and log, the data kept when the test fails.
type allInOne struct {
	*faultkit.Ximd
	node *testkit.Node
	dir  string
}

// killLoop kills the process with kill -9 and restarts it, cycles times, 0.3–1.5s apart, in a
// goroutine of its own, until ctx ends: before is called just before each kill, down while the
// process is down (either may be nil; down returning false ends the loop, its error reported).
// It returns a channel closed when the loop ended and the count of kills made.
func (x *allInOne) killLoop(t *testing.T, ctx context.Context, cycles int, before func(c int), down func(c int) bool) (<-chan struct{}, *atomic.Int64) {
	done := make(chan struct{})
	var faults atomic.Int64
	go func() {
		defer close(done)
		for c := 0; c < cycles && ctx.Err() == nil; c++ {
			time.Sleep(time.Duration(300+rand.IntN(1200)) * time.Millisecond)
			if before != nil {
				before(c)
			}
			if err := x.Kill(); err != nil {
				t.Error(err)
				return
			}
			faults.Add(1)
			if down != nil && !down(c) {
				return
			}
			if err := x.Restart(ctx); err != nil {
				t.Error(err)
				return
			}
		}
	}()
	return done, &faults
}

// clusterBinaries builds nats-server and ximd (once per test binary) for the tests that run
// them as processes of their own.
func clusterBinaries(t *testing.T) (natsBin, ximdBin string) {
	t.Helper()
	natsBin, err := faultkit.BuildOnce("nats-server", "github.com/nats-io/nats-server/v2")
	if err != nil {
		t.Fatal(err)
	}
	ximdBin, err = faultkit.BuildOnce("ximd", "github.com/ximd/ximd/cmd/ximd")
	if err != nil {
		t.Fatal(err)
	}
	return natsBin, ximdBin
}

// startAllInOne starts an all-in-one ximd with the fault suite's settings and env.
func startAllInOne(t *testing.T, ctx context.Context, name string, env ...string) *allInOne {
	t.Helper()
	bin, err := faultkit.BuildOnce("ximd", "github.com/ximd/ximd/cmd/ximd")
	if err != nil {
		t.Fatal(err)
	}
	addr, err := faultkit.FreeAddr()
	if err != nil {
		t.Fatal(err)
	}
	dir, err := os.MkdirTemp("", "ximd-fault-"+name+"-")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		if t.Failed() {
			t.Logf("logs and data kept in %s", dir)
			return
		}
		_ = os.RemoveAll(dir)
	})
	token := "fault-token-" + testkit.NewID("t")
	env = append(append(ximdEnv(token), "XIM_DATA_DIR="+filepath.Join(dir, "data"), "XIM_NATS_PORT=-1", "XIM_NATS_MONITOR_PORT=0"), env...)
	x, err := faultkit.StartXimd(ctx, "ximd", bin, "all", addr, filepath.Join(dir, "ximd.log"), env)
	if x != nil {
		t.Cleanup(x.Close)
	}
	if err != nil {
		t.Fatal(err)
	}
	return &allInOne{Ximd: x, node: &testkit.Node{Token: token, Addr: addr}, dir: dir}
}

// agent is xAgent over reconnecting WebSockets to this process.
func (p *allInOne) agent(t *testing.T) *faultAgent {
	return &faultAgent{t: t, addr: p.node.Addr, token: p.node.Token, heard: map[string]int{}, proc: p.Proc}
}

// inDoubtPlatform is a platform fake as the kill-between-intent-and-outcome test drives it.
type inDoubtPlatform struct {
	bind  func(n *testkit.Node) (int, []byte, error) // binds channel "kd" with streaming none
	hang  func(on bool)                              // the send applied, its answer held
	shown func() []string                            // the texts of the bot's messages
}

// killBetweenIntentAndOutcome: an all-in-one ximd sends a direct final, the platform applies it
// and holds the answer, ximd is killed (-9) and restarted; the retransmitted final must be
// accepted and the chat show exactly one message, with its text.
func killBetweenIntentAndOutcome(t *testing.T, name string, p inDoubtPlatform) {
	t.Helper()
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	x := startAllInOne(t, ctx, name, "XIM_TARGET_RETRY_BUDGET=30s")
	if status, body, err := p.bind(x.node); err != nil || status != 200 {
		t.Fatalf("PUT %s channel: %d %s %v", name, status, body, err)
	}
	ag := x.agent(t)
	defer ag.close()
	p.hang(true)
	if _, err := ag.conn(ctx).Send(ctx, "kd", profile.TypeMessage, msg("m_doubt", "shown exactly once")); err != nil {
		t.Fatal(err)
	}
	if !faultkit.Poll(20*time.Second, func() bool { return len(p.shown()) == 1 }) {
		t.Fatalf("the send never reached %s\n%s", name, x.LogTail(20))
	}
	if err := x.Kill(); err != nil {
		t.Fatal(err)
	}
	p.hang(false)
	if err := x.Restart(ctx); err != nil {
		t.Fatal(err)
	}
	if status := ag.answer(ctx, "kd", "m_doubt", "shown exactly once", false); status != profile.AckAccepted && status != profile.AckDuplicate {
		t.Fatalf("the final after the restart: %s, want accepted", status)
	}
	if shown := p.shown(); len(shown) != 1 || shown[0] != "shown exactly once" {
		t.Fatalf("the chat shows %q, want the final once", shown)
	}
}

// faultAgent plays xAgent over reconnecting WebSockets: it answers with finals until each is
// acked, and acks every user message it hears.
type faultAgent struct {
	t          *testing.T
	addr       string
	token      string
	a          *testkit.Agent
	heard      map[string]int             // user message_id -> deliveries
	messages   map[string]profile.Message // user message_id -> the message, when not nil
	reconnects int
	acks       map[string]string
	proc       *faultkit.Proc // the process behind addr, its log shown when it stays away
}

func (g *faultAgent) close() {
	if g.a != nil {
		g.a.Close()
	}
}

// conn returns a live connection, dialling until ximd answers.
func (g *faultAgent) conn(ctx context.Context) *testkit.Agent {
	if g.a != nil && g.a.Err() == nil {
		return g.a
	}
	g.close()
	deadline := time.Now().Add(connPatience)
	for ctx.Err() == nil {
		dctx, cancel := context.WithTimeout(ctx, 2*time.Second)
		a, err := testkit.Dial(dctx, g.addr, g.token)
		cancel()
		if err == nil {
			g.a = a
			g.reconnects++
			return a
		}
		if time.Now().After(deadline) {
			tail := ""
			if g.proc != nil {
				tail = "\n" + g.proc.LogTail(40)
			}
			g.t.Fatalf("no WebSocket to ximd at %s in %s: %v%s", g.addr, connPatience, err, tail)
		}
		time.Sleep(100 * time.Millisecond)
	}
	return nil
}

// connPatience bounds a reconnection: past a restart's readiness (60 s at most).
const connPatience = 90 * time.Second

// answer delivers one answer, streamed or direct, until it is acked; it returns the ack's
// status, or its code when refused for good. A retryable refusal (an error packet, a rejected
// ack) is retried after a pause growing to 1 s, for as long as a platform's rate-limit window
// and ximd's target retry budget may hold it (answerPatience).
func (g *faultAgent) answer(ctx context.Context, channel, messageID, text string, stream bool) string {
	deadline := time.Now().Add(answerPatience)
	pause := 100 * time.Millisecond
	last := "nothing sent"
	for attempt := 0; ctx.Err() == nil; attempt++ {
		if time.Now().After(deadline) {
			g.t.Fatalf("%s: no ack in %s (%d attempts, the last: %s)", messageID, answerPatience, attempt, last)
		}
		if attempt > 0 && last != "no reply" {
			time.Sleep(pause)
			pause = min(2*pause, time.Second)
		}
		a := g.conn(ctx)
		if stream && attempt == 0 {
			words := strings.SplitAfter(text, " ")
			for i, w := range words[:len(words)-1] {
				if _, err := a.Send(ctx, channel, profile.TypeDelta, delta(messageID, i+1, w)); err != nil {
					break
				}
			}
		}
		pid, err := a.Send(ctx, channel, profile.TypeMessage, msg(messageID, text))
		if err != nil {
			last = "send: " + err.Error()
			continue
		}
		env, err := g.replyOf(a, pid, 5*time.Second)
		if err != nil {
			last = "no reply"
			g.close() // the reply may never come on this connection: retransmit on a new one
			continue
		}
		ack, err := testkit.AckOf(env)
		if err != nil {
			if e, eerr := testkit.ErrorOf(env); eerr == nil && e.Retryable {
				last = "error " + e.Code
				continue
			}
			g.t.Fatalf("%s: %s %s", messageID, env.Type, env.Payload)
		}
		switch {
		case ack.Status == profile.AckAccepted || ack.Status == profile.AckDuplicate:
			if g.acks == nil {
				g.acks = map[string]string{}
			}
			g.acks[messageID] += ack.Status + "@" + time.Now().Format("05.000") + " "
			return ack.Status
		case ack.Code == profile.CodeDeliveryOutcomeUnknown:
			return ack.Code
		case retryable(ack):
			last = "rejected " + ack.Code + ": " + ack.Message
		default:
			g.t.Fatalf("%s: ack %+v", messageID, ack)
		}
	}
	return ""
}

// answerPatience bounds one answer's retries: past a platform's minute-long rate-limit window
// and ximd's 2-minute target retry budget (XIM_TARGET_RETRY_BUDGET's default).
const answerPatience = 3 * time.Minute

// replyOf waits for the reply to pid, acking the user messages that come meanwhile.
func (g *faultAgent) replyOf(a *testkit.Agent, pid string, timeout time.Duration) (profile.Envelope, error) {
	deadline := time.Now().Add(timeout)
	for {
		left := time.Until(deadline)
		if left <= 0 {
			return profile.Envelope{}, errors.New("no reply")
		}
		env, err := a.Next(left)
		if err != nil {
			return env, err
		}
		if env.ReplyTo == pid {
			return env, nil
		}
		g.onPacket(a, env)
	}
}

// listen reads packets for d, acking user messages.
func (g *faultAgent) listen(ctx context.Context, d time.Duration) {
	a := g.conn(ctx)
	if a == nil {
		return
	}
	for end := time.Now().Add(d); time.Now().Before(end); {
		env, err := a.Next(time.Until(end))
		if err != nil {
			if a.Err() != nil {
				g.close()
			}
			return
		}
		g.onPacket(a, env)
	}
}

func (g *faultAgent) onPacket(a *testkit.Agent, env profile.Envelope) {
	if env.Type != profile.TypeMessage || env.ReplyTo != "" {
		return
	}
	var m profile.Message
	if json.Unmarshal(env.Payload, &m) != nil {
		return
	}
	g.heard[m.MessageID]++
	if g.messages != nil {
		g.messages[m.MessageID] = m
	}
	b, err := testkit.Packet(testkit.NewID("pkt"), env.ChannelID, profile.TypeAck, map[string]any{"message_id": m.MessageID, "status": "accepted"})
	if err != nil {
		return
	}
	var p profile.Envelope
	_ = json.Unmarshal(b, &p)
	p.ReplyTo = env.PacketID
	b, _ = json.Marshal(p)
	_ = a.SendRaw(context.Background(), b)
}

func (g *faultAgent) heardAll(want map[string]bool) bool {
	for mid := range want {
		if g.heard[mid] == 0 {
			return false
		}
	}
	return true
}

// hearAll listens until it has heard every message_id of want, 60 s at most.
func (g *faultAgent) hearAll(ctx context.Context, want map[string]bool) {
	deadline := time.Now().Add(60 * time.Second)
	for !g.heardAll(want) && time.Now().Before(deadline) {
		g.listen(ctx, time.Second)
	}
}

// writeWhile writes as a person while the kills go on (until killed closes) and 10 times at
// least: write(i) for i = 0, 1, …, in a goroutine of its own, pause and up to jitter (> 0) more
// apart. The channel it returns closes after the last.
func writeWhile(killed <-chan struct{}, pause, jitter time.Duration, write func(i int)) <-chan struct{} {
	done := make(chan struct{})
	go func() {
		defer close(done)
		for i := 0; i < 10 || !faultkit.Closed(killed); i++ {
			write(i)
			time.Sleep(pause + rand.N(jitter))
		}
	}()
	return done
}

// answerAndHear plays xAgent (with the messages it hears kept) to the end of a kill -9 loop:
// while the kills go on, and 10 times at least, it answers on channel with
// fmt.Sprintf(answer, i) as message_id m_%03d (streamed, then final, until acked); once the
// kills and the person's writing are over (killed and writing closed), it hears every
// message_id of written, which it ranges only then (hearAll). It returns the agent, closed
// when the test ends, each answer's ack status (or its refusal code) by the answer's text, and
// the message_ids it waited for.
func (x *allInOne) answerAndHear(t *testing.T, ctx context.Context, channel, answer string, killed, writing <-chan struct{}, written iter.Seq[string]) (ag *faultAgent, acks map[string]string, want map[string]bool) {
	ag = x.agent(t)
	ag.messages = map[string]profile.Message{}
	t.Cleanup(ag.close)
	acks = map[string]string{}
	for i := 0; i < 10 || !faultkit.Closed(killed); i++ {
		text := fmt.Sprintf(answer, i)
		acks[text] = ag.answer(ctx, channel, fmt.Sprintf("m_%03d", i), text, true)
	}
	<-killed
	<-writing
	want = map[string]bool{}
	for mid := range written {
		want[mid] = true
	}
	ag.hearAll(ctx, want)
	return ag, acks, want
}

// tally counts the message_ids of want never heard (lost), those heard that want does not
// hold (strange), and those heard more than once (again: delivered again under the same
// message_id, as after an ack a kill cut off, which xAgent dedupes).
func (g *faultAgent) tally(want map[string]bool) (lost, strange, again int) {
	for mid := range want {
		if g.heard[mid] == 0 {
			lost++
		}
	}
	for mid, k := range g.heard {
		if !want[mid] {
			strange++
		}
		if k > 1 {
			again++
		}
	}
	return lost, strange, again
}

// answersShown sorts the answers (acks, by text) by how often the chat shows each (shown, by
// text): twice are those shown more than once; of the others, unknown counts those refused
// delivery_outcome_unknown and missing are those never shown. duplicate counts the answers
// acked duplicate (acked once before a kill cut the answer off).
func answersShown(acks map[string]string, shown map[string]int) (twice, missing []string, unknown, duplicate int) {
	for text, status := range acks {
		if status == profile.AckDuplicate {
			duplicate++
		}
		switch {
		case shown[text] > 1:
			twice = append(twice, text)
		case status == profile.CodeDeliveryOutcomeUnknown:
			unknown++
		case shown[text] == 0:
			missing = append(missing, text)
		}
	}
	return twice, missing, unknown, duplicate
}

// held is how long a platform fake holds an applied call's answer: a minute (past the call's
// timeout) while on, not at all after.
func held(on bool) time.Duration {
	if on {
		return time.Minute
	}
	return 0
}
