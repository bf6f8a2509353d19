// Package xagent is the xAgent side of a connector's packet stream: a client of ximd's /v1/ws
// (subprotocol xagent.connector.packet.v1) that sends packets and takes what ximd answers, by
// reply_to or in order. The demo agent, ximctl and the tests use it.
package xagent

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"strings"
	"sync"
	"time"

	"github.com/coder/websocket"

	"github.com/ximd/ximd/profile"
)

// Client is an xAgent WebSocket connection to /v1/ws.
type Client struct {
	ws      *websocket.Conn
	backlog []received // received, not yet taken by Reply or Next
	in      chan received
	mu      sync.Mutex
	err     error
	ctx     context.Context
	end     context.CancelFunc
}

// Dial connects to ws://addr/v1/ws with the token.
func Dial(ctx context.Context, httpAddr, token string) (*Client, error) {
	ws, _, err := websocket.Dial(ctx, "ws://"+httpAddr+"/v1/ws", &websocket.DialOptions{
		Subprotocols: []string{"xagent.connector.packet.v1"},
		HTTPHeader:   http.Header{"Authorization": {"Bearer " + token}},
	})
	if err != nil {
		return nil, err
	}
	ws.SetReadLimit(64 << 20)
	actx, end := context.WithCancel(context.Background())
	a := &Client{ws: ws, in: make(chan received, 65536), ctx: actx, end: end}
	go a.read()
	return a, nil
}

func (a *Client) read() {
	defer close(a.in)
	for {
		_, b, err := a.ws.Read(a.ctx)
		if err != nil {
			a.mu.Lock()
			a.err = err
			a.mu.Unlock()
			return
		}
		at := time.Now()
		var env profile.Envelope
		if err := json.Unmarshal(b, &env); err != nil {
			continue
		}
		a.in <- received{env, at}
	}
}

// Close closes the connection.
func (a *Client) Close() {
	_ = a.ws.Close(websocket.StatusNormalClosure, "")
	a.end()
}

// Err is the read error that ended the connection, if any.
func (a *Client) Err() error {
	a.mu.Lock()
	defer a.mu.Unlock()
	return a.err
}

// SendRaw writes one text frame.
func (a *Client) SendRaw(ctx context.Context, b []byte) error {
	return a.ws.Write(ctx, websocket.MessageText, b)
}

// SendBinary writes one binary frame.
func (a *Client) SendBinary(ctx context.Context, b []byte) error {
	return a.ws.Write(ctx, websocket.MessageBinary, b)
}

// Send writes a packet of typ with payload to channel and returns its packet_id.
func (a *Client) Send(ctx context.Context, channel, typ string, payload any) (string, error) {
	id := NewID("pkt")
	b, err := Packet(id, channel, typ, payload)
	if err != nil {
		return "", err
	}
	return id, a.SendRaw(ctx, b)
}

// Packet encodes a WirePacket.
func Packet(packetID, channel, typ string, payload any) ([]byte, error) {
	p, err := json.Marshal(payload)
	if err != nil {
		return nil, err
	}
	return json.Marshal(profile.Envelope{Schema: profile.Schema, PacketID: packetID, ChannelID: channel, Type: typ, Time: time.Now().UnixMilli(), Payload: p})
}

// received is a packet and the time its frame was read.
type received struct {
	env profile.Envelope
	at  time.Time
}

// Next returns the next packet received (first those Reply set aside), or an error at the timeout.
func (a *Client) Next(timeout time.Duration) (profile.Envelope, error) {
	env, _, err := a.NextAt(timeout)
	return env, err
}

// NextAt is Next that also returns when the frame was read off the connection.
func (a *Client) NextAt(timeout time.Duration) (profile.Envelope, time.Time, error) {
	if len(a.backlog) > 0 {
		r := a.backlog[0]
		a.backlog = a.backlog[1:]
		return r.env, r.at, nil
	}
	r, err := a.next(timeout)
	return r.env, r.at, err
}

func (a *Client) next(timeout time.Duration) (received, error) {
	t := time.NewTimer(timeout)
	defer t.Stop()
	select {
	case r, ok := <-a.in:
		if !ok {
			return received{}, fmt.Errorf("connection closed: %v", a.Err())
		}
		return r, nil
	case <-t.C:
		return received{}, errors.New("no packet within " + timeout.String())
	}
}

// Reply waits for the packet replying to packetID; other packets are set aside for Next and
// later Reply calls. A Client is used by one goroutine.
func (a *Client) Reply(packetID string, timeout time.Duration) (profile.Envelope, error) {
	for i, r := range a.backlog {
		if r.env.ReplyTo == packetID {
			a.backlog = append(a.backlog[:i:i], a.backlog[i+1:]...)
			return r.env, nil
		}
	}
	deadline := time.Now().Add(timeout)
	for {
		left := time.Until(deadline)
		if left <= 0 {
			return profile.Envelope{}, fmt.Errorf("no reply to %s within %s", packetID, timeout)
		}
		r, err := a.next(left)
		if err != nil {
			return r.env, fmt.Errorf("reply to %s: %w", packetID, err)
		}
		if r.env.ReplyTo == packetID {
			return r.env, nil
		}
		a.backlog = append(a.backlog, r)
	}
}

// Drain discards every packet received so far and returns how many there were.
func (a *Client) Drain() int {
	n := len(a.backlog)
	a.backlog = nil
	for {
		select {
		case _, ok := <-a.in:
			if !ok {
				return n
			}
			n++
		default:
			return n
		}
	}
}

// Quiet asserts that no packet arrives within d; it returns the packet that did.
func (a *Client) Quiet(d time.Duration) (profile.Envelope, bool) {
	env, err := a.Next(d)
	return env, err != nil && !strings.HasPrefix(err.Error(), "connection closed")
}

// AckOf decodes a chat.message.ack payload.
func AckOf(env profile.Envelope) (profile.Ack, error) {
	var ack profile.Ack
	if env.Type != profile.TypeAck {
		return ack, fmt.Errorf("got %s, want %s: %s", env.Type, profile.TypeAck, env.Payload)
	}
	return ack, json.Unmarshal(env.Payload, &ack)
}

// ErrorOf decodes an error payload.
func ErrorOf(env profile.Envelope) (profile.ErrorPayload, error) {
	var e profile.ErrorPayload
	if env.Type != profile.TypeError {
		return e, fmt.Errorf("got %s, want error: %s", env.Type, env.Payload)
	}
	return e, json.Unmarshal(env.Payload, &e)
}

// ToolResult is a tool.result payload (edge-api §8).
type ToolResult struct {
	InvocationID string `json:"invocation_id"`
	OK           bool   `json:"ok"`
	Result       *struct {
		TargetMessageID string `json:"target_message_id"`
		// Reply is "degraded" when im.reply_message went out as a plain message.
		Reply string `json:"reply,omitempty"`
	} `json:"result,omitempty"`
	Error *profile.ErrorPayload `json:"error,omitempty"`
}

// ToolResultOf decodes a tool.result payload.
func ToolResultOf(env profile.Envelope) (ToolResult, error) {
	var r ToolResult
	if env.Type != profile.TypeToolResult {
		return r, fmt.Errorf("got %s, want %s: %s", env.Type, profile.TypeToolResult, env.Payload)
	}
	return r, json.Unmarshal(env.Payload, &r)
}

// Invoke sends a tool.invoke (edge-api §8) for one of the Card's IM tools and returns its
// packet_id; its tool.result comes by Reply.
func (a *Client) Invoke(ctx context.Context, channel, invocationID, tool string, arguments any) (string, error) {
	return a.Send(ctx, channel, profile.TypeToolInvoke, map[string]any{"invocation_id": invocationID, "tool": tool, "arguments": arguments})
}

// NewID returns prefix_<16 hex>.
func NewID(prefix string) string {
	b := make([]byte, 8)
	_, _ = rand.Read(b)
	return prefix + "_" + hex.EncodeToString(b)
}
