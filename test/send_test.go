package test

import (
	"bytes"
	"context"
	"crypto/rand"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/ximd/ximd/handlers/adapter/webhook"
	"github.com/ximd/ximd/internal/testkit"
	"github.com/ximd/ximd/pipeline/node"
	"github.com/ximd/ximd/profile"
	"github.com/ximd/ximd/subjects"
)

// fastAcks makes missing acks visible quickly.
func fastAcks(c *node.Config) {
	c.AckTimeout = 300 * time.Millisecond
	c.OutboundBackoff = 600 * time.Millisecond
}

// postUser posts a user message as the target would (edge-api §7.1 inbound), signed with secret.
func (e *env) postUser(secret string, body map[string]any) (int, map[string]any) {
	e.t.Helper()
	raw, _ := json.Marshal(body)
	return e.postUserSigned(raw, http.Header{webhook.SignatureHeader: {webhook.Sign([]byte(secret), raw)}})
}

// postUserSigned posts raw to the channel's inbound route with the given signature headers.
func (e *env) postUserSigned(raw []byte, sig http.Header) (int, map[string]any) {
	e.t.Helper()
	req, _ := http.NewRequest(http.MethodPost, "http://"+e.node.Addr+"/v1/targets/webhook/"+e.channel+"/messages", bytes.NewReader(raw))
	req.Header.Set("Content-Type", "application/json")
	for k, v := range sig {
		req.Header[k] = v
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		e.t.Fatal(err)
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	var m map[string]any
	_ = json.Unmarshal(b, &m)
	return resp.StatusCode, m
}

// userMessage waits for the next Connector -> xAgent chat.message on a.
func userMessage(t *testing.T, a *testkit.Agent, timeout time.Duration) (profile.Envelope, profile.Message) {
	t.Helper()
	deadline := time.Now().Add(timeout)
	for {
		env, err := a.Next(time.Until(deadline))
		if err != nil {
			t.Fatalf("no user message: %v", err)
		}
		if env.Type != profile.TypeMessage {
			continue
		}
		var m profile.Message
		if err := json.Unmarshal(env.Payload, &m); err != nil {
			t.Fatal(err)
		}
		return env, m
	}
}

func ackUser(t *testing.T, a *testkit.Agent, env profile.Envelope, ack map[string]any) {
	t.Helper()
	b, err := testkit.Packet(testkit.NewID("pkt"), env.ChannelID, profile.TypeAck, ack)
	if err != nil {
		t.Fatal(err)
	}
	var p profile.Envelope
	_ = json.Unmarshal(b, &p)
	p.ReplyTo = env.PacketID
	b, _ = json.Marshal(p)
	if err := a.SendRaw(context.Background(), b); err != nil {
		t.Fatal(err)
	}
}

// waitNoPending polls until the channel has no pending user message.
func (e *env) waitNoPending() {
	e.t.Helper()
	poll(e.t, "pending_outbound 0", func() bool { return e.pending() == 0 })
}

// failures returns the channel's failure list from GET /v1/channels/{id}.
func (e *env) failures() []any {
	e.t.Helper()
	_, b, _ := e.node.Do(http.MethodGet, "/v1/channels/"+e.channel, nil)
	fs, _ := jsonOf(e.t, b)["failures"].([]any)
	return fs
}

func (e *env) pending() float64 {
	_, b, _ := e.node.Do(http.MethodGet, "/v1/channels/"+e.channel, nil)
	st, _ := jsonOf(e.t, b)["stats"].(map[string]any)
	v, _ := st["pending_outbound"].(float64)
	return v
}

// edge-api §7.1 inbound, §5.4: a signed target message becomes a chat.message to xAgent (202
// with its message_id once durable); accepted removes it from the pending set, and it is not
// sent again.
func TestSend_TargetMessageDeliveredAndAckedOnce(t *testing.T) {
	t.Parallel()
	e := newEnv(t, envOptions{mutate: fastAcks})
	status, body := e.postUser(e.target.Secret, map[string]any{"target_message_id": "T1", "text": "hi agent"})
	if status != http.StatusAccepted || body["message_id"] == "" {
		t.Fatalf("post: %d %v", status, body)
	}
	env, m := userMessage(t, e.agent, wait)
	if m.MessageID != body["message_id"] || m.Text != "hi agent" || env.ChannelID != e.channel || env.ReplyTo != "" {
		t.Fatalf("chat.message %+v %+v", env, m)
	}
	for _, k := range []string{"session_id", "user_id", "role", "connector_id"} { // P-ID-2
		if bytes.Contains(env.Payload, []byte(k)) {
			t.Fatalf("payload carries %s: %s", k, env.Payload)
		}
	}
	ackUser(t, e.agent, env, map[string]any{"message_id": m.MessageID, "status": "accepted"})
	e.waitNoPending()
	e.agent.Drain()                  // a re-send already under way when the ack came is legitimate
	e.quiet(1500 * time.Millisecond) // several ack timeouts: never re-sent
}

// edge-api §7.1: the same target_message_id posted twice (platform redelivery) yields one
// message, before and after it was acked.
func TestSend_SameTargetMessagePostedTwiceIsOneMessage(t *testing.T) {
	t.Parallel()
	e := newEnv(t, envOptions{mutate: fastAcks})
	_, b1 := e.postUser(e.target.Secret, map[string]any{"target_message_id": "T2", "text": "once"})
	status, b2 := e.postUser(e.target.Secret, map[string]any{"target_message_id": "T2", "text": "once"})
	if status != http.StatusAccepted || b1["message_id"] != b2["message_id"] || b2["duplicate"] != true {
		t.Fatalf("second post: %d %v (first %v)", status, b2, b1)
	}
	env, m := userMessage(t, e.agent, wait)
	ackUser(t, e.agent, env, map[string]any{"message_id": m.MessageID, "status": "accepted"})
	e.waitNoPending()
	e.agent.Drain()
	e.postUser(e.target.Secret, map[string]any{"target_message_id": "T2", "text": "once"})
	e.quiet(1200 * time.Millisecond)
}

// edge-api §7.1: a bad signature is 401 and nothing is sent.
func TestSend_BadSignatureIs401AndNothingSent(t *testing.T) {
	t.Parallel()
	e := newEnv(t, envOptions{})
	for _, secret := range []string{"wrong", ""} {
		status, body := e.postUser(secret, map[string]any{"target_message_id": "T3", "text": "x"})
		if status != http.StatusUnauthorized || body["code"] != profile.CodeUnauthorized {
			t.Fatalf("secret %q: %d %v", secret, status, body)
		}
	}
	e.quiet(500 * time.Millisecond)
}

// P-ACK-3, P-STATE-2, edge-api §5.4: no ack within XIM_ACK_TIMEOUT -> sent again with the same
// message_id and a new packet_id.
func TestSend_MissingAckResentSameMessageIDNewPacketID(t *testing.T) {
	t.Parallel()
	e := newEnv(t, envOptions{mutate: fastAcks})
	e.postUser(e.target.Secret, map[string]any{"target_message_id": "T4", "text": "x"})
	env1, m1 := userMessage(t, e.agent, wait)
	env2, m2 := userMessage(t, e.agent, wait)
	if m1.MessageID != m2.MessageID || env1.PacketID == env2.PacketID {
		t.Fatalf("resend: %s/%s then %s/%s", m1.MessageID, env1.PacketID, m2.MessageID, env2.PacketID)
	}
	// An ack naming the first transmission still completes the message (identity is message_id).
	ackUser(t, e.agent, env1, map[string]any{"message_id": m1.MessageID, "status": "duplicate"})
	e.waitNoPending()
}

// P-ACK-5, P-STATE-3, edge-api §5.4: rejected retryable=false is terminal: never sent again, the
// failure visible in GET /v1/channels/{id} and a metric.
func TestSend_RejectedNotRetryableIsTerminalAndVisible(t *testing.T) {
	t.Parallel()
	e := newEnv(t, envOptions{mutate: fastAcks})
	e.postUser(e.target.Secret, map[string]any{"target_message_id": "T5", "text": "x"})
	env, m := userMessage(t, e.agent, wait)
	ackUser(t, e.agent, env, map[string]any{"message_id": m.MessageID, "status": "rejected", "code": "policy_refused", "message": "no", "retryable": false})
	e.waitNoPending()
	e.agent.Drain()
	e.quiet(1500 * time.Millisecond)
	fs := e.failures()
	if len(fs) != 1 || fs[0].(map[string]any)["message_id"] != m.MessageID || fs[0].(map[string]any)["code"] != "policy_refused" {
		t.Fatalf("failures %v", fs)
	}
	if e.pending() != 0 || !metric(t, e.node, `ximd_outbound_failures_total{code="policy_refused"} 1`) {
		t.Fatal("failure not counted or still pending")
	}
	// A late ack of the finished message changes nothing and is counted.
	ackUser(t, e.agent, env, map[string]any{"message_id": m.MessageID, "status": "accepted"})
	poll(t, "finished ack counted", func() bool {
		return metric(t, e.node, `ximd_outbound_acks_ignored_total{reason="finished"} 1`)
	})
}

// edge-api §5.4: a message still pending after XIM_OUTBOUND_MAX_AGE fails for good as expired,
// visibly, and is not sent again.
func TestSend_PendingPastMaxAgeExpiresVisibly(t *testing.T) {
	t.Parallel()
	e := newEnv(t, envOptions{mutate: func(c *node.Config) { fastAcks(c); c.Store.OutboundMaxAge = 2 * time.Second }})
	e.postUser(e.target.Secret, map[string]any{"target_message_id": "old", "text": "x"})
	userMessage(t, e.agent, wait)
	poll(t, "expired failure listed", func() bool {
		fs := e.failures()
		return len(fs) == 1 && fs[0].(map[string]any)["code"] == "expired"
	})
	if e.pending() != 0 {
		t.Fatal("expired message still pending")
	}
	for e.agent.Drain() > 0 { // sends from before the expiry
	}
	if env, ok := e.agent.Quiet(1500 * time.Millisecond); !ok {
		t.Fatalf("sent after it expired: %s %s", env.Type, env.Payload)
	}
	if !metric(t, e.node, `ximd_outbound_failures_total{code="expired"} 1`) {
		t.Fatal("expiry not counted")
	}
	if info, ok := profile.Lookup("expired"); !ok || info.Retryable {
		t.Fatalf("code expired is not in the error table (docs/errors.md): %+v %v", info, ok)
	}
}

// P-ACK-5: rejected retryable=true is sent again (same message_id) and can then be accepted.
func TestSend_RejectedRetryableIsResent(t *testing.T) {
	t.Parallel()
	e := newEnv(t, envOptions{mutate: fastAcks})
	e.postUser(e.target.Secret, map[string]any{"target_message_id": "T6", "text": "x"})
	env, m := userMessage(t, e.agent, wait)
	ackUser(t, e.agent, env, map[string]any{"message_id": m.MessageID, "status": "rejected", "code": "busy", "retryable": true})
	env2, m2 := userMessage(t, e.agent, wait)
	if m2.MessageID != m.MessageID || env2.PacketID == env.PacketID {
		t.Fatalf("resend %+v", env2)
	}
	ackUser(t, e.agent, env2, map[string]any{"message_id": m.MessageID, "status": "accepted"})
	e.waitNoPending()
}

// edge-api §5.4: an ack for an unknown or finished message is ignored (counted), never an error.
func TestSend_UnknownAckIgnoredAndCounted(t *testing.T) {
	t.Parallel()
	e := newEnv(t, envOptions{})
	e.send(profile.TypeAck, map[string]any{"message_id": "never_sent", "status": "accepted"})
	e.quiet(500 * time.Millisecond)
	poll(t, "ignored ack counted", func() bool { return metric(t, e.node, `ximd_outbound_acks_ignored_total{reason="unknown"} 1`) })
}

// edge-api §5: each outbound packet goes to exactly one live connection; acks are accepted from
// any connection.
func TestSend_OneConnectionGetsItAckFromAnother(t *testing.T) {
	t.Parallel()
	e := newEnv(t, envOptions{mutate: fastAcks})
	ctx, cancel := context.WithTimeout(context.Background(), wait)
	defer cancel()
	second, err := testkit.Dial(ctx, e.node.Addr, e.node.Token)
	if err != nil {
		t.Fatal(err)
	}
	defer second.Close()
	e.postUser(e.target.Secret, map[string]any{"target_message_id": "T7", "text": "x"})
	// Collect what each connection receives for a while (re-sends included): every transmission
	// (packet_id) reaches exactly one connection.
	type got struct {
		conn int
		env  profile.Envelope
	}
	ch := make(chan got, 64)
	for i, a := range []*testkit.Agent{e.agent, second} {
		go func(i int, a *testkit.Agent) {
			for deadline := time.Now().Add(time.Second); time.Now().Before(deadline); {
				env, err := a.Next(time.Until(deadline))
				if err != nil {
					break
				}
				ch <- got{i, env}
			}
			ch <- got{conn: -1}
		}(i, a)
	}
	seen := map[string]int{}
	var last profile.Envelope
	for done := 0; done < 2; {
		g := <-ch
		if g.conn < 0 {
			done++
			continue
		}
		if g.env.Type != profile.TypeMessage {
			continue
		}
		if c, ok := seen[g.env.PacketID]; ok && c != g.conn {
			t.Fatalf("packet %s reached two connections", g.env.PacketID)
		}
		seen[g.env.PacketID], last = g.conn, g.env
	}
	if len(seen) == 0 {
		t.Fatal("the message reached no connection")
	}
	var m profile.Message
	_ = json.Unmarshal(last.Payload, &m)
	ackUser(t, second, last, map[string]any{"message_id": m.MessageID, "status": "accepted"}) // from either connection
	e.waitNoPending()
}

// P-SCOPE-4, edge-api §5.4: with no live connection a message waits; after a reconnect only
// pending messages are sent, never completed ones.
func TestSend_ReconnectSendsOnlyPending(t *testing.T) {
	t.Parallel()
	e := newEnv(t, envOptions{mutate: fastAcks})
	e.postUser(e.target.Secret, map[string]any{"target_message_id": "done", "text": "first"})
	env, m := userMessage(t, e.agent, wait)
	ackUser(t, e.agent, env, map[string]any{"message_id": m.MessageID, "status": "accepted"})
	poll(t, "first acked", func() bool { return e.pending() == 0 })
	e.agent.Close()
	e.postUser(e.target.Secret, map[string]any{"target_message_id": "open", "text": "second"})
	poll(t, "second pending", func() bool { return e.pending() == 1 })
	e.connect()
	env2, m2 := userMessage(t, e.agent, 40*time.Second)
	if m2.Text != "second" {
		t.Fatalf("after reconnect got %q", m2.Text)
	}
	ackUser(t, e.agent, env2, map[string]any{"message_id": m2.MessageID, "status": "accepted"})
	poll(t, "second acked", func() bool { return e.pending() == 0 })
	for deadline := time.Now().Add(1500 * time.Millisecond); time.Now().Before(deadline); {
		env, err := e.agent.Next(time.Until(deadline))
		if err != nil {
			break
		}
		var x profile.Message
		_ = json.Unmarshal(env.Payload, &x)
		if x.Text == "first" {
			t.Fatal("a completed message was sent again after the reconnect")
		}
	}
}

// P-STATE-1, edge-api §5.4: the pending set survives a restart of ximd.
func TestSend_PendingMessageSentAgainAfterRestart(t *testing.T) {
	t.Parallel()
	e := newEnv(t, envOptions{mutate: fastAcks})
	e.postUser(e.target.Secret, map[string]any{"target_message_id": "T8", "text": "survive"})
	_, m := userMessage(t, e.agent, wait)
	e.restart()
	env, m2 := userMessage(t, e.agent, 45*time.Second)
	if m2.MessageID != m.MessageID || m2.Text != "survive" {
		t.Fatalf("after restart %+v", m2)
	}
	ackUser(t, e.agent, env, map[string]any{"message_id": m.MessageID, "status": "accepted"})
	e.waitNoPending()
}

// allowFileHost re-opens the env's channel with host in its webhook config's file_hosts.
func allowFileHost(t *testing.T, e *env, host string) {
	t.Helper()
	cfg := e.target.Config("edit", "typing")
	cfg["file_hosts"] = []string{host}
	if err := e.node.OpenChannel(e.channel, cfg); err != nil {
		t.Fatal(err)
	}
}

// edge-api §7.1 inbound, P-MSG-6/8: a file served by the target arrives byte-identical via the
// chat.message's relative download_url; the target's URL never reaches xAgent.
func TestSend_TargetFileArrivesByteIdenticalViaDownloadURL(t *testing.T) {
	t.Parallel()
	e := newEnv(t, envOptions{mutate: fastAcks})
	data := make([]byte, 300<<10)
	_, _ = rand.Read(data)
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Content-Type", "image/png")
		_, _ = w.Write(data)
	}))
	defer srv.Close()
	allowFileHost(t, e, strings.TrimPrefix(srv.URL, "http://"))
	fileURL := srv.URL + "/media/cat.png?token=CDN-SECRET"
	status, body := e.postUser(e.target.Secret, map[string]any{"target_message_id": "T9", "text": "look",
		"files": []any{map[string]any{"type": "image", "url": fileURL, "filename": "cat.png"}}})
	if status != http.StatusAccepted {
		t.Fatalf("post: %d %v", status, body)
	}
	env, m := userMessage(t, e.agent, wait)
	if len(m.Files) != 1 || !strings.HasPrefix(m.Files[0].DownloadURL, "/files/refs/") || m.Files[0].ByteSize != int64(len(data)) || m.Files[0].Filename != "cat.png" {
		t.Fatalf("files %+v", m.Files)
	}
	if bytes.Contains(env.Payload, []byte("CDN-SECRET")) || bytes.Contains(env.Payload, []byte(srv.URL)) {
		t.Fatalf("target URL leaked into the packet: %s", env.Payload)
	}
	status2, got, err := e.node.Do(http.MethodGet, m.Files[0].DownloadURL, nil)
	if err != nil || status2 != 200 || !bytes.Equal(got, data) {
		t.Fatalf("download: %d %v (%d bytes)", status2, err, len(got))
	}
}

// edge-api §7.1 inbound: a file from a host that is not allowed, or over the cap, is 422
// file_download_failed and nothing is sent.
func TestSend_DisallowedHostOrOversizedFileIs422NothingSent(t *testing.T) {
	t.Parallel()
	e := newEnv(t, envOptions{mutate: func(c *node.Config) { fastAcks(c); c.MaxFileBytes = 64 << 10 }})
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		_, _ = w.Write(make([]byte, 128<<10))
	}))
	defer srv.Close()
	host := strings.TrimPrefix(srv.URL, "http://")
	allowFileHost(t, e, host)
	port := host[strings.LastIndex(host, ":")+1:]
	for i, u := range []string{"http://localhost:" + port + "/f", srv.URL + "/big", "file:///etc/passwd", "ftp://" + host + "/x"} {
		status, body := e.postUser(e.target.Secret, map[string]any{"target_message_id": fmt.Sprintf("F%d", i), "text": "x",
			"files": []any{map[string]any{"type": "file", "url": u}}})
		if status != http.StatusUnprocessableEntity || body["code"] != profile.CodeFileDownloadFailed {
			t.Fatalf("%s: %d %v", u, status, body)
		}
	}
	e.quiet(700 * time.Millisecond)
	if e.pending() != 0 {
		t.Fatal("a message is pending")
	}
}

// edge-api §7.1: user input signed with V2 is accepted within 5 minutes of ximd's clock; the same
// body and signature replayed later is refused 401, and a channel configured "signature": "v2"
// refuses V1 alone, so an old body cannot be replayed there at all.
func TestSend_ReplayedSignatureRefused(t *testing.T) {
	t.Parallel()
	e := newEnv(t, envOptions{})
	raw, _ := json.Marshal(map[string]any{"target_message_id": "t-v2", "text": "signed with a time"})
	v2 := func(at time.Time) http.Header {
		ts, sig := webhook.SignV2([]byte(e.target.Secret), raw, at)
		return http.Header{webhook.TimestampHeader: {ts}, webhook.SignatureV2Header: {sig}}
	}
	if status, body := e.postUserSigned(raw, v2(time.Now())); status != http.StatusAccepted {
		t.Fatalf("fresh V2: %d %v", status, body)
	}
	replay := v2(time.Now().Add(-6 * time.Minute))
	replay.Set(webhook.SignatureHeader, webhook.Sign([]byte(e.target.Secret), raw)) // V1 still valid
	if status, body := e.postUserSigned(raw, replay); status != http.StatusUnauthorized {
		t.Fatalf("V2 six minutes old: %d %v, want 401", status, body)
	}
	cfg := e.target.Config("edit", "typing")
	cfg["signature"] = "v2"
	if err := e.node.OpenChannel(e.channel+"_v2", cfg); err != nil {
		t.Fatal(err)
	}
	e.channel += "_v2"
	if status, body := e.postUser(e.target.Secret, map[string]any{"target_message_id": "t-v1", "text": "old style"}); status != http.StatusUnauthorized {
		t.Fatalf("V1 alone on a v2 channel: %d %v, want 401", status, body)
	}
	if status, body := e.postUserSigned(raw, v2(time.Now())); status != http.StatusAccepted {
		t.Fatalf("V2 on a v2 channel: %d %v", status, body)
	}
	// A channel that is not open is answered exactly like a bad signature: no probing for names.
	_, badSig := e.postUser("not-the-secret", map[string]any{"target_message_id": "t-x", "text": "x"})
	e.channel = "cch_never_opened"
	status, unknown := e.postUser(e.target.Secret, map[string]any{"target_message_id": "t-x", "text": "x"})
	if status != http.StatusUnauthorized || fmt.Sprint(unknown) != fmt.Sprint(badSig) {
		t.Fatalf("unknown channel: %d %v; bad signature: %v: want the same 401", status, unknown, badSig)
	}
	// The route is each adapter's (adapter.Receiver); an adapter that takes no posts (matrix polls)
	// or no adapter at all has none, and the bearer token opens nothing there either.
	for _, path := range []string{"/v1/targets/matrix/" + e.channel + "/messages", "/v1/targets/nope/" + e.channel + "/messages"} {
		if status, body, _ := e.node.Do(http.MethodPost, path, map[string]any{}); status != http.StatusNotFound {
			t.Errorf("POST %s: %d %s, want 404", path, status, body)
		}
	}
}

// A user message's file URL whose host name resolves to the node's own machine (localhost) is
// not fetched, even where the channel's file_hosts name it: a target cannot make ximd read its
// loopback services (the NATS monitor, metrics). The victim gets no request; the post is 422.
func TestSend_FileURLResolvingToLoopbackIsRefused(t *testing.T) {
	t.Parallel()
	e := newEnv(t, envOptions{mutate: fastAcks})
	var hits atomic.Int64
	victim := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		hits.Add(1)
		_, _ = io.WriteString(w, "internal")
	}))
	t.Cleanup(victim.Close)
	port := victim.URL[strings.LastIndexByte(victim.URL, ':')+1:]
	allowFileHost(t, e, "localhost:"+port)
	status, body := e.postUser(e.target.Secret, map[string]any{"target_message_id": "t-ssrf", "text": "see file",
		"files": []any{map[string]any{"type": "file", "url": "http://localhost:" + port + "/debug/vars", "filename": "x.txt"}}})
	if status != http.StatusUnprocessableEntity || body["code"] != profile.CodeFileDownloadFailed {
		t.Fatalf("post: %d %v, want 422 file_download_failed", status, body)
	}
	if n := hits.Load(); n != 0 {
		t.Fatalf("the loopback service got %d requests", n)
	}
}

// A user message whose second file cannot be downloaded is refused and leaves no file behind:
// the first, already stored, is discarded. A message with more files than a message may carry
// is refused before any download.
func TestSend_FailedMessageLeavesNoFiles(t *testing.T) {
	t.Parallel()
	e := newEnv(t, envOptions{mutate: fastAcks})
	var hits atomic.Int64
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		hits.Add(1)
		if strings.HasSuffix(r.URL.Path, "/missing") {
			w.WriteHeader(http.StatusNotFound)
			return
		}
		_, _ = io.WriteString(w, "file bytes")
	}))
	t.Cleanup(srv.Close)
	allowFileHost(t, e, strings.TrimPrefix(srv.URL, "http://"))
	status, body := e.postUser(e.target.Secret, map[string]any{"target_message_id": "t-two", "text": "two files",
		"files": []any{map[string]any{"type": "file", "url": srv.URL + "/ok"}, map[string]any{"type": "file", "url": srv.URL + "/missing"}}})
	if status != http.StatusUnprocessableEntity || body["code"] != profile.CodeFileDownloadFailed {
		t.Fatalf("post: %d %v, want 422", status, body)
	}
	nc := e.natsConn()
	js, _ := jetstream.New(nc)
	obs, err := js.ObjectStore(context.Background(), subjects.BucketFiles)
	if err != nil {
		t.Fatal(err)
	}
	if infos, _ := obs.List(context.Background()); len(infos) != 0 {
		t.Fatalf("%d files left behind by a refused message", len(infos))
	}

	hits.Store(0)
	many := make([]any, 257)
	for i := range many {
		many[i] = map[string]any{"type": "file", "url": srv.URL + "/ok"}
	}
	status, body = e.postUser(e.target.Secret, map[string]any{"target_message_id": "t-many", "text": "x", "files": many})
	if status != http.StatusBadRequest || body["code"] != profile.CodeInvalidPacket || hits.Load() != 0 {
		t.Fatalf("257 files: %d %v after %d downloads, want 400 invalid_packet before any", status, body, hits.Load())
	}
}
