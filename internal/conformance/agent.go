package conformance

import (
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"sync"
	"time"

	"github.com/coder/websocket"
)

// subprotocol is the packet stream's WebSocket subprotocol (edge-api §5).
const subprotocol = "xagent.connector.packet.v1"

// packet is one frame ximd sent, decoded loosely so that a check can see exactly what came:
// the envelope's keys, the payload's keys, and when it was read.
type packet struct {
	Schema    string          `json:"schema"`
	PacketID  string          `json:"packet_id"`
	ReplyTo   string          `json:"reply_to"`
	ChannelID string          `json:"connector_channel_id"`
	Type      string          `json:"type"`
	Time      int64           `json:"time"`
	Payload   json.RawMessage `json:"payload"`

	keys []string  // the envelope's keys, as sent
	at   time.Time // when the frame was read
}

// fields decodes the payload as an object (nil when it is not one).
func (p packet) fields() map[string]any {
	var m map[string]any
	_ = json.Unmarshal(p.Payload, &m)
	return m
}

// str is the payload's string member name ("" when absent).
func (p packet) str(name string) string { s, _ := p.fields()[name].(string); return s }

// ack is a chat.message.ack or an error payload, as received.
type ack struct {
	MessageID string `json:"message_id"`
	Status    string `json:"status"`
	Code      string `json:"code"`
	Message   string `json:"message"`
	Retryable *bool  `json:"retryable"`
}

func (p packet) ack() ack {
	var a ack
	_ = json.Unmarshal(p.Payload, &a)
	return a
}

func (a ack) String() string {
	s := a.Status
	if a.Code != "" {
		s += " " + a.Code
	}
	if a.Retryable != nil {
		s += fmt.Sprintf(" retryable:%t", *a.Retryable)
	}
	return s
}

// agent plays xAgent: WebSocket connections to /v1/ws whose packets are sorted into one inbox
// per connector_channel_id, whichever connection brought them (ximd sends each outbound packet
// to one live connection of its choice). Sends go through the current connection.
type agent struct {
	addr, token string

	mu    sync.Mutex
	boxes map[string]*inbox
	conn  *websocket.Conn // current connection
	wg    sync.WaitGroup  // readers
	stop  context.CancelFunc
	ctx   context.Context
}

func newAgent(addr, token string) *agent {
	ctx, stop := context.WithCancel(context.Background())
	return &agent{addr: addr, token: token, boxes: map[string]*inbox{}, ctx: ctx, stop: stop}
}

// connect dials a new connection and makes it the current one (the previous one stays open
// unless disconnect closed it).
func (a *agent) connect(ctx context.Context) error {
	ctx, cancel := context.WithTimeout(ctx, 10*time.Second)
	defer cancel()
	ws, resp, err := websocket.Dial(ctx, "ws://"+a.addr+"/v1/ws", &websocket.DialOptions{
		Subprotocols: []string{subprotocol},
		HTTPHeader:   http.Header{"Authorization": {"Bearer " + a.token}},
	})
	if err != nil {
		if resp != nil && resp.StatusCode == http.StatusUnauthorized {
			return fmt.Errorf("connect ws://%s/v1/ws: 401: the token is refused", a.addr)
		}
		return fmt.Errorf("connect ws://%s/v1/ws: %w", a.addr, err)
	}
	if ws.Subprotocol() != subprotocol {
		_ = ws.CloseNow()
		return fmt.Errorf("connect ws://%s/v1/ws: subprotocol %q negotiated, want %s", a.addr, ws.Subprotocol(), subprotocol)
	}
	ws.SetReadLimit(64 << 20)
	a.mu.Lock()
	a.conn = ws
	a.mu.Unlock()
	a.wg.Add(1)
	go a.read(ws)
	return nil
}

// current is the current connection (nil after disconnect).
func (a *agent) current() *websocket.Conn {
	a.mu.Lock()
	defer a.mu.Unlock()
	return a.conn
}

// disconnect closes the current connection and waits until its reader ended.
func (a *agent) disconnect() {
	a.mu.Lock()
	ws := a.conn
	a.conn = nil
	a.mu.Unlock()
	if ws != nil {
		_ = ws.Close(websocket.StatusNormalClosure, "")
	}
}

// close ends every connection and reader.
func (a *agent) close() {
	a.disconnect()
	a.stop()
	a.wg.Wait()
}

func (a *agent) read(ws *websocket.Conn) {
	defer a.wg.Done()
	defer ws.CloseNow()
	for {
		_, b, err := ws.Read(a.ctx)
		if err != nil {
			return
		}
		p := packet{at: time.Now()}
		var keys map[string]json.RawMessage
		if json.Unmarshal(b, &p) != nil || json.Unmarshal(b, &keys) != nil {
			continue
		}
		for k := range keys {
			p.keys = append(p.keys, k)
		}
		a.box(p.ChannelID).put(p)
	}
}

// box is the channel's inbox.
func (a *agent) box(channel string) *inbox {
	a.mu.Lock()
	defer a.mu.Unlock()
	b := a.boxes[channel]
	if b == nil {
		b = &inbox{changed: make(chan struct{})}
		a.boxes[channel] = b
	}
	return b
}

// sendRaw writes one text frame on the current connection.
func (a *agent) sendRaw(ctx context.Context, b []byte) error {
	a.mu.Lock()
	ws := a.conn
	a.mu.Unlock()
	if ws == nil {
		return fmt.Errorf("not connected")
	}
	ctx, cancel := context.WithTimeout(ctx, 10*time.Second)
	defer cancel()
	return ws.Write(ctx, websocket.MessageText, b)
}

// send writes a packet of typ with payload to channel under packetID.
func (a *agent) send(ctx context.Context, packetID, channel, typ string, payload any) error {
	p, err := json.Marshal(payload)
	if err != nil {
		return err
	}
	b, err := json.Marshal(map[string]any{"schema": "xagent.connector.packet/v1", "packet_id": packetID,
		"connector_channel_id": channel, "type": typ, "time": time.Now().UnixMilli(), "payload": json.RawMessage(p)})
	if err != nil {
		return err
	}
	return a.sendRaw(ctx, b)
}

// inbox holds the packets of one channel not yet taken by a check.
type inbox struct {
	mu      sync.Mutex
	pkts    []packet
	changed chan struct{} // closed (and replaced) on every put
}

func (b *inbox) put(p packet) {
	b.mu.Lock()
	b.pkts = append(b.pkts, p)
	close(b.changed)
	b.changed = make(chan struct{})
	b.mu.Unlock()
}

// take removes and returns the first packet match accepts, waiting until ctx ends for one.
func (b *inbox) take(ctx context.Context, match func(packet) bool) (packet, bool) {
	for {
		b.mu.Lock()
		for i, p := range b.pkts {
			if match(p) {
				b.pkts = append(b.pkts[:i:i], b.pkts[i+1:]...)
				b.mu.Unlock()
				return p, true
			}
		}
		changed := b.changed
		b.mu.Unlock()
		select {
		case <-changed:
		case <-ctx.Done():
			return packet{}, false
		}
	}
}

// within is take with a timeout.
func (b *inbox) within(ctx context.Context, d time.Duration, match func(packet) bool) (packet, bool) {
	ctx, cancel := context.WithTimeout(ctx, d)
	defer cancel()
	return b.take(ctx, match)
}

// any accepts every packet.
func anyPacket(packet) bool { return true }
