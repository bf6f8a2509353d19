package feishutest

import (
	"net/http"
	"sort"
	"strings"
	"time"

	"github.com/ximd/ximd/handlers/adapter/internal/fakekit"
)

// scopeKey names a rate limit: an app's use of one API (kind "app", a = app_id, b = route
// pattern) or one card entity (kind "card", a = card_id).
type scopeKey struct{ kind, a, b string }

func appScope(appID, pattern string) scopeKey { return scopeKey{kind: "app", a: appID, b: pattern} }
func cardScope(cardID string) scopeKey        { return scopeKey{kind: "card", a: cardID} }

// useLog is the times of the calls a limit counted, oldest first.
type useLog struct{ at []time.Time }

// need returns how long until one more call fits n calls in any span (0: now). The span is
// the half-open interval (now-span, now].
func (u *useLog) need(now time.Time, span time.Duration, n int) time.Duration {
	start := now.Add(-span)
	i := sort.Search(len(u.at), func(i int) bool { return u.at[i].After(start) })
	in := u.at[i:]
	if len(in) < n {
		return 0
	}
	return in[len(in)-n].Add(span).Sub(now)
}

// add counts a call at now and forgets calls older than keep.
func (u *useLog) add(now time.Time, keep time.Duration) {
	start := now.Add(-keep)
	i := sort.Search(len(u.at), func(i int) bool { return u.at[i].After(start) })
	u.at = append(u.at[i:], now)
}

// openWindowLocked starts a reset window of n seconds for a limit, unless a longer one runs.
// s.mu is held.
func (s *Server) openWindowLocked(k scopeKey, now time.Time, n, limit int) {
	if s.windows.Open(k, now, n) {
		s.winLimits[k] = limit
	}
}

// preflightLocked sets the call's Early flag and answers, in this order, an injected fault, a
// running reset window, and the per-app gateway limit. s.mu is held.
func (s *Server) preflightLocked(idx int, rt *route, app *appState, params map[string]string) *apiError {
	if app == nil { // the token endpoint has no documented limit
		if f := s.popFaultLocked(rt.pattern); f != nil {
			return &apiError{status: f.status, code: f.code, msg: f.msg, reset: f.reset}
		}
		return nil
	}
	now := s.Now()
	scopes := []scopeKey{appScope(app.ID, rt.pattern)}
	cardID := params[routeParamCardID]
	if cardID != "" {
		scopes = append(scopes, cardScope(cardID))
	}
	var left time.Duration // of the window that runs longest, and the limit it gave
	var limit int
	for _, k := range scopes {
		if l := s.windows.Left(k, now); l > left {
			left, limit = l, s.winLimits[k]
		}
	}
	s.calls.At(idx).Early = left > 0

	if f := s.popFaultLocked(rt.pattern); f != nil {
		e := &apiError{status: f.status, code: f.code, msg: f.msg}
		if f.reset > 0 {
			k := scopes[len(scopes)-1] // the card's own limit on a card route
			e.limit, e.reset = s.limitOf(k), f.reset
			if f.code == codeFrequencyLimit || f.status == http.StatusTooManyRequests {
				s.openWindowLocked(k, now, f.reset, e.limit)
			}
		}
		return e
	}
	if left > 0 {
		return frequencyLimit(limit, fakekit.Seconds(left))
	}
	// "Streaming card updates": in streaming mode, card and element calls "do not trigger the
	// API frequency limit (QPS)"; the per-card limit still applies.
	if c := s.cards[cardID]; c != nil && c.streamingAt(now) {
		return nil
	}
	return s.spendAppLocked(app, rt.pattern, now)
}

// limitOf is the x-ogw-ratelimit-limit of a limit. s.mu is held.
func (s *Server) limitOf(k scopeKey) int {
	if k.kind == "card" {
		return s.limits.CardPerSecond
	}
	return s.limits.AppPerSecond
}

// popFaultLocked removes and returns the first injected fault for a route. s.mu is held.
func (s *Server) popFaultLocked(pattern string) *fault {
	for i, f := range s.faults {
		if strings.HasPrefix(pattern, f.prefix) {
			s.faults = append(s.faults[:i:i], s.faults[i+1:]...)
			return &f
		}
	}
	return nil
}

// spendAppLocked counts a call against its app's per-API limits ("Rate limits", level 4:
// 1000 per minute and 50 per second), or answers 429 and starts the reset window. Every call
// that reaches the gateway counts, whatever the route answers later. s.mu is held.
func (s *Server) spendAppLocked(app *appState, pattern string, now time.Time) *apiError {
	k := appScope(app.ID, pattern)
	u := s.appUse[k]
	if u == nil {
		u = &useLog{}
		s.appUse[k] = u
	}
	l := s.limits
	wait, limit := u.need(now, time.Second, l.AppPerSecond), l.AppPerSecond
	if w := u.need(now, time.Minute, l.AppPerMinute); w > wait {
		wait, limit = w, l.AppPerMinute
	}
	if wait > 0 {
		n := fakekit.Seconds(wait)
		s.openWindowLocked(k, now, n, limit)
		return frequencyLimit(limit, n)
	}
	u.add(now, time.Minute)
	return nil
}

// spendCardLocked counts an operation about to be applied to a card entity ("Streaming card
// updates": at most 10 a second on one card entity), or answers 429 with the documented
// frequency-limit error and starts the reset window. s.mu is held.
func (s *Server) spendCardLocked(cardID string, now time.Time) *apiError {
	u := s.cardUse[cardID]
	if u == nil {
		u = &useLog{}
		s.cardUse[cardID] = u
	}
	n := s.limits.CardPerSecond
	if w := u.need(now, time.Second, n); w > 0 {
		r := fakekit.Seconds(w)
		s.openWindowLocked(cardScope(cardID), now, r, n)
		return frequencyLimit(n, r)
	}
	u.add(now, time.Second)
	return nil
}

// spendChatLocked counts a message about to be sent into a chat ("Send message": 5 QPS per
// user or group, shared by the group's bots), or answers HTTP 400 code 230020, the code that
// page documents. That page gives no reset time, so no window starts. s.mu is held.
func (s *Server) spendChatLocked(chatID string, now time.Time) *apiError {
	u := s.chatUse[chatID]
	if u == nil {
		u = &useLog{}
		s.chatUse[chatID] = u
	}
	if u.need(now, time.Second, s.limits.PerChatPerSecond) > 0 {
		return badRequest(230020, "This operation triggers the frequency limit.")
	}
	u.add(now, time.Second)
	return nil
}
