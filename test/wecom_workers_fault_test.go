package test

import (
	"context"
	"fmt"
	"maps"
	"math/rand/v2"
	"os"
	"path/filepath"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/ximd/ximd/handlers/adapter/wecom"
	"github.com/ximd/ximd/handlers/adapter/wecom/wecomtest"
	"github.com/ximd/ximd/internal/testkit"
	"github.com/ximd/ximd/test/faultkit"
)

// Edge-api §7.2.7 (one subscribed WebSocket per robot, across all workers) under kill -9: one
// nats-server, one `ximd gateway` and two `ximd worker` processes; six people's single chats
// with one robot of the long-connection fake, bound through the gateway. While the people write
// and xAgent streams answers to every chat over the gateway's /v1/ws (each retransmitted until
// acked), a worker is killed every 1–3 s and restarted: the worker holding the robot's
// connection (its ximd_polled_channels > 0) and the other in turn; every other kill of the
// holder waits until the other worker has taken the robot over before restarting it.
//
// No answer is shown twice, and every answer acked accepted or duplicate is shown (one whose
// relayed call a kill interrupted may be answered delivery_outcome_unknown: aibot_send_msg has
// no key; counted). Every message written while a worker was down reaches xAgent under its one
// message_id: the holder's connection is gone by then (the fake delivers the callbacks of a robot
// without a connection at its next subscribe, wecomtest/README.md) or the live holder takes it.
// A message written while both workers were up reaches xAgent under its one message_id or not
// at all: one WeCom pushed to a holder killed before it submitted it is lost, since WeCom asks
// no acknowledgement of a callback and keeps no position to read from again: counted, not
// failed (up_lost=; callbacks_dropped_logged= counts the wecom_callbacks_dropped lines, callbacks
// a worker let go without a kill). The workers never fight over the connection: the successful
// aibot_subscribes stay within those of the setup, two per kill of the holder (the takeover and
// the way back) and one more, none for a kill of the other worker (a worker just restarted
// takes no poll key before it has heard the others); longest_unconnected= is the longest time the robot had
// no connection. XIMD_WECOM_WORKERS_FAULT_CYCLES (default 3) sets the number of kills.
func TestFault_WeComWorkersKillNineOneConnection(t *testing.T) {
	skipFaults(t)
	cycles := faultkit.Env(t, "XIMD_WECOM_WORKERS_FAULT_CYCLES", 3)
	natsBin, ximdBin := clusterBinaries(t)
	dir, err := os.MkdirTemp("", "ximd-fault-wecomworkers-")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { // last: after every process is gone
		if t.Failed() {
			t.Logf("logs and data kept in %s", dir)
			return
		}
		_ = os.RemoveAll(dir)
	})
	ctx, cancel := context.WithCancel(context.Background())
	t.Cleanup(cancel)
	nats, err := faultkit.StartNATSCluster(ctx, natsBin, filepath.Join(dir, "nats"), 1, 0)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(nats.Close) // after the ximd processes' own cleanups (LIFO)

	token := "fault-token-" + testkit.NewID("t")
	env := append(ximdEnv(token), "XIM_NATS_URL="+nats.URL())
	start := func(role, name string) *faultkit.Ximd {
		addr, err := faultkit.FreeAddr()
		if err != nil {
			t.Fatal(err)
		}
		x, err := faultkit.StartXimd(ctx, name, ximdBin, role, addr, filepath.Join(dir, name+".log"),
			append(env, "XIM_DATA_DIR="+filepath.Join(dir, "data-"+name), "XIM_INSTANCE="+name))
		if x != nil {
			t.Cleanup(x.Close)
		}
		if err != nil {
			t.Fatal(err)
		}
		return x
	}
	// Fixed names: the robot's poll key hashes to the same worker whenever both are live.
	workers := []*faultkit.Ximd{start("worker", "wk-a"), start("worker", "wk-b")}
	gw := start("gateway", "gw")
	logTails := func() string {
		s := ""
		for _, x := range append([]*faultkit.Ximd{gw}, workers...) {
			s += fmt.Sprintf("--- %s\n%s\n", x.Name, x.LogTail(30))
		}
		return s
	}
	if !faultkit.Poll(30*time.Second, func() bool {
		return workerGauge(workers[0].Addr, "ximd_workers_live") == 2 && workerGauge(workers[1].Addr, "ximd_workers_live") == 2
	}) {
		t.Fatalf("the two workers do not see each other\n%s", logTails())
	}

	fake := wecomtest.New()
	t.Cleanup(fake.Close)
	bot := fake.AddBot("Helper")
	people := []string{"alice", "bob", "carol", "dave", "erin", "frank"}
	gwNode := &testkit.Node{Token: token, Addr: gw.Addr}
	for i, p := range people {
		fake.Met(bot, wecomtest.Single(p))
		cfg := map[string]any{"bot_id": bot.ID, "secret": bot.Secret, "user_id": p, "ws_url": fake.URL(), "first_preview_words": 0}
		if status, body, err := openWeCom(gwNode, fmt.Sprintf("wc%d", i), cfg); err != nil || status != 200 {
			t.Fatalf("PUT wecom channel: %d %s %v", status, body, err)
		}
	}

	// holder is the one running worker polling the robot (-1: none, or two in a hand-over).
	holder := func() int {
		h := -1
		for i, w := range workers {
			if w.Running() && workerGauge(w.Addr, "ximd_polled_channels") > 0 {
				if h >= 0 {
					return -1
				}
				h = i
			}
		}
		return h
	}
	held := func() int {
		h := -1
		if !faultkit.Poll(30*time.Second, func() bool { h = holder(); return h >= 0 && fake.Connected(bot) }) {
			return -1
		}
		return h
	}
	if held() < 0 {
		t.Fatalf("no worker holds the robot's connection\n%s", logTails())
	}
	setupSubscribes := fake.Subscribes(bot)

	var mu sync.Mutex
	up := map[string]bool{}   // message_id -> written while both workers were up
	down := map[string]bool{} // message_id -> written while a worker was down
	var n atomic.Int64
	say := func(set map[string]bool) {
		i := n.Add(1)
		p := people[int(i)%len(people)]
		msgid := fake.Say(bot, wecomtest.Single(p), p, fmt.Sprintf("message %d from %s", i, p), false)
		mu.Lock()
		set[wecom.MessageIDOf(bot.ID, msgid)] = true
		mu.Unlock()
	}
	// relayed sums ximd_relayed_calls_total{way="sent"} over every run of the workers: each run's
	// count read just before its kill, and at the end.
	var relayed atomic.Int64
	sent := func(w *faultkit.Ximd) {
		if v := workerGauge(w.Addr, `ximd_relayed_calls_total{way="sent"}`); v > 0 {
			relayed.Add(int64(v))
		}
	}

	// The killer: the holder on even cycles, the other worker on odd ones.
	var faults, holderKills, takeovers atomic.Int64
	killed := make(chan struct{})
	go func() {
		defer close(killed)
		for c := 0; c < cycles && ctx.Err() == nil; c++ {
			time.Sleep(time.Duration(1000+rand.IntN(2000)) * time.Millisecond)
			h := held()
			if h < 0 {
				t.Errorf("kill %d: no worker holds the robot's connection", c+1)
				return
			}
			victim, other := h, 1-h
			if c%2 == 1 {
				victim, other = other, victim
			}
			x := workers[victim]
			before := fake.Subscribes(bot)
			sent(x)
			if err := x.Kill(); err != nil {
				t.Error(err)
				return
			}
			faults.Add(1)
			t0 := time.Now()
			how := "restarted at once"
			if victim == h {
				k := holderKills.Add(1)
				// The dead holder's connection is gone: closed, or replaced by the other's subscribe.
				if !faultkit.Poll(10*time.Second, func() bool { return !fake.Connected(bot) || fake.Subscribes(bot) > before }) {
					t.Errorf("kill %d: the fake still sees the killed holder's connection", c+1)
					return
				}
				for range 3 {
					say(down)
				}
				if k%2 == 1 { // every other kill of the holder: the other worker takes the robot over
					if !faultkit.Poll(30*time.Second, func() bool { return holder() == other && fake.Connected(bot) }) {
						t.Errorf("kill %d: %s never took the robot over from the killed %s", c+1, workers[other].Name, x.Name)
						return
					}
					takeovers.Add(1)
					how = fmt.Sprintf("taken over by %s after %s", workers[other].Name, time.Since(t0).Round(time.Millisecond))
				}
			}
			for range 3 {
				say(down)
			}
			if err := x.Restart(ctx); err != nil {
				t.Error(err)
				return
			}
			t.Logf("kill %d: %s (holder: %v), %s; subscribes so far %d", c+1, x.Name, victim == h, how, fake.Subscribes(bot))
		}
	}()

	// The people write as long as the kills go on.
	posted := make(chan struct{})
	go func() {
		defer close(posted)
		for i := 0; i < 10 || !faultkit.Closed(killed); i++ {
			say(up)
			time.Sleep(time.Duration(50+rand.IntN(150)) * time.Millisecond)
		}
	}()

	// The longest time the robot had no subscribed connection, sampled every 50 ms.
	var gapMu sync.Mutex
	var gap, longestGap time.Duration
	var unconnectedSince time.Time
	watched := make(chan struct{})
	watchCtx, stopWatch := context.WithCancel(ctx)
	go func() {
		defer close(watched)
		tick := time.NewTicker(50 * time.Millisecond)
		defer tick.Stop()
		for {
			select {
			case <-watchCtx.Done():
				return
			case now := <-tick.C:
				gapMu.Lock()
				switch {
				case fake.Connected(bot):
					unconnectedSince = time.Time{}
				case unconnectedSince.IsZero():
					unconnectedSince = now
				default:
					gap = now.Sub(unconnectedSince)
					longestGap = max(longestGap, gap)
				}
				gapMu.Unlock()
			}
		}
	}()

	// xAgent answers about once a second over the six chats: each chat's 30 replies a minute
	// (previews included) then last through the kills instead of being spent in the first seconds.
	ag := &faultAgent{t: t, addr: gw.Addr, token: token, heard: map[string]int{}, proc: gw.Proc}
	defer ag.close()
	acks := map[string]string{}
	for i := 0; i < 10 || !faultkit.Closed(killed); i++ {
		text := fmt.Sprintf("answer %d: streamed, then final", i)
		acks[text] = ag.answer(ctx, fmt.Sprintf("wc%d", i%len(people)), fmt.Sprintf("m_%03d", i), text, true)
		time.Sleep(time.Duration(700+rand.IntN(600)) * time.Millisecond) // pacing, not a wait for a condition
	}
	<-killed
	<-posted
	if t.Failed() {
		t.FailNow()
	}
	mu.Lock()
	defer mu.Unlock()
	ag.hearAll(ctx, down)
	ag.listen(ctx, 2*time.Second) // late doubles
	written := maps.Clone(up)
	maps.Copy(written, down)
	downLost, _, _ := ag.tally(down)
	lost, strange, redelivered := ag.tally(written)
	upLost := lost - downLost
	// Every answer was acked after WeCom answered its call: what is shown is final, but read
	// until the acked ones are all there (or the deadline).
	var twice, missing []string
	unknown := 0
	faultkit.Poll(10*time.Second, func() bool {
		shown := map[string]int{}
		for _, p := range people {
			for _, m := range fake.Messages(bot, wecomtest.Single(p)) {
				shown[m.Text]++
			}
		}
		twice, missing, unknown, _ = answersShown(acks, shown)
		return len(missing) == 0
	})
	if held() < 0 {
		t.Errorf("at the end no worker holds the robot's connection")
	}
	for _, w := range workers {
		sent(w)
	}
	stopWatch()
	<-watched
	subs := fake.Subscribes(bot)
	limit := setupSubscribes + 2*int(holderKills.Load()) + 1 // a takeover and the way back per kill of the holder; none for the other
	dropped := 0
	for _, w := range workers {
		dropped += w.LogCount(`"wecom_callbacks_dropped"`)
	}
	t.Logf("summary: test=WeComWorkersKillNine cycles=%d faults=%d holder_kills=%d takeovers=%d written_up=%d up_lost=%d written_down=%d down_lost=%d redelivered=%d strange=%d answers=%d outcome_unknown=%d shown_twice=%d missing=%d subscribes=%d setup_subscribes=%d subscribes_limit=%d longest_unconnected=%s callbacks_dropped_logged=%d relayed_sent=%d reconnects=%d",
		cycles, faults.Load(), holderKills.Load(), takeovers.Load(), len(up), upLost, len(down), downLost, redelivered, strange, len(acks), unknown, len(twice), len(missing), subs, setupSubscribes, limit, longestGap.Round(10*time.Millisecond), dropped, relayed.Load(), ag.reconnects)
	if downLost > 0 || strange > 0 || len(twice) > 0 || len(missing) > 0 || subs > limit {
		t.Fatalf("written while a worker was down lost %d; heard under unknown ids %d; answers twice %v, missing %v; %d subscribes (limit %d: the workers fight over the connection)\n%s",
			downLost, strange, twice, missing, subs, limit, logTails())
	}
}
