package bots

import (
	"context"
	"errors"
	"hash/fnv"
	"strconv"
	"sync"
	"time"

	"github.com/nats-io/nats.go/jetstream"
)

// limiter holds each conversation to its bot's max_per_minute across every process (gateways
// behind a load balancer each take part of a platform's posts): a count per conversation and
// clock minute in KV xim_bot_rates, read, then created or set by revision (two calls a message
// passed on). A minute known full is kept here, so a flood costs no call; a message whose every
// round is lost to other processes' counts is refused; when NATS does not answer, this process
// counts alone.
type limiter struct {
	kv      jetstream.KeyValue // nil: this process counts alone
	stripes [64]sync.Mutex

	mu    sync.Mutex
	full  map[string]int64 // conversation -> the minute it is known full in
	local map[string]*window
	calls int
}

type window struct {
	start time.Time
	n     int
}

func newLimiter(kv jetstream.KeyValue) *limiter {
	return &limiter{kv: kv, full: map[string]int64{}, local: map[string]*window{}}
}

// rateAttempts bounds the compare-and-set rounds of one message against the other processes'.
const rateAttempts = 8

func fnv32(s string) uint32 {
	h := fnv.New32a()
	_, _ = h.Write([]byte(s))
	return h.Sum32()
}

// allow counts one message of key and reports whether it is within limit this minute.
func (l *limiter) allow(ctx context.Context, key string, limit int) bool {
	if limit <= 0 {
		return true
	}
	now := time.Now()
	minute := now.Unix() / 60
	l.mu.Lock()
	l.forget(now, minute)
	known := l.full[key] == minute
	l.mu.Unlock()
	if known {
		return false
	}
	if l.kv == nil {
		return l.alone(now, key, limit)
	}
	// One round at a time per conversation in this process: rounds are lost only to other
	// processes'.
	stripe := &l.stripes[fnv32(key)%uint32(len(l.stripes))]
	stripe.Lock()
	defer stripe.Unlock()
	k := key + "." + strconv.FormatInt(minute, 10)
	for range rateAttempts {
		e, err := l.kv.Get(ctx, k)
		switch {
		case errors.Is(err, jetstream.ErrKeyNotFound):
			if _, err = l.kv.Create(ctx, k, []byte("1")); err == nil {
				return true
			}
		case err == nil:
			n, _ := strconv.Atoi(string(e.Value()))
			if n >= limit {
				l.mu.Lock()
				l.full[key] = minute
				l.mu.Unlock()
				return false
			}
			if _, err = l.kv.Update(ctx, k, []byte(strconv.Itoa(n+1)), e.Revision()); err == nil {
				return true
			}
		}
		if !errors.Is(err, jetstream.ErrKeyExists) && !isWrongRevision(err) {
			return l.alone(now, key, limit) // not another process's count that came first: NATS trouble
		}
	}
	return false // every round lost to other processes' counts: a flood, refused
}

// isWrongRevision reports an Update refused because another process counted first.
func isWrongRevision(err error) bool {
	var apiErr *jetstream.APIError
	return errors.As(err, &apiErr) && apiErr.ErrorCode == jetstream.JSErrCodeStreamWrongLastSequence
}

// alone counts key in this process only (fixed one-minute windows from its first message).
func (l *limiter) alone(now time.Time, key string, limit int) bool {
	l.mu.Lock()
	defer l.mu.Unlock()
	w := l.local[key]
	if w == nil || now.Sub(w.start) >= time.Minute {
		w = &window{start: now}
		l.local[key] = w
	}
	w.n++
	return w.n <= limit
}

// forget drops, every 1,024 calls, the minutes and windows that ended (l.mu held).
func (l *limiter) forget(now time.Time, minute int64) {
	if l.calls++; l.calls%1024 != 0 {
		return
	}
	for k, m := range l.full {
		if m < minute {
			delete(l.full, k)
		}
	}
	for k, w := range l.local {
		if now.Sub(w.start) >= time.Minute {
			delete(l.local, k)
		}
	}
}
