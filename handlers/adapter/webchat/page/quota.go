package page

import (
	"net/http"
	"strconv"
	"sync"
	"time"

	"github.com/ximd/ximd/profile"
)

// Quotas bound what one page link holder can take of a gateway (per channel, in this gateway's
// memory: with several gateways each enforces its own). Past one: 429 with Retry-After.
type Quotas struct {
	// MaxStreams (XIM_WEBCHAT_MAX_STREAMS) bounds a channel's open event streams. Default 8.
	MaxStreams int
	// MessagesPerMinute (XIM_WEBCHAT_MESSAGES_PER_MINUTE) bounds a channel's posted messages.
	// Default 60.
	MessagesPerMinute int
	// UploadBytesPerHour (XIM_WEBCHAT_UPLOAD_BYTES_PER_HOUR) bounds a channel's uploaded bytes.
	// Default 1 GiB.
	UploadBytesPerHour int64
}

func (q *Quotas) defaults() {
	if q.MaxStreams <= 0 {
		q.MaxStreams = 8
	}
	if q.MessagesPerMinute <= 0 {
		q.MessagesPerMinute = 60
	}
	if q.UploadBytesPerHour <= 0 {
		q.UploadBytesPerHour = 1 << 30
	}
}

// usage is one channel's use of its quotas: open streams, and the current minute's messages and
// hour's bytes (fixed windows).
type usage struct {
	streams  int
	minute   time.Time
	messages int
	hour     time.Time
	bytes    int64
}

// quotas is the per-channel usage of a gateway, dropped when a channel is idle.
type quotas struct {
	cfg Quotas
	mu  sync.Mutex
	by  map[string]*usage
	now func() time.Time
}

func newQuotas(cfg Quotas) *quotas {
	cfg.defaults()
	return &quotas{cfg: cfg, by: map[string]*usage{}, now: time.Now}
}

// get returns the channel's usage with its windows current; q.mu is held.
func (q *quotas) get(channel string) *usage {
	u := q.by[channel]
	if u == nil {
		u = &usage{}
		q.by[channel] = u
	}
	now := q.now()
	if now.Sub(u.minute) >= time.Minute {
		u.minute, u.messages = now.Truncate(time.Minute), 0
	}
	if now.Sub(u.hour) >= time.Hour {
		u.hour, u.bytes = now.Truncate(time.Hour), 0
	}
	return u
}

// release drops an idle channel's entry; q.mu is held.
func (q *quotas) release(channel string, u *usage) {
	if u.streams == 0 && u.messages == 0 && u.bytes == 0 {
		delete(q.by, channel)
	}
}

// openStream takes a stream slot: done gives it back. ok false: the channel has MaxStreams.
func (q *quotas) openStream(channel string) (done func(), ok bool) {
	q.mu.Lock()
	defer q.mu.Unlock()
	u := q.get(channel)
	if u.streams >= q.cfg.MaxStreams {
		return nil, false
	}
	u.streams++
	return func() {
		q.mu.Lock()
		defer q.mu.Unlock()
		u.streams--
		q.release(channel, u)
	}, true
}

// message counts one posted message; retry > 0: over the quota, try again after it.
func (q *quotas) message(channel string) (retry time.Duration) {
	q.mu.Lock()
	defer q.mu.Unlock()
	u := q.get(channel)
	if u.messages >= q.cfg.MessagesPerMinute {
		return u.minute.Add(time.Minute).Sub(q.now())
	}
	u.messages++
	return 0
}

// upload reserves n bytes of the hour's upload quota (n < 0: unknown, 1 byte reserved);
// retry > 0: over the quota. The reservation is corrected to the bytes stored by done.
func (q *quotas) upload(channel string, n int64) (done func(stored int64), retry time.Duration) {
	q.mu.Lock()
	defer q.mu.Unlock()
	u := q.get(channel)
	n = max(n, 1)
	if u.bytes+n > q.cfg.UploadBytesPerHour {
		return nil, u.hour.Add(time.Hour).Sub(q.now())
	}
	u.bytes += n
	return func(stored int64) {
		q.mu.Lock()
		defer q.mu.Unlock()
		u.bytes += stored - n
	}, 0
}

// tooMany answers 429 with Retry-After (whole seconds, at least 1).
func tooMany(w http.ResponseWriter, retry time.Duration, what string) {
	w.Header().Set("Retry-After", strconv.Itoa(max(1, int((retry+time.Second-1)/time.Second))))
	writeError(w, http.StatusTooManyRequests, profile.CodeRateLimited, what)
}
