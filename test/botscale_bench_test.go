package test

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/ximd/ximd/handlers/adapter"
	"github.com/ximd/ximd/handlers/adapter/webhook"
	"github.com/ximd/ximd/internal/testkit"
	"github.com/ximd/ximd/subjects"
)

// BenchmarkBotChannels measures a node holding a bot's channels (edge-api §4.1 bounds; numbers
// in docs/perf.md): the ximd binary, all-in-one with its embedded NATS server, started on a data
// dir holding one webhook bot and XIMD_BOT_CHANNELS (default 100,000) of its channels, against the
// same node with none. It reports the resident set per idle channel (the difference of the two
// processes' VmRSS once ready, over the channel count), how long the restart took to answer
// /readyz 200, and the latency of a bot route post that opens a channel against one into an
// open conversation (p50/p99 of 500 each). Run it with
//
//	go test ./test -run '^$' -bench BotChannels -benchtime 1x
func BenchmarkBotChannels(b *testing.B) {
	n := 100_000
	if v, err := strconv.Atoi(os.Getenv("XIMD_BOT_CHANNELS")); err == nil && v > 0 {
		n = v
	}
	bin := buildXimdB(b)
	target, err := testkit.NewTarget("bench-secret-0123456789", testkit.TargetOptions{})
	if err != nil {
		b.Fatal(err)
	}
	defer target.Close()
	full, empty := b.TempDir(), b.TempDir()
	raw := seedBot(b, full, target, n)
	seedBot(b, empty, target, 0)
	for b.Loop() {
		base := runXimd(b, bin, empty)
		rss0 := base.rss(b)
		base.stop()
		p := runXimd(b, bin, full)
		rss := p.rss(b)
		b.ReportMetric(float64(rss-rss0)/float64(n), "B/idle-channel")
		b.ReportMetric(float64(p.ready.Milliseconds()), "ms-ready")
		b.ReportMetric(float64(base.ready.Milliseconds()), "ms-ready-empty")
		open, into := postLatencies(b, p.addr, target.Secret, 500)
		b.ReportMetric(float64(pct(open, 50).Microseconds()), "µs-open-p50")
		b.ReportMetric(float64(pct(open, 99).Microseconds()), "µs-open-p99")
		b.ReportMetric(float64(pct(into, 50).Microseconds()), "µs-open-conv-p50")
		b.ReportMetric(float64(pct(into, 99).Microseconds()), "µs-open-conv-p99")
		// The raw baseline: one KV create on the same kind of server (what an opening adds).
		b.ReportMetric(float64(pct(raw, 50).Microseconds()), "µs-raw-kv-create-p50")
		b.ReportMetric(float64(pct(raw, 99).Microseconds()), "µs-raw-kv-create-p99")
		p.stop()
	}
}

func buildXimdB(b *testing.B) string {
	bin := filepath.Join(b.TempDir(), "ximd")
	if out, err := exec.Command("go", "build", "-o", bin, "../cmd/ximd").CombinedOutput(); err != nil {
		b.Fatalf("go build: %v\n%s", err, out)
	}
	return bin
}

// seedBot puts bot "b" (webhook, direct open) into a node on dir and writes n channel records of
// it straight into KV xim_bot_channels, as the bot's openings write them. It returns the latencies
// of 500 raw KV creates of such records, one at a time, on that node's server.
func seedBot(b *testing.B, dir string, target *testkit.Target, n int) []time.Duration {
	node, err := testkit.StartNode(testkit.NodeOptions{DataDir: dir})
	if err != nil {
		b.Fatal(err)
	}
	defer node.Stop()
	cfg := target.Config("edit", "typing")
	delete(cfg, "chat_id")
	status, body, _ := node.Do(http.MethodPut, "/v1/bots/b", map[string]any{
		"connection":    map[string]any{"target_type": "im", "profiles": []string{"xagent.im.v2"}},
		"target":        map[string]any{"adapter": "webhook", "config": cfg},
		"conversations": map[string]any{"direct": "open", "max_per_minute": 10000},
	})
	if status != http.StatusOK {
		b.Fatalf("PUT bot: %d %s", status, body)
	}
	nc, err := nats.Connect(node.NATSURL(), node.NATSOptions()...)
	if err != nil {
		b.Fatal(err)
	}
	defer nc.Close()
	js, _ := jetstream.New(nc)
	seedBotChannels(b, js, "b", n)
	now := time.Now().UnixMilli()
	kv, err := js.KeyValue(context.Background(), subjects.BucketBotChannels)
	if err != nil {
		b.Fatal(err)
	}
	raw := make([]time.Duration, 500)
	for i := range raw {
		conv := adapter.Conversation{Kind: adapter.Direct, ID: fmt.Sprintf("raw-%d", i)}
		rec, _ := json.Marshal(adapter.Channel{ID: conv.ChannelID("raw"), OpenedAt: now, Bot: "raw", Conversation: &conv})
		start := time.Now()
		if _, err := kv.Create(context.Background(), conv.ChannelID("raw"), rec); err != nil {
			b.Fatal(err)
		}
		raw[i] = time.Since(start)
	}
	for i := range raw { // the raw records are not the node's: leave the bucket as the bot left it
		_ = kv.Purge(context.Background(), fmt.Sprintf("raw-raw-%d", i))
	}
	return raw
}

// seedBotChannels writes n channel records of bot straight into KV xim_bot_channels, as the
// bot's openings write them (conversations user-0000000, user-0000001, …).
func seedBotChannels(tb testing.TB, js jetstream.JetStream, bot string, n int) {
	now := time.Now().UnixMilli()
	var futures []jetstream.PubAckFuture
	for i := range n {
		conv := adapter.Conversation{Kind: adapter.Direct, ID: fmt.Sprintf("user-%07d", i), Title: fmt.Sprintf("Person %d", i)}
		raw, _ := json.Marshal(adapter.Channel{ID: conv.ChannelID(bot), OpenedAt: now, Bot: bot, Conversation: &conv})
		f, err := js.PublishAsync(subjects.KVKeys(subjects.BucketBotChannels, conv.ChannelID(bot)), raw)
		if err != nil {
			tb.Fatal(err)
		}
		futures = append(futures, f)
		if len(futures) == 4096 || i == n-1 {
			select {
			case <-js.PublishAsyncComplete():
			case <-time.After(time.Minute):
				tb.Fatal("seeding stalled")
			}
			for _, f := range futures {
				select {
				case err := <-f.Err():
					tb.Fatal(err)
				default:
				}
			}
			futures = futures[:0]
		}
	}
}

type ximdProc struct {
	cmd     *exec.Cmd
	addr    string
	ready   time.Duration
	readyAt time.Time
}

func runXimd(b *testing.B, bin, dir string) *ximdProc {
	addr := freeAddr(b)
	cmd := exec.Command(bin)
	cmd.Env = append(os.Environ(), "XIM_DATA_DIR="+dir, "XIM_HTTP_ADDR="+addr, "XIM_NATS_PORT=-1", "XIM_NATS_MONITOR_PORT=-1", "XIM_LOG_LEVEL=error")
	start := time.Now()
	if err := cmd.Start(); err != nil {
		b.Fatal(err)
	}
	p := &ximdProc{cmd: cmd, addr: addr}
	for {
		resp, err := http.Get("http://" + addr + "/readyz")
		if err == nil {
			resp.Body.Close()
			if resp.StatusCode == 200 {
				break
			}
		}
		if time.Since(start) > 2*time.Minute {
			p.stop()
			b.Fatal("not ready within 2 minutes")
		}
		time.Sleep(5 * time.Millisecond)
	}
	p.ready, p.readyAt = time.Since(start), time.Now()
	return p
}

// rss is the process's VmRSS 10s after it answered ready (its start's garbage returned, the
// steady work of an idle node under way).
func (p *ximdProc) rss(b *testing.B) int64 {
	time.Sleep(10*time.Second - time.Since(p.readyAt))
	raw, err := os.ReadFile(fmt.Sprintf("/proc/%d/status", p.cmd.Process.Pid))
	if err != nil {
		b.Fatal(err)
	}
	for _, line := range strings.Split(string(raw), "\n") {
		if v, ok := strings.CutPrefix(line, "VmRSS:"); ok {
			kb, _ := strconv.ParseInt(strings.TrimSpace(strings.TrimSuffix(strings.TrimSpace(v), "kB")), 10, 64)
			return kb * 1024
		}
	}
	b.Fatal("no VmRSS")
	return 0
}

func (p *ximdProc) stop() {
	_ = p.cmd.Process.Signal(os.Interrupt)
	done := make(chan struct{})
	go func() { _ = p.cmd.Wait(); close(done) }()
	select {
	case <-done:
	case <-time.After(20 * time.Second):
		_ = p.cmd.Process.Kill()
		<-done
	}
}

// postLatencies posts k messages of new conversations (each opens a channel) and k into open
// ones, 4 at a time, and returns their latencies.
func postLatencies(b *testing.B, addr, secret string, k int) (open, into []time.Duration) {
	post := func(conv, msgID string) time.Duration {
		raw, _ := json.Marshal(map[string]any{"conversation": map[string]any{"id": conv, "kind": "direct"},
			"sender": map[string]any{"id": conv}, "target_message_id": msgID, "text": "hello"})
		req, _ := http.NewRequest(http.MethodPost, "http://"+addr+"/v1/targets/webhook/bots/b/messages", bytes.NewReader(raw))
		req.Header.Set(webhook.SignatureHeader, webhook.Sign([]byte(secret), raw))
		start := time.Now()
		resp, err := http.DefaultClient.Do(req)
		d := time.Since(start)
		if err != nil {
			b.Fatal(err)
		}
		resp.Body.Close()
		if resp.StatusCode != http.StatusAccepted {
			b.Fatalf("post: %d", resp.StatusCode)
		}
		return d
	}
	run := func(conv func(i int) string) []time.Duration {
		out := make([]time.Duration, k)
		var wg sync.WaitGroup
		sem := make(chan struct{}, 4)
		for i := range k {
			wg.Add(1)
			sem <- struct{}{}
			go func() {
				defer wg.Done()
				defer func() { <-sem }()
				out[i] = post(conv(i), fmt.Sprint("m", time.Now().UnixNano(), "-", i))
			}()
		}
		wg.Wait()
		return out
	}
	open = run(func(i int) string { return fmt.Sprintf("new-%d-%d", time.Now().UnixNano(), i) })
	into = run(func(i int) string { return fmt.Sprintf("user-%07d", i) }) // open since the seed
	return open, into
}

func pct(ds []time.Duration, p int) time.Duration {
	s := slices.Clone(ds)
	slices.Sort(s)
	return s[min(len(s)-1, len(s)*p/100)]
}
