package discord

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/http/httptrace"
	"strconv"
	"sync"
	"sync/atomic"
	"time"

	"github.com/bwmarrin/discordgo"

	"github.com/ximd/ximd/handlers/adapter"
	"github.com/ximd/ximd/profile"
)

// account is one bot token's client: its discordgo session (REST through the library's request
// helper and bucket lock), the buckets Discord announced, the channels' pauses and edit budgets,
// and what it remembers of the messages it sent. Shared by every channel of the token.
type account struct {
	s       *discordgo.Session
	api     string
	refused atomic.Bool // Discord answered 401: the token makes no more calls

	mu      sync.Mutex
	buckets map[string]bucket    // route key -> what X-RateLimit-* said last
	pauses  map[string]time.Time // channel id ("" the whole bot) -> no call before
	edits   map[string][]time.Time
	sent    map[string][]part // idempotency key -> the messages of its parts
	order   []string
	self    *discordgo.User
}

// bucket is a route's budget as Discord's headers announced it.
type bucket struct {
	remaining int
	reset     time.Time
}

// part is one message of a text: its id and the content it shows.
type part struct {
	id      string
	content string
}

// maxSentKeys bounds what an account remembers of the texts it sent (the oldest is forgotten).
const maxSentKeys = 4096

func newAccount(c *config, hc *http.Client) *account {
	acc := &account{api: c.apiURL, buckets: map[string]bucket{}, pauses: map[string]time.Time{},
		edits: map[string][]time.Time{}, sent: map[string][]part{}}
	s, _ := discordgo.New("Bot " + c.botToken) // New fails for no reason with a plain token
	s.ShouldRetryOnRateLimit = false           // a 429 is the caller's to wait out (RetryAfterError)
	s.MaxRestRetries = 0
	s.ShouldReconnectOnError = false // the poll loop reconnects, and stops on a refused token
	s.LogLevel = -1                  // the library's log lines carry no structure; errors are returned
	s.Identify.Intents = discordgo.IntentsGuilds | discordgo.IntentsGuildMessages | discordgo.IntentsDirectMessages | discordgo.IntentMessageContent
	base := hc.Transport
	if base == nil {
		base = http.DefaultTransport
	}
	s.Client = &http.Client{Timeout: hc.Timeout, Transport: &transport{base: base, acc: acc, api: c.apiURL, gateway: c.gatewayURL}}
	acc.s = s
	return acc
}

// transport is the account's HTTP: the library's own gateway lookup (a fixed discord.com URL)
// goes to the configured API (or is answered with the configured gateway_url), and every answer's
// X-RateLimit-* headers are kept for the route.
type transport struct {
	base    http.RoundTripper
	acc     *account
	api     string
	gateway string
}

func (t *transport) RoundTrip(req *http.Request) (*http.Response, error) {
	if req.URL.String() == discordgo.EndpointGateway || req.URL.String() == discordgo.EndpointGatewayBot {
		if t.gateway != "" {
			body, _ := json.Marshal(map[string]string{"url": t.gateway})
			return &http.Response{StatusCode: http.StatusOK, Status: "200 OK", Header: http.Header{"Content-Type": {"application/json"}},
				Body: io.NopCloser(bytes.NewReader(body)), Request: req}, nil
		}
		r2 := req.Clone(req.Context())
		u, err := r2.URL.Parse(t.api + "/gateway/bot")
		if err != nil {
			return nil, err
		}
		r2.URL, r2.Host = u, u.Host
		req = r2
	}
	info, _ := req.Context().Value(callInfoKey{}).(*callInfo)
	if info != nil {
		req = req.WithContext(httptrace.WithClientTrace(req.Context(), &httptrace.ClientTrace{
			WroteRequest: func(httptrace.WroteRequestInfo) { info.wrote.Store(true) },
		}))
	}
	resp, err := t.base.RoundTrip(req)
	if err != nil {
		return nil, err
	}
	if info != nil {
		info.status.Store(int64(resp.StatusCode))
		info.global.Store(resp.Header.Get("X-RateLimit-Global") == "true")
		t.acc.noteBucket(info.route, resp.Header)
	}
	return resp, nil
}

type callInfoKey struct{}

// callInfo is what the transport saw of one call: whether the request went out, its status.
type callInfo struct {
	route  string
	wrote  atomic.Bool
	status atomic.Int64
	global atomic.Bool // a 429 of the bot's global limit
}

// noteBucket keeps a route's X-RateLimit-Remaining and -Reset-After.
func (acc *account) noteBucket(route string, h http.Header) {
	rem, err1 := strconv.Atoi(h.Get("X-RateLimit-Remaining"))
	after, err2 := strconv.ParseFloat(h.Get("X-RateLimit-Reset-After"), 64)
	if err1 != nil || err2 != nil {
		return
	}
	acc.mu.Lock()
	acc.buckets[route] = bucket{remaining: rem, reset: time.Now().Add(time.Duration(after * float64(time.Second)))}
	acc.mu.Unlock()
}

// wait is how long no call of route in channel may be made: the channel's (or the bot's)
// retry_after, or the route's bucket spent until its reset.
func (acc *account) wait(route, channel string) time.Duration {
	acc.mu.Lock()
	defer acc.mu.Unlock()
	now := time.Now()
	d := max(acc.pauses[channel].Sub(now), acc.pauses[""].Sub(now))
	if b, ok := acc.buckets[route]; ok && b.remaining <= 0 {
		d = max(d, b.reset.Sub(now))
	}
	return max(d, 0)
}

func (acc *account) pause(channel string, d time.Duration) {
	acc.mu.Lock()
	defer acc.mu.Unlock()
	if until := time.Now().Add(d); until.After(acc.pauses[channel]) {
		acc.pauses[channel] = until
	}
}

// request is one REST call.
type request struct {
	method  string
	path    string // below the API base, "/channels/…"
	channel string // the channel it concerns ("": none)
	route   string // the rate-limit route: method and path with the message id cut
	body    any    // JSON body, or nil
	ctype   string // with raw: a multipart body
	raw     []byte
}

// call makes one REST call through the library's request helper and decodes the answer into out
// (nil: ignored). While the channel's retry time or its route's bucket runs it makes no call and
// answers a RetryAfterError; a token Discord refused makes none at all. A failure is mapped to
// its ack code (edge-api §7.2.5).
func (acc *account) call(ctx context.Context, r request, out any) error {
	if acc.refused.Load() {
		return profile.Errorf(profile.CodeTargetAuthFailed, "discord: the bot token was refused (401); no more calls are made with it")
	}
	if r.route == "" {
		r.route = r.method + " " + r.path
	}
	if d := acc.wait(r.route, r.channel); d > 0 {
		return &adapter.RetryAfterError{After: d, Err: profile.Errorf(profile.CodeTargetRateLimited, "discord %s: rate-limited, retry after %s", r.route, d.Round(time.Millisecond))}
	}
	ctype, raw := r.ctype, r.raw
	if r.body != nil {
		b, err := json.Marshal(r.body)
		if err != nil {
			return profile.Errorf(profile.CodeTargetDeliveryFailed, "discord %s: %v", r.route, err)
		}
		ctype, raw = "application/json", b
	}
	info := &callInfo{route: r.route}
	cctx := context.WithValue(ctx, callInfoKey{}, info)
	bucketID := acc.api + r.route
	resp, err := acc.s.RequestWithLockedBucket(r.method, acc.api+r.path, ctype, raw, acc.s.Ratelimiter.LockBucket(bucketID), 0, discordgo.WithContext(cctx))
	if err != nil {
		return acc.mapErr(ctx, r, info, err)
	}
	if out != nil && len(resp) > 0 {
		if err := json.Unmarshal(resp, out); err != nil {
			return &adapter.AmbiguousError{Err: profile.Errorf(profile.CodeTargetUnavailable, "discord %s: an answer that is not JSON", r.route)}
		}
	}
	return nil
}

// mapErr maps a failed call to its ack code: 429 -> target_rate_limited with retry_after (the
// channel, or with X-RateLimit-Global the whole bot, pauses that long); 401 ->
// target_auth_failed, and the token makes no more calls; other 4xx -> target_delivery_failed
// with Discord's code and message; 5xx -> target_unavailable; no answer after the request went
// out (a timeout, a reset) -> target_unavailable in doubt (AmbiguousError); nothing sent ->
// target_unavailable, certain.
func (acc *account) mapErr(ctx context.Context, r request, info *callInfo, err error) error {
	var rl *discordgo.RateLimitError
	if errors.As(err, &rl) {
		after := rl.RetryAfter
		if after <= 0 {
			after = time.Second
		}
		after = min(after, adapter.MaxRetryAfter)
		scope := r.channel
		if info.global.Load() {
			scope = ""
		}
		acc.pause(scope, after)
		return &adapter.RetryAfterError{After: after, Err: profile.Errorf(profile.CodeTargetRateLimited, "discord %s: too many requests, retry after %s", r.route, after)}
	}
	status := int(info.status.Load())
	var re *discordgo.RESTError
	detail := ""
	if errors.As(err, &re) && re.Message != nil {
		detail = fmt.Sprintf(": %d %s", re.Message.Code, re.Message.Message)
	}
	switch {
	case status == http.StatusUnauthorized:
		acc.refused.Store(true)
		return profile.Errorf(profile.CodeTargetAuthFailed, "discord %s: the bot token was refused (401)", r.route)
	case status >= 400 && status < 500:
		pe := profile.Errorf(profile.CodeTargetDeliveryFailed, "discord %s: status %d%s", r.route, status, detail)
		return &apiError{status: status, code: codeOf(re), err: pe}
	case status >= 500:
		return profile.Errorf(profile.CodeTargetUnavailable, "discord %s: server error %d", r.route, status)
	case !info.wrote.Load() && ctx.Err() == nil:
		return profile.Errorf(profile.CodeTargetUnavailable, "discord %s: unreachable: %v", r.route, err)
	default:
		return &adapter.AmbiguousError{Err: profile.Errorf(profile.CodeTargetUnavailable, "discord %s: no answer: %v", r.route, err)}
	}
}

// apiError is a 4xx answer of Discord with its JSON error code (10003 unknown channel, 50001
// missing access, 50013 missing permissions, …); it wraps the call's *profile.Error.
type apiError struct {
	status int
	code   int
	err    error
}

func (e *apiError) Error() string { return e.err.Error() }
func (e *apiError) Unwrap() error { return e.err }

func codeOf(re *discordgo.RESTError) int {
	if re == nil || re.Message == nil {
		return 0
	}
	return re.Message.Code
}

// budget takes the channel's next slot for a message or an edit: at most EditBurst in five
// seconds, and for a preview (!wait) one per EditInterval too. A final waits for its slot; a
// preview that would have to wait is answered a RetryAfterError instead (the display stretches,
// nothing is sent).
func (acc *account) budget(ctx context.Context, channel string, wait bool) error {
	for {
		acc.mu.Lock()
		now := time.Now()
		times := acc.edits[channel]
		for len(times) > 0 && now.Sub(times[0]) >= 5*time.Second {
			times = times[1:]
		}
		var d time.Duration
		if len(times) >= EditBurst {
			d = times[0].Add(5 * time.Second).Sub(now)
		}
		if !wait && len(times) > 0 {
			d = max(d, times[len(times)-1].Add(EditInterval).Sub(now))
		}
		if d <= 0 {
			acc.edits[channel] = append(times, now)
			acc.mu.Unlock()
			return nil
		}
		acc.edits[channel] = times
		acc.mu.Unlock()
		if !wait {
			return &adapter.RetryAfterError{After: d, Err: profile.Errorf(profile.CodeTargetRateLimited, "discord: the channel's edit budget is spent")}
		}
		t := time.NewTimer(d)
		select {
		case <-t.C:
		case <-ctx.Done():
			t.Stop()
			return profile.Errorf(profile.CodeTargetUnavailable, "discord: waiting for the channel's budget: %v", ctx.Err())
		}
	}
}

// parts returns what the account remembers of key's messages.
func (acc *account) parts(key string) []part {
	acc.mu.Lock()
	defer acc.mu.Unlock()
	return append([]part(nil), acc.sent[key]...)
}

// remember keeps key's messages, forgetting the oldest key past maxSentKeys.
func (acc *account) remember(key string, ps []part) {
	acc.mu.Lock()
	defer acc.mu.Unlock()
	if _, ok := acc.sent[key]; !ok {
		acc.order = append(acc.order, key)
		if len(acc.order) > maxSentKeys {
			delete(acc.sent, acc.order[0])
			acc.order = acc.order[1:]
		}
	}
	acc.sent[key] = append([]part(nil), ps...)
}

// me is the bot's own user (GET /users/@me), asked once.
func (acc *account) me(ctx context.Context) (*discordgo.User, error) {
	acc.mu.Lock()
	u := acc.self
	acc.mu.Unlock()
	if u != nil {
		return u, nil
	}
	u = &discordgo.User{}
	if err := acc.call(ctx, request{method: http.MethodGet, path: "/users/@me"}, u); err != nil {
		return nil, err
	}
	acc.mu.Lock()
	acc.self = u
	acc.mu.Unlock()
	return u, nil
}

// channel is GET /channels/{id}.
func (acc *account) channel(ctx context.Context, id string) (*discordgo.Channel, error) {
	ch := &discordgo.Channel{}
	err := acc.call(ctx, request{method: http.MethodGet, path: "/channels/" + id, channel: id, route: "GET /channels/" + id}, ch)
	return ch, err
}
