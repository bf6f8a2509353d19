package edge

import (
	"context"
	"encoding/json"
	"errors"
	"io"
	"log/slog"
	"math/rand/v2"
	"net/http"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/coder/websocket"
	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
	"github.com/nats-io/nuid"
	"github.com/prometheus/client_golang/prometheus"
	"go.opentelemetry.io/otel"
	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/trace"

	"github.com/ximd/ximd/handlers"
	"github.com/ximd/ximd/handlers/spans"
	"github.com/ximd/ximd/profile"
	"github.com/ximd/ximd/subjects"
)

// Subprotocol is the WebSocket subprotocol of the packet stream (edge-api §5).
const Subprotocol = "xagent.connector.packet.v1"

// DefaultMaxConnections is GatewayConfig.MaxConnections when unset: far more than the few
// connections xAgent holds for availability, few enough that a reconnect loop gone wrong cannot
// exhaust the process (each connection holds two goroutines and a 4096-packet send queue).
const DefaultMaxConnections = 1024

// GatewayConfig configures the WebSocket packet gateway.
type GatewayConfig struct {
	// ID names this gateway instance (a subject token); replies for its connections arrive on
	// xim.gw.<ID>.reply.
	ID string
	// MaxPacketBytes (XIM_MAX_PACKET_BYTES) is the largest frame accepted; larger frames are
	// answered packet_too_large and the connection keeps working.
	MaxPacketBytes int64
	// DrainLimit is the largest frame that is read and discarded to keep the connection; a larger
	// one closes it with status 1009.
	DrainLimit int64
	// SendQueue is the number of outbound packets buffered per connection.
	SendQueue int
	// WriteTimeout closes a connection that does not take a packet within it (slow reader).
	WriteTimeout time.Duration
	// MaxConnections (XIM_MAX_CONNECTIONS) bounds the live connections of this gateway; an upgrade
	// past it is refused 503 {"code":"unavailable"} with Retry-After, before any state is made.
	MaxConnections int
	// PublishTimeout bounds the wait for JetStream's acknowledgement of one publish; past it the
	// publish is retried (see PublishAttempts). Default 10s.
	PublishTimeout time.Duration
	// PublishAttempts bounds the publishes of one packet whose acknowledgement did not come
	// (timeout, no responder during a leader election, a lost connection); past it the packet is
	// answered `unavailable`. Default 4. A packet that is answered (a final, a tool invocation)
	// carries a Nats-Msg-Id unique to its transmission, so a retry of a stored one is not stored
	// again (the XIM_IN duplicate window, pipeline.InDuplicates, outlasts the attempts).
	PublishAttempts int
}

// Gateway terminates xAgent WebSocket connections: it checks each frame in the order of
// edge-api §5, makes accepted packets durable in XIM_IN, and writes replies and outbound packets
// to live connections.
type Gateway struct {
	cfg     GatewayConfig
	nc      *nats.Conn
	js      jetstream.JetStream
	catalog *profile.Catalog
	isOpen  func(ctx context.Context, id string) (bool, error)
	metrics *gatewayMetrics
	logger  *slog.Logger

	mu      sync.RWMutex
	conns   map[string]*wsConn
	order   []string
	seq     atomic.Uint64
	active  atomic.Int64 // upgrades admitted and not yet ended (bounded by MaxConnections)
	sub     *nats.Subscription
	sendSub *nats.Subscription // on subjects.GatewaySend while a connection is live
	wg      sync.WaitGroup
	retries sync.WaitGroup // publishes waiting for their next attempt
	serving sync.WaitGroup // connections whose frames may still be checked and published
	closing bool           // Close was called: no new connection (g.mu)
}

type gatewayMetrics struct {
	frames    *prometheus.CounterVec
	dropped   *prometheus.CounterVec
	conns     prometheus.Gauge
	replies   *prometheus.CounterVec
	published prometheus.Counter
	messages  prometheus.Counter
	refused   prometheus.Counter
}

func newGatewayMetrics(reg prometheus.Registerer) *gatewayMetrics {
	m := &gatewayMetrics{
		frames: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "ximd_gateway_frames_total", Help: "WebSocket frames received, by outcome (stored, invalid, too_large, channel_not_open, dropped, publish_retried, publish_failed).",
		}, []string{"outcome"}),
		dropped: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "ximd_packets_dropped_total", Help: "Packets dropped silently because their type is outside the IM v2 catalog (P-ERR-1), by type.",
		}, []string{"type"}),
		conns: prometheus.NewGauge(prometheus.GaugeOpts{
			Name: "ximd_gateway_connections", Help: "Open xAgent WebSocket connections on this gateway.",
		}),
		replies: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "ximd_gateway_replies_total", Help: "Packets written to xAgent connections, by outcome (sent, rerouted, no_connection).",
		}, []string{"outcome"}),
		published: prometheus.NewCounter(prometheus.CounterOpts{
			Name: "ximd_gateway_packets_stored_total", Help: "Packets made durable in XIM_IN.",
		}),
		messages: prometheus.NewCounter(prometheus.CounterOpts{
			Name: "ximd_gateway_messages_stored_total", Help: "Messages published to XIM_IN: one a packet, or one a channel's deltas that arrived together (packets stored / messages stored is the mean batch).",
		}),
		refused: prometheus.NewCounter(prometheus.CounterOpts{
			Name: "ximd_gateway_connections_refused_total", Help: "WebSocket upgrades refused because XIM_MAX_CONNECTIONS connections were live.",
		}),
	}
	if reg != nil {
		reg.MustRegister(m.frames, m.dropped, m.conns, m.replies, m.published, m.messages, m.refused)
	}
	return m
}

// NewGateway returns a gateway publishing through nc and subscribes to its reply subject.
// isOpen reports whether a channel is open.
func NewGateway(cfg GatewayConfig, nc *nats.Conn, cat *profile.Catalog, isOpen func(ctx context.Context, id string) (bool, error), reg prometheus.Registerer, logger *slog.Logger) (*Gateway, error) {
	if cfg.MaxPacketBytes <= 0 {
		cfg.MaxPacketBytes = 1 << 20
	}
	if cfg.DrainLimit < cfg.MaxPacketBytes {
		cfg.DrainLimit = 16 * cfg.MaxPacketBytes
	}
	if cfg.SendQueue <= 0 {
		cfg.SendQueue = 4096
	}
	if cfg.WriteTimeout <= 0 {
		cfg.WriteTimeout = 10 * time.Second
	}
	if cfg.MaxConnections <= 0 {
		cfg.MaxConnections = DefaultMaxConnections
	}
	if cfg.PublishTimeout <= 0 {
		cfg.PublishTimeout = 10 * time.Second
	}
	if cfg.PublishAttempts <= 0 {
		cfg.PublishAttempts = 4
	}
	g := &Gateway{cfg: cfg, nc: nc, catalog: cat, isOpen: isOpen, metrics: newGatewayMetrics(reg), logger: logger, conns: map[string]*wsConn{}}
	js, err := jetstream.New(nc,
		jetstream.WithPublishAsyncMaxPending(8192),
		jetstream.WithPublishAsyncTimeout(cfg.PublishTimeout),
		jetstream.WithPublishAsyncErrHandler(g.publishFailed))
	if err != nil {
		return nil, err
	}
	g.js = js
	subject, err := subjects.Reply(cfg.ID)
	if err != nil {
		return nil, err
	}
	if g.sub, err = nc.Subscribe(subject, g.onReply); err != nil {
		return nil, err
	}
	if err := g.sub.SetPendingLimits(-1, 256<<20); err != nil {
		return nil, err
	}
	return g, nil
}

// Close stops taking replies and closes every connection (status 1001, going away).
func (g *Gateway) Close() {
	_ = g.sub.Drain()
	g.mu.Lock()
	g.closing = true
	if g.sendSub != nil {
		_ = g.sendSub.Unsubscribe()
		g.sendSub = nil
	}
	for _, c := range g.conns {
		c.close(websocket.StatusGoingAway, "ximd shutting down")
	}
	g.mu.Unlock()
	g.wg.Wait()
}

// Flush, after Close, waits until every frame read from a connection was checked and published
// (a connection's reader may be ahead of its checks) and every publish was acknowledged by
// JetStream, retries included (or ctx ends).
func (g *Gateway) Flush(ctx context.Context) error {
	if err := waitFor(ctx, &g.serving); err != nil {
		return err
	}
	for {
		select {
		case <-g.js.PublishAsyncComplete():
		case <-ctx.Done():
			return ctx.Err()
		}
		if err := waitFor(ctx, &g.retries); err != nil {
			return err
		}
		if g.js.PublishAsyncPending() == 0 {
			return nil
		}
	}
}

// waitFor waits until wg is done or ctx ends (the waiting goroutine then ends with wg).
func waitFor(ctx context.Context, wg *sync.WaitGroup) error {
	done := make(chan struct{})
	go func() { wg.Wait(); close(done) }()
	select {
	case <-done:
		return nil
	case <-ctx.Done():
		return ctx.Err()
	}
}

// headerAttempt numbers the publishes of one packet (from 2; absent on the first).
const headerAttempt = "Xim-Publish-Attempt"

// wsConn is one xAgent connection.
type wsConn struct {
	id     string
	ws     *websocket.Conn
	out    chan []byte
	closed chan struct{}
	once   sync.Once
}

func (c *wsConn) close(code websocket.StatusCode, reason string) {
	c.once.Do(func() {
		close(c.closed)
		go c.ws.Close(code, reason)
	})
}

// ServeHTTP upgrades GET /v1/ws (the caller has checked the bearer token).
func (g *Gateway) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	if g.active.Add(1) > int64(g.cfg.MaxConnections) {
		g.active.Add(-1)
		g.metrics.refused.Inc()
		w.Header().Set("Retry-After", "1")
		WriteError(w, profile.Errorf(profile.CodeUnavailable, "too many connections (XIM_MAX_CONNECTIONS=%d)", g.cfg.MaxConnections))
		return
	}
	defer g.active.Add(-1)
	g.mu.Lock()
	closing := g.closing
	if !closing {
		g.serving.Add(1)
	}
	g.mu.Unlock()
	if closing {
		w.Header().Set("Retry-After", "1")
		WriteError(w, profile.Errorf(profile.CodeUnavailable, "ximd is shutting down"))
		return
	}
	defer g.serving.Done()
	ws, err := websocket.Accept(w, r, &websocket.AcceptOptions{Subprotocols: []string{Subprotocol}, InsecureSkipVerify: true})
	if err != nil {
		return // Accept wrote the HTTP error
	}
	ws.SetReadLimit(g.cfg.DrainLimit)
	c := &wsConn{id: strconv.FormatUint(g.seq.Add(1), 10), ws: ws, out: make(chan []byte, g.cfg.SendQueue), closed: make(chan struct{})}
	if !g.add(c) {
		_ = ws.Close(websocket.StatusGoingAway, "ximd shutting down")
		return
	}
	defer g.remove(c)
	ctx, cancel := context.WithCancel(r.Context())
	defer cancel()
	go g.writeLoop(ctx, c)
	g.logger.Info("agent_connected", "conn", c.id, "remote", r.RemoteAddr)
	// The reader reads ahead while this goroutine checks and publishes; what has queued up when a
	// frame is handled is batched (see batches), and everything pending is published once the
	// queue is empty.
	frames := make(chan []byte, frameQueue)
	go g.readLoop(ctx, c, frames)
	bs := newBatches()
	handled := 0
	for frame := range frames {
		g.handleFrame(ctx, c, frame, bs)
		// Everything pending goes once no frame waits, or after batchMaxFrames frames however
		// busy the connection: a quiet channel's delta never waits long behind a flood of
		// others.
		if handled++; len(frames) == 0 || handled >= batchMaxFrames {
			for ch := range bs.pending {
				g.publishBatch(c, bs.take(ch))
			}
			handled = 0
		}
	}
}

// readLoop reads a connection's frames into frames (closed when the connection ends), answering
// those too large or not text itself.
func (g *Gateway) readLoop(ctx context.Context, c *wsConn, frames chan<- []byte) {
	defer close(frames)
	buf := make([]byte, 0, 4096)
	for {
		typ, rd, err := c.ws.Reader(ctx)
		if err != nil {
			g.logger.Info("agent_disconnected", "conn", c.id, "reason", websocket.CloseStatus(err).String())
			c.close(websocket.StatusNormalClosure, "")
			return
		}
		frame, tooLarge, err := readFrame(rd, buf[:0], g.cfg.MaxPacketBytes)
		if err != nil {
			g.logger.Info("agent_disconnected", "conn", c.id, "err", err)
			c.close(websocket.StatusMessageTooBig, "frame above the drain limit")
			return
		}
		buf = frame[:0]
		if tooLarge {
			g.metrics.frames.WithLabelValues("too_large").Inc()
			g.replyError(c, profile.Envelope{}, profile.Errorf(profile.CodePacketTooLarge, "frame exceeds %d bytes", g.cfg.MaxPacketBytes))
			continue
		}
		if typ != websocket.MessageText {
			g.metrics.frames.WithLabelValues("invalid").Inc()
			g.replyError(c, profile.Envelope{}, profile.Errorf(profile.CodeInvalidPacket, "binary frames are not packets"))
			continue
		}
		frames <- append([]byte(nil), frame...)
	}
}

// readFrame reads one frame into buf; past max it discards the rest and reports tooLarge.
func readFrame(r io.Reader, buf []byte, max int64) ([]byte, bool, error) {
	lr := io.LimitReader(r, max+1)
	for {
		if len(buf) == cap(buf) {
			buf = append(buf, 0)[:len(buf)]
		}
		n, err := lr.Read(buf[len(buf):cap(buf)])
		buf = buf[:len(buf)+n]
		if err == io.EOF {
			break
		}
		if err != nil {
			return buf, false, err
		}
	}
	if int64(len(buf)) <= max {
		return buf, false, nil
	}
	if _, err := io.Copy(io.Discard, r); err != nil {
		return buf, true, err
	}
	return buf, true, nil
}

// handleFrame applies edge-api §5 steps 1-4 to one frame: a delta joins its channel's batch,
// any other packet is published after the batch of its channel.
func (g *Gateway) handleFrame(ctx context.Context, c *wsConn, frame []byte, bs *batches) {
	received := time.Now()
	env, err := profile.DecodeEnvelope(frame)
	if err != nil {
		g.metrics.frames.WithLabelValues("invalid").Inc()
		g.replyError(c, env, profile.AsError(err))
		return
	}
	pt, ok := g.catalog.Accepts(profile.FromAgent, env.Type)
	if !ok {
		g.metrics.frames.WithLabelValues("dropped").Inc()
		g.metrics.dropped.WithLabelValues(dropLabel(env.Type)).Inc()
		return
	}
	// One trace per packet: this span is its root, the stage that takes it its grandchild.
	ctx, span := spans.Start(ctx, tracer, trace.SpanKindServer, "edge receive", "")
	defer span.End()
	if span.IsRecording() { // off, no attribute is built
		span.SetAttributes(attribute.String("xim.channel", env.ChannelID), attribute.String("xim.type", env.Type), attribute.String("xim.packet_id", env.PacketID))
	}
	if !profile.ValidChannelID(env.ChannelID) {
		g.metrics.frames.WithLabelValues("invalid").Inc()
		g.replyError(c, env, profile.Errorf(profile.CodeInvalidPacket, "connector_channel_id must match ^[A-Za-z0-9_-]{1,128}$"))
		return
	}
	open, err := g.isOpen(ctx, env.ChannelID)
	if err != nil {
		g.metrics.frames.WithLabelValues("publish_failed").Inc()
		g.replyError(c, env, profile.Errorf(profile.CodeUnavailable, "channel registry unavailable"))
		return
	}
	if !open {
		g.metrics.frames.WithLabelValues("channel_not_open").Inc()
		g.replyError(c, env, profile.Errorf(profile.CodeChannelNotOpen, "channel %s is not open", env.ChannelID))
		return
	}
	subject, err := subjects.In(env.ChannelID, pt.Kind)
	if err != nil {
		g.replyError(c, env, profile.Errorf(profile.CodeInvalidPacket, "%v", err))
		return
	}
	if env.Type == profile.TypeDelta {
		if full := bs.add(ctx, env.ChannelID, subject, received, frame); full != nil {
			g.publishBatch(c, full)
		}
		return
	}
	if b := bs.take(env.ChannelID); b != nil {
		g.publishBatch(c, b) // the channel's deltas before its next packet
	}
	b := &batch{subject: subject, ctx: ctx, received: received, frames: [][]byte{frame}, bytes: len(frame)}
	g.publish(c, b, pt.Answered)
}

// publishBatch publishes a batch of deltas (see batches).
func (g *Gateway) publishBatch(c *wsConn, b *batch) { g.publish(c, b, false) }

// publish stores one packet, or a channel's batch of deltas, in XIM_IN (asynchronously: a failed
// publish is handled by publishFailed).
func (g *Gateway) publish(c *wsConn, b *batch, answered bool) {
	m := nats.NewMsg(b.subject)
	if answered {
		// This transmission is stored once however often its publish is retried: one answer per
		// frame. The id names the transmission, not the packet_id: a frame xAgent sends again,
		// even byte for byte, is answered again. Other packets go without (the stages are
		// idempotent on (channel, message_id, sequence), and the dedup window would hold memory
		// for every delta).
		m.Header.Set(jetstream.MsgIDHeader, nuid.Next())
	}
	m.Header.Set(subjects.HeaderGateway, g.cfg.ID)
	m.Header.Set(subjects.HeaderConn, c.id)
	m.Header.Set(subjects.HeaderReceived, strconv.FormatInt(b.received.UnixNano(), 10))
	var lengths string
	m.Data, lengths = b.payload()
	if lengths != "" {
		m.Header.Set(subjects.HeaderFrames, lengths)
	}
	// The publish span ends when the publish is handed to the connection (its acknowledgement
	// comes asynchronously); its context, in the headers, is the stage span's parent.
	pctx, span := spans.Start(b.ctx, tracer, trace.SpanKindProducer, "publish", subjects.StreamIn)
	otel.GetTextMapPropagator().Inject(pctx, handlers.NATSHeaderCarrier(m.Header))
	_, err := g.js.PublishMsgAsync(m)
	span.End()
	n := float64(len(b.frames))
	if err != nil {
		g.metrics.frames.WithLabelValues("publish_failed").Add(n)
		for _, f := range b.frames {
			env, _ := profile.DecodeEnvelope(f)
			g.replyError(c, env, profile.Errorf(profile.CodeUnavailable, "packet not stored, send it again"))
		}
		return
	}
	g.metrics.frames.WithLabelValues("stored").Add(n)
	g.metrics.published.Add(n)
	g.metrics.messages.Inc()
}

// publishFailed handles a publish JetStream did not acknowledge. A refusal (stream full) is
// answered `unavailable` at once: xAgent sends the packet again. Without an answer (timeout, no
// responder, connection lost) the packet may be stored: it is published again, up to
// PublishAttempts times (JetStream drops the copy of a stored answered packet by its
// Nats-Msg-Id), and answered `unavailable` only after the last.
func (g *Gateway) publishFailed(_ jetstream.JetStream, m *nats.Msg, err error) {
	var apiErr *jetstream.APIError
	attempt, _ := strconv.Atoi(m.Header.Get(headerAttempt))
	attempt = max(attempt, 1)
	if !errors.As(err, &apiErr) && attempt < g.cfg.PublishAttempts {
		g.metrics.frames.WithLabelValues("publish_retried").Inc()
		g.logger.Info("packet_publish_retried", "subject", m.Subject, "attempt", attempt+1, "err", err)
		retry := nats.NewMsg(m.Subject)
		for k, v := range m.Header {
			retry.Header[k] = v
		}
		retry.Header.Set(headerAttempt, strconv.Itoa(attempt+1))
		retry.Data = m.Data
		g.retries.Add(1)
		time.AfterFunc(time.Duration(attempt)*100*time.Millisecond, func() {
			defer g.retries.Done()
			if _, err := g.js.PublishMsgAsync(retry); err != nil {
				g.publishFailed(g.js, retry, err)
			}
		})
		return
	}
	frames, ferr := subjects.SplitFrames(m.Header.Get(subjects.HeaderFrames), m.Data)
	if ferr != nil { // never: the gateway set both
		frames = [][]byte{m.Data}
	}
	g.metrics.frames.WithLabelValues("publish_failed").Add(float64(len(frames)))
	g.logger.Warn("packet_not_stored", "subject", m.Subject, "packets", len(frames), "attempt", attempt, "err", err)
	g.mu.RLock()
	c := g.conns[m.Header.Get(subjects.HeaderConn)]
	g.mu.RUnlock()
	if c == nil {
		return
	}
	for _, f := range frames {
		env, _ := profile.DecodeEnvelope(f)
		g.replyError(c, env, profile.Errorf(profile.CodeUnavailable, "packet not stored, send it again"))
	}
}

func (g *Gateway) replyError(c *wsConn, in profile.Envelope, e *profile.Error) {
	pkt, err := profile.NewPacket(in.ChannelID, profile.TypeError, in.PacketID, profile.ErrorPayloadOf(e))
	if err != nil {
		return
	}
	b, _ := json.Marshal(pkt)
	g.enqueue(c, b)
}

// tracer starts the gateway's spans, through spans.Start (none unless pipeline/tracing switched tracing on).
var tracer = otel.Tracer("github.com/ximd/ximd/pipeline/edge")

// onReply routes a worker's reply to the connection the packet came from, else any live one, and
// answers a request with "sent" or "none" (the worker then queues the reply until a connection
// is back).
func (g *Gateway) onReply(m *nats.Msg) {
	answer := func(a string) {
		if m.Reply != "" {
			_ = m.Respond([]byte(a))
		}
	}
	g.mu.RLock()
	c := g.conns[m.Header.Get(subjects.HeaderConn)]
	g.mu.RUnlock()
	if c == nil {
		c = g.any()
		if c == nil {
			g.metrics.replies.WithLabelValues("no_connection").Inc()
			answer("none")
			return
		}
		g.metrics.replies.WithLabelValues("rerouted").Inc()
	}
	if g.enqueue(c, m.Data) {
		answer("sent")
		return
	}
	answer("none")
}

func (g *Gateway) enqueue(c *wsConn, b []byte) bool {
	select {
	case c.out <- b:
		g.metrics.replies.WithLabelValues("sent").Inc()
		return true
	case <-c.closed:
		return false
	default:
	}
	t := time.NewTimer(g.cfg.WriteTimeout)
	defer t.Stop()
	select {
	case c.out <- b:
		g.metrics.replies.WithLabelValues("sent").Inc()
		return true
	case <-c.closed:
		return false
	case <-t.C:
		g.logger.Warn("agent_slow_reader", "conn", c.id)
		c.close(websocket.StatusPolicyViolation, "slow reader")
		return false
	}
}

func (g *Gateway) writeLoop(ctx context.Context, c *wsConn) {
	defer g.wg.Done()
	for {
		select {
		case <-c.closed:
			return
		case b := <-c.out:
			wctx, cancel := context.WithTimeout(ctx, g.cfg.WriteTimeout)
			err := c.ws.Write(wctx, websocket.MessageText, b)
			cancel()
			if err != nil {
				c.close(websocket.StatusInternalError, "write failed")
				return
			}
		}
	}
}

// add registers a connection and counts its write loop, unless the gateway is closing (a
// connection accepted while Close ran): then it reports false.
func (g *Gateway) add(c *wsConn) bool {
	g.mu.Lock()
	if g.closing {
		g.mu.Unlock()
		return false
	}
	g.wg.Add(1) // the write loop, before Close can wait for it
	g.conns[c.id] = c
	g.order = append(g.order, c.id)
	if g.sendSub == nil {
		// Take outbound packets only while xAgent is connected here: a sender with no responder
		// knows that no gateway has a live connection.
		sub, err := g.nc.QueueSubscribe(subjects.GatewaySend, subjects.GatewayQueue, g.onSend)
		if err != nil {
			g.logger.Warn("gateway_send_subscribe", "err", err)
		} else {
			g.sendSub = sub
		}
	}
	g.mu.Unlock()
	g.metrics.conns.Inc()
	return true
}

// onSend writes an outbound packet (a user message) to one live connection; a request with
// several packets (subjects.HeaderFrames: a bot channel's channel.opened and its message) writes
// them all, in their order, to the same connection.
func (g *Gateway) onSend(m *nats.Msg) {
	frames := [][]byte{m.Data}
	if lengths := m.Header.Get(subjects.HeaderFrames); lengths != "" {
		var err error
		if frames, err = subjects.SplitFrames(lengths, m.Data); err != nil {
			g.logger.Error("gateway_send_frames_invalid", "err", err)
			_ = m.Respond([]byte("none"))
			return
		}
	}
	answer := "none"
	if c := g.any(); c != nil {
		answer = "sent"
		for _, f := range frames {
			if !g.enqueue(c, f) {
				answer = "none" // what went is sent again, before the message, by the next send
				break
			}
		}
	}
	_ = m.Respond([]byte(answer))
}

func (g *Gateway) remove(c *wsConn) {
	g.mu.Lock()
	delete(g.conns, c.id)
	for i, id := range g.order {
		if id == c.id {
			g.order = append(g.order[:i], g.order[i+1:]...)
			break
		}
	}
	if len(g.conns) == 0 && g.sendSub != nil {
		_ = g.sendSub.Unsubscribe()
		g.sendSub = nil
	}
	g.mu.Unlock()
	g.metrics.conns.Dec()
}

// any picks a live connection at random.
func (g *Gateway) any() *wsConn {
	g.mu.RLock()
	defer g.mu.RUnlock()
	if len(g.order) == 0 {
		return nil
	}
	return g.conns[g.order[rand.IntN(len(g.order))]]
}

// Connections is the number of live xAgent connections.
func (g *Gateway) Connections() int {
	g.mu.RLock()
	defer g.mu.RUnlock()
	return len(g.conns)
}

// dropLabel bounds the label values of dropped types to the families the profile names
// (P-SCOPE-3) and "other".
func dropLabel(t string) string {
	for _, prefix := range []string{"session.sync_", "history.", "ui."} {
		if strings.HasPrefix(t, prefix) {
			return prefix + "*"
		}
	}
	return "other"
}
