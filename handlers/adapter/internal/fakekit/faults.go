package fakekit

import (
	"strings"
	"time"
)

// Faults are injected error answers F queued per key (a method name), taken one per call in
// the order they were added. The zero Faults is ready.
type Faults[F any] struct {
	next map[string][]F
}

// FailNext queues f as the answer of the next n calls of key.
func (q *Faults[F]) FailNext(key string, n int, f F) {
	if q.next == nil {
		q.next = map[string][]F{}
	}
	for range n {
		q.next[key] = append(q.next[key], f)
	}
}

// Take removes and returns the first fault queued for key; ok is false when none is.
func (q *Faults[F]) Take(key string) (f F, ok bool) {
	fs := q.next[key]
	if len(fs) == 0 {
		return f, false
	}
	q.next[key] = fs[1:]
	return fs[0], true
}

// Hangs are hold times per key (a method name or a route prefix): how long a call holds its
// answer after it was applied. The zero Hangs is ready.
type Hangs struct {
	d map[string]time.Duration
}

// Set makes calls of key hold their answer for d; d <= 0 stops it.
func (h *Hangs) Set(key string, d time.Duration) {
	if d <= 0 {
		delete(h.d, key)
		return
	}
	if h.d == nil {
		h.d = map[string]time.Duration{}
	}
	h.d[key] = d
}

// Of is the hold time of key, 0 if none.
func (h *Hangs) Of(key string) time.Duration { return h.d[key] }

// OfPrefix is the hold time of the longest key that is a prefix of name, 0 if none.
func (h *Hangs) OfPrefix(name string) time.Duration {
	best, d := -1, time.Duration(0)
	for prefix, hd := range h.d {
		if strings.HasPrefix(name, prefix) && len(prefix) > best {
			best, d = len(prefix), hd
		}
	}
	return d
}
