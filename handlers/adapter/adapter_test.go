package adapter_test

import (
	"encoding/json"
	"errors"
	"fmt"
	"slices"
	"testing"
	"time"

	"github.com/ximd/ximd/handlers/adapter"
)

type namedAdapter string

func (a namedAdapter) Name() string                                    { return string(a) }
func (namedAdapter) Open(json.RawMessage) (adapter.Target, error)      { return nil, nil }
func (namedAdapter) Public(c json.RawMessage) (json.RawMessage, error) { return c, nil }

func TestRegistry_LookupAndNames(t *testing.T) {
	r := adapter.NewRegistry(namedAdapter("webhook"), namedAdapter("webchat"))

	for _, name := range []string{"webhook", "webchat"} {
		a, ok := r.Lookup(name)
		if !ok || a.Name() != name {
			t.Errorf("Lookup(%q) = %v, %v; want the %q adapter", name, a, ok, name)
		}
	}
	if a, ok := r.Lookup("slack"); ok {
		t.Errorf("Lookup(slack) = %v, true; want not found", a)
	}
	names := r.Names()
	if want := []string{"webchat", "webhook"}; !slices.Equal(names, want) {
		t.Fatalf("Names() = %v, want %v (sorted)", names, want)
	}
	names[0] = "changed"
	if r.Names()[0] != "webchat" {
		t.Error("Names() returned the registry's own slice; want a copy")
	}
}

func TestNewRegistry_PanicsOnBadWiring(t *testing.T) {
	tests := []struct {
		name     string
		adapters []adapter.Opener
	}{
		{name: "duplicate", adapters: []adapter.Opener{namedAdapter("webhook"), namedAdapter("webhook")}},
		{name: "empty name", adapters: []adapter.Opener{namedAdapter("")}},
		{name: "nil adapter", adapters: []adapter.Opener{nil}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			defer func() {
				if recover() == nil {
					t.Error("NewRegistry did not panic")
				}
			}()
			adapter.NewRegistry(tt.adapters...)
		})
	}
}

func TestNewRegistry_Empty(t *testing.T) {
	r := adapter.NewRegistry()
	if _, ok := r.Lookup("webhook"); ok {
		t.Error("empty registry found an adapter")
	}
	if n := r.Names(); len(n) != 0 {
		t.Errorf("Names() = %v, want none", n)
	}
}

func TestParseRetryAfter(t *testing.T) {
	now := time.Date(2026, 12, 3, 10, 0, 0, 0, time.UTC)
	tests := []struct {
		name   string
		v      string
		want   time.Duration
		wantOK bool
	}{
		{name: "seconds", v: "30", want: 30 * time.Second, wantOK: true},
		{name: "spaces", v: " 2 ", want: 2 * time.Second, wantOK: true},
		{name: "zero", v: "0", want: 0, wantOK: true},
		{name: "HTTP date", v: "Thu, 03 Dec 2026 10:01:00 GMT", want: time.Minute, wantOK: true},
		{name: "date in the past", v: "Thu, 03 Dec 2026 09:00:00 GMT", want: 0, wantOK: true},
		{name: "capped", v: "86400", want: adapter.MaxRetryAfter, wantOK: true},
		{name: "empty", v: "", wantOK: false},
		{name: "negative", v: "-5", wantOK: false},
		{name: "garbage", v: "soon", wantOK: false},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got, ok := adapter.ParseRetryAfter(tt.v, now)
			if got != tt.want || ok != tt.wantOK {
				t.Fatalf("ParseRetryAfter(%q) = %s, %v; want %s, %v", tt.v, got, ok, tt.want, tt.wantOK)
			}
		})
	}
}

func TestRetryAfterOfWrapsTheCallsError(t *testing.T) {
	base := errors.New("rate limited")
	err := fmt.Errorf("send: %w", &adapter.RetryAfterError{After: 3 * time.Second, Err: base})
	if d, ok := adapter.RetryAfterOf(err); !ok || d != 3*time.Second {
		t.Fatalf("RetryAfterOf = %s, %v", d, ok)
	}
	if !errors.Is(err, base) {
		t.Fatal("the call's error is not wrapped")
	}
	if _, ok := adapter.RetryAfterOf(base); ok {
		t.Fatal("a plain error names a retry time")
	}
}

// closingAdapter counts its Close calls and fails them when told to.
type closingAdapter struct {
	namedAdapter
	closed int
	err    error
}

func (a *closingAdapter) Close() error { a.closed++; return a.err }

// The node closes its adapters' clients at shutdown through the registry: every adapter that
// has a Close is closed once, the others are left alone, and a failure is reported.
func TestRegistry_CloseClosesEveryClosableAdapter(t *testing.T) {
	broken := errors.New("client close failed")
	a, b := &closingAdapter{namedAdapter: "a"}, &closingAdapter{namedAdapter: "b", err: broken}
	r := adapter.NewRegistry(a, namedAdapter("plain"), b)
	if err := r.Close(); !errors.Is(err, broken) {
		t.Fatalf("Close() = %v, want %v joined", err, broken)
	}
	if a.closed != 1 || b.closed != 1 {
		t.Fatalf("closed a %d, b %d times, want once each", a.closed, b.closed)
	}
}

// A platform message from before the channel's binding (less the grace for a clock ahead of
// ximd's) is not the agent's; one from within the grace on is.
func TestChannel_PredatesItsBindingLessTheGrace(t *testing.T) {
	ch := adapter.Channel{OpenedAt: 1_000_000}
	grace := adapter.BindGrace.Milliseconds()
	for _, tc := range []struct {
		name string
		at   int64
		want bool
	}{
		{name: "before the grace", at: 1_000_000 - grace - 1, want: true},
		{name: "at the grace", at: 1_000_000 - grace, want: false},
		{name: "after the binding", at: 1_000_001, want: false},
	} {
		if got := ch.Predates(tc.at); got != tc.want {
			t.Errorf("%s: Predates(%d) = %v, want %v", tc.name, tc.at, got, tc.want)
		}
	}
}

// Offer: every bot is offered the message; the first outcome not Ignored is the message's; an
// error ends the round.
func TestOffer_FirstOutcomeThatIsNotIgnored(t *testing.T) {
	bots := []adapter.Bot{{ID: "other-account"}, {ID: "refuses"}, {ID: "takes"}}
	outcomes := map[string]adapter.Received{"other-account": adapter.Ignored, "refuses": adapter.Received(adapter.RefusedNotMentioned), "takes": adapter.Accepted}
	var offered []string
	got, err := adapter.Offer(bots, func(b adapter.Bot) (adapter.Received, error) {
		offered = append(offered, b.ID)
		return outcomes[b.ID], nil
	})
	if err != nil || got != adapter.Received(adapter.RefusedNotMentioned) || len(offered) != 3 {
		t.Fatalf("got %q %v after %v, want the refusal after offering all three", got, err, offered)
	}
	if got, err := adapter.Offer(bots[:1], func(adapter.Bot) (adapter.Received, error) { return adapter.Ignored, nil }); err != nil || got != adapter.Ignored {
		t.Fatalf("nobody's: %q %v", got, err)
	}
	offered = nil
	boom := errors.New("store down")
	if _, err := adapter.Offer(bots, func(b adapter.Bot) (adapter.Received, error) {
		offered = append(offered, b.ID)
		return "", boom
	}); !errors.Is(err, boom) || len(offered) != 1 {
		t.Fatalf("error %v after %v, want the first error at once", err, offered)
	}
}
