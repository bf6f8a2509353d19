package test

import (
	"context"
	"encoding/json"
	"io"
	"log/slog"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/nats-io/nats.go"

	"github.com/ximd/ximd/internal/testkit"
	"github.com/ximd/ximd/pipeline/node"
	"github.com/ximd/ximd/profile"
)

const wait = 10 * time.Second

// env is one test's world: a node, a webhook target, an xAgent connection and an open channel.
type env struct {
	t       *testing.T
	node    *testkit.Node
	target  *testkit.Target
	agent   *testkit.Agent
	channel string
	dataDir string
}

type envOptions struct {
	streaming, activity string
	mutate              func(*node.Config)
	dataDir             string
}

func newEnv(t *testing.T, o envOptions) *env {
	t.Helper()
	if o.streaming == "" {
		o.streaming = "edit"
	}
	if o.activity == "" {
		o.activity = "typing"
	}
	if o.dataDir == "" {
		o.dataDir = t.TempDir()
	}
	tg, err := testkit.NewTarget("s3cr3t-"+testkit.NewID("k"), testkit.TargetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(tg.Close)
	e := &env{t: t, target: tg, channel: "cch_" + strings.ReplaceAll(testkit.NewID("c"), "c_", ""), dataDir: o.dataDir}
	e.start(o.mutate)
	if err := e.node.OpenChannel(e.channel, tg.Config(o.streaming, o.activity)); err != nil {
		t.Fatal(err)
	}
	e.connect()
	return e
}

func (e *env) start(mutate func(*node.Config)) {
	e.t.Helper()
	n, err := testkit.StartNode(testkit.NodeOptions{DataDir: e.dataDir, Mutate: func(c *node.Config) {
		c.EditInterval = 0
		c.TargetRetryBudget = 300 * time.Millisecond
		if mutate != nil {
			mutate(c)
		}
	}})
	if err != nil {
		e.t.Fatal(err)
	}
	e.node = n
	e.t.Cleanup(func() { _ = n.Stop() })
}

// natsConn is a client of the node's NATS server, closed when the test ends.
func (e *env) natsConn() *nats.Conn {
	e.t.Helper()
	nc, err := nats.Connect(e.node.NATSURL(), e.node.NATSOptions()...)
	if err != nil {
		e.t.Fatal(err)
	}
	e.t.Cleanup(nc.Close)
	return nc
}

func (e *env) connect() {
	e.t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), wait)
	defer cancel()
	a, err := testkit.Dial(ctx, e.node.Addr, e.node.Token)
	if err != nil {
		e.t.Fatal(err)
	}
	e.agent = a
	e.t.Cleanup(a.Close)
}

// restart stops the node and starts a new one on the same data dir, then reconnects.
func (e *env) restart() {
	e.t.Helper()
	e.agent.Close()
	if err := e.node.Stop(); err != nil {
		e.t.Fatalf("stop: %v", err)
	}
	e.start(nil)
	e.connect()
}

func (e *env) send(typ string, payload any) string {
	e.t.Helper()
	return e.sendTo(e.channel, typ, payload)
}

func (e *env) sendTo(channel, typ string, payload any) string {
	e.t.Helper()
	id, err := e.agent.Send(context.Background(), channel, typ, payload)
	if err != nil {
		e.t.Fatal(err)
	}
	return id
}

// final sends a chat.message and returns its ack.
func (e *env) final(payload map[string]any) (string, profile.Ack) {
	e.t.Helper()
	pid := e.send(profile.TypeMessage, payload)
	return pid, e.ackOf(pid)
}

func (e *env) ackOf(packetID string) profile.Ack {
	e.t.Helper()
	env, err := e.agent.Reply(packetID, wait)
	if err != nil {
		e.t.Fatal(err)
	}
	ack, err := testkit.AckOf(env)
	if err != nil {
		e.t.Fatal(err)
	}
	if env.ChannelID != e.channel && env.ChannelID == "" {
		e.t.Fatalf("ack without channel: %+v", env)
	}
	return ack
}

func (e *env) errorOf(packetID string) profile.ErrorPayload {
	e.t.Helper()
	env, err := e.agent.Reply(packetID, wait)
	if err != nil {
		e.t.Fatal(err)
	}
	p, err := testkit.ErrorOf(env)
	if err != nil {
		e.t.Fatal(err)
	}
	return p
}

// quiet asserts that no packet reaches the agent for d.
func (e *env) quiet(d time.Duration) {
	e.t.Helper()
	if env, ok := e.agent.Quiet(d); !ok {
		e.t.Fatalf("unexpected packet %s: %s", env.Type, env.Payload)
	}
}

func (e *env) waitCalls(desc string, pred func([]testkit.Call) bool) []testkit.Call {
	e.t.Helper()
	calls, ok := e.target.WaitFor(wait, pred)
	if !ok {
		e.t.Fatalf("target: %s; calls: %s", desc, dump(calls))
	}
	return calls
}

func dump(calls []testkit.Call) string {
	var b strings.Builder
	for _, c := range calls {
		b.WriteString("\n  " + c.Method + " " + c.Path + " " + string(c.Raw))
	}
	return b.String()
}

func msg(id, text string) map[string]any { return map[string]any{"message_id": id, "text": text} }

func delta(id string, seq int, text string) map[string]any {
	return map[string]any{"message_id": id, "sequence": seq, "text": text}
}

func retryable(a profile.Ack) bool { return a.Retryable != nil && *a.Retryable }

func wantAck(t *testing.T, a profile.Ack, status, code string) {
	t.Helper()
	if a.Status != status || a.Code != code {
		t.Fatalf("ack = %s/%s (%s), want %s/%s", a.Status, a.Code, a.Message, status, code)
	}
}

// listing is every channel GET /v1/channels lists, page by page, as one body: the channels'
// representations side by side.
func listing(t *testing.T, n *testkit.Node) []byte {
	t.Helper()
	list, err := n.Channels()
	if err != nil {
		t.Fatal(err)
	}
	var b []byte
	for _, ch := range list {
		b = append(b, ch...)
	}
	return b
}

func jsonOf(t *testing.T, b []byte) map[string]any {
	t.Helper()
	var m map[string]any
	if err := json.Unmarshal(b, &m); err != nil {
		t.Fatalf("not JSON: %s", b)
	}
	return m
}

func metric(t *testing.T, n *testkit.Node, line string) bool {
	t.Helper()
	status, body, err := n.DoAuth(http.MethodGet, "/metrics", nil, "")
	if err != nil || status != 200 {
		t.Fatalf("metrics: %d %v", status, err)
	}
	return strings.Contains(string(body), line)
}

// poll runs f until it returns true or the deadline passes.
func poll(t *testing.T, desc string, f func() bool) {
	t.Helper()
	deadline := time.Now().Add(wait)
	for !f() {
		if time.Now().After(deadline) {
			t.Fatalf("timed out: %s", desc)
		}
		time.Sleep(10 * time.Millisecond)
	}
}

func discardLogger() *slog.Logger { return slog.New(slog.NewTextHandler(io.Discard, nil)) }
