package test

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"math/rand/v2"
	"net/http"
	"path/filepath"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/ximd/ximd/handlers/adapter/webhook"
	"github.com/ximd/ximd/internal/testkit"
	"github.com/ximd/ximd/profile"
	"github.com/ximd/ximd/test/faultkit"
)

// edge-api §4.1 under kill -9: ximd (embedded NATS, persistent data dir) is killed at random
// moments while new conversations write to a webhook bot, and restarted; the platform posts each
// message again until it is answered 202, xAgent acks what reaches it. At the end: one channel per
// conversation, every message passed on, none as two messages, and on every connection each
// channel's first chat.message came after its channel.opened (until it was acked).
// XIMD_BOT_FAULT_CYCLES sets the kills (default 4; ./test/faults runs 30).
func TestFault_BotOpeningsKillNine(t *testing.T) {
	skipFaults(t)
	cycles := faultkit.Env(t, "XIMD_BOT_FAULT_CYCLES", 4)
	const convs, each = 40, 4
	w := newFaultWorld(t, "BotKillNine", 0)
	token := "fault-token-" + testkit.NewID("t")
	bin, err := faultkit.BuildOnce("ximd", "github.com/ximd/ximd/cmd/ximd")
	if err != nil {
		t.Fatal(err)
	}
	addr, err := faultkit.FreeAddr()
	if err != nil {
		t.Fatal(err)
	}
	env := append(ximdEnv(token), "XIM_DATA_DIR="+filepath.Join(w.logDir, "data"), "XIM_NATS_PORT=-1", "XIM_NATS_MONITOR_PORT=0")
	x, err := faultkit.StartXimd(w.ctx, "ximd", bin, "all", addr, filepath.Join(w.logDir, "ximd.log"), env)
	if x != nil {
		t.Cleanup(x.Close)
	}
	if err != nil {
		t.Fatal(err)
	}
	n := &testkit.Node{Token: token, Addr: x.Addr}
	cfg := w.target.Config("none", "none")
	delete(cfg, "chat_id")
	if status, b, err := n.Do(http.MethodPut, "/v1/bots/fb", map[string]any{
		"connection":    map[string]any{"target_type": "im", "profiles": []string{"xagent.im.v2"}},
		"target":        map[string]any{"adapter": "webhook", "config": cfg},
		"conversations": map[string]any{"direct": "open", "max_per_minute": 1000},
	}); err != nil || status != http.StatusOK {
		t.Fatalf("PUT bot: %d %s %v", status, b, err)
	}

	// The platform: every message posted until answered 202, in order within its conversation.
	var posted, retried atomic.Int64 // answered 202; posted again (ximd was down or refused)
	var wg sync.WaitGroup
	for c := range convs {
		wg.Add(1)
		go func() {
			defer wg.Done()
			conv := fmt.Sprintf("c%02d", c)
			// Conversations start, and write, across the kills: openings meet them.
			time.Sleep(time.Duration(rand.IntN(max(cycles, 1)*500)) * time.Millisecond)
			for m := range each {
				if m > 0 {
					time.Sleep(time.Duration(100+rand.IntN(400)) * time.Millisecond)
				}
				raw, _ := json.Marshal(map[string]any{"conversation": map[string]any{"id": conv, "kind": "direct"},
					"sender": map[string]any{"id": conv}, "target_message_id": fmt.Sprint(conv, "-", m), "text": fmt.Sprint(conv, " says ", m)})
				for w.ctx.Err() == nil {
					req, _ := http.NewRequestWithContext(w.ctx, http.MethodPost, "http://"+addr+"/v1/targets/webhook/bots/fb/messages", bytes.NewReader(raw))
					req.Header.Set(webhook.SignatureHeader, webhook.Sign([]byte(faultSecret), raw))
					resp, err := http.DefaultClient.Do(req)
					if err == nil {
						resp.Body.Close()
						if resp.StatusCode == http.StatusAccepted {
							posted.Add(1)
							break
						}
					}
					retried.Add(1)
					time.Sleep(time.Duration(50+rand.IntN(200)) * time.Millisecond)
				}
			}
		}()
	}

	// xAgent: reconnects after every kill; per connection, a channel's chat.message must follow
	// a channel.opened on that connection until the channel's first message was acked.
	var mu sync.Mutex
	got := map[string]map[string]int{} // channel -> text -> times received
	acked := map[string]bool{}         // channels with an acked message
	var problems []string
	agentLoop := func(ctx context.Context) {
		for ctx.Err() == nil {
			dctx, cancel := context.WithTimeout(ctx, 5*time.Second)
			a, err := testkit.Dial(dctx, addr, token)
			cancel()
			if err != nil {
				time.Sleep(100 * time.Millisecond)
				continue
			}
			opened := map[string]bool{}
			for ctx.Err() == nil {
				env, err := a.Next(time.Second)
				if err != nil {
					if a.Err() != nil {
						break
					}
					continue
				}
				switch env.Type {
				case profile.TypeChannelOpened:
					opened[env.ChannelID] = true
				case profile.TypeMessage:
					var m profile.Message
					_ = json.Unmarshal(env.Payload, &m)
					mu.Lock()
					if !opened[env.ChannelID] && !acked[env.ChannelID] {
						problems = append(problems, "chat.message on "+env.ChannelID+" before channel.opened")
					}
					if got[env.ChannelID] == nil {
						got[env.ChannelID] = map[string]int{}
					}
					got[env.ChannelID][m.Text+"\x00"+m.MessageID]++
					mu.Unlock()
					b, _ := testkit.Packet(testkit.NewID("pkt"), env.ChannelID, profile.TypeAck, map[string]any{"message_id": m.MessageID, "status": "accepted"})
					var p profile.Envelope
					_ = json.Unmarshal(b, &p)
					p.ReplyTo = env.PacketID
					b, _ = json.Marshal(p)
					if a.SendRaw(ctx, b) == nil {
						mu.Lock()
						acked[env.ChannelID] = true
						mu.Unlock()
					}
				}
			}
			a.Close()
		}
	}
	actx, stopAgent := context.WithCancel(w.ctx)
	agentDone := make(chan struct{})
	go func() { defer close(agentDone); agentLoop(actx) }()
	defer func() { stopAgent(); <-agentDone }()

	for c := 0; c < cycles; c++ {
		time.Sleep(time.Duration(100+rand.IntN(900)) * time.Millisecond)
		if err := x.Kill(); err != nil {
			t.Fatal(err)
		}
		if err := x.Restart(w.ctx); err != nil {
			t.Fatal(err)
		}
	}
	wg.Wait()
	received := func() int {
		mu.Lock()
		defer mu.Unlock()
		texts := 0
		for _, m := range got {
			texts += len(m)
		}
		return texts
	}
	if !faultkit.Poll(2*time.Minute, func() bool { return received() >= convs*each }) {
		t.Fatalf("xAgent received %d distinct messages of %d (posted %d); log:\n%s", received(), convs*each, posted.Load(), x.LogTail(30))
	}
	mu.Lock()
	defer mu.Unlock()
	for _, p := range problems {
		t.Error(p)
	}
	if len(got) != convs {
		t.Errorf("%d channels got messages, want %d (one per conversation)", len(got), convs)
	}
	for ch, texts := range got {
		if len(texts) != each {
			t.Errorf("channel %s: %d distinct messages, want %d (a message passed on as two, or lost): %v", ch, len(texts), each, texts)
		}
	}
	status, b, _ := n.Do(http.MethodGet, "/v1/bots/fb", nil)
	if st, _ := jsonOf(t, b)["stats"].(map[string]any); status != 200 || st["channels"] != float64(convs) {
		t.Errorf("bot stats after the kills: %d %s", status, b)
	}
	t.Logf("summary: test=BotKillNine cycles=%d conversations=%d messages=%d posts_retried=%d channels=%d problems=%d", cycles, convs, convs*each, retried.Load(), len(got), len(problems))
}
