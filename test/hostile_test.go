package test

import (
	"bytes"
	"context"
	"encoding/base64"
	"encoding/hex"
	"fmt"
	"io"
	"log/slog"
	"math/rand/v2"
	"net"
	"net/http"
	"net/url"
	"runtime"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/coder/websocket"

	"github.com/ximd/ximd/handlers/adapter/webhook"
	"github.com/ximd/ximd/internal/testkit"
	"github.com/ximd/ximd/pipeline/edge"
	"github.com/ximd/ximd/pipeline/node"
	"github.com/ximd/ximd/profile"
)

// hostileFrame returns the i-th frame of a deterministic mix of hostile input for an open
// channel: malformed, truncated, oversized, binary, random, deeply nested, invalid UTF-8, and
// well-formed envelopes carrying hostile payloads. It reports whether the frame is binary.
func hostileFrame(r *rand.Rand, i int, channel string, maxPacket int) ([]byte, bool) {
	env := func(typ string, payload string) []byte {
		return []byte(fmt.Sprintf(`{"schema":"xagent.connector.packet/v1","packet_id":"ph_%d","connector_channel_id":%q,"type":%q,"time":1,"payload":%s}`, i, channel, typ, payload))
	}
	random := func(n int) []byte {
		b := make([]byte, n)
		for j := range b {
			b[j] = byte(r.IntN(256))
		}
		return b
	}
	nest := func(open, close string, depth int) string {
		return strings.Repeat(open, depth) + strings.Repeat(close, depth)
	}
	switch i % 21 {
	case 0:
		return random(1 + r.IntN(512)), false // text frame that is not UTF-8 or JSON
	case 1:
		return random(1 + r.IntN(512)), true // binary
	case 2:
		good := env(profile.TypeMessage, `{"message_id":"m","text":"x"}`)
		return good[:r.IntN(len(good))], false // truncated
	case 3:
		return bytes.Repeat([]byte("x"), maxPacket+1+r.IntN(maxPacket)), false // oversized
	case 4:
		return []byte(nest("[", "]", maxPacket/2-1)), false // deeply nested array
	case 5:
		return []byte(strings.Repeat(`{"a":`, maxPacket/6) + "1" + strings.Repeat("}", maxPacket/6)), false
	case 6: // deeper than the scanner's 64 levels: not JSON for ximd, an error packet
		return env(profile.TypeMessage, `{"message_id":"m_deep","text":"x","files":`+nest("[", "]", 2000)+`}`), false
	default: // within them: stored, then rejected by the worker's payload decoder
		return env(profile.TypeMessage, `{"message_id":"m_nested","text":"x","files":`+nest("[", "]", 50)+`}`), false
	case 7:
		return env(profile.TypeDelta, `{"message_id":"d","sequence":1e400,"text":"x"}`), false
	case 8:
		return env(profile.TypeDelta, `{"message_id":"d","sequence":-1,"text":"\udc00"}`), false
	case 9:
		return env(profile.TypeActivity, `{"status":"tool","tool_name":"`+strings.Repeat("t", 300)+`"}`), false
	case 10:
		return env(profile.TypeAck, `{"message_id":"m","status":"rejected"}`), false
	case 11:
		return env(profile.TypeToolInvoke, `{"invocation_id":`+nest("[", "]", 500)+`}`), false
	case 12:
		return env(profile.TypeMessage, `{"message_id":"m","text":"x","text":"y"}`), false // duplicate key
	case 13:
		return env("session.sync_request", `{}`), false // dropped silently
	case 14:
		return []byte(`{"packet_id":"` + strings.Repeat("\\u0000", 50) + `","type":"chat.message"}`), false
	case 15:
		return env(profile.TypeMessage, `{"message_id":"m_bad_utf8","text":"`+string([]byte{0xff, 0xfe})+`"}`), false
	case 16:
		return env(profile.TypeMessage, `{"message_id":"`+strings.Repeat("m", 300)+`","text":"x"}`), false
	case 17:
		return env(profile.TypeMessage, `{"message_id":"m_file","text":"x","files":[{"type":"file","file_ref":"../../etc/passwd","download_url":"file:///etc/passwd"}]}`), false
	case 18:
		return []byte(fmt.Sprintf(`{"schema":"xagent.connector.packet/v1","packet_id":"ph_%d","connector_channel_id":"a.b.>","type":"chat.message","payload":{}}`, i)), false
	case 19:
		return []byte(`{"schema":"xagent.connector.packet/v1","packet_id":1e999,"type":null}`), false
	}
}

// edge-api §5: thousands of hostile frames on several connections at once never take the node
// down: afterwards it answers correct acks on the same connections and on a fresh one, and its
// goroutines and connections return to what they were.
func TestHostile_FramesFloodThenAcksStillCorrect(t *testing.T) {
	// Not parallel: it counts the process's goroutines.
	const conns, perConn, maxPacket = 4, 1000, 16 << 10
	e := newEnv(t, envOptions{mutate: func(c *node.Config) { c.MaxPacketBytes = maxPacket }})
	_, ack := e.final(msg("m_before", "x"))
	wantAck(t, ack, profile.AckAccepted, "")
	baseGoroutines := runtime.NumGoroutine()
	baseConns := metricValue(t, e.node, "ximd_gateway_connections")

	agents := make([]*testkit.Agent, conns)
	for c := range agents {
		agents[c] = dial(t, e.node)
	}
	start := time.Now()
	var wg sync.WaitGroup
	errs := make(chan error, conns)
	for c, a := range agents {
		wg.Add(1)
		go func() {
			defer wg.Done()
			r := rand.New(rand.NewPCG(uint64(c), 42))
			for i := 0; i < perConn; i++ {
				frame, binary := hostileFrame(r, c*perConn+i, e.channel, maxPacket)
				ctx, cancel := context.WithTimeout(context.Background(), wait)
				var err error
				if binary {
					err = a.SendBinary(ctx, frame)
				} else {
					err = a.SendRaw(ctx, frame)
				}
				cancel()
				if err != nil {
					errs <- fmt.Errorf("connection %d frame %d: %w", c, i, err)
					return
				}
			}
		}()
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		t.Fatal(err)
	}
	t.Logf("%d hostile frames on %d connections sent in %s", conns*perConn, conns, time.Since(start).Round(time.Millisecond))

	// The same connections: a final gets its one correct ack; a hostile payload in a valid
	// envelope gets the rejection the contract names.
	for c, a := range agents {
		id := fmt.Sprintf("m_after_%d", c)
		pid, err := a.Send(context.Background(), e.channel, profile.TypeMessage, msg(id, "still works"))
		if err != nil {
			t.Fatal(err)
		}
		env, err := a.Reply(pid, 30*time.Second)
		if err != nil {
			t.Fatalf("connection %d: %v", c, err)
		}
		if a, err := testkit.AckOf(env); err != nil || a.Status != profile.AckAccepted || a.MessageID != id || env.ChannelID != e.channel {
			t.Fatalf("connection %d: %+v %+v %v", c, env, a, err)
		}
	}
	deep, _ := hostileFrame(nil, 6, e.channel, maxPacket)
	if err := e.agent.SendRaw(context.Background(), deep); err != nil {
		t.Fatal(err)
	}
	if p := e.errorOf("ph_6"); p.Code != profile.CodeInvalidPacket {
		t.Fatalf("files nested 2000 deep: %+v", p)
	}
	nested, _ := hostileFrame(nil, 20, e.channel, maxPacket)
	if err := e.agent.SendRaw(context.Background(), nested); err != nil {
		t.Fatal(err)
	}
	if a := e.ackOf("ph_20"); a.Status != profile.AckRejected || a.Code != profile.CodeInvalidPacket || a.MessageID != "m_nested" {
		t.Fatalf("files nested 50 deep: %+v", a)
	}
	fresh := dial(t, e.node)
	pid, _ := fresh.Send(context.Background(), e.channel, profile.TypeMessage, msg("m_fresh", "x"))
	if env, err := fresh.Reply(pid, wait); err != nil || env.Type != profile.TypeAck {
		t.Fatalf("fresh connection: %+v %v", env, err)
	}
	if calls := e.target.MessageCalls(); len(calls) != conns+2 {
		t.Fatalf("hostile frames reached the target: %s", dump(calls))
	}

	for _, a := range agents {
		a.Close()
	}
	fresh.Close()
	pollFor(t, 30*time.Second, "connections back to baseline", func() bool {
		return metricValue(t, e.node, "ximd_gateway_connections") == baseConns
	})
	var now int
	pollFor(t, 30*time.Second, "goroutines back to baseline", func() bool {
		now = runtime.NumGoroutine()
		return now <= baseGoroutines+2
	})
	t.Logf("goroutines %d before, %d after", baseGoroutines, now)
}

// edge-api §5: a frame above the drain limit (16 x XIM_MAX_PACKET_BYTES) closes the connection
// with 1009; a reconnect works and every other connection is untouched.
func TestHostile_FrameAboveDrainLimitClosesOnlyThatConnection(t *testing.T) {
	t.Parallel()
	e := newEnv(t, envOptions{mutate: func(c *node.Config) { c.MaxPacketBytes = 4 << 10 }})
	bad := dial(t, e.node)
	if err := bad.SendRaw(context.Background(), bytes.Repeat([]byte("{"), 16*(4<<10)+1)); err != nil {
		t.Fatal(err)
	}
	if _, err := bad.Next(wait); err == nil || websocket.CloseStatus(bad.Err()) != websocket.StatusMessageTooBig {
		t.Fatalf("connection not closed with 1009: %v / %v", err, bad.Err())
	}
	_, ack := e.final(msg("m_other", "x"))
	wantAck(t, ack, profile.AckAccepted, "")
	again := dial(t, e.node)
	pid, _ := again.Send(context.Background(), e.channel, profile.TypeMessage, msg("m_again", "x"))
	if env, err := again.Reply(pid, wait); err != nil || env.Type != profile.TypeAck {
		t.Fatalf("after reconnect: %+v %v", env, err)
	}
}

// A frame with very many unknown envelope members must cost about what its size costs: it must not
// hold up the packets behind it. (DecodeEnvelope once checked unknown members for duplicates
// against a list, quadratic in their number: ~8s for a 1 MiB frame without -race, and the worker
// decodes the stored packet again, holding up its whole partition.)
func TestHostile_ManyUnknownEnvelopeMembersDoNotStallThePartition(t *testing.T) {
	t.Parallel()
	e := newEnv(t, envOptions{})
	var b strings.Builder
	fmt.Fprintf(&b, `{"schema":"xagent.connector.packet/v1","packet_id":"p_members","connector_channel_id":%q,"type":"chat.activity","payload":{"status":"thinking"}`, e.channel)
	for i := 0; b.Len() < 256<<10; i++ { // a quarter of the default XIM_MAX_PACKET_BYTES
		fmt.Fprintf(&b, `,"k%d":0`, i)
	}
	b.WriteString("}")
	start := time.Now()
	if err := e.agent.SendRaw(context.Background(), []byte(b.String())); err != nil {
		t.Fatal(err)
	}
	pollFor(t, 10*time.Minute, "the frame stored", func() bool {
		return metricValue(t, e.node, "ximd_gateway_packets_stored_total") == 1
	})
	t.Logf("the gateway took %s to take the frame", time.Since(start).Round(time.Millisecond))
	// From another connection: only the worker stands between this final and its ack.
	other := dial(t, e.node)
	pid, _ := other.Send(context.Background(), e.channel, profile.TypeMessage, msg("m_behind", "x"))
	env, err := other.Reply(pid, 5*time.Second)
	if err != nil {
		t.Fatalf("the final behind a 256 KiB frame of unknown members: %v", err)
	}
	if a, _ := testkit.AckOf(env); a.Status != profile.AckAccepted {
		t.Fatalf("%+v", a)
	}
}

// README "Behaviour details": a client that does not read its WebSocket for 10s while ximd has
// packets for it is disconnected; other connections keep being served meanwhile.
func TestHostile_SlowReaderDisconnected(t *testing.T) {
	t.Parallel()
	e := newEnv(t, envOptions{})
	ctx, cancel := context.WithTimeout(context.Background(), wait)
	defer cancel()
	ws, _, err := websocket.Dial(ctx, "ws://"+e.node.Addr+"/v1/ws", &websocket.DialOptions{
		Subprotocols: []string{edge.Subprotocol}, HTTPHeader: http.Header{"Authorization": {"Bearer " + e.node.Token}}})
	if err != nil {
		t.Fatal(err)
	}
	defer ws.CloseNow()
	pollFor(t, wait, "two connections", func() bool { return metricValue(t, e.node, "ximd_gateway_connections") == 2 })
	// Each frame is answered by an error packet the client never reads, until the socket buffers
	// and the connection's send queue are full and the gateway cannot hand it more. The client
	// never closes the connection itself (a write that times out would).
	frame := []byte(`{"packet_id":"` + strings.Repeat("p", profile.MaxPacketIDBytes) + `"}`)
	start := time.Now()
	var sent atomic.Int64
	go func() {
		for sent.Load() < 10_000_000 {
			if err := ws.Write(context.Background(), websocket.MessageText, frame); err != nil {
				return
			}
			sent.Add(1)
		}
	}()
	// Meanwhile the healthy connection is served.
	_, ack := e.final(msg("m_healthy", "x"))
	wantAck(t, ack, profile.AckAccepted, "")
	pollFor(t, time.Minute, "slow reader disconnected", func() bool {
		return metricValue(t, e.node, "ximd_gateway_connections") == 1
	})
	gone := time.Since(start)
	t.Logf("slow reader disconnected %s after it stopped reading (%d frames written)", gone.Round(time.Millisecond), sent.Load())
	if gone < 10*time.Second {
		t.Fatalf("disconnected after %s, before the 10s the README promises", gone)
	}
	_, ack = e.final(msg("m_healthy_after", "x"))
	wantAck(t, ack, profile.AckAccepted, "")
}

// XIM_MAX_CONNECTIONS: past the limit an upgrade is refused 503 {"code":"unavailable"} before any
// state is made; a closed connection frees its place.
func TestHostile_ConnectionFloodRefusedPastLimit(t *testing.T) {
	t.Parallel()
	max := node.Defaults().MaxConnections
	e := newEnv(t, envOptions{mutate: func(c *node.Config) { c.MaxConnections = max }})
	conns := make([]*websocket.Conn, 0, max)
	t.Cleanup(func() {
		for _, c := range conns {
			c.CloseNow()
		}
	})
	dialWS := func() (*websocket.Conn, *http.Response, error) {
		ctx, cancel := context.WithTimeout(context.Background(), wait)
		defer cancel()
		return websocket.Dial(ctx, "ws://"+e.node.Addr+"/v1/ws", &websocket.DialOptions{
			Subprotocols: []string{edge.Subprotocol}, HTTPHeader: http.Header{"Authorization": {"Bearer " + e.node.Token}}})
	}
	start := time.Now()
	for len(conns) < max-1 { // e.agent holds one place
		c, _, err := dialWS()
		if err != nil {
			t.Fatalf("connection %d: %v", len(conns)+2, err)
		}
		conns = append(conns, c)
	}
	t.Logf("%d connections in %s", max, time.Since(start).Round(time.Millisecond))
	_, resp, err := dialWS()
	if err == nil || resp == nil || resp.StatusCode != http.StatusServiceUnavailable {
		t.Fatalf("connection %d: %v %v", max+1, resp, err)
	}
	body, _ := io.ReadAll(resp.Body)
	if jsonOf(t, body)["code"] != profile.CodeUnavailable || resp.Header.Get("Retry-After") == "" {
		t.Fatalf("refusal %d %s", resp.StatusCode, body)
	}
	if got := metricValue(t, e.node, "ximd_gateway_connections_refused_total"); got != 1 {
		t.Fatalf("refused metric %v", got)
	}
	_, ack := e.final(msg("m_at_limit", "x")) // the live connections still work
	wantAck(t, ack, profile.AckAccepted, "")
	conns[0].CloseNow()
	conns = conns[1:]
	pollFor(t, wait, "a place is free again", func() bool {
		c, _, err := dialWS()
		if err == nil {
			conns = append(conns, c)
		}
		return err == nil
	})
}

// XIM_MAX_INBOUND_REQUESTS: requests on the token-less inbound route are bounded; one past the
// bound is refused 503 at once, and the route serves again once they end.
func TestHostile_InboundRequestsBounded(t *testing.T) {
	t.Parallel()
	max := node.Defaults().MaxInbound
	// The held requests keep their bodies open for the whole test.
	e := newEnv(t, envOptions{mutate: func(c *node.Config) { c.MaxInbound, c.BodyTimeout = max, 10*time.Minute }})
	path := "/v1/targets/webhook/" + e.channel + "/messages"
	var held []net.Conn
	t.Cleanup(func() {
		for _, c := range held {
			c.Close()
		}
	})
	// Each holds a place: headers sent, the body never finishes.
	for len(held) < max {
		c, err := net.Dial("tcp", e.node.Addr)
		if err != nil {
			t.Fatal(err)
		}
		held = append(held, c)
		fmt.Fprintf(c, "POST %s HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\nContent-Length: 1000\r\n\r\n{", path)
	}
	// The held requests reach the handler asynchronously (slowly on a starved machine): wait until
	// the node counts them all in flight, then the next one must be refused.
	pollFor(t, time.Minute, "every held request in flight", func() bool {
		return testkit.GaugeValue(e.node.Metrics(), "ximd_inbound_requests_in_flight") == float64(max)
	})
	status, body, err := e.node.DoAuth(http.MethodPost, path, []byte(`{"target_message_id":"u1","text":"x"}`), "")
	if err != nil || status != http.StatusServiceUnavailable || jsonOf(t, body)["code"] != profile.CodeUnavailable {
		t.Fatalf("request %d: %d %s %v", max+1, status, body, err)
	}
	for _, c := range held {
		c.Close()
	}
	held = nil
	raw := []byte(`{"target_message_id":"u1","text":"x"}`)
	pollFor(t, wait, "inbound route serves again", func() bool {
		req, _ := http.NewRequest(http.MethodPost, "http://"+e.node.Addr+path, bytes.NewReader(raw))
		req.Header.Set(webhook.SignatureHeader, webhook.Sign([]byte(e.target.Secret), raw))
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			return false
		}
		resp.Body.Close()
		return resp.StatusCode == http.StatusAccepted
	})
}

// edge-api §2: every route the edge serves needs the bearer token (401 {"code":"unauthorized"}
// without it or with a wrong one), except /healthz, /readyz and /metrics (open), the target
// inbound route (its own signature) and signed file links.
func TestAuth_EveryRouteTable(t *testing.T) {
	t.Parallel()
	e := newEnv(t, envOptions{})
	ref := upload(t, e.node, e.channel, "a.txt", []byte("hello"))
	if err := e.node.OpenChannel("cch_deleted", e.target.Config("none", "none")); err != nil {
		t.Fatal(err)
	}
	ch := "/v1/channels/" + e.channel
	tests := []struct {
		name, method, path string
		body               []byte
		open               bool // served without a token
	}{
		{"healthz", "GET", "/healthz", nil, true},
		{"readyz", "GET", "/readyz", nil, true},
		{"metrics", "GET", "/metrics", nil, true},
		{"card", "GET", "/v1/card", nil, false},
		{"ws upgrade", "GET", "/v1/ws", nil, false},
		{"list channels", "GET", "/v1/channels", nil, false},
		{"get channel", "GET", ch, nil, false},
		{"put channel", "PUT", ch, []byte(`{}`), false},
		{"delete channel", "DELETE", "/v1/channels/cch_deleted", nil, false},
		{"delete unknown channel", "DELETE", "/v1/channels/nope", nil, false},
		{"webchat link", "GET", ch + "/webchat", nil, false},
		{"unknown /v1 route", "GET", "/v1/nothing", nil, false},
		{"POST on a GET route", "POST", "/v1/card", nil, false},
		{"other /v1/targets route", "GET", "/v1/targets/webhook/" + e.channel + "/messages", nil, false},
		{"other /v1/targets path", "POST", "/v1/targets/other", nil, false},
		{"upload", "POST", "/files/uploads", nil, false},
		{"GET uploads", "GET", "/files/uploads", nil, false},
		{"file", "GET", "/files/refs/" + ref, nil, false},
		{"file HEAD", "HEAD", "/files/refs/" + ref, nil, false},
		{"file DELETE", "DELETE", "/files/refs/" + ref, nil, false},
		{"file with a bad link", "GET", "/files/refs/" + ref + "?exp=9999999999&sig=" + strings.Repeat("0", 64), nil, false},
		{"unknown /files path", "GET", "/files/other", nil, false},
	}
	for _, tt := range tests {
		for _, auth := range []string{"", "Bearer wrong-" + e.node.Token, "Bearer " + e.node.Token + "x", "Bearer", "bearer  " + e.node.Token, "Basic " + e.node.Token, e.node.Token} {
			status, body, err := e.node.DoAuth(tt.method, tt.path, tt.body, auth)
			if err != nil {
				t.Fatal(err)
			}
			if tt.open {
				if status != 200 {
					t.Errorf("%s: %d without token", tt.name, status)
				}
				continue
			}
			if status != 401 || (tt.method != "HEAD" && jsonOf(t, body)["code"] != profile.CodeUnauthorized) {
				t.Errorf("%s %s %s with auth %q: %d %s", tt.name, tt.method, tt.path, auth, status, body)
			}
		}
		// With the token, the route is served (not 401).
		if status, body, _ := e.node.Do(tt.method, tt.path, tt.body); status == 401 {
			t.Errorf("%s with the token: %d %s", tt.name, status, body)
		}
	}
	// The inbound route: no token needed, its signature is.
	raw := []byte(`{"target_message_id":"u1","text":"x"}`)
	path := "/v1/targets/webhook/" + e.channel + "/messages"
	for _, sig := range []string{"", "sha256=" + strings.Repeat("0", 64), webhook.Sign([]byte("wrong"), raw), webhook.Sign([]byte(e.target.Secret), raw[1:])} {
		req, _ := http.NewRequest(http.MethodPost, "http://"+e.node.Addr+path, bytes.NewReader(raw))
		req.Header.Set("Authorization", "Bearer "+e.node.Token) // the token is no substitute
		if sig != "" {
			req.Header.Set(webhook.SignatureHeader, sig)
		}
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		b, _ := io.ReadAll(resp.Body)
		resp.Body.Close()
		if resp.StatusCode != 401 || jsonOf(t, b)["code"] != profile.CodeUnauthorized {
			t.Fatalf("inbound with signature %q: %d %s", sig, resp.StatusCode, b)
		}
	}
	req, _ := http.NewRequest(http.MethodPost, "http://"+e.node.Addr+path, bytes.NewReader(raw))
	req.Header.Set(webhook.SignatureHeader, webhook.Sign([]byte(e.target.Secret), raw))
	if resp, err := http.DefaultClient.Do(req); err != nil || resp.StatusCode != http.StatusAccepted {
		t.Fatalf("signed inbound: %v %v", resp, err)
	}
	// The WebSocket upgrade with a wrong token never becomes a connection.
	ctx, cancel := context.WithTimeout(context.Background(), wait)
	defer cancel()
	if _, resp, err := websocket.Dial(ctx, "ws://"+e.node.Addr+"/v1/ws", &websocket.DialOptions{Subprotocols: []string{edge.Subprotocol},
		HTTPHeader: http.Header{"Authorization": {"Bearer wrong"}}}); err == nil || resp == nil || resp.StatusCode != 401 {
		t.Fatalf("upgrade with a wrong token: %v %v", resp, err)
	}
}

// edge-api §6: a signed link works until its exp, then is refused; a tampered sig, exp or ref is
// refused; the bearer token still reads the file.
func TestFiles_SignedLinkExpiresAndTamperedRefused(t *testing.T) {
	t.Parallel()
	e := newEnv(t, envOptions{mutate: func(c *node.Config) { c.FileLinkTTL = time.Second }})
	ref := upload(t, e.node, e.channel, "a.txt", []byte("hello"))
	other := upload(t, e.node, e.channel, "b.txt", []byte("other"))
	_, ack := e.final(map[string]any{"message_id": "m_link", "text": "x", "files": []any{map[string]any{"type": "file", "file_ref": ref}}})
	wantAck(t, ack, profile.AckAccepted, "")
	f := e.target.MessageCalls()[0].Body["files"].([]any)[0].(map[string]any)
	u, err := url.Parse(f["url"].(string))
	if err != nil {
		t.Fatal(err)
	}
	path, q := u.Path, u.Query()
	get := func(p string, query url.Values) (int, string) {
		status, body, err := e.node.DoAuth(http.MethodGet, p+"?"+query.Encode(), nil, "")
		if err != nil {
			t.Fatal(err)
		}
		return status, string(body)
	}
	if status, body := get(path, q); status != 200 || body != "hello" {
		t.Fatalf("fresh link: %d %s", status, body)
	}
	with := func(k, v string) url.Values {
		c := url.Values{}
		for key, vs := range q {
			c[key] = vs
		}
		c.Set(k, v)
		return c
	}
	sig := q.Get("sig")
	flipped := []byte(sig)
	flipped[10] ^= 1 // still hex, another MAC
	for _, tc := range []struct {
		name  string
		path  string
		query url.Values
	}{
		{"tampered sig", path, with("sig", string(flipped))},
		{"upper-case sig", path, with("sig", strings.ToUpper(sig))},
		{"short sig", path, with("sig", sig[:62])},
		{"later exp", path, with("exp", fmt.Sprint(time.Now().Add(time.Hour).Unix()))},
		{"no exp", path, url.Values{"sig": {sig}}},
		{"another file", "/files/refs/" + other, q},
	} {
		status, body := get(tc.path, tc.query)
		if tc.name == "upper-case sig" && status == 200 {
			continue // hex of either case is the same MAC
		}
		if status != 401 || !strings.Contains(body, `"unauthorized"`) {
			t.Fatalf("%s: %d %s", tc.name, status, body)
		}
	}
	pollFor(t, 5*time.Second, "link expired", func() bool {
		status, _ := get(path, q)
		return status == 401
	})
	if status, body := get(path, q); !strings.Contains(body, `"unauthorized"`) {
		t.Fatalf("expired link: %d %s", status, body)
	}
	if status, body, _ := e.node.Do(http.MethodGet, path, nil); status != 200 || string(body) != "hello" {
		t.Fatalf("with the token: %d %s", status, body)
	}
}

// edge-api §2, STYLE 7: no secret is ever logged or echoed. A node at debug level is driven through
// every path that handles the token, a webhook secret, signatures and signed links (good and
// bad); then all its log output and its channel representations are searched for each secret.
func TestSecrets_NeverInLogsOrResponses(t *testing.T) {
	t.Parallel()
	var logs testkit.SyncBuffer
	logger := newJSONLogger(&logs)
	tg, err := testkit.NewTarget("s3cr3t-"+testkit.NewID("hook"), testkit.TargetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(tg.Close)
	n, err := testkit.StartNode(testkit.NodeOptions{DataDir: t.TempDir(), Logger: logger, Mutate: func(c *node.Config) {
		c.LogLevel = "debug"
		c.TargetRetryBudget = 300 * time.Millisecond
	}})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = n.Stop() })
	const channel = "cch_secrets"
	if err := n.OpenChannel(channel, tg.Config("edit", "status")); err != nil {
		t.Fatal(err)
	}
	secrets := map[string]string{"token": n.Token, "webhook secret": tg.Secret}
	// The file-link signing key, in every encoding a log line might use.
	key := signingKey(t, n.NATSURL(), n.NATSOptions()...)
	secrets["signing key (hex)"] = hex.EncodeToString(key)
	secrets["signing key (base64)"] = base64.StdEncoding.EncodeToString(key)
	secrets["signing key (raw)"] = string(key)

	// Drive it: WebSocket with good and bad tokens, a streamed message with a file, activity,
	// a failing target, user input with good and bad signatures, signed links good and bad.
	ctx, cancel := context.WithTimeout(context.Background(), wait)
	defer cancel()
	a, err := testkit.Dial(ctx, n.Addr, n.Token)
	if err != nil {
		t.Fatal(err)
	}
	defer a.Close()
	_, _ = testkit.Dial(ctx, n.Addr, n.Token+"-wrong")
	_, _, _ = n.DoAuth(http.MethodGet, "/v1/card", nil, "Bearer "+n.Token+"-wrong")
	ref := upload(t, n, channel, "f.txt", []byte("file bytes"))
	_, _ = a.Send(ctx, channel, profile.TypeActivity, map[string]any{"status": "tool", "tool_name": "search"})
	_, _ = a.Send(ctx, channel, profile.TypeDelta, delta("m1", 1, "hello "))
	pid, _ := a.Send(ctx, channel, profile.TypeMessage, map[string]any{"message_id": "m1", "text": "hello world",
		"files": []any{map[string]any{"type": "file", "file_ref": ref}}})
	if env, err := a.Reply(pid, wait); err != nil || env.Type != profile.TypeAck {
		t.Fatalf("final: %+v %v", env, err)
	}
	tg.SetAnswer(func(testkit.Call) int { return http.StatusUnauthorized })
	pid, _ = a.Send(ctx, channel, profile.TypeMessage, msg("m2", "refused"))
	_, _ = a.Reply(pid, wait)
	tg.SetAnswer(nil)
	var sigs []string
	for _, c := range tg.Calls() {
		for _, f := range asSlice(c.Body["files"]) {
			u, err := url.Parse(f.(map[string]any)["url"].(string))
			if err != nil {
				t.Fatal(err)
			}
			sigs = append(sigs, u.Query().Get("sig"))
			_, _, _ = n.DoAuth(http.MethodGet, u.Path+"?"+u.RawQuery, nil, "")
			_, _, _ = n.DoAuth(http.MethodGet, u.Path+"?exp=1&sig="+u.Query().Get("sig"), nil, "")
		}
		sigs = append(sigs, webhook.Sign([]byte(tg.Secret), c.Raw)) // X-Xim-Signature of each call
	}
	if len(sigs) < 3 {
		t.Fatalf("too few signatures exercised: %d", len(sigs))
	}
	raw := []byte(`{"target_message_id":"u-1","text":"from the user"}`)
	for _, sig := range []string{webhook.Sign([]byte(tg.Secret), raw), webhook.Sign([]byte("wrong"), raw)} {
		req, _ := http.NewRequest(http.MethodPost, "http://"+n.Addr+"/v1/targets/webhook/"+channel+"/messages", bytes.NewReader(raw))
		req.Header.Set(webhook.SignatureHeader, sig)
		if resp, err := http.DefaultClient.Do(req); err == nil {
			resp.Body.Close()
		}
		sigs = append(sigs, sig)
	}
	// Responses: the channel's representations and an invalid PUT never echo the secret.
	var bodies []string
	_, b, _ := n.Do(http.MethodGet, "/v1/channels/"+channel, nil)
	bodies = append(bodies, string(b), string(listing(t, n)))
	badCfg := tg.Config("edit", "bogus")
	_, b, _ = n.Do(http.MethodPut, "/v1/channels/cch_bad", map[string]any{"connection": map[string]any{"target_type": "im", "profiles": []string{profile.IM}},
		"target": map[string]any{"adapter": "webhook", "config": badCfg}})
	bodies = append(bodies, string(b))
	status, b, _ := n.Do(http.MethodPut, "/v1/channels/"+channel, map[string]any{"connection": map[string]any{"target_type": "im", "profiles": []string{profile.IM}},
		"target": map[string]any{"adapter": "webhook", "config": tg.Config("edit", "status")}})
	if status != 200 {
		t.Fatalf("re-PUT: %d %s", status, b)
	}
	bodies = append(bodies, string(b))
	if err := n.Stop(); err != nil {
		t.Fatal(err)
	}

	out := logs.String()
	if !strings.Contains(out, `"level":"DEBUG"`) || !strings.Contains(out, "agent_connected") {
		t.Fatalf("the logs were not captured at debug level:\n%.2000s", out)
	}
	for name, s := range secrets {
		if strings.Contains(out, s) {
			t.Errorf("the %s is in the logs", name)
		}
		for _, body := range bodies {
			if strings.Contains(body, s) {
				t.Errorf("the %s is in a response: %s", name, body)
			}
		}
	}
	for _, sig := range sigs {
		if strings.Contains(out, strings.TrimPrefix(sig, "sha256=")) {
			t.Errorf("signature %s is in the logs", sig)
		}
	}
	t.Logf("%d bytes of logs, %d lines, searched for %d secrets and %d signatures", len(out), strings.Count(out, "\n"), len(secrets), len(sigs))
}

func asSlice(v any) []any { s, _ := v.([]any); return s }

// newJSONLogger logs everything at debug level as JSON into w, the format a production node
// writes off a terminal.
func newJSONLogger(w io.Writer) *slog.Logger {
	return slog.New(slog.NewJSONHandler(w, &slog.HandlerOptions{Level: slog.LevelDebug}))
}

// A client that sends a request body slowly, or stops in the middle, has its connection cut at
// XIM_BODY_TIMEOUT; the node keeps serving everyone else meanwhile.
func TestHostile_SlowBodyIsCutAtTheDeadline(t *testing.T) {
	t.Parallel()
	e := newEnv(t, envOptions{mutate: func(c *node.Config) { c.BodyTimeout = time.Second }})
	conn, err := net.Dial("tcp", e.node.Addr)
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	start := time.Now()
	fmt.Fprintf(conn, "POST /v1/targets/webhook/%s/messages HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\nContent-Length: 1000\r\n\r\n{\"target_message_id\":", e.channel)
	// A normal request is served while the slow one holds its connection.
	if status, _ := e.postUser(e.target.Secret, map[string]any{"target_message_id": "t-ok", "text": "not held up"}); status != http.StatusAccepted {
		t.Fatalf("a normal post during the slow one: %d", status)
	}
	_ = conn.SetReadDeadline(time.Now().Add(10 * time.Second))
	_, err = io.ReadAll(conn) // whatever the server answers, it must end the connection
	if err != nil {
		t.Fatalf("the slow body's connection was not cut within 10s: %v", err)
	}
	if took := time.Since(start); took < 900*time.Millisecond || took > 5*time.Second {
		t.Fatalf("cut after %s, want about XIM_BODY_TIMEOUT (1s)", took)
	}
}
