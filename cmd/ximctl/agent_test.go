package main

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	"github.com/coder/websocket"

	"github.com/ximd/ximd/internal/testkit"
	"github.com/ximd/ximd/profile"
)

// The fake edge stands in for ximd's /v1/ws (edge-api §5): it checks the bearer token and the
// subprotocol, hands every accepted connection to the test, and checks every frame the agent
// sends as ximd's gateway would (envelope, then the payload against the IM v2 catalog).

const (
	testToken   = "tok-agent-test"
	testChannel = "cch_agent"
	waitFor     = 5 * time.Second // deadline for a packet the agent must send
	// quietFor is how long the tests watch for packets that must NOT come. It exceeds the
	// -ack-timeout + -retry-backoff the tests pass (200ms + 10ms), so a final the agent would
	// send again despite its ack shows up within it.
	quietFor = 600 * time.Millisecond
)

type fakeEdge struct {
	srv   *httptest.Server
	ctx   context.Context
	conns chan *edgeConn
}

type edgeConn struct {
	ws     *websocket.Conn
	ctx    context.Context
	frames chan []byte // closed when the connection ends

	// Used by the test goroutine only.
	lastWrite int64           // Unix ms of the edge's last write
	finals    map[string]bool // message_ids of the finals received
}

func newFakeEdge(t *testing.T) *fakeEdge {
	t.Helper()
	ctx, cancel := context.WithCancel(context.Background())
	e := &fakeEdge{ctx: ctx, conns: make(chan *edgeConn, 8)}
	e.srv = httptest.NewServer(http.HandlerFunc(e.serve))
	t.Cleanup(func() {
		cancel() // ends every handler's Read
		e.srv.Close()
	})
	return e
}

func (e *fakeEdge) serve(w http.ResponseWriter, r *http.Request) {
	if r.URL.Path != "/v1/ws" {
		http.NotFound(w, r)
		return
	}
	if r.Header.Get("Authorization") != "Bearer "+testToken {
		http.Error(w, "unauthorized", http.StatusUnauthorized)
		return
	}
	ws, err := websocket.Accept(w, r, &websocket.AcceptOptions{Subprotocols: []string{"xagent.connector.packet.v1"}})
	if err != nil {
		return
	}
	if ws.Subprotocol() != "xagent.connector.packet.v1" {
		_ = ws.Close(websocket.StatusPolicyViolation, "subprotocol xagent.connector.packet.v1 required")
		return
	}
	c := &edgeConn{ws: ws, ctx: e.ctx, frames: make(chan []byte, 1024), finals: make(map[string]bool)}
	e.conns <- c
	defer close(c.frames)
	for {
		_, b, err := ws.Read(e.ctx)
		if err != nil {
			return
		}
		c.frames <- b
	}
}

func (e *fakeEdge) addr() string { return strings.TrimPrefix(e.srv.URL, "http://") }

// accept returns the next connection the agent opened.
func (e *fakeEdge) accept(t *testing.T) *edgeConn {
	t.Helper()
	select {
	case c := <-e.conns:
		return c
	case <-time.After(waitFor):
		t.Fatalf("the agent did not connect within %s", waitFor)
		return nil
	}
}

// recv returns the next packet the agent sent within d, after checking it as ximd's gateway
// would; false when none came. It skips a final sent again no later than the edge's last
// write: the agent's -ack-timeout ran out before the edge answered (a slow test machine), so
// sending again was right, and it cannot be a reaction to what the edge wrote.
func (c *edgeConn) recv(t *testing.T, d time.Duration) (profile.Envelope, bool) {
	t.Helper()
	timer := time.NewTimer(d)
	defer timer.Stop()
	for {
		select {
		case b, ok := <-c.frames:
			if !ok {
				t.Fatal("connection closed while waiting for a packet")
			}
			env := checkFrame(t, b)
			if env.Type == profile.TypeMessage {
				id := profile.MessageIDOf(env.Payload)
				if c.finals[id] && env.Time <= c.lastWrite {
					t.Logf("final %s sent again (packet %s) before the edge's answer reached the agent", id, env.PacketID)
					continue
				}
				c.finals[id] = true
			}
			return env, true
		case <-timer.C:
			return profile.Envelope{}, false
		}
	}
}

// next returns the next packet the agent sent.
func (c *edgeConn) next(t *testing.T) profile.Envelope {
	t.Helper()
	env, ok := c.recv(t, waitFor)
	if !ok {
		t.Fatalf("no packet from the agent within %s", waitFor)
	}
	return env
}

// quiet fails if the agent sends anything within quietFor.
func (c *edgeConn) quiet(t *testing.T) {
	t.Helper()
	if env, ok := c.recv(t, quietFor); ok {
		t.Fatalf("unexpected %s %s", env.Type, env.Payload)
	}
}

// settleFinal acknowledges the sends of final messageID that crossed an ack already given (a
// resend whose timer fired as the ack arrived: P-ACK-3 allows it, ximd would answer it
// duplicate) until the agent is quiet; anything else is unexpected.
func (c *edgeConn) settleFinal(t *testing.T, messageID string) {
	t.Helper()
	for {
		env, ok := c.recv(t, quietFor)
		if !ok {
			return
		}
		if m := want[profile.Message](t, env, profile.TypeMessage); m.MessageID != messageID {
			t.Fatalf("unexpected chat.message %s", env.Payload)
		}
		c.reply(t, env, profile.TypeAck, profile.Ack{MessageID: messageID, Status: profile.AckDuplicate})
	}
}

func (c *edgeConn) send(t *testing.T, env profile.Envelope) {
	t.Helper()
	b, err := json.Marshal(env)
	if err != nil {
		t.Fatal(err)
	}
	c.lastWrite = time.Now().UnixMilli()
	if err := c.ws.Write(c.ctx, websocket.MessageText, b); err != nil {
		t.Fatalf("edge write: %v", err)
	}
}

// userMessage sends a Connector -> xAgent chat.message as packet pid on channel.
func (c *edgeConn) userMessage(t *testing.T, channel, pid string, m profile.Message) {
	t.Helper()
	c.send(t, envelope(t, pid, "", channel, profile.TypeMessage, m))
}

// reply answers packet to with a packet of typ.
func (c *edgeConn) reply(t *testing.T, to profile.Envelope, typ string, payload any) {
	t.Helper()
	c.send(t, envelope(t, profile.NewPacketID(), to.PacketID, to.ChannelID, typ, payload))
}

func envelope(t *testing.T, pid, replyTo, channel, typ string, payload any) profile.Envelope {
	t.Helper()
	p, err := json.Marshal(payload)
	if err != nil {
		t.Fatal(err)
	}
	return profile.Envelope{Schema: profile.Schema, PacketID: pid, ReplyTo: replyTo, ChannelID: channel,
		Type: typ, Time: time.Now().UnixMilli(), Payload: p}
}

// checkFrame decodes a frame from the agent and validates its payload against the catalog,
// failing the test where ximd would answer invalid_packet.
func checkFrame(t *testing.T, b []byte) profile.Envelope {
	t.Helper()
	env, err := profile.DecodeEnvelope(b)
	if err != nil {
		t.Fatalf("invalid frame %s: %v", b, err)
	}
	if !profile.ValidChannelID(env.ChannelID) {
		t.Fatalf("invalid channel in %s", b)
	}
	cat := profile.Default()
	switch env.Type {
	case profile.TypeAck:
		_, err = cat.DecodeAck(env.Payload)
	case profile.TypeActivity:
		_, err = cat.DecodeActivity(env.Payload)
	case profile.TypeDelta:
		_, err = cat.DecodeDelta(env.Payload)
	case profile.TypeMessage:
		_, err = cat.DecodeMessage(env.Payload, profile.FromAgent)
	default:
		err = errors.New("not a type xAgent sends in IM v2")
	}
	if err != nil {
		t.Fatalf("invalid %s %s: %v", env.Type, env.Payload, err)
	}
	// The copy detaches the payload from the frame buffer.
	env.Payload = append(json.RawMessage(nil), env.Payload...)
	return env
}

// want returns the payload of env after checking its type.
func want[P any](t *testing.T, env profile.Envelope, typ string) P {
	t.Helper()
	if env.Type != typ {
		t.Fatalf("got %s %s, want %s", env.Type, env.Payload, typ)
	}
	var p P
	if err := json.Unmarshal(env.Payload, &p); err != nil {
		t.Fatal(err)
	}
	return p
}

// wantAck checks a chat.message.ack answering user packet pid with message_id id (P-ACK-1,
// P-ACK-2) and returns it.
func wantAck(t *testing.T, env profile.Envelope, channel, pid, id, status string) profile.Ack {
	t.Helper()
	ack := want[profile.Ack](t, env, profile.TypeAck)
	if env.ReplyTo != pid || env.ChannelID != channel || ack.MessageID != id || ack.Status != status {
		t.Fatalf("ack %s on %s reply_to %s, want %s for %s on %s reply_to %s", env.Payload, env.ChannelID, env.ReplyTo, status, id, channel, pid)
	}
	return ack
}

// wantActivity checks a chat.activity with status (and tool_name).
func wantActivity(t *testing.T, env profile.Envelope, status, tool string) {
	t.Helper()
	a := want[profile.Activity](t, env, profile.TypeActivity)
	if a.Status != status || a.ToolName != tool || env.ChannelID != testChannel {
		t.Fatalf("activity %s on %s, want %s %q on %s", env.Payload, env.ChannelID, status, tool, testChannel)
	}
}

// answer reads the idle activity, the deltas and the final that follow the activity, checks sequence 1..n, one
// message_id, and that the deltas concatenate to the final's text; it returns the final.
func answer(t *testing.T, c *edgeConn) (profile.Envelope, profile.Message, int) {
	t.Helper()
	var text strings.Builder
	n := 0
	// The status is cleared before the text streams: thinking (-> tool) -> idle.
	wantActivity(t, c.next(t), profile.ActivityIdle, "")
	for {
		env := c.next(t)
		if env.ChannelID != testChannel {
			t.Fatalf("%s on channel %s, want %s", env.Type, env.ChannelID, testChannel)
		}
		if env.Type == profile.TypeMessage {
			final := want[profile.Message](t, env, profile.TypeMessage)
			if !strings.HasPrefix(final.MessageID, "asst_") {
				t.Fatalf("final message_id %q, want asst_…", final.MessageID)
			}
			if final.Text != text.String() {
				t.Fatalf("final text %q, deltas concatenate to %q", final.Text, text.String())
			}
			return env, final, n
		}
		d := want[profile.Delta](t, env, profile.TypeDelta)
		n++
		if d.Sequence != int64(n) {
			t.Fatalf("delta %d has sequence %d", n, d.Sequence)
		}
		text.WriteString(d.Text)
	}
}

func startAgent(t *testing.T, e *fakeEdge, extra ...string) (stdout, stderr *testkit.SyncBuffer) {
	t.Helper()
	stdout, stderr = &testkit.SyncBuffer{}, &testkit.SyncBuffer{}
	args := append([]string{"-addr", e.addr(), "-token", testToken, "-think", "0", "-delay", "0",
		"-ack-timeout", "200ms", "-retry-backoff", "10ms"}, extra...)
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- runAgent(ctx, args, stdout, stderr) }()
	t.Cleanup(func() {
		cancel()
		select {
		case err := <-done:
			if err != nil {
				t.Errorf("runAgent: %v", err)
			}
		case <-time.After(waitFor):
			t.Errorf("runAgent did not return within %s of cancel", waitFor)
		}
		if t.Failed() {
			t.Logf("stdout:\n%s\nstderr:\n%s", stdout, stderr)
		}
	})
	return stdout, stderr
}

func TestAgentAnswersUserMessage(t *testing.T) {
	t.Parallel()
	e := newFakeEdge(t)
	stdout, _ := startAgent(t, e)
	c := e.accept(t)

	msg := profile.Message{MessageID: "msg_1", Text: "hello from the user", CreatedAt: time.Now().UnixMilli(),
		Files: []profile.File{{Type: profile.FileImage, FileRef: "file_1", Filename: "page.png", DownloadURL: "/files/refs/file_1"}}}
	c.userMessage(t, testChannel, "pkt_user_1", msg)

	wantAck(t, c.next(t), testChannel, "pkt_user_1", "msg_1", profile.AckAccepted)
	wantActivity(t, c.next(t), profile.ActivityThinking, "")
	wantActivity(t, c.next(t), profile.ActivityTool, "web_search")
	finalEnv, final, deltas := answer(t, c)
	if !strings.Contains(final.Text, `You said: "hello from the user"`) || !strings.Contains(final.Text, "page.png") {
		t.Fatalf("final text %q: want the user's text and file name", final.Text)
	}
	if words := len(strings.Fields(final.Text)); deltas != words {
		t.Fatalf("%d deltas for %d words (-chunk 1)", deltas, words)
	}

	c.reply(t, finalEnv, profile.TypeAck, profile.Accepted(final.MessageID))
	c.quiet(t) // acked: not sent again, and no idle (the final cleared the activity)

	// A retransmission of the answered message: duplicate, and no second answer (P-ACK-4).
	c.userMessage(t, testChannel, "pkt_user_2", msg)
	wantAck(t, c.next(t), testChannel, "pkt_user_2", "msg_1", profile.AckDuplicate)
	c.quiet(t)

	out := stdout.String()
	for _, line := range []string{"<- chat.message ", "-> chat.message.ack ", "-> chat.message.delta ", "final " + final.MessageID + " on " + testChannel + ": accepted"} {
		if !strings.Contains(out, line) {
			t.Errorf("stdout lacks %q", line)
		}
	}
}

func TestAgentAcks(t *testing.T) {
	t.Parallel()
	first := profile.Message{MessageID: "msg_a", Text: "first"}
	tests := []struct {
		name       string
		channel    string
		msg        profile.Message
		wantStatus string
		wantCode   string
		wantAnswer bool
	}{
		{name: "same message_id and content", channel: testChannel, msg: first, wantStatus: profile.AckDuplicate},
		{name: "same message_id, other text", channel: testChannel, msg: profile.Message{MessageID: "msg_a", Text: "other"},
			wantStatus: profile.AckRejected, wantCode: profile.CodeMessageIDConflict},
		{name: "same message_id on another channel", channel: "cch_other", msg: first, wantStatus: profile.AckAccepted, wantAnswer: true},
		{name: "file without download_url", channel: testChannel,
			msg:        profile.Message{MessageID: "msg_b", Files: []profile.File{{Type: profile.FileFile, FileRef: "f1"}}},
			wantStatus: profile.AckRejected, wantCode: profile.CodeInvalidPacket},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			e := newFakeEdge(t)
			startAgent(t, e, "-tool=false", "-chunk", "100")
			c := e.accept(t)
			c.userMessage(t, testChannel, "pkt_first", first)
			wantAck(t, c.next(t), testChannel, "pkt_first", first.MessageID, profile.AckAccepted)
			wantActivity(t, c.next(t), profile.ActivityThinking, "")
			finalEnv, final, _ := answer(t, c)
			c.reply(t, finalEnv, profile.TypeAck, profile.Accepted(final.MessageID))

			c.userMessage(t, tt.channel, "pkt_second", tt.msg)
			ack := wantAck(t, c.next(t), tt.channel, "pkt_second", tt.msg.MessageID, tt.wantStatus)
			if ack.Code != tt.wantCode {
				t.Fatalf("code %q, want %q", ack.Code, tt.wantCode)
			}
			if tt.wantStatus == profile.AckRejected && (ack.Retryable == nil || *ack.Retryable) {
				t.Fatalf("rejection %+v: want retryable false", ack)
			}
			if tt.wantAnswer {
				if env := c.next(t); env.Type != profile.TypeActivity || env.ChannelID != tt.channel {
					t.Fatalf("got %s on %s, want the answer's activity on %s", env.Type, env.ChannelID, tt.channel)
				}
				return
			}
			c.quiet(t)
		})
	}
}

func TestAgentFailRateRejectsRetryable(t *testing.T) {
	t.Parallel()
	e := newFakeEdge(t)
	startAgent(t, e, "-fail-rate", "1")
	c := e.accept(t)
	msg := profile.Message{MessageID: "msg_1", Text: "hi"}
	for _, pid := range []string{"pkt_user_1", "pkt_user_2"} {
		c.userMessage(t, testChannel, pid, msg)
		ack := wantAck(t, c.next(t), testChannel, pid, "msg_1", profile.AckRejected)
		if ack.Code != profile.CodeInternal || ack.Retryable == nil || !*ack.Retryable {
			t.Fatalf("ack %+v: want internal_error, retryable", ack)
		}
		c.quiet(t) // refused: not answered, and a retransmission is refused afresh (not duplicate)
	}
}

func TestAgentNoAckRateAnswersWithoutAck(t *testing.T) {
	t.Parallel()
	e := newFakeEdge(t)
	startAgent(t, e, "-no-ack-rate", "1", "-tool=false")
	c := e.accept(t)
	msg := profile.Message{MessageID: "msg_1", Text: "hi"}
	c.userMessage(t, testChannel, "pkt_user_1", msg)
	wantActivity(t, c.next(t), profile.ActivityThinking, "") // no ack first
	finalEnv, final, _ := answer(t, c)
	c.reply(t, finalEnv, profile.TypeAck, profile.Accepted(final.MessageID))
	// As if the ack had been lost: ximd sends the message again and gets duplicate.
	c.userMessage(t, testChannel, "pkt_user_2", msg)
	wantAck(t, c.next(t), testChannel, "pkt_user_2", "msg_1", profile.AckDuplicate)
	c.quiet(t)
}

func TestAgentSendsFinalAgain(t *testing.T) {
	t.Parallel()
	retryable := func(code string, r bool) profile.Ack {
		return profile.Rejected("", &profile.Error{Code: code, Retryable: r})
	}
	tests := []struct {
		name string
		// answer answers the first send of the final (nil: no answer at all).
		answer    func(t *testing.T, c *edgeConn, env profile.Envelope, id string)
		wantAgain bool
	}{
		{name: "no ack within -ack-timeout", wantAgain: true},
		{name: "rejected retryable", wantAgain: true, answer: func(t *testing.T, c *edgeConn, env profile.Envelope, id string) {
			ack := retryable(profile.CodeTargetUnavailable, true)
			ack.MessageID = id
			c.reply(t, env, profile.TypeAck, ack)
		}},
		{name: "error packet retryable", wantAgain: true, answer: func(t *testing.T, c *edgeConn, env profile.Envelope, id string) {
			c.reply(t, env, profile.TypeError, profile.ErrorPayload{Code: profile.CodeUnavailable, Retryable: true})
		}},
		{name: "rejected not retryable", answer: func(t *testing.T, c *edgeConn, env profile.Envelope, id string) {
			ack := retryable(profile.CodeTargetDeliveryFailed, false)
			ack.MessageID = id
			c.reply(t, env, profile.TypeAck, ack)
		}},
		{name: "error packet not retryable", answer: func(t *testing.T, c *edgeConn, env profile.Envelope, id string) {
			c.reply(t, env, profile.TypeError, profile.ErrorPayload{Code: profile.CodeChannelNotOpen, Retryable: false})
		}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			e := newFakeEdge(t)
			args := []string{"-tool=false", "-chunk", "100"}
			if tt.answer != nil {
				// Only the edge's answer can make the agent send again within waitFor.
				args = append(args, "-ack-timeout", "1m")
			}
			_, stderr := startAgent(t, e, args...)
			c := e.accept(t)
			c.userMessage(t, testChannel, "pkt_user_1", profile.Message{MessageID: "msg_1", Text: "hi"})
			wantAck(t, c.next(t), testChannel, "pkt_user_1", "msg_1", profile.AckAccepted)
			wantActivity(t, c.next(t), profile.ActivityThinking, "")
			firstEnv, first, _ := answer(t, c)
			if tt.answer != nil {
				tt.answer(t, c, firstEnv, first.MessageID)
			}
			if !tt.wantAgain {
				// Refused for good: never sent again (P-STATE-3); the status is cleared.
				wantActivity(t, c.next(t), profile.ActivityIdle, "")
				c.quiet(t)
				if !strings.Contains(stderr.String(), "giving up") {
					t.Errorf("stderr lacks the failure: %q", stderr.String())
				}
				return
			}
			againEnv := c.next(t)
			again := want[profile.Message](t, againEnv, profile.TypeMessage)
			if again.MessageID != first.MessageID || again.Text != first.Text || againEnv.PacketID == firstEnv.PacketID {
				t.Fatalf("sent again as %s %+v, want message_id %s with a new packet_id (not %s)", againEnv.PacketID, again, first.MessageID, firstEnv.PacketID)
			}
			c.reply(t, againEnv, profile.TypeAck, profile.Accepted(again.MessageID))
			c.quiet(t)
		})
	}
}

func TestAgentGivesUpAfterRetries(t *testing.T) {
	t.Parallel()
	e := newFakeEdge(t)
	_, stderr := startAgent(t, e, "-tool=false", "-chunk", "100", "-retries", "2")
	c := e.accept(t)
	c.userMessage(t, testChannel, "pkt_user_1", profile.Message{MessageID: "msg_1", Text: "hi"})
	wantAck(t, c.next(t), testChannel, "pkt_user_1", "msg_1", profile.AckAccepted)
	wantActivity(t, c.next(t), profile.ActivityThinking, "")
	firstEnv, first, _ := answer(t, c)
	pids := map[string]bool{firstEnv.PacketID: true}
	for range 2 {
		env := c.next(t)
		if m := want[profile.Message](t, env, profile.TypeMessage); m.MessageID != first.MessageID || pids[env.PacketID] {
			t.Fatalf("sent again as %s %s, want %s with a new packet_id", env.PacketID, env.Payload, first.MessageID)
		}
		pids[env.PacketID] = true
	}
	wantActivity(t, c.next(t), profile.ActivityIdle, "")
	c.quiet(t)
	if !strings.Contains(stderr.String(), "giving up after 3 sends") {
		t.Errorf("stderr %q lacks the failure", stderr.String())
	}
}

func TestAgentReconnectsAndSendsPendingFinal(t *testing.T) {
	t.Parallel()
	e := newFakeEdge(t)
	stdout, _ := startAgent(t, e, "-tool=false", "-chunk", "100")
	c1 := e.accept(t)
	c1.userMessage(t, testChannel, "pkt_user_1", profile.Message{MessageID: "msg_1", Text: "hi"})
	wantAck(t, c1.next(t), testChannel, "pkt_user_1", "msg_1", profile.AckAccepted)
	wantActivity(t, c1.next(t), profile.ActivityThinking, "")
	firstEnv, first, _ := answer(t, c1)
	_ = c1.ws.CloseNow() // the final is never acked: a disconnect is not delivery (P-ACK-3)

	c2 := e.accept(t)
	againEnv := c2.next(t)
	again := want[profile.Message](t, againEnv, profile.TypeMessage)
	if again.MessageID != first.MessageID || againEnv.PacketID == firstEnv.PacketID {
		t.Fatalf("after reconnecting sent %s %+v, want message_id %s with a new packet_id", againEnv.PacketID, again, first.MessageID)
	}
	c2.reply(t, againEnv, profile.TypeAck, profile.Accepted(again.MessageID))
	c2.settleFinal(t, again.MessageID)
	if !strings.Contains(stdout.String(), "reconnected to ws://"+e.addr()) {
		t.Errorf("stdout lacks the reconnection")
	}
}

func TestAgentFlags(t *testing.T) {
	t.Parallel()
	tests := []struct {
		name    string
		args    []string
		wantErr error
	}{
		{name: "fail rate above 1", args: []string{"-fail-rate", "1.5"}, wantErr: errUsage},
		{name: "negative no-ack rate", args: []string{"-no-ack-rate", "-0.1"}, wantErr: errUsage},
		{name: "chunk 0", args: []string{"-chunk", "0"}, wantErr: errUsage},
		{name: "empty reply", args: []string{"-reply", ""}, wantErr: errUsage},
		{name: "zero ack timeout", args: []string{"-ack-timeout", "0s"}, wantErr: errUsage},
		{name: "positional argument", args: []string{"extra"}, wantErr: errUsage},
		{name: "unknown flag", args: []string{"-nope"}, wantErr: errUsage},
		{name: "valid, cancelled", args: []string{"-fail-rate", "0.5", "-no-ack-rate", "0"}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			ctx, cancel := context.WithCancel(context.Background())
			cancel() // a valid command line returns at once: nothing to connect to
			args := append([]string{"-addr", "127.0.0.1:1", "-token", "t"}, tt.args...)
			var out, errOut bytes.Buffer
			if err := runAgent(ctx, args, &out, &errOut); !errors.Is(err, tt.wantErr) {
				t.Fatalf("runAgent(%q) = %v, want %v", tt.args, err, tt.wantErr)
			}
		})
	}
}
