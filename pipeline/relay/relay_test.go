package relay_test

import (
	"context"
	"errors"
	"io"
	"log/slog"
	"sync/atomic"
	"testing"
	"time"

	"github.com/nats-io/nats-server/v2/server"
	"github.com/nats-io/nats.go"
	"github.com/prometheus/client_golang/prometheus"

	"github.com/ximd/ximd/handlers/adapter"
	"github.com/ximd/ximd/pipeline/natstest"
	"github.com/ximd/ximd/pipeline/relay"
	"github.com/ximd/ximd/profile"
)

var quiet = slog.New(slog.NewTextHandler(io.Discard, nil))

// two processes' relays on one server: a holder and a caller.
func pair(t *testing.T) (holder, caller *relay.Relay) {
	s := natstest.Server(t)
	return newRelay(t, s), newRelay(t, s)
}

func newRelay(t testing.TB, s *server.Server) *relay.Relay {
	r, err := relay.New(natstest.Connect(t, s), prometheus.NewRegistry(), quiet)
	if err != nil {
		t.Fatal(err)
	}
	return r
}

func echo(ran *atomic.Int64) adapter.RelayFunc {
	return func(ctx context.Context, req []byte) ([]byte, error) {
		ran.Add(1)
		return append([]byte("served "), req...), nil
	}
}

func TestCall_RunsWhereTheKeyIsHeld(t *testing.T) {
	holder, caller := pair(t)
	var ran atomic.Int64
	release := holder.Hold("wecom.k1", echo(&ran))
	defer release()
	ctx := context.Background()
	for _, r := range []*relay.Relay{caller, holder} { // another process, and the holder itself
		out, err := r.Call(ctx, "wecom.k1", []byte("hello"))
		if err != nil || string(out) != "served hello" {
			t.Fatalf("Call = %q, %v", out, err)
		}
	}
	if ran.Load() != 2 {
		t.Fatalf("served %d calls, want 2", ran.Load())
	}
}

func TestCall_NoHolderIsNotHeldAndCertain(t *testing.T) {
	holder, caller := pair(t)
	release := holder.Hold("wecom.k2", echo(new(atomic.Int64)))
	release()
	_, err := caller.Call(context.Background(), "wecom.k2", []byte("x"))
	if !errors.Is(err, adapter.ErrNotHeld) || profile.AsError(err).Code != profile.CodeTargetUnavailable || adapter.IsAmbiguous(err) {
		t.Fatalf("Call without a holder = %v, want ErrNotHeld, target_unavailable, not in doubt", err)
	}
}

// A holder's error reaches the caller with its code, retry-after and doubt.
func TestCall_ErrorsCrossWithCodeRetryAfterAndDoubt(t *testing.T) {
	holder, caller := pair(t)
	fails := []error{
		&adapter.RetryAfterError{After: 42 * time.Second, Err: profile.Errorf(profile.CodeTargetRateLimited, "spent")},
		&adapter.AmbiguousError{Err: profile.Errorf(profile.CodeTargetUnavailable, "no answer")},
		profile.Errorf(profile.CodeTargetDeliveryFailed, "refused"),
	}
	var n atomic.Int64
	defer holder.Hold("k3", func(context.Context, []byte) ([]byte, error) { return nil, fails[n.Add(1)-1] })()
	for _, want := range fails {
		_, err := caller.Call(context.Background(), "k3", nil)
		wa, _ := adapter.RetryAfterOf(want)
		ga, _ := adapter.RetryAfterOf(err)
		if profile.AsError(err).Code != profile.AsError(want).Code || profile.AsError(err).Message != profile.AsError(want).Message ||
			ga != wa || adapter.IsAmbiguous(err) != adapter.IsAmbiguous(want) {
			t.Errorf("relayed %v, want %v", err, want)
		}
	}
}

// Two processes holding one key (a poll loop moving between workers): each call runs once.
func TestCall_TwoHoldersRunEachCallOnce(t *testing.T) {
	s := natstest.Server(t)
	var ran atomic.Int64
	for range 2 {
		defer newRelay(t, s).Hold("k4", echo(&ran))()
	}
	caller := newRelay(t, s)
	for range 20 {
		if _, err := caller.Call(context.Background(), "k4", nil); err != nil {
			t.Fatal(err)
		}
	}
	if ran.Load() != 20 {
		t.Fatalf("20 calls ran %d times", ran.Load())
	}
}

// The caller's deadline bounds the holder's work; no answer in time is in doubt.
func TestCall_DeadlineTravelsAndTimeoutIsInDoubt(t *testing.T) {
	holder, caller := pair(t)
	got := make(chan time.Duration, 1)
	defer holder.Hold("k5", func(ctx context.Context, _ []byte) ([]byte, error) {
		d, _ := ctx.Deadline()
		got <- time.Until(d)
		<-ctx.Done()
		return nil, ctx.Err()
	})()
	ctx, cancel := context.WithTimeout(context.Background(), 300*time.Millisecond)
	defer cancel()
	_, err := caller.Call(ctx, "k5", nil)
	if !adapter.IsAmbiguous(err) || profile.AsError(err).Code != profile.CodeTargetUnavailable {
		t.Fatalf("Call past its deadline = %v, want target_unavailable in doubt", err)
	}
	if d := <-got; d <= 0 || d > 300*time.Millisecond {
		t.Fatalf("the holder's deadline was %s away, want within the caller's 300ms", d)
	}
}

// Release lets the calls in flight finish for a while, then ends their context; the caller
// hears the call in doubt.
func TestHold_ReleaseEndsCallsInFlight(t *testing.T) {
	holder, caller := pair(t)
	started := make(chan struct{})
	release := holder.Hold("k6", func(ctx context.Context, _ []byte) ([]byte, error) {
		close(started)
		<-ctx.Done()
		return nil, ctx.Err()
	})
	errc := make(chan error, 1)
	go func() { _, err := caller.Call(context.Background(), "k6", nil); errc <- err }()
	<-started
	done := make(chan struct{})
	go func() { release(); close(done) }()
	select {
	case <-done:
	case <-time.After(15 * time.Second):
		t.Fatal("release did not end the call in flight")
	}
	if err := <-errc; !adapter.IsAmbiguous(err) || profile.AsError(err).Code != profile.CodeTargetUnavailable {
		t.Fatalf("the caller of a call its holder released heard %v, want target_unavailable in doubt", err)
	}
}

// BenchmarkCall measures a relayed call against its floor, a raw core NATS request to a
// subscriber answering the same bytes, in the same run: go test -run '^$' -bench . ./pipeline/relay/
func BenchmarkCall(b *testing.B) {
	s := natstest.Server(b)
	req := make([]byte, 600) // a relayed final of a few hundred characters
	b.Run("raw_request", func(b *testing.B) {
		holder, caller := natstest.Connect(b, s), natstest.Connect(b, s)
		sub, err := holder.Subscribe("bench.raw", func(m *nats.Msg) { _ = m.Respond(m.Data) })
		if err != nil {
			b.Fatal(err)
		}
		defer sub.Unsubscribe()
		_ = holder.Flush()
		for b.Loop() {
			if _, err := caller.Request("bench.raw", req, 5*time.Second); err != nil {
				b.Fatal(err)
			}
		}
	})
	b.Run("relayed", func(b *testing.B) {
		holder, caller := newRelay(b, s), newRelay(b, s)
		defer holder.Hold("bench.k", func(_ context.Context, r []byte) ([]byte, error) { return r, nil })()
		ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
		defer cancel()
		for b.Loop() {
			if _, err := caller.Call(ctx, "bench.k", req); err != nil {
				b.Fatal(err)
			}
		}
	})
	b.Run("held_here", func(b *testing.B) {
		holder := newRelay(b, s)
		defer holder.Hold("bench.l", func(_ context.Context, r []byte) ([]byte, error) { return r, nil })()
		for b.Loop() {
			if _, err := holder.Call(context.Background(), "bench.l", req); err != nil {
				b.Fatal(err)
			}
		}
	})
}
