package node

import (
	"bytes"
	"context"
	"log/slog"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	dto "github.com/prometheus/client_model/go"

	"github.com/ximd/ximd/handlers/adapter"
)

// panicky panics in its first Poll and waits for the end in the next.
type panicky struct{ calls atomic.Int32 }

func (p *panicky) PollKey(adapter.Channel) string { return "k" }

func (p *panicky) Poll(ctx context.Context, _ adapter.Feed) error {
	if p.calls.Add(1) == 1 {
		var none []adapter.Bot
		_ = none[0] // an adapter's bug on unexpected platform data
	}
	<-ctx.Done()
	return ctx.Err()
}

type syncBuffer struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (s *syncBuffer) Write(p []byte) (int, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.Write(p)
}

func (s *syncBuffer) String() string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.String()
}

// A panic in an adapter's Poll ends that loop's run, not the process: it is logged with its
// stack, counted as a failure, and the loop starts again after the back-off.
func TestPollLoop_PanicIsAFailureAndTheLoopGoesOn(t *testing.T) {
	var logs syncBuffer
	p := &pollers{logger: slog.New(slog.NewJSONHandler(&logs, nil)),
		failures: prometheus.NewCounterVec(prometheus.CounterOpts{Name: "f"}, []string{"adapter"})}
	poller := &panicky{}
	ctx, cancel := context.WithCancelCause(context.Background())
	p.wg.Add(1)
	go p.loop(ctx, pollID{adapter: "x", key: "k"}, &feed{pollers: p, key: "k"}, poller)
	deadline := time.Now().Add(pollBackoffMin + 10*time.Second)
	for poller.calls.Load() < 2 {
		if time.Now().After(deadline) {
			t.Fatalf("Poll called %d times, want it started again after the panic", poller.calls.Load())
		}
		time.Sleep(10 * time.Millisecond)
	}
	cancel(nil)
	p.wg.Wait()
	var m dto.Metric
	if err := p.failures.WithLabelValues("x").Write(&m); err != nil || m.GetCounter().GetValue() != 1 {
		t.Errorf("failures %v (%v), want 1", m.GetCounter().GetValue(), err)
	}
	for _, want := range []string{`"msg":"poll_panicked"`, "index out of range", "pollers_test.go", `"msg":"poll_failed"`} {
		if !strings.Contains(logs.String(), want) {
			t.Errorf("logs lack %s:\n%s", want, logs.String())
		}
	}
}
