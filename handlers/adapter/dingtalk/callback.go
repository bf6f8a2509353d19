package dingtalk

import (
	"context"
	"crypto/hmac"
	"crypto/sha256"
	"encoding/base64"
	"encoding/json"
	"net/http"
	"strconv"
	"time"

	"github.com/ximd/ximd/handlers/adapter"
	"github.com/ximd/ximd/profile"
)

var _ adapter.Receiver = (*Adapter)(nil)

// CallbackWindow is how far an HTTP callback's timestamp may be from now (DingTalk: one hour).
const CallbackWindow = time.Hour

// errBadSign answers a callback that fails the sign check, and one for a channel that is not
// open: the same answer, so the route tells nobody which channels exist.
var errBadSign = profile.Errorf(profile.CodeUnauthorized, "bad or missing timestamp and sign")

// Refusal implements adapter.Receiver.
func (a *Adapter) Refusal() error { return errBadSign }

var callbackRoute = adapter.Route[*config]{Path: "events", Refusal: errBadSign,
	Accept: func(r *http.Request, c *config) bool {
		return c.inbound == InboundHTTP && Signed(r.Header, c.clientSecret, time.Now())
	}}

// Signed reports whether h carries DingTalk's callback headers for secret: timestamp (ms)
// within CallbackWindow of now, and sign = Base64(HMAC-SHA256(secret, timestamp+"\n"+secret)).
func Signed(h http.Header, secret string, now time.Time) bool {
	ts, sign := h.Get("timestamp"), h.Get("sign")
	ms, err := strconv.ParseInt(ts, 10, 64)
	if err != nil || sign == "" {
		return false
	}
	if d := now.Sub(time.UnixMilli(ms)); d > CallbackWindow || d < -CallbackWindow {
		return false
	}
	return hmac.Equal([]byte(Sign(secret, ts)), []byte(sign))
}

// Sign is DingTalk's callback sign of timestamp with secret.
func Sign(secret, timestamp string) string {
	mac := hmac.New(sha256.New, []byte(secret))
	mac.Write([]byte(timestamp + "\n" + secret))
	return base64.StdEncoding.EncodeToString(mac.Sum(nil))
}

// Receive implements adapter.Receiver for POST /v1/targets/dingtalk/{channel}/events, the
// robot's HTTP callback (inbound "http"): the sign is checked before the body is read; the robot
// message goes to the channel of its conversation among the app's channels, else to the app's
// bots; 200 once it is durable (a failure is 503).
func (a *Adapter) Receive(w http.ResponseWriter, r *http.Request, ch adapter.Channel, in adapter.Inboxes) (adapter.Received, error) {
	c, body, err := a.StartReceive(r, ch, callbackRoute)
	if err != nil {
		return "", err
	}
	var m botMessage
	if err := json.Unmarshal(body, &m); err != nil {
		return "", profile.Errorf(profile.CodeBadRequest, "not a DingTalk robot message: %v", err)
	}
	ctx, cancel := context.WithTimeout(context.WithoutCancel(r.Context()), time.Minute)
	defer cancel()
	same := func(cc *config) bool { return cc.appKey() == c.appKey() }
	var bots []adapter.Bot
	for _, b := range in.Bots() {
		if bc, err := a.botConfig(b); err == nil && same(bc) {
			bots = append(bots, b)
		}
	}
	outcome, err := a.dispatch(ctx, m, in.Channels(), bots, in, same)
	if err != nil {
		a.Logger.Warn("dingtalk_message_failed", "channel", ch.ID, "err", err)
		return "", profile.Errorf(profile.CodeUnavailable, "the message could not be stored")
	}
	w.Header().Set("Content-Type", "application/json")
	_, _ = w.Write([]byte(`{}`))
	return outcome, nil
}
