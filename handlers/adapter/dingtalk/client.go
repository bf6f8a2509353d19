package dingtalk

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"mime/multipart"
	"net"
	"net/http"
	"net/url"
	"strings"
	"sync"
	"time"

	"github.com/ximd/ximd/handlers/adapter"
	"github.com/ximd/ximd/profile"
)

// Error codes of DingTalk's OpenAPI answers ({requestid, code, message} with a non-2xx status).
const (
	codeBadCredentials = "invalidClientIdOrSecret"
	codeInvalidAuth    = "InvalidAuthentication"
	codeQPSApi         = "Forbidden.AccessDenied.QpsLimitForApi"
	codeQPSAppkeyAPI   = "Forbidden.AccessDenied.QpsLimitForAppkeyAndApi"
)

// QPSPause is how long a card update waits after DingTalk's QPS refusal: the limits are per
// second.
const QPSPause = time.Second

// tokenEarly: the access token is fetched again this long before DingTalk says it expires.
const tokenEarly = 5 * time.Minute

// client is one app's calls: its access token (fetched, kept, refreshed before it expires and
// after an InvalidAuthentication answer) and its card update budget, shared by the app's
// channels and bots.
type client struct {
	apiURL, oapiURL string
	clientID        string
	secret          string
	http            *http.Client

	mu      sync.Mutex
	token   string
	expires time.Time
	next    time.Time // the update budget: the earliest time of the next card update
	every   time.Duration
	paused  time.Time // a QPS refusal's pause ends
}

func newClient(c *config, hc *http.Client) *client {
	return &client{apiURL: c.apiURL, oapiURL: c.oapiURL, clientID: c.clientID, secret: c.clientSecret, http: hc,
		every: time.Second / time.Duration(c.updatesPerSec)}
}

// apiError is a refused call: its status and DingTalk's code and message.
type apiError struct {
	status  int
	code    string
	message string
}

func (e *apiError) Error() string {
	return fmt.Sprintf("dingtalk: status %d %s: %s", e.status, e.code, e.message)
}

// accessToken is the app's token, fetched when there is none or it is about to expire.
func (c *client) accessToken(ctx context.Context, fresh bool) (string, error) {
	c.mu.Lock()
	if !fresh && c.token != "" && time.Now().Before(c.expires) {
		t := c.token
		c.mu.Unlock()
		return t, nil
	}
	c.mu.Unlock()
	var out struct {
		AccessToken string `json:"accessToken"`
		ExpireIn    int64  `json:"expireIn"`
	}
	body := map[string]string{"appKey": c.clientID, "appSecret": c.secret}
	if err := c.raw(ctx, http.MethodPost, c.apiURL+"/v1.0/oauth2/accessToken", "", body, &out); err != nil {
		return "", err
	}
	if out.AccessToken == "" {
		return "", profile.Errorf(profile.CodeTargetUnavailable, "dingtalk accessToken: no token in the answer")
	}
	c.mu.Lock()
	c.token = out.AccessToken
	c.expires = time.Now().Add(time.Duration(out.ExpireIn)*time.Second - tokenEarly)
	c.mu.Unlock()
	return out.AccessToken, nil
}

// call makes an OpenAPI call with the app's token; an InvalidAuthentication answer (or 401)
// fetches a new token and makes it once more.
func (c *client) call(ctx context.Context, method, path string, in, out any) error {
	for attempt := 0; ; attempt++ {
		tok, err := c.accessToken(ctx, attempt > 0)
		if err != nil {
			return mapError(err, "accessToken")
		}
		err = c.raw(ctx, method, c.apiURL+path, tok, in, out)
		var ae *apiError
		if attempt == 0 && errors.As(err, &ae) && (ae.code == codeInvalidAuth || ae.status == http.StatusUnauthorized) {
			continue
		}
		return mapError(err, path)
	}
}

// raw makes one HTTP call: JSON in, JSON out; a non-2xx answer is an *apiError, a transport
// failure is returned as it is.
func (c *client) raw(ctx context.Context, method, u, token string, in, out any) error {
	var body io.Reader
	if in != nil {
		b, err := json.Marshal(in)
		if err != nil {
			return err
		}
		body = bytes.NewReader(b)
	}
	req, err := http.NewRequestWithContext(ctx, method, u, body)
	if err != nil {
		return err
	}
	req.Header.Set("Content-Type", "application/json")
	if token != "" {
		req.Header.Set("x-acs-dingtalk-access-token", token)
	}
	return c.do(req, out)
}

func (c *client) do(req *http.Request, out any) error {
	resp, err := c.http.Do(req)
	if err != nil {
		return err
	}
	defer resp.Body.Close()
	data, err := io.ReadAll(io.LimitReader(resp.Body, 4<<20))
	if err != nil {
		return err
	}
	if resp.StatusCode < 200 || resp.StatusCode > 299 {
		var e struct {
			Code    string `json:"code"`
			Message string `json:"message"`
		}
		_ = json.Unmarshal(data, &e)
		return &apiError{status: resp.StatusCode, code: e.Code, message: e.Message}
	}
	if out != nil && len(data) > 0 {
		if err := json.Unmarshal(data, out); err != nil {
			return fmt.Errorf("dingtalk: answer: %w", err)
		}
	}
	return nil
}

// upload stores a file as media (oapi media/upload, multipart "media") and returns its media_id.
func (c *client) upload(ctx context.Context, kind, name string, r io.Reader) (string, error) {
	tok, err := c.accessToken(ctx, false)
	if err != nil {
		return "", mapError(err, "accessToken")
	}
	var buf bytes.Buffer
	mw := multipart.NewWriter(&buf)
	fw, err := mw.CreateFormFile("media", name)
	if err != nil {
		return "", err
	}
	if _, err := io.Copy(fw, r); err != nil {
		return "", profile.Errorf(profile.CodeTargetUnavailable, "dingtalk media upload: reading the file: %v", err)
	}
	_ = mw.Close()
	u := c.oapiURL + "/media/upload?" + url.Values{"access_token": {tok}, "type": {kind}}.Encode()
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, u, &buf)
	if err != nil {
		return "", err
	}
	req.Header.Set("Content-Type", mw.FormDataContentType())
	var out struct {
		ErrCode int    `json:"errcode"`
		ErrMsg  string `json:"errmsg"`
		MediaID string `json:"media_id"`
	}
	if err := c.do(req, &out); err != nil {
		return "", mapError(err, "media/upload")
	}
	if out.ErrCode != 0 || out.MediaID == "" {
		return "", profile.Errorf(profile.CodeTargetDeliveryFailed, "dingtalk media upload: errcode %d: %s", out.ErrCode, out.ErrMsg)
	}
	return out.MediaID, nil
}

// budget takes one card update from the app's budget: nil, or a RetryAfterError with the wait
// (a QPS refusal's pause, or the budget's next slot).
func (c *client) budget() error {
	c.mu.Lock()
	defer c.mu.Unlock()
	now := time.Now()
	if now.Before(c.paused) {
		return rateLimited(c.paused.Sub(now), "dingtalk card updates: paused after DingTalk's QPS limit")
	}
	if now.Before(c.next) {
		return rateLimited(c.next.Sub(now), "dingtalk card updates: the app's update budget")
	}
	c.next = now.Add(c.every)
	return nil
}

// pause records a QPS refusal: no card update of the app for QPSPause.
func (c *client) pause() {
	c.mu.Lock()
	c.paused = time.Now().Add(QPSPause)
	c.mu.Unlock()
}

func rateLimited(d time.Duration, what string) error {
	return &adapter.RetryAfterError{After: max(d, time.Millisecond), Err: profile.Errorf(profile.CodeTargetRateLimited, "%s", what)}
}

// mapError is a call's failure as an ack code (edge-api §7.2.6): bad credentials and
// InvalidAuthentication (after a fresh token) target_auth_failed; the QPS limits
// target_rate_limited, retried after QPSPause; 5xx and transport failures target_unavailable
// (a timeout or a reset after sending is ambiguous); other 4xx target_delivery_failed.
func mapError(err error, what string) error {
	if err == nil {
		return nil
	}
	var pe *profile.Error
	if errors.As(err, &pe) {
		return err
	}
	var ae *apiError
	if errors.As(err, &ae) {
		switch {
		case ae.code == codeBadCredentials || ae.code == codeInvalidAuth || ae.status == http.StatusUnauthorized:
			return profile.Errorf(profile.CodeTargetAuthFailed, "dingtalk %s: %s", what, ae.code)
		case ae.code == codeQPSApi || ae.code == codeQPSAppkeyAPI || ae.status == http.StatusTooManyRequests:
			return rateLimited(QPSPause, fmt.Sprintf("dingtalk %s: %s", what, ae.code))
		case ae.status >= 500:
			return profile.Errorf(profile.CodeTargetUnavailable, "dingtalk %s: status %d %s", what, ae.status, ae.code)
		}
		return profile.Errorf(profile.CodeTargetDeliveryFailed, "dingtalk %s: status %d %s: %s", what, ae.status, ae.code, ae.message)
	}
	unavailable := profile.Errorf(profile.CodeTargetUnavailable, "dingtalk %s: %s", what, describe(err))
	if certain(err) {
		return unavailable
	}
	return &adapter.AmbiguousError{Err: unavailable}
}

// certain reports whether a transport failure happened before the request could reach
// DingTalk (the connection refused, the name unknown).
func certain(err error) bool {
	var dnsErr *net.DNSError
	var opErr *net.OpError
	return errors.As(err, &dnsErr) || (errors.As(err, &opErr) && opErr.Op == "dial")
}

// describe is a transport failure without its URL (which may hold the access token).
func describe(err error) string {
	var ue *url.Error
	if errors.As(err, &ue) {
		err = ue.Err
	}
	s := err.Error()
	if i := strings.Index(s, "access_token="); i >= 0 {
		s = s[:i] + "access_token=…"
	}
	return s
}
