package faultkit

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"math/rand/v2"
	"net/http"
	"sync"
	"sync/atomic"
	"time"

	"github.com/ximd/ximd/handlers/adapter/webhook"
)

// Platform plays the target system's send path: it posts user messages to
// POST /v1/targets/webhook/{channel}/messages, signed with the channel's secret, and re-posts
// each one (same target_message_id) until ximd answers 202, as a platform redelivers a webhook.
type Platform struct {
	Addrs    []string // gateways, tried in turn
	Secret   string
	Channels []string
	// Every is the pause between two new messages of one poster (default 50ms).
	Every time.Duration
	// Posters is the number of concurrent posters (default 2).
	Posters int

	mu       sync.Mutex
	accepted map[string]string // channel:message_id -> target_message_id, once answered 202
	refused  []string          // answers that are not worth a re-post (4xx): a test failure
	stopping atomic.Bool
	wg       sync.WaitGroup
	posts    atomic.Int64
	failed   atomic.Int64
	seq      atomic.Int64
}

// Run starts the posters; they end after Stop (once their current message is accepted) or with ctx.
func (p *Platform) Run(ctx context.Context) {
	if p.Every <= 0 {
		p.Every = 50 * time.Millisecond
	}
	if p.Posters <= 0 {
		p.Posters = 2
	}
	p.mu.Lock()
	p.accepted = map[string]string{}
	p.mu.Unlock()
	for i := 0; i < p.Posters; i++ {
		p.wg.Add(1)
		go func() {
			defer p.wg.Done()
			for !p.stopping.Load() && ctx.Err() == nil {
				p.post(ctx)
				time.Sleep(p.Every) // pacing of the load
			}
		}()
	}
}

// Stop ends the posters after their current message.
func (p *Platform) Stop() { p.stopping.Store(true) }

// Wait waits for the posters to end.
func (p *Platform) Wait(timeout time.Duration) error {
	done := make(chan struct{})
	go func() { p.wg.Wait(); close(done) }()
	select {
	case <-done:
		return nil
	case <-time.After(timeout):
		return fmt.Errorf("user messages still being posted after %s", timeout)
	}
}

// Accepted returns the user messages ximd answered 202 for: channel:message_id -> target id.
func (p *Platform) Accepted() map[string]string {
	p.mu.Lock()
	defer p.mu.Unlock()
	out := make(map[string]string, len(p.accepted))
	for k, v := range p.accepted {
		out[k] = v
	}
	return out
}

// Refused returns answers that were neither 202 nor worth a re-post.
func (p *Platform) Refused() []string {
	p.mu.Lock()
	defer p.mu.Unlock()
	return append([]string(nil), p.refused...)
}

// Posts counts the POSTs made; Failed those without a 202 (each was re-posted).
func (p *Platform) Posts() (int64, int64) { return p.posts.Load(), p.failed.Load() }

func (p *Platform) post(ctx context.Context) {
	n := p.seq.Add(1)
	channel := p.Channels[rand.IntN(len(p.Channels))]
	tmid := fmt.Sprintf("tmsg-%06d", n)
	raw, _ := json.Marshal(map[string]any{"target_message_id": tmid, "text": fmt.Sprintf("user says %d on %s", n, channel)})
	client := &http.Client{Timeout: 5 * time.Second}
	for i := 0; ctx.Err() == nil; i++ {
		addr := p.Addrs[i%len(p.Addrs)]
		req, _ := http.NewRequestWithContext(ctx, http.MethodPost, "http://"+addr+"/v1/targets/webhook/"+channel+"/messages", bytes.NewReader(raw))
		req.Header.Set("Content-Type", "application/json")
		req.Header.Set("X-Xim-Signature", webhook.Sign([]byte(p.Secret), raw))
		p.posts.Add(1)
		resp, err := client.Do(req)
		if err == nil {
			body, _ := io.ReadAll(resp.Body)
			resp.Body.Close()
			if resp.StatusCode == http.StatusAccepted {
				var out struct {
					MessageID string `json:"message_id"`
				}
				_ = json.Unmarshal(body, &out)
				p.mu.Lock()
				p.accepted[channel+":"+out.MessageID] = tmid
				p.mu.Unlock()
				return
			}
			if resp.StatusCode >= 400 && resp.StatusCode < 500 && resp.StatusCode != http.StatusTooManyRequests && resp.StatusCode != http.StatusNotFound {
				p.mu.Lock()
				p.refused = append(p.refused, fmt.Sprintf("%s %s: %d %s", channel, tmid, resp.StatusCode, body))
				p.mu.Unlock()
				return
			}
			// 404 channel_not_open can be a gateway whose channel cache is still loading.
		}
		p.failed.Add(1)
		select { // ximd down, starting or unavailable: the platform redelivers
		case <-ctx.Done():
		case <-time.After(100 * time.Millisecond):
		}
	}
}
