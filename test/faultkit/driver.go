package faultkit

import (
	"context"
	"encoding/json"
	"fmt"
	"math/rand/v2"
	"net/http"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/coder/websocket"

	"github.com/ximd/ximd/internal/testkit"
	"github.com/ximd/ximd/profile"
)

// Channel is one channel the driver plays on.
type Channel struct {
	ID string
	// Streaming is the channel's target config: "edit" or "none".
	Streaming string
	// Activity is the channel's target config: "status", "typing" or "none".
	Activity string
	// Lookup is the channel's target config "lookup": the target answers lookups by
	// idempotency_key, which settle a final a crash left in doubt.
	Lookup bool
}

// DriverConfig shapes the load.
type DriverConfig struct {
	// Addrs are the gateways' HTTP addresses; the driver connects to one at a time, the next one
	// after a disconnect.
	Addrs []string
	Token string
	// Channels to play on; one goroutine each sends its messages one after the other.
	Channels []Channel
	// Deltas is the number of chat.message.delta per message (default 4).
	Deltas int
	// DeltaGap is the pause between two packets of one message (default 10ms).
	DeltaGap time.Duration
	// RetransmitAfter: a final with no terminal ack on the same connection for this long is sent
	// again (default 5s).
	RetransmitAfter time.Duration
	// ResendDeltas: after a reconnect in the middle of a message, its deltas are sent again from
	// sequence 1 (same texts) before the stream goes on.
	ResendDeltas bool
}

// Ack is one ack the driver received for a final.
type Ack struct {
	PacketID  string
	Status    string
	Code      string
	Retryable bool
}

// Final is one message the driver sends: activity, deltas, then the final until a terminal ack;
// or, with Tool, an im.send_message tool.invoke (invocation_id MessageID) until a terminal
// tool.result (ok, or an error that is not retryable).
type Final struct {
	Channel   string
	MessageID string
	Text      string
	Deltas    []string
	Tool      bool

	mu       sync.Mutex
	packets  []string // packet_ids of the final's transmissions
	acks     []Ack
	terminal *Ack // first accepted/duplicate/rejected-not-retryable
	retryAt  time.Time
}

// Key is the message's idempotency key at the target: <channel>:<message_id>, or
// <channel>:tool:<invocation_id> for a tool's message.
func (f *Final) Key() string {
	if f.Tool {
		return f.Channel + ":tool:" + f.MessageID
	}
	return f.Channel + ":" + f.MessageID
}

// Outcome returns the terminal ack (nil while pending), every ack, and the transmissions.
func (f *Final) Outcome() (*Ack, []Ack, int) {
	f.mu.Lock()
	defer f.mu.Unlock()
	var t *Ack
	if f.terminal != nil {
		c := *f.terminal
		t = &c
	}
	return t, append([]Ack(nil), f.acks...), len(f.packets)
}

type pktRef struct {
	final *Final // nil for deltas and activity
	typ   string
}

// Driver plays xAgent over /v1/ws: per channel a sequence of messages, each a chat.activity,
// Deltas chat.message.deltas and a final chat.message. Every final stays pending until it gets
// `accepted`, `duplicate` or a `retryable: false` rejection; it is retransmitted (same
// message_id and content, new packet_id) after a reconnect, after RetransmitAfter without an
// answer, and after a retryable rejection or an `unavailable` error (P-ACK-3, P-STATE-1/2). User
// messages from ximd are acked `accepted` the first time and `duplicate` after, deduplicated by
// message_id.
type Driver struct {
	cfg DriverConfig

	mu       sync.Mutex
	conn     *websocket.Conn
	epoch    int
	ready    chan struct{} // closed while a connection is up
	finals   []*Final
	pkts     map[string]pktRef
	user     map[string]int // channel:message_id -> chat.message packets received
	errs     map[string]int // error packets by type/code
	stray    []string       // unexpected packets
	stopping atomic.Bool

	cancel     context.CancelFunc
	packets    atomic.Int64
	reconnects atomic.Int64
	wg         sync.WaitGroup
	loops      sync.WaitGroup
}

// NewDriver returns a driver; Run connects and starts the load.
func NewDriver(cfg DriverConfig) *Driver {
	if cfg.Deltas <= 0 {
		cfg.Deltas = 4
	}
	if cfg.DeltaGap <= 0 {
		cfg.DeltaGap = 10 * time.Millisecond
	}
	if cfg.RetransmitAfter <= 0 {
		cfg.RetransmitAfter = 5 * time.Second
	}
	return &Driver{cfg: cfg, ready: make(chan struct{}), pkts: map[string]pktRef{}, user: map[string]int{}, errs: map[string]int{}}
}

// Run starts the connection loop and one goroutine per channel; they end with ctx, the channel
// goroutines also after Stop once their current message is terminal.
func (d *Driver) Run(ctx context.Context) {
	ctx, d.cancel = context.WithCancel(ctx)
	d.wg.Add(1)
	go func() { defer d.wg.Done(); d.connLoop(ctx) }()
	for _, ch := range d.cfg.Channels {
		d.loops.Add(1)
		go func() { defer d.loops.Done(); d.channelLoop(ctx, ch) }()
	}
}

// Stop makes every channel goroutine stop after its current message.
func (d *Driver) Stop() { d.stopping.Store(true) }

// WaitIdle waits until every channel goroutine ended (its last final terminal) or the timeout.
func (d *Driver) WaitIdle(timeout time.Duration) error {
	done := make(chan struct{})
	go func() { d.loops.Wait(); close(done) }()
	select {
	case <-done:
		return nil
	case <-time.After(timeout):
		return fmt.Errorf("finals still pending after %s: %s", timeout, strings.Join(d.Pending(), ", "))
	}
}

// Close ends the load and the connection and waits for them.
func (d *Driver) Close() {
	d.cancel()
	d.mu.Lock()
	if d.conn != nil {
		d.conn.CloseNow()
	}
	d.mu.Unlock()
	d.wg.Wait()
	d.loops.Wait()
}

// Epoch counts the connections made so far.
func (d *Driver) Epoch() int {
	d.mu.Lock()
	defer d.mu.Unlock()
	return d.epoch
}

// Connected reports whether a connection is up.
func (d *Driver) Connected() bool {
	d.mu.Lock()
	defer d.mu.Unlock()
	return d.conn != nil
}

// Packets counts the packets written (every type, retransmissions included).
func (d *Driver) Packets() int64 { return d.packets.Load() }

// Reconnects counts the connections after the first.
func (d *Driver) Reconnects() int64 { return d.reconnects.Load() }

// Finals returns every message sent so far.
func (d *Driver) Finals() []*Final {
	d.mu.Lock()
	defer d.mu.Unlock()
	return append([]*Final(nil), d.finals...)
}

// Pending lists the keys of finals without a terminal ack.
func (d *Driver) Pending() []string {
	var out []string
	for _, f := range d.Finals() {
		if t, _, _ := f.Outcome(); t == nil {
			out = append(out, f.Key())
		}
	}
	return out
}

// UserMessages returns how often each user message (channel:message_id) reached the driver.
func (d *Driver) UserMessages() map[string]int {
	d.mu.Lock()
	defer d.mu.Unlock()
	out := make(map[string]int, len(d.user))
	for k, v := range d.user {
		out[k] = v
	}
	return out
}

// Errors returns the error packets received, by "<type of the packet answered>/<code>".
func (d *Driver) Errors() map[string]int {
	d.mu.Lock()
	defer d.mu.Unlock()
	out := make(map[string]int, len(d.errs))
	for k, v := range d.errs {
		out[k] = v
	}
	return out
}

// Stray returns packets the driver did not expect (replies to unknown packets, other types).
func (d *Driver) Stray() []string {
	d.mu.Lock()
	defer d.mu.Unlock()
	return append([]string(nil), d.stray...)
}

func (d *Driver) connLoop(ctx context.Context) {
	for i := 0; ctx.Err() == nil; i++ {
		addr := d.cfg.Addrs[i%len(d.cfg.Addrs)]
		dctx, cancel := context.WithTimeout(ctx, 2*time.Second)
		ws, _, err := websocket.Dial(dctx, "ws://"+addr+"/v1/ws", &websocket.DialOptions{
			Subprotocols: []string{"xagent.connector.packet.v1"},
			HTTPHeader:   http.Header{"Authorization": {"Bearer " + d.cfg.Token}},
		})
		cancel()
		if err != nil {
			select { // ximd is down or starting: try again soon
			case <-ctx.Done():
			case <-time.After(50 * time.Millisecond):
			}
			continue
		}
		ws.SetReadLimit(64 << 20)
		d.mu.Lock()
		d.conn = ws
		d.epoch++
		if d.epoch > 1 {
			d.reconnects.Add(1)
		}
		close(d.ready)
		d.mu.Unlock()
		d.readLoop(ctx, ws)
		d.mu.Lock()
		if d.conn == ws {
			d.conn = nil
			d.ready = make(chan struct{})
		}
		d.mu.Unlock()
		ws.CloseNow()
	}
}

// drop forgets a connection a write failed on; the read loop ends with it.
func (d *Driver) drop(ws *websocket.Conn) {
	ws.CloseNow()
}

func (d *Driver) readLoop(ctx context.Context, ws *websocket.Conn) {
	for {
		_, b, err := ws.Read(ctx)
		if err != nil {
			return
		}
		var env profile.Envelope
		if err := json.Unmarshal(b, &env); err != nil {
			d.strayf("undecodable frame: %.200s", b)
			continue
		}
		switch env.Type {
		case profile.TypeAck:
			d.onAck(env)
		case profile.TypeToolResult:
			d.onToolResult(env)
		case profile.TypeError:
			d.onError(env)
		case profile.TypeMessage:
			d.onUserMessage(ctx, ws, env)
		default:
			d.strayf("unexpected %s: %.200s", env.Type, b)
		}
	}
}

func (d *Driver) strayf(format string, args ...any) {
	d.mu.Lock()
	defer d.mu.Unlock()
	if len(d.stray) < 100 {
		d.stray = append(d.stray, fmt.Sprintf(format, args...))
	}
}

func (d *Driver) onAck(env profile.Envelope) {
	var a profile.Ack
	if err := json.Unmarshal(env.Payload, &a); err != nil {
		d.strayf("undecodable ack %s", env.Payload)
		return
	}
	d.mu.Lock()
	ref, ok := d.pkts[env.ReplyTo]
	d.mu.Unlock()
	if !ok || ref.final == nil {
		d.strayf("ack replying to unknown packet %s: %s", env.ReplyTo, env.Payload)
		return
	}
	f := ref.final
	if a.MessageID != f.MessageID || env.ChannelID != f.Channel {
		d.strayf("ack of %s/%s replies to a packet of %s: %s", env.ChannelID, a.MessageID, f.Key(), env.Payload)
		return
	}
	d.settle(f, Ack{PacketID: env.ReplyTo, Status: a.Status, Code: a.Code, Retryable: a.Retryable != nil && *a.Retryable})
}

// onToolResult takes a tool.result as the ack of its invocation: ok is accepted, an error a
// rejection with its code.
func (d *Driver) onToolResult(env profile.Envelope) {
	var r struct {
		InvocationID string                `json:"invocation_id"`
		OK           bool                  `json:"ok"`
		Error        *profile.ErrorPayload `json:"error"`
	}
	if err := json.Unmarshal(env.Payload, &r); err != nil {
		d.strayf("undecodable tool.result %s", env.Payload)
		return
	}
	d.mu.Lock()
	ref, ok := d.pkts[env.ReplyTo]
	d.mu.Unlock()
	if !ok || ref.final == nil || !ref.final.Tool || r.InvocationID != ref.final.MessageID || env.ChannelID != ref.final.Channel {
		d.strayf("tool.result replying to unknown packet %s: %s", env.ReplyTo, env.Payload)
		return
	}
	ack := Ack{PacketID: env.ReplyTo, Status: profile.AckAccepted}
	if !r.OK {
		ack.Status = profile.AckRejected
		if r.Error != nil {
			ack.Code, ack.Retryable = r.Error.Code, r.Error.Retryable
		}
	}
	d.settle(ref.final, ack)
}

// settle records an answer of a final's transmission: terminal, or a retry after a back-off.
func (d *Driver) settle(f *Final, ack Ack) {
	a := ack
	f.mu.Lock()
	defer f.mu.Unlock()
	f.acks = append(f.acks, ack)
	if f.terminal != nil {
		return
	}
	switch {
	case a.Status == profile.AckAccepted || a.Status == profile.AckDuplicate:
		f.terminal = &ack
	case a.Status == profile.AckRejected && !a.Retryable:
		f.terminal = &ack
	default: // rejected, retryable: send again after a back-off (P-ACK-5)
		f.retryAt = time.Now().Add(300 * time.Millisecond)
	}
}

func (d *Driver) onError(env profile.Envelope) {
	var e profile.ErrorPayload
	_ = json.Unmarshal(env.Payload, &e)
	d.mu.Lock()
	ref, ok := d.pkts[env.ReplyTo]
	typ := "unknown"
	if ok {
		typ = ref.typ
	}
	d.errs[typ+"/"+e.Code]++
	d.mu.Unlock()
	if ok && ref.final != nil && e.Retryable { // e.g. `unavailable`: not stored, send again
		ref.final.mu.Lock()
		ref.final.retryAt = time.Now().Add(200 * time.Millisecond)
		ref.final.mu.Unlock()
	}
}

func (d *Driver) onUserMessage(ctx context.Context, ws *websocket.Conn, env profile.Envelope) {
	var m profile.Message
	if err := json.Unmarshal(env.Payload, &m); err != nil || m.MessageID == "" {
		d.strayf("undecodable user message %s", env.Payload)
		return
	}
	key := env.ChannelID + ":" + m.MessageID
	d.mu.Lock()
	d.user[key]++
	first := d.user[key] == 1
	d.mu.Unlock()
	status := profile.AckAccepted
	if !first {
		status = profile.AckDuplicate
	}
	id := testkit.NewID("pkt")
	d.mu.Lock()
	d.pkts[id] = pktRef{typ: profile.TypeAck}
	d.mu.Unlock()
	b, _ := testkit.Packet(id, env.ChannelID, profile.TypeAck, map[string]any{"message_id": m.MessageID, "status": status})
	var p profile.Envelope
	_ = json.Unmarshal(b, &p)
	p.ReplyTo = env.PacketID
	b, _ = json.Marshal(p)
	wctx, cancel := context.WithTimeout(ctx, 5*time.Second)
	defer cancel()
	if err := ws.Write(wctx, websocket.MessageText, b); err != nil {
		d.drop(ws) // ximd sends it again; it is then acked duplicate
		return
	}
	d.packets.Add(1)
}

// current waits for a live connection.
func (d *Driver) current(ctx context.Context) (*websocket.Conn, int, error) {
	for {
		d.mu.Lock()
		ws, ep, ready := d.conn, d.epoch, d.ready
		d.mu.Unlock()
		if ws != nil {
			return ws, ep, nil
		}
		select {
		case <-ready:
		case <-ctx.Done():
			return nil, 0, ctx.Err()
		}
	}
}

// send writes one packet on the live connection (waiting for one), and returns the epoch of the
// connection it went out on.
func (d *Driver) send(ctx context.Context, channel, typ string, payload any, f *Final) (int, error) {
	for {
		ws, ep, err := d.current(ctx)
		if err != nil {
			return 0, err
		}
		id := testkit.NewID("pkt")
		b, err := testkit.Packet(id, channel, typ, payload)
		if err != nil {
			return 0, err
		}
		d.mu.Lock()
		d.pkts[id] = pktRef{final: f, typ: typ}
		d.mu.Unlock()
		if f != nil {
			f.mu.Lock()
			f.packets = append(f.packets, id)
			f.mu.Unlock()
		}
		wctx, cancel := context.WithTimeout(ctx, 5*time.Second)
		err = ws.Write(wctx, websocket.MessageText, b)
		cancel()
		if err == nil {
			d.packets.Add(1)
			return ep, nil
		}
		d.drop(ws)
		if ctx.Err() != nil {
			return 0, ctx.Err()
		}
		// Wait for the read loop to notice and a new connection to come up.
		for d.Epoch() == ep && ctx.Err() == nil {
			time.Sleep(5 * time.Millisecond)
		}
	}
}

func (d *Driver) channelLoop(ctx context.Context, ch Channel) {
	rng := rand.New(rand.NewPCG(rand.Uint64(), rand.Uint64()))
	for i := 0; !d.stopping.Load() && ctx.Err() == nil; i++ {
		f := &Final{Channel: ch.ID, MessageID: fmt.Sprintf("m%05d", i), Tool: i%5 == 4}
		if f.Tool { // every fifth message is an IM tool's: invoked, never streamed
			f.Text = fmt.Sprintf("%s-%s-tool-%x end.", ch.ID, f.MessageID, rng.Uint32())
			d.mu.Lock()
			d.finals = append(d.finals, f)
			d.mu.Unlock()
			d.deliver(ctx, f)
			continue
		}
		for s := 0; s < d.cfg.Deltas; s++ {
			f.Deltas = append(f.Deltas, fmt.Sprintf("%s-%s-d%d-%x ", ch.ID, f.MessageID, s+1, rng.Uint32()))
		}
		f.Text = strings.Join(f.Deltas, "") + "end."
		d.mu.Lock()
		d.finals = append(d.finals, f)
		d.mu.Unlock()
		if err := d.stream(ctx, ch, f, i); err != nil {
			return
		}
		d.deliver(ctx, f)
	}
}

// stream sends the message's activity and deltas; after a reconnect in the middle, with
// ResendDeltas, the deltas sent so far are sent again first.
func (d *Driver) stream(ctx context.Context, ch Channel, f *Final, i int) error {
	ep, err := d.send(ctx, ch.ID, profile.TypeActivity, map[string]any{"status": "thinking"}, nil)
	if err != nil {
		return err
	}
	resend := func(upTo int) error { // deltas 1..upTo again, on the connection now up
		for r := 0; r < upTo; r++ {
			if ep, err = d.send(ctx, ch.ID, profile.TypeDelta, map[string]any{"message_id": f.MessageID, "sequence": r + 1, "text": f.Deltas[r]}, nil); err != nil {
				return err
			}
		}
		return nil
	}
	for s := 0; s < len(f.Deltas); s++ {
		time.Sleep(d.cfg.DeltaGap) // pacing of the stream, not a wait for a condition
		// Reconnected since the last packet: the new connection gets the deltas so far first.
		if d.cfg.ResendDeltas && d.Epoch() != ep {
			if err := resend(s); err != nil {
				return err
			}
		}
		prev := ep
		if ep, err = d.send(ctx, ch.ID, profile.TypeDelta, map[string]any{"message_id": f.MessageID, "sequence": s + 1, "text": f.Deltas[s]}, nil); err != nil {
			return err
		}
		if d.cfg.ResendDeltas && ep != prev && s > 0 { // the write failed and went out on a new connection
			if err := resend(s + 1); err != nil {
				return err
			}
		}
		if s == 1 && i%2 == 1 { // a tool status in the middle of some messages
			if _, err := d.send(ctx, ch.ID, profile.TypeActivity, map[string]any{"status": "tool", "tool_name": "web_search"}, nil); err != nil {
				return err
			}
		}
	}
	time.Sleep(d.cfg.DeltaGap)
	return nil
}

// deliver sends the final until it has a terminal ack (or ctx ends).
func (d *Driver) deliver(ctx context.Context, f *Final) {
	typ, payload := profile.TypeMessage, map[string]any{"message_id": f.MessageID, "text": f.Text}
	if f.Tool {
		typ, payload = profile.TypeToolInvoke, map[string]any{"invocation_id": f.MessageID, "tool": profile.ToolSendMessage, "arguments": map[string]any{"text": f.Text}}
	}
	sentEpoch, sentAt := -1, time.Time{}
	for ctx.Err() == nil {
		f.mu.Lock()
		terminal, retryAt := f.terminal != nil, f.retryAt
		f.mu.Unlock()
		if terminal {
			return
		}
		now := time.Now()
		if sentEpoch != d.Epoch() || now.Sub(sentAt) > d.cfg.RetransmitAfter || (!retryAt.IsZero() && now.After(retryAt)) {
			f.mu.Lock()
			f.retryAt = time.Time{}
			f.mu.Unlock()
			ep, err := d.send(ctx, f.Channel, typ, payload, f)
			if err != nil {
				return
			}
			sentEpoch, sentAt = ep, time.Now()
		}
		time.Sleep(10 * time.Millisecond) // poll the ack state
	}
}

// Summary counts the finals by terminal outcome ("pending" for none).
func (d *Driver) Summary() map[string]int {
	out := map[string]int{}
	for _, f := range d.Finals() {
		t, _, _ := f.Outcome()
		switch {
		case t == nil:
			out["pending"]++
		case t.Status == profile.AckRejected:
			out["rejected/"+t.Code]++
		default:
			out[t.Status]++
		}
	}
	return out
}
