package telegramtest

import (
	"time"

	"github.com/ximd/ximd/handlers/adapter/internal/fakekit"
)

// budgetClass is what a call spends.
type budgetClass int

const (
	spendSend      budgetClass = iota // a message-creating call
	spendEdit                         // editMessageText
	spendEphemeral                    // sendMessageDraft, sendChatAction
)

// budgetKey is a bot's view of a chat; chat 0 is for calls without chat_id.
type budgetKey struct{ bot, chat int64 }

// budget is the rate-limit state of one bot in one chat. Guarded by Server.mu.
type budget struct {
	send  bucket      // sends and edits: Limits.PerChatPerSecond
	eph   bucket      // drafts and chat actions: Limits.EphemeralPerSecond
	group []time.Time // sends and edits in a group over the last minute
	edits []time.Time // edits over the last minute
}

// budgetLocked returns the budget of a bot in a chat. s.mu is held.
func (s *Server) budgetLocked(botID, chatID int64) *budget {
	k := budgetKey{bot: botID, chat: chatID}
	bg := s.budgets[k]
	if bg == nil {
		bg = &budget{}
		s.budgets[k] = bg
	}
	return bg
}

// spendLocked takes one call of a class from a bot's budget in a chat, or answers 429 with the
// seconds until the call would fit and starts that retry_after window. s.mu is held.
func (s *Server) spendLocked(b *botState, ch *chatState, class budgetClass) *apiError {
	now := s.Now()
	l := s.limits
	bg := s.budgetLocked(b.ID, ch.id)
	var wait time.Duration
	switch class {
	case spendSend, spendEdit:
		rate := float64(l.PerChatPerSecond)
		wait = max(wait, bg.send.need(now, rate, max(3, rate)))
		if ch.isGroup() {
			wait = max(wait, windowNeed(&bg.group, now, l.GroupPerMinute))
		}
		if class == spendEdit {
			wait = max(wait, windowNeed(&bg.edits, now, l.EditsPerMinute))
		}
	case spendEphemeral:
		rate := float64(l.EphemeralPerSecond)
		wait = max(wait, bg.eph.need(now, rate, rate))
	}
	if wait > 0 {
		n := fakekit.Seconds(wait)
		s.windows.Open(budgetKey{bot: b.ID, chat: ch.id}, now, n)
		return tooManyRequests(n)
	}
	switch class {
	case spendSend, spendEdit:
		bg.send.tokens--
		if ch.isGroup() {
			bg.group = append(bg.group, now)
		}
		if class == spendEdit {
			bg.edits = append(bg.edits, now)
		}
	case spendEphemeral:
		bg.eph.tokens--
	}
	return nil
}

// bucket is a token bucket that starts full.
type bucket struct {
	tokens  float64
	last    time.Time
	started bool
}

// need refills the bucket to now and returns how long until it holds one token (0: now).
func (k *bucket) need(now time.Time, rate, burst float64) time.Duration {
	if !k.started {
		k.tokens, k.last, k.started = burst, now, true
	}
	if dt := now.Sub(k.last).Seconds(); dt > 0 {
		k.tokens = min(burst, k.tokens+dt*rate)
		k.last = now
	}
	if k.tokens >= 1 {
		return 0
	}
	return time.Duration((1 - k.tokens) / rate * float64(time.Second))
}

// windowNeed drops entries older than a minute and returns how long until fewer than n
// remain (0: now).
func windowNeed(w *[]time.Time, now time.Time, n int) time.Duration {
	cut := 0
	for cut < len(*w) && !now.Before((*w)[cut].Add(time.Minute)) {
		cut++
	}
	*w = (*w)[cut:]
	if len(*w) < n {
		return 0
	}
	return (*w)[len(*w)-n].Add(time.Minute).Sub(now)
}
