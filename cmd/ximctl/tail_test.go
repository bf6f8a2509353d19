package main

import (
	"context"
	"encoding/json"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/ximd/ximd/internal/testkit"
	"github.com/ximd/ximd/pipeline/node"
	"github.com/ximd/ximd/profile"
	"github.com/ximd/ximd/subjects"
)

// ximctl tail -channel shows what passes for that channel, both ways, one line per packet: the
// delta, the final and its ack; a user message queued, sent, acked and delivered; and nothing of
// another channel. It takes nothing away: every packet is still processed and acked.
func TestTail_ShowsOneChannelBothWays(t *testing.T) {
	t.Parallel()
	n := startTestNode(t, nil)
	tg := startTarget(t)
	const mine, other = "cch_tail_mine", "cch_tail_other"
	for _, ch := range []string{mine, other} {
		if err := n.OpenChannel(ch, tg.Config("edit", "none")); err != nil {
			t.Fatal(err)
		}
	}
	tail := startCommand(t, "tail", "-channel", mine, "-nats", n.NATSURL(), "-creds", filepath.Join(n.DataDir, node.NATSSeedFile))
	pollUntil(t, "tail subscribed", func() bool { return strings.Contains(tail.stderr.String(), "tailing channel "+mine) })

	ctx := context.Background()
	agent, err := testkit.Dial(ctx, n.Addr, n.Token)
	if err != nil {
		t.Fatal(err)
	}
	defer agent.Close()
	stream := func(ch, id string) {
		t.Helper()
		if _, err := agent.Send(ctx, ch, profile.TypeDelta, map[string]any{"message_id": id, "sequence": 1, "text": "Hello "}); err != nil {
			t.Fatal(err)
		}
		pid, err := agent.Send(ctx, ch, profile.TypeMessage, map[string]any{"message_id": id, "text": "Hello tail"})
		if err != nil {
			t.Fatal(err)
		}
		env, err := agent.Reply(pid, pollDeadline)
		if err != nil {
			t.Fatal(err)
		}
		if a, _ := testkit.AckOf(env); a.Status != profile.AckAccepted {
			t.Fatalf("%s: %s %s", ch, env.Type, env.Payload)
		}
	}
	stream(other, "m_other") // first: its lines would come before ours
	stream(mine, "m_mine")
	pollUntil(t, "the ack's line", func() bool { return len(linesWith(tail.stdout.String(), "chat.message.ack")) > 0 })

	got := strings.Split(strings.TrimSpace(tail.stdout.String()), "\n")
	want := [][]string{
		{"xAgent→ximd", "chat.message.delta", mine, "m_mine", "#1", `"Hello "`},
		{"xAgent→ximd", "chat.message ", mine, "m_mine", `"Hello tail"`},
		{"ximd→xAgent", "chat.message.ack", mine, "m_mine", "accepted"},
	}
	if len(got) != len(want) {
		t.Fatalf("tail printed %d lines, want %d (none of %s):\n%s", len(got), len(want), other, tail.stdout.String())
	}
	for i, parts := range want {
		for _, p := range parts {
			if !strings.Contains(got[i], p) {
				t.Fatalf("line %d %q lacks %q", i, got[i], p)
			}
		}
		if _, err := time.Parse("15:04:05.000", got[i][:12]); err != nil {
			t.Fatalf("line %d does not start with the time: %q", i, got[i])
		}
	}

	// A user message to xAgent: queued by the target's post, sent, acked by xAgent, delivered.
	id := postUserMessage(t, n, mine, tg.Secret, "T-tail", "What is JetStream?")
	var user profile.Envelope
	for user.Type != profile.TypeMessage {
		if user, err = agent.Next(pollDeadline); err != nil {
			t.Fatal(err)
		}
	}
	ack, err := testkit.Packet(testkit.NewID("pkt"), mine, profile.TypeAck, map[string]any{"message_id": id, "status": "accepted"})
	if err != nil {
		t.Fatal(err)
	}
	var env profile.Envelope
	_ = json.Unmarshal(ack, &env)
	env.ReplyTo = user.PacketID
	ack, _ = json.Marshal(env)
	if err := agent.SendRaw(ctx, ack); err != nil {
		t.Fatal(err)
	}
	for _, parts := range [][]string{
		{"target→ximd", "chat.message ", id, `queued "What is JetStream?"`},
		{"ximd→xAgent", "chat.message ", id, "send 1", `"What is JetStream?"`},
		{"xAgent→ximd", "chat.message.ack", id, "accepted"},
		{"outbox", "chat.message ", id, "delivered"},
	} {
		deadline := time.Now().Add(pollDeadline)
		for len(linesWith(tail.stdout.String(), parts...)) != 1 {
			if time.Now().After(deadline) {
				t.Fatalf("not within %s: one line with %q; tail printed:\n%s", pollDeadline, parts, tail.stdout.String())
			}
			time.Sleep(20 * time.Millisecond)
		}
	}
	if strings.Contains(tail.stdout.String(), other) {
		t.Fatalf("tail showed the other channel:\n%s", tail.stdout.String())
	}
	t.Logf("ximctl tail printed:\n%s", tail.stdout.String())
	if code := tail.stop(t); code != 0 {
		t.Fatalf("tail exited %d: %s", code, tail.stderr.String())
	}
}

// A channel's deltas stored together (one XIM_IN message, subjects.HeaderFrames) are shown one
// line each, in order.
func TestTail_ShowsEachPacketOfABatch(t *testing.T) {
	t.Parallel()
	n := startTestNode(t, nil)
	const ch = "cch_tail_batch"
	if err := n.OpenChannel(ch, startTarget(t).Config("edit", "none")); err != nil {
		t.Fatal(err)
	}
	tail := startCommand(t, "tail", "-channel", ch, "-nats", n.NATSURL(), "-creds", filepath.Join(n.DataDir, node.NATSSeedFile))
	pollUntil(t, "tail subscribed", func() bool { return strings.Contains(tail.stderr.String(), "tailing channel "+ch) })

	var frames [][]byte
	for i, text := range []string{"Hello ", "batched ", "world"} {
		f, err := testkit.Packet(testkit.NewID("pkt"), ch, profile.TypeDelta, map[string]any{"message_id": "m_batch", "sequence": i + 1, "text": text})
		if err != nil {
			t.Fatal(err)
		}
		frames = append(frames, f)
	}
	nc, err := nats.Connect(n.NATSURL(), n.NATSOptions()...)
	if err != nil {
		t.Fatal(err)
	}
	defer nc.Close()
	subject, err := subjects.In(ch, "delta")
	if err != nil {
		t.Fatal(err)
	}
	m := nats.NewMsg(subject)
	var lengths string
	m.Data, lengths = subjects.JoinFrames(frames)
	m.Header.Set(subjects.HeaderFrames, lengths)
	if err := nc.PublishMsg(m); err != nil {
		t.Fatal(err)
	}
	pollUntil(t, "three delta lines", func() bool { return len(linesWith(tail.stdout.String(), "chat.message.delta")) == 3 })
	for i, want := range [][]string{{"#1", `"Hello "`}, {"#2", `"batched "`}, {"#3", `"world"`}} {
		l := linesWith(tail.stdout.String(), "chat.message.delta")[i]
		if !strings.Contains(l, want[0]) || !strings.Contains(l, want[1]) {
			t.Fatalf("line %d %q lacks %q", i, l, want)
		}
	}
}
