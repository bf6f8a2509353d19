package handlers

import (
	"context"
	"log/slog"
	"sync"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/ximd/ximd/handlers/adapter"
	"github.com/ximd/ximd/profile"
)

// statusTarget records the statuses shown.
type statusTarget struct {
	caps adapter.Capabilities
	mu   sync.Mutex
	seen []adapter.Status
}

func (t *statusTarget) Send(context.Context, adapter.Message) (string, error) { return "m", nil }
func (t *statusTarget) Capabilities() adapter.Capabilities                    { return t.caps }
func (t *statusTarget) ShowActivity(_ context.Context, a adapter.Activity) error {
	t.mu.Lock()
	t.seen = append(t.seen, a.Status)
	t.mu.Unlock()
	return nil
}

func (t *statusTarget) shown() []adapter.Status {
	t.mu.Lock()
	defer t.mu.Unlock()
	return append([]adapter.Status(nil), t.seen...)
}

// edge-api §7.2: a platform indicator that expires by itself (ActivityRenewal) is shown again
// while the status lasts, and no more once it is cleared.
func TestActivity_ExpiringIndicatorIsRenewedUntilCleared(t *testing.T) {
	tg := &statusTarget{caps: adapter.Capabilities{Activity: adapter.ActivityTyping, ActivityRenewal: 30 * time.Millisecond}}
	a := NewActivity(ActivityConfig{Timeout: time.Minute}, NewMetrics(prometheus.NewRegistry()), slog.New(slog.DiscardHandler))
	defer func() { _ = a.Close(context.Background()) }()
	a.Show(Bound{Channel: "c", Adapter: "fake", Target: tg}, profile.Activity{Status: string(adapter.StatusThinking)}, 1)
	deadline := time.Now().Add(5 * time.Second)
	for len(tg.shown()) < 4 {
		if time.Now().After(deadline) {
			t.Fatalf("shown %v: want the typing indicator renewed", tg.shown())
		}
		time.Sleep(5 * time.Millisecond)
	}
	a.Clear("c", 2)
	for last := adapter.Status(""); last != adapter.StatusIdle; {
		if s := tg.shown(); len(s) > 0 {
			last = s[len(s)-1]
		}
		if time.Now().After(deadline) {
			t.Fatalf("shown %v: want idle after the clear", tg.shown())
		}
		time.Sleep(5 * time.Millisecond)
	}
	n := len(tg.shown())
	time.Sleep(100 * time.Millisecond) // three renewal periods: nothing more may come
	if s := tg.shown(); len(s) != n {
		t.Fatalf("after idle the indicator was shown again: %v", s)
	}
	for _, st := range tg.shown()[:n-1] {
		if st != adapter.StatusTyping {
			t.Fatalf("shown %v: want typing until idle", tg.shown())
		}
	}
}
