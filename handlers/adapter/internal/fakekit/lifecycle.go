package fakekit

import (
	"context"
	"net/http/httptest"
	"sync"
	"time"
)

// Lifecycle is a fake's loopback listener and the work its Close ends: a channel closed when
// closing begins, a context cancelled then, and the goroutines Close waits for. Its methods
// are safe for concurrent use.
type Lifecycle struct {
	ts      *httptest.Server
	closing chan struct{}
	once    sync.Once
	ctx     context.Context
	cancel  context.CancelFunc
	wg      sync.WaitGroup
}

// NewLifecycle takes charge of a started fake's listener ts: Close closes it last.
func NewLifecycle(ts *httptest.Server) *Lifecycle {
	ctx, cancel := context.WithCancel(context.Background())
	return &Lifecycle{ts: ts, closing: make(chan struct{}), ctx: ctx, cancel: cancel}
}

// URL is the listener's base URL, "http://127.0.0.1:port" without a trailing slash.
func (l *Lifecycle) URL() string { return l.ts.URL }

// Context is cancelled when Close begins: the context of the fake's own outgoing requests.
func (l *Lifecycle) Context() context.Context { return l.ctx }

// Closing is closed when Close begins.
func (l *Lifecycle) Closing() <-chan struct{} { return l.closing }

// IsClosing reports whether Close has begun.
func (l *Lifecycle) IsClosing() bool {
	select {
	case <-l.closing:
		return true
	default:
		return false
	}
}

// Go runs f in a goroutine Close waits for. Call it with the lock passed to Close held, after
// IsClosing reported false, so that Close either waits for f or f is never started.
func (l *Lifecycle) Go(f func()) {
	l.wg.Add(1)
	go func() {
		defer l.wg.Done()
		f()
	}()
}

// Track counts the calling goroutine as work Close waits for, until done is called. The
// rule of Go applies.
func (l *Lifecycle) Track() (done func()) {
	l.wg.Add(1)
	return l.wg.Done
}

// Sleep waits d, or until ctx ends or Close begins.
func (l *Lifecycle) Sleep(ctx context.Context, d time.Duration) {
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-t.C:
	case <-ctx.Done():
	case <-l.closing:
	}
}

// Close closes Closing while holding mu (so that work started under mu either started first
// or sees Closing), cancels Context, waits for the goroutines of Go and Track, calls each
// before, and closes the listener. Only the first call does anything.
func (l *Lifecycle) Close(mu sync.Locker, before ...func()) {
	l.once.Do(func() {
		mu.Lock()
		close(l.closing)
		mu.Unlock()
		l.cancel()
		l.wg.Wait()
		for _, f := range before {
			f()
		}
		l.ts.Close()
	})
}
