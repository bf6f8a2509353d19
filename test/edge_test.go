package test

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"mime/multipart"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/coder/websocket"

	"github.com/ximd/ximd/internal/testkit"
	"github.com/ximd/ximd/pipeline/natstest"
	"github.com/ximd/ximd/pipeline/node"
	"github.com/ximd/ximd/profile"
)

// edge-api §1: /healthz, /readyz and /metrics need no token; /readyz is 200 once provisioned.
func TestEdge_HealthReadyMetricsWithoutToken(t *testing.T) {
	t.Parallel()
	e := newEnv(t, envOptions{})
	for _, path := range []string{"/healthz", "/readyz", "/metrics"} {
		status, body, err := e.node.DoAuth(http.MethodGet, path, nil, "")
		if err != nil || status != 200 {
			t.Fatalf("%s: %d %s %v", path, status, body, err)
		}
	}
	_, ack := e.final(msg("m_metric", "x"))
	wantAck(t, ack, profile.AckAccepted, "")
	for _, line := range []string{`ximd_inbound_age_seconds_count 1`, `ximd_acks_sent_total{code="",status="accepted"} 1`,
		`ximd_gateway_packets_stored_total 1`, `ximd_target_call_seconds_count{adapter="webhook",op="send",outcome="ok"} 1`} {
		if !metric(t, e.node, line) {
			t.Fatalf("metrics lack %q", line)
		}
	}
}

// edge-api §2: every /v1 and /files route, the WebSocket upgrade included, needs the bearer token.
func TestEdge_EveryRouteNeedsToken(t *testing.T) {
	t.Parallel()
	e := newEnv(t, envOptions{})
	for _, r := range []struct{ method, path string }{
		{"GET", "/v1/card"}, {"GET", "/v1/channels"}, {"GET", "/v1/channels/" + e.channel},
		{"PUT", "/v1/channels/x"}, {"DELETE", "/v1/channels/" + e.channel}, {"GET", "/v1/ws"},
		{"POST", "/files/uploads"}, {"GET", "/files/refs/file_0"},
	} {
		for _, auth := range []string{"", "Bearer wrong", "Basic " + e.node.Token} {
			status, body, err := e.node.DoAuth(r.method, r.path, nil, auth)
			if err != nil || status != 401 || jsonOf(t, body)["code"] != "unauthorized" {
				t.Fatalf("%s %s auth %q: %d %s", r.method, r.path, auth, status, body)
			}
		}
	}
	ctx, cancel := context.WithTimeout(context.Background(), wait)
	defer cancel()
	if _, err := testkit.Dial(ctx, e.node.Addr, "wrong"); err == nil {
		t.Fatal("WebSocket upgrade with a wrong token succeeded")
	}
}

// edge-api §3: the Card declares im + xagent.im.v2 and the three tools with input schemas.
func TestEdge_CardDeclaresProfileAndTools(t *testing.T) {
	t.Parallel()
	e := newEnv(t, envOptions{})
	status, body, err := e.node.Do(http.MethodGet, "/v1/card", nil)
	if err != nil || status != 200 {
		t.Fatalf("%d %v", status, err)
	}
	var card struct {
		Schema   string `json:"schema"`
		Supports struct {
			TargetTypes []string `json:"target_types"`
			Profiles    []string `json:"profiles"`
		} `json:"supports"`
		Tools []struct {
			Name, Profile string
			InputSchema   map[string]any `json:"input_schema"`
		} `json:"tools"`
	}
	if err := json.Unmarshal(body, &card); err != nil {
		t.Fatal(err)
	}
	if card.Schema != "xagent.connector.card/v1" || fmt.Sprint(card.Supports.TargetTypes) != "[im]" || fmt.Sprint(card.Supports.Profiles) != "[xagent.im.v2]" || len(card.Tools) != 3 {
		t.Fatalf("card %s", body)
	}
	for _, tool := range card.Tools {
		if tool.Profile != profile.IM || tool.InputSchema["type"] != "object" {
			t.Fatalf("tool %+v", tool)
		}
	}
}

// edge-api §4: PUT opens (idempotently) without echoing secrets; descriptor errors have codes.
func TestChannels_PutGetDeleteAndErrors(t *testing.T) {
	t.Parallel()
	e := newEnv(t, envOptions{})
	put := func(id string, body any) (int, map[string]any) {
		status, b, err := e.node.Do(http.MethodPut, "/v1/channels/"+id, body)
		if err != nil {
			t.Fatal(err)
		}
		return status, jsonOf(t, b)
	}
	good := map[string]any{"connection": map[string]any{"target_type": "im", "profiles": []string{"xagent.im.v2"}},
		"target": map[string]any{"adapter": "webhook", "config": e.target.Config("edit", "status")}}
	for i := 0; i < 2; i++ {
		status, v := put("cch_api", good)
		if status != 200 || v["status"] != "open" || v["connector_channel_id"] != "cch_api" {
			t.Fatalf("PUT %d: %d %v", i, status, v)
		}
		if raw, _ := json.Marshal(v); bytes.Contains(raw, []byte(e.target.Secret)) {
			t.Fatalf("secret echoed: %s", raw)
		}
		caps := v["target"].(map[string]any)["capabilities"].(map[string]any)
		if caps["streaming"] != "edit" || caps["activity"] != "status" {
			t.Fatalf("capabilities %v", caps)
		}
	}
	tests := []struct {
		name, id, code string
		status         int
		body           any
	}{
		{"bad id", "a.b", profile.CodeInvalidChannelID, 400, good},
		{"profile", "c1", profile.CodeProfileNotSupported, 422, map[string]any{"connection": map[string]any{"target_type": "im", "profiles": []string{"xagent.browser-runtime.v1"}}, "target": good["target"]}},
		{"target type", "c1", profile.CodeTargetTypeNotSupported, 422, map[string]any{"connection": map[string]any{"target_type": "browser", "profiles": []string{"xagent.im.v2"}}, "target": good["target"]}},
		{"adapter", "c1", profile.CodeUnknownAdapter, 422, map[string]any{"connection": good["connection"], "target": map[string]any{"adapter": "carrier-pigeon"}}},
		{"config", "c1", profile.CodeInvalidDescriptor, 400, map[string]any{"connection": good["connection"], "target": map[string]any{"adapter": "webhook", "config": map[string]any{"url": "ftp://x"}}}},
		{"malformed", "c1", profile.CodeInvalidDescriptor, 400, []byte(`{"connection":`)},
		{"no target_type", "c1", profile.CodeInvalidDescriptor, 400, map[string]any{"connection": map[string]any{"profiles": []string{"xagent.im.v2"}}, "target": good["target"]}},
		{"no adapter", "c1", profile.CodeInvalidDescriptor, 400, map[string]any{"connection": good["connection"], "target": map[string]any{"config": map[string]any{}}}},
	}
	for _, tt := range tests {
		status, v := put(tt.id, tt.body)
		if status != tt.status || v["code"] != tt.code {
			t.Fatalf("%s: %d %v, want %d %s", tt.name, status, v, tt.status, tt.code)
		}
	}
	status, b, _ := e.node.Do(http.MethodGet, "/v1/channels/cch_api", nil)
	v := jsonOf(t, b)
	if status != 200 || v["stats"] == nil || v["failures"] == nil {
		t.Fatalf("GET: %d %s", status, b)
	}
	if b := listing(t, e.node); !bytes.Contains(b, []byte(`"cch_api"`)) || bytes.Contains(b, []byte(e.target.Secret)) {
		t.Fatalf("list: %s", b)
	}
	if status, _, _ := e.node.Do(http.MethodDelete, "/v1/channels/cch_api", nil); status != 204 {
		t.Fatalf("DELETE: %d", status)
	}
	if status, b, _ := e.node.Do(http.MethodGet, "/v1/channels/cch_api", nil); status != 404 || jsonOf(t, b)["code"] != profile.CodeChannelNotOpen {
		t.Fatalf("GET after delete: %d %s", status, b)
	}
	// A channel id in a URL that cannot be one is 400 invalid_channel_id on every route.
	for _, r := range []struct{ method, path string }{
		{http.MethodGet, "/v1/channels/a%20b"}, {http.MethodDelete, "/v1/channels/a%20b"},
		{http.MethodGet, "/v1/channels/" + strings.Repeat("x", 129)},
	} {
		if status, b, _ := e.node.Do(r.method, r.path, nil); status != 400 || jsonOf(t, b)["code"] != profile.CodeInvalidChannelID {
			t.Fatalf("%s %s: %d %s, want 400 invalid_channel_id", r.method, r.path, status, b)
		}
	}
	resp, err := http.Post("http://"+e.node.Addr+"/v1/targets/webhook/a%20b/messages", "application/json", strings.NewReader(`{}`))
	if err != nil {
		t.Fatal(err)
	}
	b, _ = io.ReadAll(resp.Body)
	resp.Body.Close()
	if resp.StatusCode != 400 || jsonOf(t, b)["code"] != profile.CodeInvalidChannelID {
		t.Fatalf("inbound route with a bad id: %d %s, want 400 invalid_channel_id", resp.StatusCode, b)
	}
}

// edge-api §4: channels survive restarts; GET reports completed_ids and open_delta_buffers.
func TestChannels_SurviveRestartAndReportStats(t *testing.T) {
	t.Parallel()
	e := newEnv(t, envOptions{})
	_, ack := e.final(msg("m_s1", "x"))
	wantAck(t, ack, profile.AckAccepted, "")
	e.send(profile.TypeDelta, delta("m_open", 1, "y"))
	e.waitCalls("delta shown", func(c []testkit.Call) bool { return len(c) == 2 })
	_, b, _ := e.node.Do(http.MethodGet, "/v1/channels/"+e.channel, nil)
	st := jsonOf(t, b)["stats"].(map[string]any)
	// completed_ids counts the channel's message records: m_s1 (done) and m_open (streamed).
	if st["completed_ids"] != 2.0 || st["open_delta_buffers"] != 1.0 || st["pending_outbound"] != 0.0 {
		t.Fatalf("stats %v", st)
	}
	e.restart()
	_, ack = e.final(msg("m_s2", "after restart"))
	wantAck(t, ack, profile.AckAccepted, "")
}

// edge-api §4: DELETE closes the channel for good; later packets get channel_not_open and its
// completed IDs are purged.
func TestChannels_DeletePurgesAndLaterPacketsNotOpen(t *testing.T) {
	t.Parallel()
	e := newEnv(t, envOptions{})
	_, ack := e.final(msg("m_d", "x"))
	wantAck(t, ack, profile.AckAccepted, "")
	if status, _, _ := e.node.Do(http.MethodDelete, "/v1/channels/"+e.channel, nil); status != 204 {
		t.Fatalf("DELETE %d", status)
	}
	for _, typ := range []string{profile.TypeMessage, profile.TypeDelta, profile.TypeActivity} {
		var payload any = msg("m_d", "x")
		if typ == profile.TypeDelta {
			payload = delta("m_x", 1, "x")
		} else if typ == profile.TypeActivity {
			payload = map[string]any{"status": "thinking"}
		}
		pid := e.send(typ, payload)
		if p := e.errorOf(pid); p.Code != profile.CodeChannelNotOpen {
			t.Fatalf("%s: %+v", typ, p)
		}
	}
	// Re-opened, the channel starts empty: the old message_id is new again.
	if err := e.node.OpenChannel(e.channel, e.target.Config("edit", "typing")); err != nil {
		t.Fatal(err)
	}
	_, ack = e.final(msg("m_d", "x"))
	wantAck(t, ack, profile.AckAccepted, "")
}

// edge-api §5 step 1: garbage frames get error invalid_packet, with reply_to when a packet_id
// could be read, and the connection keeps working.
func TestWS_GarbageFramesAnsweredConnectionKeepsWorking(t *testing.T) {
	t.Parallel()
	e := newEnv(t, envOptions{})
	ctx := context.Background()
	for _, frame := range []string{`not json`, `{}`, `{"packet_id":"p1"}`, `[1,2]`, `{"packet_id":"p2","type":5}`} {
		if err := e.agent.SendRaw(ctx, []byte(frame)); err != nil {
			t.Fatal(err)
		}
		env, err := e.agent.Next(wait)
		if err != nil {
			t.Fatal(err)
		}
		p, err := testkit.ErrorOf(env)
		if err != nil || p.Code != profile.CodeInvalidPacket {
			t.Fatalf("%s: %+v %v", frame, env, err)
		}
		if strings.Contains(frame, `"p1"`) && env.ReplyTo != "p1" {
			t.Fatalf("reply_to %q", env.ReplyTo)
		}
	}
	if err := e.agent.SendBinary(ctx, []byte{0, 1, 2}); err != nil {
		t.Fatal(err)
	}
	if env, err := e.agent.Next(wait); err != nil || env.Type != profile.TypeError {
		t.Fatalf("binary frame: %+v %v", env, err)
	}
	_, ack := e.final(msg("m_after_garbage", "still works"))
	wantAck(t, ack, profile.AckAccepted, "")
}

// edge-api §5 step 1: another schema is unsupported_schema.
func TestWS_OtherSchemaIsUnsupported(t *testing.T) {
	t.Parallel()
	e := newEnv(t, envOptions{})
	b := []byte(`{"schema":"xagent.connector.packet/v2","packet_id":"p9","connector_channel_id":"` + e.channel + `","type":"chat.message","time":1,"payload":{"message_id":"m","text":"x"}}`)
	if err := e.agent.SendRaw(context.Background(), b); err != nil {
		t.Fatal(err)
	}
	if p := e.errorOf("p9"); p.Code != profile.CodeUnsupportedSchema {
		t.Fatalf("error %+v", p)
	}
}

// edge-api §5 step 2, P-SCOPE-3, P-ERR-1: types outside the catalog (session.sync_*, history,
// UI projections) are dropped silently and counted.
func TestWS_TypesOutsideCatalogDroppedSilentlyAndCounted(t *testing.T) {
	t.Parallel()
	e := newEnv(t, envOptions{})
	for _, typ := range []string{"session.sync_request", "session.sync_message", "session.sync_end", "history.snapshot", "ui.projection", "chat.message.delta.v9"} {
		e.send(typ, map[string]any{"x": 1})
	}
	e.sendTo("not_open_channel", "session.sync_request", map[string]any{})
	e.quiet(300 * time.Millisecond)
	if n := len(e.target.Calls()); n != 0 {
		t.Fatalf("target called: %s", dump(e.target.Calls()))
	}
	poll(t, "drop metric", func() bool { return metric(t, e.node, `ximd_packets_dropped_total{type="session.sync_*"} 4`) })
}

// edge-api §5 step 3, P-ERR-2: a packet of any type for a channel that is not open gets error
// channel_not_open with reply_to, and no ack.
func TestWS_ChannelNotOpenIsErrorForEveryType(t *testing.T) {
	t.Parallel()
	e := newEnv(t, envOptions{})
	for _, typ := range []string{profile.TypeMessage, profile.TypeDelta, profile.TypeActivity, profile.TypeAck} {
		pid := e.sendTo("cch_closed", typ, msg("m", "x"))
		env, err := e.agent.Reply(pid, wait)
		if err != nil {
			t.Fatal(err)
		}
		if p, err := testkit.ErrorOf(env); err != nil || p.Code != profile.CodeChannelNotOpen || env.ChannelID != "cch_closed" {
			t.Fatalf("%s: %+v %v", typ, env, err)
		}
	}
	pid := e.sendTo("bad.channel", profile.TypeMessage, msg("m", "x"))
	if p := e.errorOf(pid); p.Code != profile.CodeInvalidPacket {
		t.Fatalf("bad channel id: %+v", p)
	}
}

// edge-api §5: frames above XIM_MAX_PACKET_BYTES get packet_too_large; the connection and
// every other channel keep working.
func TestWS_OversizedFrameRefusedConnectionKeepsWorking(t *testing.T) {
	t.Parallel()
	e := newEnv(t, envOptions{})
	big, _ := testkit.Packet("p_big", e.channel, profile.TypeMessage, msg("m_big", strings.Repeat("x", 1<<20)))
	if err := e.agent.SendRaw(context.Background(), big); err != nil {
		t.Fatal(err)
	}
	env, err := e.agent.Next(wait)
	if err != nil {
		t.Fatal(err)
	}
	if p, err := testkit.ErrorOf(env); err != nil || p.Code != profile.CodePacketTooLarge {
		t.Fatalf("%+v %v", env, err)
	}
	_, ack := e.final(msg("m_small", "fine"))
	wantAck(t, ack, profile.AckAccepted, "")
}

// On a NATS server whose max_payload is NATS's default (1 MiB), a frame within
// XIM_MAX_PACKET_BYTES (1 MiB) that NATS would refuse with its headers is packet_too_large at the
// edge (for good: it was `unavailable`, retryable, and xAgent would send it forever); the
// connection keeps working.
func TestWS_PacketLimitFollowsTheNATSServersMaxPayload(t *testing.T) {
	t.Parallel()
	srv := natstest.Server(t)
	e := newEnv(t, envOptions{mutate: func(c *node.Config) { c.NATSURL = srv.ClientURL() }})
	big, _ := testkit.Packet("p_big", e.channel, profile.TypeMessage, msg("m_big", strings.Repeat("x", 1_048_380))) // a frame of 1 MiB less 5 bytes
	if err := e.agent.SendRaw(context.Background(), big); err != nil {
		t.Fatal(err)
	}
	env, err := e.agent.Next(wait)
	if err != nil {
		t.Fatal(err)
	}
	if p, err := testkit.ErrorOf(env); err != nil || p.Code != profile.CodePacketTooLarge || !strings.Contains(p.Message, "1032192") {
		t.Fatalf("%+v %v, want packet_too_large at 1 MiB less 16 KiB", env, err)
	}
	_, ack := e.final(msg("m_small", "fine"))
	wantAck(t, ack, profile.AckAccepted, "")
}

// edge-api §5: the subprotocol is negotiated; one connection carries every channel.
func TestWS_SubprotocolAndOneConnectionManyChannels(t *testing.T) {
	t.Parallel()
	e := newEnv(t, envOptions{})
	ctx, cancel := context.WithTimeout(context.Background(), wait)
	defer cancel()
	ws, resp, err := websocket.Dial(ctx, "ws://"+e.node.Addr+"/v1/ws", &websocket.DialOptions{
		Subprotocols: []string{"xagent.connector.packet.v1"}, HTTPHeader: http.Header{"Authorization": {"Bearer " + e.node.Token}}})
	if err != nil {
		t.Fatal(err)
	}
	defer ws.CloseNow()
	if resp.Header.Get("Sec-WebSocket-Protocol") != "xagent.connector.packet.v1" || ws.Subprotocol() != "xagent.connector.packet.v1" {
		t.Fatalf("subprotocol %q", ws.Subprotocol())
	}
	second := "cch_second"
	if err := e.node.OpenChannel(second, e.target.Config("none", "none")); err != nil {
		t.Fatal(err)
	}
	p1 := e.send(profile.TypeMessage, msg("m_a", "a"))
	p2 := e.sendTo(second, profile.TypeMessage, msg("m_b", "b"))
	if a := e.ackOf(p1); a.Status != profile.AckAccepted {
		t.Fatalf("%+v", a)
	}
	env, err := e.agent.Reply(p2, wait)
	if err != nil || env.ChannelID != second {
		t.Fatalf("%+v %v", env, err)
	}
}

// edge-api §6 + §7.1: a final with an uploaded file reaches the target with an absolute signed
// link under XIM_PUBLIC_URL that serves the same bytes without the token.
func TestFiles_FinalCarriesSignedLinkToUploadedBytes(t *testing.T) {
	t.Parallel()
	e := newEnv(t, envOptions{})
	data := bytes.Repeat([]byte("0123456789abcdef"), 4096)
	ref := upload(t, e.node, e.channel, "report.bin", data)
	_, ack := e.final(map[string]any{"message_id": "m_file", "text": "see file", "files": []any{map[string]any{"type": "file", "file_ref": ref, "filename": "report.bin"}}})
	wantAck(t, ack, profile.AckAccepted, "")
	c := e.target.MessageCalls()[0]
	files, _ := c.Body["files"].([]any)
	if len(files) != 1 {
		t.Fatalf("files %s", c.Raw)
	}
	f := files[0].(map[string]any)
	link, _ := f["url"].(string)
	if f["file_ref"] != ref || !strings.HasPrefix(link, "http://127.0.0.1/files/refs/"+ref+"?") || f["byte_size"] != float64(len(data)) {
		t.Fatalf("file %v", f)
	}
	path := strings.TrimPrefix(link, "http://127.0.0.1")
	status, got, err := e.node.DoAuth(http.MethodGet, path, nil, "")
	if err != nil || status != 200 || !bytes.Equal(got, data) {
		t.Fatalf("signed link: %d %v (%d bytes)", status, err, len(got))
	}
	if status, _, _ := e.node.DoAuth(http.MethodGet, path+"0", nil, ""); status == 200 {
		t.Fatal("tampered link served the file")
	}
}

func upload(t *testing.T, n *testkit.Node, channel, name string, data []byte) string {
	t.Helper()
	var body bytes.Buffer
	mw := multipart.NewWriter(&body)
	_ = mw.WriteField("connector_channel_id", channel)
	fw, _ := mw.CreateFormFile("file", name)
	_, _ = fw.Write(data)
	_ = mw.Close()
	req, _ := http.NewRequest(http.MethodPost, "http://"+n.Addr+"/files/uploads", &body)
	req.Header.Set("Content-Type", mw.FormDataContentType())
	req.Header.Set("Authorization", "Bearer "+n.Token)
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	if resp.StatusCode != 201 {
		t.Fatalf("upload: %d %s", resp.StatusCode, b)
	}
	ref, _ := jsonOf(t, b)["file_ref"].(string)
	return ref
}
