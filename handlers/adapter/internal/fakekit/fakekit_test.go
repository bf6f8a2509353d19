package fakekit

import (
	"context"
	"net/http"
	"net/http/httptest"
	"sync"
	"testing"
	"time"
)

func TestSeconds(t *testing.T) {
	tests := []struct {
		name string
		d    time.Duration
		want int
	}{
		{name: "rounds up", d: 1500 * time.Millisecond, want: 2},
		{name: "at least 1", d: time.Millisecond, want: 1},
		{name: "whole", d: 3 * time.Second, want: 3},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			if got := Seconds(tt.d); got != tt.want {
				t.Fatalf("Seconds(%v) = %d, want %d", tt.d, got, tt.want)
			}
		})
	}
}

func TestWindowsKeepTheLongerWindow(t *testing.T) {
	t0 := time.Unix(1_700_000_000, 0)
	var w Windows[string]
	if got := w.Left("a", t0); got != 0 {
		t.Fatalf("no window yet, Left = %v", got)
	}
	if !w.Open("a", t0, 5) {
		t.Fatal("first window not opened")
	}
	if w.Open("a", t0.Add(time.Second), 2) {
		t.Fatal("a shorter window replaced a longer one")
	}
	if got := w.Left("a", t0.Add(time.Second)); got != 4*time.Second {
		t.Fatalf("Left = %v, want 4s", got)
	}
	if got := w.Left("b", t0); got != 0 {
		t.Fatalf("another key's Left = %v, want 0", got)
	}
	if got := w.Left("a", t0.Add(5*time.Second)); got != 0 {
		t.Fatalf("ended window's Left = %v, want 0", got)
	}
}

func TestFaultsAreTakenInOrderPerKey(t *testing.T) {
	var q Faults[int]
	q.FailNext("send", 2, 429)
	q.FailNext("send", 1, 500)
	for _, want := range []int{429, 429, 500} {
		if f, ok := q.Take("send"); !ok || f != want {
			t.Fatalf("Take = %d, %v; want %d", f, ok, want)
		}
	}
	if _, ok := q.Take("send"); ok {
		t.Fatal("a fault left after the queued ones were taken")
	}
}

func TestHangs(t *testing.T) {
	var h Hangs
	h.Set("/a", time.Second)
	h.Set("/a/b", 2*time.Second)
	if got := h.Of("/a"); got != time.Second {
		t.Fatalf("Of = %v, want 1s", got)
	}
	if got := h.OfPrefix("/a/b/c"); got != 2*time.Second {
		t.Fatalf("OfPrefix takes %v, want the longest prefix's 2s", got)
	}
	h.Set("/a/b", 0)
	if got := h.OfPrefix("/a/b/c"); got != time.Second {
		t.Fatalf("after stopping /a/b, OfPrefix = %v, want 1s", got)
	}
}

func TestCalls(t *testing.T) {
	type call struct {
		name  string
		early bool
	}
	var l Calls[call]
	l.Add(call{name: "a"})
	i := l.Add(call{name: "b"})
	l.At(i).early = true
	all := l.All()
	all[0].name = "changed"
	if got := l.All(); len(got) != 2 || got[0].name != "a" || !got[1].early {
		t.Fatalf("All = %+v", got)
	}
	if n := l.Count(func(c call) bool { return c.early }); n != 1 {
		t.Fatalf("Count = %d, want 1", n)
	}
}

func TestCloseEndsSleepsAndWaitsForWork(t *testing.T) {
	l := NewLifecycle(httptest.NewServer(http.NotFoundHandler()))
	var mu sync.Mutex
	slept := make(chan struct{})
	mu.Lock()
	l.Go(func() {
		l.Sleep(context.Background(), time.Hour)
		close(slept)
	})
	mu.Unlock()
	l.Close(&mu)
	select {
	case <-slept:
	default:
		t.Fatal("Close returned before the goroutine it started ended")
	}
	if !l.IsClosing() || l.Context().Err() == nil {
		t.Fatal("after Close: not closing, or context not cancelled")
	}
	l.Close(&mu) // a second Close does nothing
}
