package handlers

import (
	"context"
	"sync"
	"time"
)

// Pacer holds, per channel, the time before which its target must not be called again: a
// platform's retry-after (edge-api §7.2: no call to that chat before the platform's retry time).
// The deliver stage waits for it inside the channel's lane, the display loop stretches its edit
// interval to it, and the activity stage skips a status meanwhile. Safe for concurrent use.
type Pacer struct {
	mu    sync.Mutex
	until map[string]time.Time
}

// NewPacer returns an empty pacer.
func NewPacer() *Pacer { return &Pacer{until: map[string]time.Time{}} }

// Pause keeps the channel's target uncalled for d from now (a later pause extends it).
func (p *Pacer) Pause(channel string, d time.Duration) {
	at := time.Now().Add(d)
	p.mu.Lock()
	defer p.mu.Unlock()
	if at.After(p.until[channel]) {
		p.until[channel] = at
	}
}

// Until is the time before which the channel's target must not be called (zero when it may be
// called now).
func (p *Pacer) Until(channel string) time.Time {
	if p == nil {
		return time.Time{}
	}
	p.mu.Lock()
	defer p.mu.Unlock()
	at, ok := p.until[channel]
	if ok && !time.Now().Before(at) {
		delete(p.until, channel)
		return time.Time{}
	}
	return at
}

// Wait blocks until the channel's target may be called, or ctx ends.
func (p *Pacer) Wait(ctx context.Context, channel string) error {
	at := p.Until(channel)
	if at.IsZero() {
		return nil
	}
	t := time.NewTimer(time.Until(at))
	defer t.Stop()
	select {
	case <-t.C:
		return nil
	case <-ctx.Done():
		return ctx.Err()
	}
}

// Drop forgets a closed channel.
func (p *Pacer) Drop(channel string) {
	p.mu.Lock()
	delete(p.until, channel)
	p.mu.Unlock()
}
