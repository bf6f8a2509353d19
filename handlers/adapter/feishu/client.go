package feishu

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"mime/multipart"
	"net/http"
	"net/http/httptrace"
	"strconv"
	"sync"
	"time"

	"github.com/ximd/ximd/handlers/adapter"
	"github.com/ximd/ximd/profile"
)

// Open-platform answer codes the client acts on (Feishu "通用错误码" / server error codes).
const (
	codeOK = 0
	// The tenant access token is missing, invalid or expired: fetched again, the call repeated
	// once.
	codeTokenMissing = 99991661
	codeTokenInvalid = 99991663
	codeTokenExpired = 99991668
	// The app's request rate is exceeded (the reset time in x-ogw-ratelimit-reset).
	codeFrequencyLimit = 99991400
	// A message to one chat (or user) too often.
	codeChatFrequencyLimit = 230020
)

// tokenMargin: a token is fetched again this long before Feishu's expiry (a quarter of its life
// when that is shorter).
const tokenMargin = 5 * time.Minute

// app is one Feishu app's client, shared by the channels of that app: its tenant access token,
// each chat's send pacing and rate-limit pause, each card's sequence.
type app struct {
	base, id, secret string
	http             *http.Client

	tokMu   sync.Mutex
	token   string
	expires time.Time
	margin  time.Duration // fetched again this long before expiry

	mu     sync.Mutex
	until  map[string]time.Time // chat or "" (the app) -> no call before
	next   map[string]time.Time // chat -> the next send within its pace
	seq    map[string]int       // card id -> last sequence used
	self   string               // the app's bot's open_id, once known (bot info)
	titles map[string]string    // chat id -> its name, for the groups bots open channels for
}

// answer is the open platform's answer envelope.
type answer struct {
	Code int             `json:"code"`
	Msg  string          `json:"msg"`
	Data json.RawMessage `json:"data"`
	Bot  json.RawMessage `json:"bot"` // GET /open-apis/bot/v3/info answers its result here
}

// callInfo is what the HTTP client saw of one call.
type callInfo struct{ wrote bool }

// tokenFor returns a valid tenant access token, fetching one when there is none, it is about to
// expire, or stale is the token a call was refused with.
func (a *app) tokenFor(ctx context.Context, stale string) (string, error) {
	a.tokMu.Lock()
	defer a.tokMu.Unlock()
	if a.token != "" && a.token != stale && time.Until(a.expires) > a.margin {
		return a.token, nil
	}
	body, _ := json.Marshal(map[string]string{"app_id": a.id, "app_secret": a.secret})
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, a.base+"/open-apis/auth/v3/tenant_access_token/internal", bytes.NewReader(body))
	if err != nil {
		return "", profile.Errorf(profile.CodeTargetDeliveryFailed, "feishu: bad base URL")
	}
	req.Header.Set("Content-Type", "application/json; charset=utf-8")
	resp, err := a.http.Do(req)
	if err != nil {
		return "", profile.Errorf(profile.CodeTargetUnavailable, "feishu token: %v", errors.Unwrap(err))
	}
	defer resp.Body.Close()
	var r struct {
		Code   int    `json:"code"`
		Msg    string `json:"msg"`
		Token  string `json:"tenant_access_token"`
		Expire int    `json:"expire"`
	}
	if err := json.NewDecoder(io.LimitReader(resp.Body, 1<<20)).Decode(&r); err != nil {
		return "", profile.Errorf(profile.CodeTargetUnavailable, "feishu token: status %d, unreadable answer", resp.StatusCode)
	}
	switch {
	case resp.StatusCode >= 500:
		return "", profile.Errorf(profile.CodeTargetUnavailable, "feishu token: server error %d", resp.StatusCode)
	case r.Code != codeOK || r.Token == "":
		return "", profile.Errorf(profile.CodeTargetAuthFailed, "feishu refused the app credentials: %d %s", r.Code, r.Msg)
	}
	ttl := time.Duration(r.Expire) * time.Second
	a.token, a.expires, a.margin = r.Token, time.Now().Add(ttl), min(tokenMargin, ttl/4)
	return a.token, nil
}

// request is one open-API call: a JSON body, or a multipart upload.
type request struct {
	method, path string
	chat         string // the chat it concerns ("": the app's)
	json         any
	form         func(*multipart.Writer) error
	// bot: the result is the answer's "bot" member, not "data" (GET /open-apis/bot/v3/info).
	bot bool
}

// do makes one call and decodes its data into out. While a rate limit's reset runs for the chat
// (or the app) it makes no call and answers a RetryAfterError. An invalid token is fetched again
// and the call repeated once.
func (a *app) do(ctx context.Context, r request, out any) error {
	if wait := a.paused(r.chat); wait > 0 {
		return &adapter.RetryAfterError{After: wait, Err: profile.Errorf(profile.CodeTargetRateLimited, "feishu %s: rate-limited", r.path)}
	}
	stale := ""
	for attempt := 0; ; attempt++ {
		tok, err := a.tokenFor(ctx, stale)
		if err != nil {
			return err
		}
		ans, status, header, info, err := a.send(ctx, r, tok)
		if err != nil {
			if info.wrote {
				// Sent, and no answer: applied or not. Sends carry a uuid, so sending again
				// is safe within the hour; the stages decide.
				return &adapter.AmbiguousError{Err: profile.Errorf(profile.CodeTargetUnavailable, "feishu %s: no answer: %v", r.path, err)}
			}
			return profile.Errorf(profile.CodeTargetUnavailable, "feishu %s: unreachable: %v", r.path, err)
		}
		switch {
		case ans.Code == codeOK && status < 300:
			data := ans.Data
			if r.bot {
				data = ans.Bot
			}
			if out != nil && len(data) > 0 {
				if err := json.Unmarshal(data, out); err != nil {
					return profile.Errorf(profile.CodeTargetUnavailable, "feishu %s: unreadable data", r.path)
				}
			}
			return nil
		case (ans.Code == codeTokenInvalid || ans.Code == codeTokenExpired || ans.Code == codeTokenMissing) && attempt == 0:
			stale = tok
			continue
		case ans.Code == codeTokenInvalid || ans.Code == codeTokenExpired || ans.Code == codeTokenMissing || status == http.StatusUnauthorized:
			return profile.Errorf(profile.CodeTargetAuthFailed, "feishu %s: the access token was refused: %d %s", r.path, ans.Code, ans.Msg)
		case status == http.StatusTooManyRequests || ans.Code == codeFrequencyLimit || ans.Code == codeChatFrequencyLimit:
			after := resetOf(header)
			scope := r.chat
			if ans.Code == codeFrequencyLimit {
				scope = "" // the app's limit
			}
			a.pause(scope, after)
			return &adapter.RetryAfterError{After: after, Err: profile.Errorf(profile.CodeTargetRateLimited, "feishu %s: frequency limit (%d), retry after %s", r.path, ans.Code, after)}
		case status >= 500:
			return profile.Errorf(profile.CodeTargetUnavailable, "feishu %s: server error %d (%d %s)", r.path, status, ans.Code, ans.Msg)
		case status == http.StatusForbidden:
			return profile.Errorf(profile.CodeTargetAuthFailed, "feishu %s: forbidden: %d %s", r.path, ans.Code, ans.Msg)
		default:
			return &apiError{path: r.path, code: ans.Code, msg: ans.Msg, err: profile.Errorf(profile.CodeTargetDeliveryFailed, "feishu %s: %d %s", r.path, ans.Code, ans.Msg)}
		}
	}
}

// apiError is a refusal with the platform's code, for the callers that act on one.
type apiError struct {
	path string
	code int
	msg  string
	err  *profile.Error
}

func (e *apiError) Error() string { return e.err.Error() }
func (e *apiError) Unwrap() error { return e.err }

// codeOf is the platform's code of a refusal (0: none).
func codeOf(err error) int {
	var ae *apiError
	if errors.As(err, &ae) {
		return ae.code
	}
	return 0
}

// send writes the request and reads the answer envelope.
func (a *app) send(ctx context.Context, r request, tok string) (answer, int, http.Header, *callInfo, error) {
	info := &callInfo{}
	var body io.Reader
	ctype := "application/json; charset=utf-8"
	switch {
	case r.form != nil:
		var buf bytes.Buffer
		mw := multipart.NewWriter(&buf)
		if err := r.form(mw); err != nil {
			return answer{}, 0, nil, info, err
		}
		if err := mw.Close(); err != nil {
			return answer{}, 0, nil, info, err
		}
		body, ctype = &buf, mw.FormDataContentType()
	case r.json != nil:
		b, err := json.Marshal(r.json)
		if err != nil {
			return answer{}, 0, nil, info, err
		}
		body = bytes.NewReader(b)
	}
	req, err := http.NewRequestWithContext(httptrace.WithClientTrace(ctx, &httptrace.ClientTrace{
		WroteRequest: func(httptrace.WroteRequestInfo) { info.wrote = true },
	}), r.method, a.base+r.path, body)
	if err != nil {
		return answer{}, 0, nil, info, err
	}
	req.Header.Set("Authorization", "Bearer "+tok)
	if body != nil {
		req.Header.Set("Content-Type", ctype)
	}
	resp, err := a.http.Do(req)
	if err != nil {
		return answer{}, 0, nil, info, errors.Unwrap(err) // the url.Error's URL is safe, its text is not needed
	}
	defer resp.Body.Close()
	var ans answer
	if err := json.NewDecoder(io.LimitReader(resp.Body, 8<<20)).Decode(&ans); err != nil {
		if resp.StatusCode >= 500 || resp.StatusCode == http.StatusTooManyRequests {
			return answer{Code: -1, Msg: http.StatusText(resp.StatusCode)}, resp.StatusCode, resp.Header, info, nil
		}
		info.wrote = true
		return answer{}, 0, nil, info, fmt.Errorf("status %d, unreadable answer", resp.StatusCode)
	}
	return ans, resp.StatusCode, resp.Header, info, nil
}

// resetOf reads a frequency limit's reset time (x-ogw-ratelimit-reset, seconds; Retry-After);
// 1 s when the answer names none.
func resetOf(h http.Header) time.Duration {
	if s, err := strconv.Atoi(h.Get("x-ogw-ratelimit-reset")); err == nil && s > 0 {
		return min(time.Duration(s)*time.Second, adapter.MaxRetryAfter)
	}
	if d, ok := adapter.ParseRetryAfter(h.Get("Retry-After"), time.Now()); ok && d > 0 {
		return d
	}
	return time.Second
}

// download fetches a resource of a message (image or file) into w's reader.
func (a *app) download(ctx context.Context, messageID, key, typ string) (io.ReadCloser, string, error) {
	tok, err := a.tokenFor(ctx, "")
	if err != nil {
		return nil, "", err
	}
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, a.base+"/open-apis/im/v1/messages/"+pathEscape(messageID)+"/resources/"+pathEscape(key)+"?type="+typ, nil)
	if err != nil {
		return nil, "", profile.Errorf(profile.CodeFileDownloadFailed, "feishu: bad resource")
	}
	req.Header.Set("Authorization", "Bearer "+tok)
	resp, err := a.http.Do(req)
	if err != nil {
		return nil, "", profile.Errorf(profile.CodeTargetUnavailable, "feishu resource download: %v", errors.Unwrap(err))
	}
	if resp.StatusCode != http.StatusOK {
		resp.Body.Close()
		if resp.StatusCode >= 500 || resp.StatusCode == http.StatusTooManyRequests {
			return nil, "", profile.Errorf(profile.CodeTargetUnavailable, "feishu resource download: status %d", resp.StatusCode)
		}
		return nil, "", profile.Errorf(profile.CodeFileDownloadFailed, "feishu resource download: status %d", resp.StatusCode)
	}
	return resp.Body, resp.Header.Get("Content-Type"), nil
}

// paused is how long a rate limit's reset still runs for chat or the app.
func (a *app) paused(chat string) time.Duration {
	a.mu.Lock()
	defer a.mu.Unlock()
	return max(time.Until(a.until[chat]), time.Until(a.until[""]))
}

func (a *app) pause(scope string, d time.Duration) {
	a.mu.Lock()
	defer a.mu.Unlock()
	if until := time.Now().Add(d); until.After(a.until[scope]) {
		a.until[scope] = until
	}
}

// pace takes the chat's next send slot, interval apart (Feishu: 5 messages a second to one
// chat), waiting for it.
func (a *app) pace(ctx context.Context, chat string, interval time.Duration) error {
	a.mu.Lock()
	now := time.Now()
	at := now
	if n := a.next[chat]; n.After(now) {
		at = n
	}
	a.next[chat] = at.Add(interval)
	a.mu.Unlock()
	if d := at.Sub(now); d > 0 {
		t := time.NewTimer(d)
		defer t.Stop()
		select {
		case <-t.C:
		case <-ctx.Done():
			return profile.Errorf(profile.CodeTargetUnavailable, "feishu: waiting to send: %v", ctx.Err())
		}
	}
	return nil
}

// nextSeq is the next sequence of a card's updates: strictly increasing across processes
// (milliseconds since the card was created, the creation time being part of its target message
// id) and within this one.
func (a *app) nextSeq(card string, created time.Time) int {
	a.mu.Lock()
	defer a.mu.Unlock()
	s := max(int(time.Since(created)/time.Millisecond), a.seq[card]+1, 1)
	a.seq[card] = s
	if len(a.seq) > 10000 {
		clear(a.seq) // bounded: the time-based part keeps the order
		a.seq[card] = s
	}
	return s
}
