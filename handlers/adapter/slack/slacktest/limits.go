package slacktest

import "time"

// Limits are the Web API rate limits ("Rate limits"): budgets per method per app per
// workspace, and per channel for posting. A zero field means its default (DefaultLimits); set
// large numbers to turn a limit off.
type Limits struct {
	// PostPerSecond is the rate of a per-channel token bucket for chat.postMessage and
	// chat.startStream ("1 per second per channel", a Special tier). Default 1.
	PostPerSecond int
	// PostBurst is that bucket's size ("short bursts >1 allowed"). Default 3.
	PostBurst int
	// Tier1PerMinute is the budget of Tier 1 methods (apps.connections.open). Default 1.
	Tier1PerMinute int
	// Tier2PerMinute is the budget of Tier 2 methods (none of the fake's methods are Tier 2;
	// kept for completeness). Default 20.
	Tier2PerMinute int
	// Tier3PerMinute is the budget of Tier 3 methods (chat.update, conversations.info,
	// conversations.history, conversations.replies). Default 50.
	Tier3PerMinute int
	// Tier4PerMinute is the budget of Tier 4 methods (auth.test, users.info, chat.appendStream,
	// chat.stopStream, assistant.threads.setStatus, files.getUploadURLExternal,
	// files.completeUploadExternal). Default 100.
	Tier4PerMinute int
}

// DefaultLimits are the limits a new Server applies.
var DefaultLimits = Limits{
	PostPerSecond: 1, PostBurst: 3,
	Tier1PerMinute: 1, Tier2PerMinute: 20, Tier3PerMinute: 50, Tier4PerMinute: 100,
}

// SetLimits replaces the rate limits; a zero field means its default.
func (s *Server) SetLimits(l Limits) {
	d := DefaultLimits
	fill := func(v *int, def int) {
		if *v <= 0 {
			*v = def
		}
	}
	fill(&l.PostPerSecond, d.PostPerSecond)
	fill(&l.PostBurst, d.PostBurst)
	fill(&l.Tier1PerMinute, d.Tier1PerMinute)
	fill(&l.Tier2PerMinute, d.Tier2PerMinute)
	fill(&l.Tier3PerMinute, d.Tier3PerMinute)
	fill(&l.Tier4PerMinute, d.Tier4PerMinute)
	s.mu.Lock()
	defer s.mu.Unlock()
	s.limits = l
}

// limitClass is the budget a method spends from.
type limitClass int

const (
	perChannel limitClass = iota // chat.postMessage, chat.startStream
	tier1
	tier2
	tier3
	tier4
)

// budgetKey names a budget: an app's method, and the channel for perChannel methods.
type budgetKey struct{ bot, method, channel string }

// budget is the rate-limit state of one budgetKey. Guarded by Server.mu.
type budget struct {
	tokens  float64
	last    time.Time
	started bool
}

func (s *Server) budgetLocked(k budgetKey) *budget {
	bg := s.budgets[k]
	if bg == nil {
		bg = &budget{}
		s.budgets[k] = bg
	}
	return bg
}

// spendLocked takes one call from a budget, or returns how long until it would fit. s.mu is
// held.
func (s *Server) spendLocked(bg *budget, class limitClass, now time.Time) time.Duration {
	l := s.limits
	var rate, burst float64 // per second, bucket size
	switch class {
	case perChannel:
		rate, burst = float64(l.PostPerSecond), float64(max(l.PostBurst, l.PostPerSecond))
	case tier1:
		rate, burst = float64(l.Tier1PerMinute)/60, float64(l.Tier1PerMinute)
	case tier2:
		rate, burst = float64(l.Tier2PerMinute)/60, float64(l.Tier2PerMinute)
	case tier3:
		rate, burst = float64(l.Tier3PerMinute)/60, float64(l.Tier3PerMinute)
	case tier4:
		rate, burst = float64(l.Tier4PerMinute)/60, float64(l.Tier4PerMinute)
	}
	if !bg.started {
		bg.tokens, bg.last, bg.started = burst, now, true
	}
	if dt := now.Sub(bg.last).Seconds(); dt > 0 {
		bg.tokens = min(burst, bg.tokens+dt*rate)
		bg.last = now
	}
	if bg.tokens >= 1 {
		bg.tokens--
		return 0
	}
	return time.Duration((1 - bg.tokens) / rate * float64(time.Second))
}
