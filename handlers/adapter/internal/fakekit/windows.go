package fakekit

import (
	"math"
	"time"
)

// Windows are the retry-after windows a fake gave, per rate-limit key K: until one ends, a
// call under that key is early. The zero Windows is ready.
type Windows[K comparable] struct {
	until map[K]time.Time
}

// Open starts a window of n seconds from now for k, unless a window that ends later runs. It
// reports whether it started one.
func (w *Windows[K]) Open(k K, now time.Time, n int) bool {
	end := now.Add(time.Duration(n) * time.Second)
	if !end.After(w.until[k]) {
		return false
	}
	if w.until == nil {
		w.until = map[K]time.Time{}
	}
	w.until[k] = end
	return true
}

// Left is how long k's window runs after now, 0 when none runs.
func (w *Windows[K]) Left(k K, now time.Time) time.Duration {
	if until := w.until[k]; now.Before(until) {
		return until.Sub(now)
	}
	return 0
}

// Seconds rounds a wait up to whole seconds, at least 1: the retry-after a fake answers.
func Seconds(d time.Duration) int { return max(1, int(math.Ceil(d.Seconds()))) }
