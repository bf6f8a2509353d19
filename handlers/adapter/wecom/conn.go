package wecom

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"sync"
	"sync/atomic"
	"time"

	"github.com/coder/websocket"

	"github.com/ximd/ximd/handlers/adapter"
	"github.com/ximd/ximd/profile"
)

// The long connection's commands (developer.work.weixin.qq.com/document/path/101463).
const (
	cmdSubscribe = "aibot_subscribe"
	cmdPing      = "ping"
	cmdRespond   = "aibot_respond_msg"
	cmdSend      = "aibot_send_msg"
	cmdMsg       = "aibot_msg_callback"
	cmdEvent     = "aibot_event_callback"
	cmdUpInit    = "aibot_upload_media_init"
	cmdUpChunk   = "aibot_upload_media_chunk"
	cmdUpFinish  = "aibot_upload_media_finish"
)

// Timing of the long connection. The zero value of every field is its default.
type Timing struct {
	// Ping is the heartbeat interval. Default 30 s (WeCom's advice); two pings without an
	// answer end the connection.
	Ping time.Duration
	// Answer bounds the wait for a command's answer. Default 5 s (WeCom's SDK).
	Answer time.Duration
	// Connect bounds how long a call waits for the connection to be subscribed. Default 10 s.
	Connect time.Duration
	// MaxBackoff bounds the wait between reconnections (1 s doubling), and is the wait after
	// a refused subscribe. Default 30 s.
	MaxBackoff time.Duration
	// Retake is how long a connection taken over by another process's subscribe waits before
	// subscribing again (when this process still holds the robot then: the poll loop that
	// moved elsewhere closes it first). Default 10 s.
	Retake time.Duration
	// ThinkGrace is how long a thinking frame's bubble waits, once the status is cleared, for
	// the answer to take it over before it is finished. Default 3 s.
	ThinkGrace time.Duration
}

func (t Timing) defaults() Timing {
	t.Ping = adapter.OrDefault(t.Ping, 30*time.Second)
	t.Answer = adapter.OrDefault(t.Answer, 5*time.Second)
	t.Connect = adapter.OrDefault(t.Connect, 10*time.Second)
	t.MaxBackoff = adapter.OrDefault(t.MaxBackoff, 30*time.Second)
	t.Retake = adapter.OrDefault(t.Retake, 10*time.Second)
	t.ThinkGrace = adapter.OrDefault(t.ThinkGrace, 3*time.Second)
	return t
}

// frame is every frame of the long connection: a command (cmd, headers, body) or a command's
// answer (headers, errcode, errmsg, body).
type frame struct {
	Cmd     string          `json:"cmd,omitempty"`
	Headers headers         `json:"headers"`
	Body    json.RawMessage `json:"body,omitempty"`
	Errcode *int            `json:"errcode,omitempty"`
	Errmsg  string          `json:"errmsg,omitempty"`
}

type headers struct {
	ReqID string `json:"req_id"`
}

// WeCom's error codes the adapter acts on (docs/adapters/wecom.md, "Error codes").
const (
	errStreamExpired = 846608 // a stream's 6 minutes are over
	errBadReqID      = 846605 // the req_id answered is unknown or too old
)

// errcodes maps WeCom's errcodes to ack codes; any other non-zero errcode is
// target_delivery_failed.
var errcodes = map[int]string{
	40001: profile.CodeTargetAuthFailed,  // invalid credential
	40014: profile.CodeTargetAuthFailed,  // invalid access token
	42001: profile.CodeTargetAuthFailed,  // token expired
	60020: profile.CodeTargetAuthFailed,  // not allow to access from your ip
	45009: profile.CodeTargetRateLimited, // api freq out of limit
	45033: profile.CodeTargetRateLimited, // api concurrent out of limit
	-1:    profile.CodeTargetUnavailable, // system busy
}

// refusal is a command WeCom answered with a non-zero errcode.
type refusal struct {
	cmd  string
	code int
	msg  string
}

func (r *refusal) Error() string {
	return fmt.Sprintf("wecom %s: errcode %d: %s", r.cmd, r.code, r.msg)
}

// codeOf is the errcode of err's refusal, 0 when it is none.
func codeOf(err error) int {
	var r *refusal
	if errors.As(err, &r) {
		return r.code
	}
	return 0
}

// ackErr maps a refusal to its ack code (edge-api §7.2.7), keeping the refusal inside.
func ackErr(r *refusal) error {
	code, ok := errcodes[r.code]
	if !ok {
		code = profile.CodeTargetDeliveryFailed
	}
	pe := profile.Errorf(code, "%s", r.Error())
	if code == profile.CodeTargetRateLimited {
		return &adapter.RetryAfterError{After: time.Minute, Err: &wrapped{pe, r}}
	}
	return &wrapped{pe, r}
}

// wrapped is an ack code's error that still says which refusal it was.
type wrapped struct {
	pe *profile.Error
	r  *refusal
}

func (w *wrapped) Error() string { return w.pe.Error() }

func (w *wrapped) Unwrap() []error { return []error{w.pe, w.r} }

// callback is one aibot_msg_callback or aibot_event_callback frame.
type callback struct {
	cmd   string
	reqID string
	body  json.RawMessage
	at    time.Time
}

// reply is the latest message of a person in a conversation: the req_id an answer replies with.
type reply struct {
	msgID string // the message's msgid: a callback WeCom makes again keeps the reply as it is
	reqID string
	at    time.Time
	by    string // the stream id of the answer that took it ("": none yet)
	// think is the stream id of the thinking frame shown on it ("": none): the answer that
	// takes the reply streams into that bubble.
	think string
	idle  *time.Timer // finishes the thinking bubble no answer took (ThinkGrace after idle)
}

// client is one robot's long connection, shared by the robot's channels, bots and poll loop: one
// subscribed WebSocket, heartbeats, reconnections, answers routed by req_id, and what the
// callbacks tell the senders (each conversation's latest req_id).
type client struct {
	url, botID, secret string
	log                *slog.Logger
	timing             Timing

	startOnce sync.Once
	cancel    context.CancelFunc
	done      chan struct{}

	mu        sync.Mutex
	conn      *websocket.Conn
	lost      chan struct{} // closed when the current connection ends
	ready     chan struct{} // closed while a connection is subscribed
	refused   error         // the last subscribe's refusal (a wrong secret), nil once one succeeds
	refusals  chan struct{} // closed (and made again) at each refused subscribe
	takeovers chan struct{} // closed (and made again) when another process subscribes the robot
	polls     atomic.Int32  // poll loops reading inbox
	pending   map[string]chan frame
	order     map[string]*sync.Mutex // one command at a time per req_id
	replies   map[string]*reply      // conversation -> its person's latest message
	streams   map[string]time.Time   // stream id -> its first frame
	sent      map[string][]time.Time // conversation -> replies and pushes of the last hour
	inbox     chan callback
	subbed    bool
	kicked    bool
	pingMiss  int
}

func newClient(c *config, log *slog.Logger, timing Timing) *client {
	return &client{url: c.wsURL, botID: c.botID, secret: c.secret, log: log, timing: timing.defaults(),
		ready: make(chan struct{}), lost: make(chan struct{}), refusals: make(chan struct{}), takeovers: make(chan struct{}), pending: map[string]chan frame{}, order: map[string]*sync.Mutex{},
		replies: map[string]*reply{}, streams: map[string]time.Time{}, sent: map[string][]time.Time{},
		inbox: make(chan callback, 1024)}
}

// start runs the connection from now on, until Close.
func (c *client) start() {
	c.startOnce.Do(func() {
		ctx, cancel := context.WithCancel(context.Background())
		c.cancel, c.done = cancel, make(chan struct{})
		go func() {
			defer close(c.done)
			c.run(ctx)
		}()
	})
}

// Close ends the connection and waits for its goroutines.
func (c *client) Close() error {
	c.start() // so that done exists
	c.cancel()
	<-c.done
	if n := len(c.inbox); n > 0 {
		// Pushed after the last poll loop here ended (the robot moved to another worker) and
		// before the new holder subscribed: WeCom will not push them again.
		c.log.Warn("wecom_callbacks_dropped", "bot_id", c.botID, "count", n)
	}
	return nil
}

// run connects, subscribes and reads until ctx ends, reconnecting after 1 s doubling to
// MaxBackoff (Retake after a takeover, MaxBackoff after a refused subscribe).
func (c *client) run(ctx context.Context) {
	wait := time.Second
	for ctx.Err() == nil {
		subscribed, err := c.session(ctx)
		if ctx.Err() != nil {
			return
		}
		c.mu.Lock()
		kicked := c.kicked // until the next subscribe: no command goes out meanwhile
		refused := c.refused != nil
		c.mu.Unlock()
		if subscribed {
			wait = time.Second
		}
		next := wait
		switch {
		case kicked:
			next = c.timing.Retake
		case refused:
			next = c.timing.MaxBackoff
		}
		c.log.Warn("wecom_connection_lost", "bot_id", c.botID, "err", err, "retry_in", next, "taken_over", kicked)
		select {
		case <-ctx.Done():
			return
		case <-time.After(next):
		}
		wait = min(2*wait, c.timing.MaxBackoff)
	}
}

// session is one connection: dial, subscribe, then read (and ping) until it ends.
func (c *client) session(ctx context.Context) (subscribed bool, err error) {
	dctx, cancel := context.WithTimeout(ctx, c.timing.Connect)
	conn, _, err := websocket.Dial(dctx, c.url, nil)
	cancel()
	if err != nil {
		return false, err
	}
	conn.SetReadLimit(8 << 20)
	defer conn.CloseNow()
	sctx, stop := context.WithCancel(ctx)
	defer stop()
	sub := newReqID(cmdSubscribe)
	body, _ := json.Marshal(map[string]string{"bot_id": c.botID, "secret": c.secret})
	if err := write(sctx, conn, frame{Cmd: cmdSubscribe, Headers: headers{sub}, Body: body}); err != nil {
		return false, err
	}
	actx, cancel := context.WithTimeout(sctx, c.timing.Connect)
	var f frame
	err = read(actx, conn, &f)
	cancel()
	switch {
	case err != nil:
		return false, err
	case f.Headers.ReqID != sub || f.Errcode == nil:
		return false, fmt.Errorf("wecom: the first frame answers no subscribe (cmd %q)", f.Cmd)
	case *f.Errcode != 0:
		r := &refusal{cmd: cmdSubscribe, code: *f.Errcode, msg: f.Errmsg}
		c.mu.Lock()
		c.refused = r
		close(c.refusals)
		c.refusals = make(chan struct{})
		c.mu.Unlock()
		return false, r
	}
	c.mu.Lock()
	c.conn, c.refused, c.kicked, c.pingMiss = conn, nil, false, 0
	close(c.ready)
	lost := c.lost
	c.mu.Unlock()
	c.log.Info("wecom_subscribed", "bot_id", c.botID)
	defer func() {
		c.mu.Lock()
		c.conn = nil
		c.ready = make(chan struct{})
		close(lost)
		c.lost = make(chan struct{})
		c.mu.Unlock()
	}()
	go c.heartbeat(sctx, conn)
	for {
		_, b, err := conn.Read(sctx)
		if err != nil {
			return true, err
		}
		var f frame
		if err := json.Unmarshal(b, &f); err != nil {
			c.log.Warn("wecom_frame_unreadable", "bot_id", c.botID, "err", err)
			continue
		}
		c.dispatch(f)
	}
}

// heartbeat pings every Ping; the second ping without an answer ends the connection.
func (c *client) heartbeat(ctx context.Context, conn *websocket.Conn) {
	t := time.NewTicker(c.timing.Ping)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		}
		c.mu.Lock()
		c.pingMiss++
		dead := c.pingMiss > 2
		c.mu.Unlock()
		if dead {
			c.log.Warn("wecom_heartbeat_unanswered", "bot_id", c.botID)
			conn.CloseNow()
			return
		}
		_ = write(ctx, conn, frame{Cmd: cmdPing, Headers: headers{newReqID(cmdPing)}})
	}
}

// dispatch routes one frame read: a callback to the inbox (and its req_id to the replies), an
// answer to its waiting command.
func (c *client) dispatch(f frame) {
	switch f.Cmd {
	case cmdMsg, cmdEvent:
		c.callback(callback{cmd: f.Cmd, reqID: f.Headers.ReqID, body: f.Body, at: time.Now()})
		return
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	if ch, ok := c.pending[f.Headers.ReqID]; ok {
		delete(c.pending, f.Headers.ReqID)
		ch <- f
		return
	}
	c.pingMiss = 0 // a ping's answer (or a late one: the connection lives)
}

// callback records a person's message (its req_id answers that conversation) and queues it for
// the poll loop; a takeover notice marks the connection as taken over.
func (c *client) callback(cb callback) {
	var b inMsg
	_ = json.Unmarshal(cb.body, &b)
	c.mu.Lock()
	if cb.cmd == cmdMsg && b.MsgID != "" {
		if conv := b.conversation(); conv != "" && (c.replies[conv] == nil || c.replies[conv].msgID != b.MsgID) {
			c.replies[conv] = &reply{msgID: b.MsgID, reqID: cb.reqID, at: cb.at}
		}
	}
	if b.Event.EventType == "disconnected_event" && !c.kicked {
		c.kicked = true
		close(c.takeovers)
		c.takeovers = make(chan struct{})
	}
	c.mu.Unlock()
	select {
	case c.inbox <- cb:
	default:
		c.log.Warn("wecom_inbox_full", "bot_id", c.botID)
	}
}

// connected waits for the subscribed connection (at most Connect): the refusal of the last
// subscribe (as soon as it comes), or target_unavailable, when there is none. Nothing was sent:
// certain.
func (c *client) connected(ctx context.Context, cmd string) (*websocket.Conn, chan struct{}, error) {
	c.start()
	t := time.NewTimer(c.timing.Connect)
	defer t.Stop()
	for {
		c.mu.Lock()
		conn, ready, lost, refused, refusals, kicked := c.conn, c.ready, c.lost, c.refused, c.refusals, c.kicked
		c.mu.Unlock()
		if kicked {
			// Another process subscribed the robot: this connection takes no command, and this
			// process is (or is about to be) no longer the robot's holder. Certain: nothing sent.
			return nil, nil, profile.Errorf(profile.CodeTargetUnavailable, "wecom %s: the robot's connection was taken over by another process", cmd)
		}
		if conn != nil {
			return conn, lost, nil
		}
		if r, ok := refused.(*refusal); ok {
			return nil, nil, profile.Errorf(profile.CodeTargetAuthFailed, "wecom %s: the robot's subscribe was refused (errcode %d: %s)", cmd, r.code, r.msg)
		}
		select {
		case <-ready:
		case <-refusals:
		case <-ctx.Done():
			return nil, nil, profile.Errorf(profile.CodeTargetUnavailable, "wecom %s: no connection: %v", cmd, ctx.Err())
		case <-t.C:
			return nil, nil, profile.Errorf(profile.CodeTargetUnavailable, "wecom %s: no connection within %s", cmd, c.timing.Connect)
		}
	}
}

// replaced reports whether conn is no longer the robot's subscribed connection here: another
// process subscribed (a disconnected_event came), or the connection ended.
func (c *client) replaced(conn *websocket.Conn) bool {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.kicked || c.conn != conn
}

// request sends a command and waits for its answer. Commands of one req_id go one at a time,
// each after the previous one's answer. A non-zero errcode is a *refusal mapped to its ack code;
// no answer within Answer, or the connection lost before it, is ambiguous.
func (c *client) request(ctx context.Context, cmd, reqID string, body any) (json.RawMessage, error) {
	defer c.lockReq(reqID)()
	return c.requestLocked(ctx, cmd, reqID, body)
}

// lockReq waits for the commands of reqID before it (request's order) and returns the unlock.
func (c *client) lockReq(reqID string) (unlock func()) {
	c.mu.Lock()
	o, ok := c.order[reqID]
	if !ok {
		if len(c.order) > 4096 {
			clear(c.order)
		}
		o = &sync.Mutex{}
		c.order[reqID] = o
	}
	c.mu.Unlock()
	o.Lock()
	return o.Unlock
}

// requestLocked is request with reqID's order already held (lockReq).
func (c *client) requestLocked(ctx context.Context, cmd, reqID string, body any) (json.RawMessage, error) {
	raw, err := json.Marshal(body)
	if err != nil {
		return nil, profile.Errorf(profile.CodeTargetDeliveryFailed, "wecom %s: %v", cmd, err)
	}
	conn, lost, err := c.connected(ctx, cmd)
	if err != nil {
		return nil, err
	}
	answer := make(chan frame, 1)
	c.mu.Lock()
	c.pending[reqID] = answer
	c.mu.Unlock()
	defer func() {
		c.mu.Lock()
		delete(c.pending, reqID)
		c.mu.Unlock()
	}()
	if err := write(ctx, conn, frame{Cmd: cmd, Headers: headers{reqID}, Body: raw}); err != nil {
		return nil, &adapter.AmbiguousError{Err: profile.Errorf(profile.CodeTargetUnavailable, "wecom %s: %v", cmd, err)}
	}
	t := time.NewTimer(c.timing.Answer)
	defer t.Stop()
	select {
	case f := <-answer:
		if f.Errcode != nil && *f.Errcode != 0 {
			r := &refusal{cmd: cmd, code: *f.Errcode, msg: f.Errmsg}
			if errcodes[r.code] == profile.CodeTargetAuthFailed && c.replaced(conn) {
				// Refused because another process subscribed meanwhile: not the credentials.
				return nil, &wrapped{profile.Errorf(profile.CodeTargetUnavailable, "wecom %s: the robot's connection was taken over", cmd), r}
			}
			return nil, ackErr(r)
		}
		return f.Body, nil
	case <-lost:
		return nil, &adapter.AmbiguousError{Err: profile.Errorf(profile.CodeTargetUnavailable, "wecom %s: connection lost before the answer", cmd)}
	case <-t.C:
		return nil, &adapter.AmbiguousError{Err: profile.Errorf(profile.CodeTargetUnavailable, "wecom %s: no answer within %s", cmd, c.timing.Answer)}
	case <-ctx.Done():
		return nil, &adapter.AmbiguousError{Err: profile.Errorf(profile.CodeTargetUnavailable, "wecom %s: %v", cmd, ctx.Err())}
	}
}

// Conversation budget (W-LC: replies and pushes together, per conversation).
const (
	perMinute = 30
	perHour   = 1000
	// finalReserve of each minute's replies are kept for finals: a preview frame is refused
	// (and waits) when fewer are left.
	finalReserve = 6
)

// spend takes one of the conversation's replies or pushes, or says how long to wait: a final
// may take every one, a preview all but finalReserve.
func (c *client) spend(conv string, final bool) error {
	now := time.Now()
	c.mu.Lock()
	defer c.mu.Unlock()
	ts := c.sent[conv]
	for len(ts) > 0 && now.Sub(ts[0]) >= time.Hour {
		ts = ts[1:]
	}
	inMinute := 0
	for _, t := range ts {
		if now.Sub(t) < time.Minute {
			inMinute++
		}
	}
	limit := perMinute
	if !final {
		limit -= finalReserve
	}
	if inMinute >= limit || len(ts) >= perHour {
		after := time.Minute - now.Sub(ts[len(ts)-inMinute])
		if len(ts) >= perHour {
			after = time.Hour - now.Sub(ts[0])
		}
		c.sent[conv] = ts
		return &adapter.RetryAfterError{After: max(after, time.Second),
			Err: profile.Errorf(profile.CodeTargetRateLimited, "wecom: the conversation's %d replies a minute are spent", perMinute)}
	}
	c.sent[conv] = append(ts, now)
	return nil
}

// budgeted sends one command of conv within its budget (spend): the reply or push it took is
// given back when the command certainly did not go out (no connection, taken over), and kept
// when WeCom answered it or may have. locked: the caller holds reqID's order (lockReq).
func (c *client) budgeted(ctx context.Context, conv string, final, locked bool, cmd, reqID string, body any) error {
	if err := c.spend(conv, final); err != nil {
		return err
	}
	var err error
	if locked {
		_, err = c.requestLocked(ctx, cmd, reqID, body)
	} else {
		_, err = c.request(ctx, cmd, reqID, body)
	}
	if err != nil && !adapter.IsAmbiguous(err) && codeOf(err) == 0 {
		c.mu.Lock()
		if ts := c.sent[conv]; len(ts) > 0 {
			c.sent[conv] = ts[:len(ts)-1]
		}
		c.mu.Unlock()
	}
	return err
}

// takeReply is the req_id an answer (stream id sid) replies with in conv, and the stream id it
// streams with: the person's latest message there within 24 hours that no other answer took, and
// the bubble a thinking frame opened on it (else sid). ok is false when there is none.
func (c *client) takeReply(conv, sid string) (stream, reqID string, ok bool) {
	c.mu.Lock()
	defer c.mu.Unlock()
	r := c.replies[conv]
	if r == nil || time.Since(r.at) > replyWindow || (r.by != "" && r.by != sid) {
		return "", "", false
	}
	r.by = sid
	if r.idle != nil {
		r.idle.Stop()
		r.idle = nil
	}
	if r.think != "" {
		return r.think, r.reqID, true
	}
	return sid, r.reqID, true
}

// replyWindow: a callback's req_id takes replies for 24 hours (W-LC).
const replyWindow = 24 * time.Hour

// streamStarted records a stream's first frame and reports how long ago it was.
func (c *client) streamAge(sid string) time.Duration {
	c.mu.Lock()
	defer c.mu.Unlock()
	at, ok := c.streams[sid]
	if !ok {
		if len(c.streams) > 4096 {
			for k, t := range c.streams {
				if time.Since(t) > streamLife {
					delete(c.streams, k)
				}
			}
		}
		c.streams[sid] = time.Now()
		return 0
	}
	return time.Since(at)
}

// streamStarted reports whether a frame of stream sid was sent (or tried).
func (c *client) streamStarted(sid string) bool {
	c.mu.Lock()
	defer c.mu.Unlock()
	_, ok := c.streams[sid]
	return ok
}

// streamOver records that WeCom takes no more frames of stream sid (846608, 846605): its
// previews stop and its final goes proactive.
func (c *client) streamOver(sid string) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.streams[sid] = time.Now().Add(-streamLife)
}

// streamLife is how long a stream takes frames after its first (W-OC: 846608 after 6 minutes).
const streamLife = 6 * time.Minute

func write(ctx context.Context, conn *websocket.Conn, f frame) error {
	b, err := json.Marshal(f)
	if err != nil {
		return err
	}
	return conn.Write(ctx, websocket.MessageText, b)
}

func read(ctx context.Context, conn *websocket.Conn, f *frame) error {
	_, b, err := conn.Read(ctx)
	if err != nil {
		return err
	}
	return json.Unmarshal(b, f)
}

// newReqID is a fresh req_id for cmd, as WeCom's SDK makes them: "<cmd>_<random>".
func newReqID(cmd string) string {
	var b [8]byte
	_, _ = rand.Read(b[:])
	return cmd + "_" + hex.EncodeToString(b[:])
}
