package test

import (
	"context"
	"encoding/json"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/nats-io/nats.go"

	"github.com/ximd/ximd/internal/testkit"
	"github.com/ximd/ximd/pipeline/node"
	"github.com/ximd/ximd/profile"
	"github.com/ximd/ximd/subjects"
)

// A burst of deltas is stored a batch at a time (subjects.HeaderFrames), and batching never
// reorders: XIM_IN holds the channel's packets in the order xAgent sent them, each final after
// its deltas; every final is acked accepted and shows its whole text, and no delta is shown
// after its final.
func TestDelta_BurstStoredInBatchesInSendOrder(t *testing.T) {
	t.Parallel()
	e := newEnv(t, envOptions{})
	nc := e.natsConn()
	in, err := subjects.InChannel(e.channel)
	if err != nil {
		t.Fatal(err)
	}
	seen := make(chan *nats.Msg, 4096)
	sub, err := nc.ChanSubscribe(in, seen) // sees the publishes in stream order, takes nothing
	if err != nil {
		t.Fatal(err)
	}
	defer sub.Unsubscribe()
	if err := nc.Flush(); err != nil {
		t.Fatal(err)
	}

	const messages, deltas = 3, 300
	ctx := context.Background()
	var sent []string // packet ids in send order
	var finals []string
	for seq := 1; seq <= deltas; seq++ {
		for m := range messages {
			id, err := e.agent.Send(ctx, e.channel, profile.TypeDelta, delta(fmt.Sprintf("burst%d", m), seq, fmt.Sprintf("%d ", seq)))
			if err != nil {
				t.Fatal(err)
			}
			sent = append(sent, id)
		}
		if seq == deltas/2 { // a final in the middle of the burst, right behind its deltas
			id, err := e.agent.Send(ctx, e.channel, profile.TypeMessage, msg("burst0", "the whole of burst0"))
			if err != nil {
				t.Fatal(err)
			}
			sent, finals = append(sent, id), append(finals, id)
		}
	}
	for m := 1; m < messages; m++ {
		id, err := e.agent.Send(ctx, e.channel, profile.TypeMessage, msg(fmt.Sprintf("burst%d", m), fmt.Sprintf("the whole of burst%d", m)))
		if err != nil {
			t.Fatal(err)
		}
		sent, finals = append(sent, id), append(finals, id)
	}
	for _, id := range finals {
		wantAck(t, e.ackOf(id), profile.AckAccepted, "")
	}

	var stored []string
	batches, batched := 0, 0
	deadline := time.After(wait)
	for len(stored) < len(sent) {
		select {
		case m := <-seen:
			frames, err := subjects.SplitFrames(m.Header.Get(subjects.HeaderFrames), m.Data)
			if err != nil {
				t.Fatalf("stored message on %s: %v", m.Subject, err)
			}
			if len(frames) > 1 {
				batches++
				batched += len(frames)
			}
			for _, f := range frames {
				env, err := profile.DecodeEnvelope(f)
				if err != nil {
					t.Fatalf("stored packet: %v", err)
				}
				if len(frames) > 1 && env.Type != profile.TypeDelta {
					t.Fatalf("a %s stored in a batch", env.Type)
				}
				stored = append(stored, env.PacketID)
			}
		case <-deadline:
			t.Fatalf("%d of %d packets seen stored", len(stored), len(sent))
		}
	}
	for i := range sent {
		if stored[i] != sent[i] {
			t.Fatalf("packet %d stored is %s, sent was %s", i, stored[i], sent[i])
		}
	}
	if batches == 0 {
		t.Fatalf("%d packets sent back to back, none stored in a batch", len(sent))
	}
	t.Logf("%d packets stored: %d of them in %d batches", len(sent), batched, batches)

	for m := range messages {
		key := fmt.Sprintf("burst%d", m)
		calls := e.waitCalls("final of "+key, func(c []testkit.Call) bool {
			for _, x := range c {
				if x.Final() && x.Text() == "the whole of "+key {
					return true
				}
			}
			return false
		})
		final := false
		for _, c := range calls {
			if !strings.HasSuffix(c.Key, key) {
				continue
			}
			if final {
				t.Fatalf("%s: %s %q after its final", key, c.Method, c.Text())
			}
			final = c.Final()
		}
	}
	if got, msgs := metricValue(t, e.node, "ximd_gateway_packets_stored_total"), metricValue(t, e.node, "ximd_gateway_messages_stored_total"); got != float64(len(sent)) || msgs >= got {
		t.Fatalf("packets stored %v (sent %d) in %v messages", got, len(sent), msgs)
	}
}

// A stored batch is applied packet by packet: the deltas before a gap are applied, the gap is
// answered delta_sequence_gap (that packet only), nothing from it on is displayed; the final
// still shows the whole text. A batch whose frame lengths do not match its payload is counted
// undecodable and takes nothing else with it.
func TestDelta_StoredBatchAppliedPacketByPacket(t *testing.T) {
	t.Parallel()
	const gateway = "gw-batch" // the replies' way back to xAgent, as a gateway names itself
	e := newEnv(t, envOptions{mutate: func(c *node.Config) { c.Instance = gateway }})
	nc := e.natsConn()
	subject, err := subjects.In(e.channel, "delta")
	if err != nil {
		t.Fatal(err)
	}
	var frames [][]byte
	ids := map[int64]string{}
	for _, d := range []struct {
		seq  int64
		text string
	}{{1, "one "}, {2, "two "}, {4, "four "}, {5, "five"}} {
		ids[d.seq] = testkit.NewID("pkt")
		f, err := testkit.Packet(ids[d.seq], e.channel, profile.TypeDelta, delta("batched", int(d.seq), d.text))
		if err != nil {
			t.Fatal(err)
		}
		frames = append(frames, f)
	}
	publish := func(data []byte, lengths string) {
		t.Helper()
		m := nats.NewMsg(subject)
		m.Data = data
		m.Header.Set(subjects.HeaderFrames, lengths)
		m.Header.Set(subjects.HeaderGateway, gateway)
		if err := nc.PublishMsg(m); err != nil {
			t.Fatal(err)
		}
	}
	data, lengths := subjects.JoinFrames(frames)
	publish(data, "3,"+lengths) // lengths that do not add up: undecodable
	publish(data, lengths)
	if err := nc.Flush(); err != nil {
		t.Fatal(err)
	}

	p := e.errorOf(ids[4])
	if p.Code != profile.CodeDeltaSequenceGap || !strings.Contains(p.Message, "expected sequence 3, got 4") {
		t.Fatalf("error for the gap: %+v", p)
	}
	_, ack := e.final(msg("batched", "one two three four five"))
	wantAck(t, ack, profile.AckAccepted, "")
	for _, c := range e.target.MessageCalls() {
		if (strings.Contains(c.Text(), "four") || strings.Contains(c.Text(), "five")) && !c.Final() {
			t.Fatalf("a delta after the gap displayed: %s", c.Raw)
		}
	}
	if got := metricValue(t, e.node, "ximd_worker_packets_total", `type="undecodable"`); got != 1 {
		b, _ := json.Marshal(got)
		t.Fatalf("undecodable stored messages %s, want 1", b)
	}
	e.quiet(200 * time.Millisecond) // one error packet, for the gap only
}
