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
// clock minute in KV xim_bot_rates, set by revision. The count this process last wrote or read
// is kept, so a message costs one call while no other process counted meanwhile (the minute's
// create, or an update of the revision known), and a minute known full none; a message whose every round is
// lost to other processes' counts is refused; when NATS does not answer, this process counts
// alone.
type limiter struct {
	kv      jetstream.KeyValue // nil: this process counts alone
	stripes [64]sync.Mutex

	mu    sync.Mutex
	seen  map[string]count // conversation -> its count this process last saw
	local map[string]*window
	calls int
}

// count is a conversation's messages of one minute, and the revision of the KV entry holding it.
type count struct {
	minute int64
	n      int
	rev    uint64
}

type window struct {
	start time.Time
	n     int
}

func newLimiter(kv jetstream.KeyValue) *limiter {
	return &limiter{kv: kv, seen: map[string]count{}, local: map[string]*window{}}
}

// rateAttempts bounds the rounds of one message against the other processes' counts.
const rateAttempts = 8

// allow counts one message of key and reports whether it is within limit this minute.
func (l *limiter) allow(ctx context.Context, key string, limit int) bool {
	if limit <= 0 {
		return true
	}
	now := time.Now()
	minute := now.Unix() / 60
	l.mu.Lock()
	l.forget(now, minute)
	l.mu.Unlock()
	if l.kv == nil {
		return l.alone(now, key, limit)
	}
	// One round at a time per conversation in this process: rounds are lost only to other
	// processes'.
	stripe := &l.stripes[fnv32(key)%uint32(len(l.stripes))]
	stripe.Lock()
	defer stripe.Unlock()
	l.mu.Lock()
	c, known := l.seen[key]
	l.mu.Unlock()
	known = known && c.minute == minute
	k := key + "." + strconv.FormatInt(minute, 10)
	for range rateAttempts {
		if !known {
			// Most often the conversation's first message of the minute: create the count.
			rev, err := l.kv.Create(ctx, k, []byte("1"))
			if err == nil {
				l.note(key, count{minute, 1, rev})
				return true
			}
			if !errors.Is(err, jetstream.ErrKeyExists) {
				return l.alone(now, key, limit) // NATS trouble
			}
			e, err := l.kv.Get(ctx, k)
			if errors.Is(err, jetstream.ErrKeyNotFound) {
				continue // expired between the two calls
			}
			if err != nil {
				return l.alone(now, key, limit)
			}
			n, _ := strconv.Atoi(string(e.Value()))
			c, known = count{minute, n, e.Revision()}, true
			l.note(key, c)
		}
		if c.n >= limit {
			return false
		}
		rev, err := l.kv.Update(ctx, k, []byte(strconv.Itoa(c.n+1)), c.rev)
		if err == nil {
			l.note(key, count{minute, c.n + 1, rev})
			return true
		}
		if !isWrongRevision(err) {
			return l.alone(now, key, limit)
		}
		known = false // another process counted meanwhile: read again
	}
	return false // every round lost to other processes' counts: a flood, refused
}

func (l *limiter) note(key string, c count) {
	l.mu.Lock()
	l.seen[key] = c
	l.mu.Unlock()
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

// forget drops, every 1,024 calls, the counts of minutes past and the windows that ended (l.mu
// held).
func (l *limiter) forget(now time.Time, minute int64) {
	if l.calls++; l.calls%1024 != 0 {
		return
	}
	for k, c := range l.seen {
		if c.minute < minute {
			delete(l.seen, k)
		}
	}
	for k, w := range l.local {
		if now.Sub(w.start) >= time.Minute {
			delete(l.local, k)
		}
	}
}

func fnv32(s string) uint32 {
	h := fnv.New32a()
	_, _ = h.Write([]byte(s))
	return h.Sum32()
}
