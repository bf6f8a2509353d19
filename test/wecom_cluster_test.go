package test

import (
	"fmt"
	"net/http"
	"testing"

	"github.com/ximd/ximd/handlers/adapter/wecom"
	"github.com/ximd/ximd/handlers/adapter/wecom/wecomtest"
	"github.com/ximd/ximd/internal/testkit"
	"github.com/ximd/ximd/pipeline"
	"github.com/ximd/ximd/pipeline/node"
	"github.com/ximd/ximd/profile"
)

// Edge-api §7.2.7, one subscribed WebSocket per robot across all workers: two workers and a
// gateway on one NATS, twelve people's single chats with one robot bound through the gateway.
// Each channel's answers are delivered by the worker serving its partition, and run on the one
// connection of the worker polling the robot (relayed from the other: ximd_relayed_calls_total):
// while every chat gets a streamed answer nobody subscribes again. When the holding worker
// stops, the other takes the robot over with one subscribe and the answers go on.
func TestWeCom_TwoWorkersShareTheRobotsOneConnection(t *testing.T) {
	t.Parallel()
	srv, err := pipeline.StartServer(pipeline.ServerConfig{DataDir: t.TempDir(), Port: -1}, discardLogger())
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(srv.Shutdown)
	start := func(role node.Role, instance string) *testkit.Node {
		n, err := testkit.StartNode(testkit.NodeOptions{DataDir: t.TempDir(), Mutate: func(c *node.Config) {
			c.Role, c.NATSURL, c.Instance = role, srv.ClientURL(), instance
			fastAcks(c)
		}})
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { _ = n.Stop() })
		return n
	}
	// Fixed names: which worker delivers which channel is then fixed, and both deliver some.
	workers := []*testkit.Node{start(node.RoleWorker, "wk-a"), start(node.RoleWorker, "wk-b")}
	gw := start(node.RoleGateway, "gw")

	fake := wecomtest.New()
	t.Cleanup(fake.Close)
	bot := fake.AddBot("Helper")
	var people []string
	for i := range 12 {
		p := fmt.Sprintf("p%02d", i)
		people = append(people, p)
		fake.Met(bot, wecomtest.Single(p))
		cfg := map[string]any{"bot_id": bot.ID, "secret": bot.Secret, "user_id": p, "ws_url": fake.URL(), "first_preview_words": 0}
		if status, body, err := openWeCom(gw, "wc-"+p, cfg); err != nil || status != http.StatusOK {
			t.Fatalf("PUT wecom channel: %d %s %v", status, body, err)
		}
	}
	metric := func(n *testkit.Node, name string) float64 { return testkit.GaugeValue(n.Metrics(), name) }
	holder := func() int {
		for i, w := range workers {
			if w != nil && metric(w, "ximd_polled_channels") > 0 {
				return i
			}
		}
		return -1
	}
	poll(t, "one worker polls the robot, connected", func() bool { return holder() >= 0 && fake.Connected(bot) })
	poll(t, "both workers serve partitions", func() bool {
		return metric(workers[0], "ximd_partitions_owned") > 0 && metric(workers[1], "ximd_partitions_owned") > 0
	})

	e := &env{t: t, node: gw}
	e.connect()
	// round: everyone writes, xAgent hears each message once and streams an answer to each
	// chat; every chat shows its answer as one finished bubble replying to the message.
	round := func(r int) {
		t.Helper()
		asked := map[string]string{} // channel -> msgid
		for _, p := range people {
			asked["wc-"+p] = fake.Say(bot, wecomtest.Single(p), p, fmt.Sprintf("round %d: hello from %s", r, p), false)
		}
		for range people {
			uenv, um := userMessage(t, e.agent, wait)
			if um.MessageID != wecom.MessageIDOf(bot.ID, asked[uenv.ChannelID]) {
				t.Fatalf("round %d: %s got %s, want the message of %s", r, uenv.ChannelID, um.MessageID, asked[uenv.ChannelID])
			}
			ackUser(t, e.agent, uenv, map[string]any{"message_id": um.MessageID, "status": "accepted"})
		}
		for _, p := range people {
			id := fmt.Sprintf("m_%d_%s", r, p)
			e.sendTo("wc-"+p, profile.TypeDelta, delta(id, 1, "Hello "))
			if a := e.ackOf(e.sendTo("wc-"+p, profile.TypeMessage, msg(id, "Hello "+p+", round "+fmt.Sprint(r)))); a.Status != profile.AckAccepted {
				t.Fatalf("round %d, %s: %+v", r, p, a)
			}
		}
		for _, p := range people {
			seen := fake.Messages(bot, wecomtest.Single(p))
			last := seen[len(seen)-1]
			if last.Kind != "stream" || !last.Finished || last.Text != "Hello "+p+", round "+fmt.Sprint(r) || last.ReplyTo != asked["wc-"+p] {
				t.Fatalf("round %d: %s sees %+v last, want the answer finished, replying to %s", r, p, last, asked["wc-"+p])
			}
			shown := 0
			for _, m := range seen {
				if m.Text == last.Text {
					shown++
				}
			}
			if shown != 1 {
				t.Fatalf("round %d: %s sees the answer %d times", r, p, shown)
			}
		}
	}

	// Rounds until a call was relayed (counted on both sides: served by the holder, sent by
	// the other); a worker that just joined takes its partitions over within a few seconds.
	before := fake.Subscribes(bot)
	h := holder()
	r := 0
	for metric(workers[h], "ximd_relayed_calls_total") == 0 || metric(workers[1-h], "ximd_relayed_calls_total") == 0 {
		if r++; r > 20 {
			t.Fatal("no call relayed between the workers in 20 rounds: every channel was delivered where the robot is held")
		}
		round(r)
		if n := fake.Subscribes(bot); n != before {
			t.Fatalf("%d subscribes while the workers answered, want none (the robot's one connection taken over)", n-before)
		}
	}

	// The holding worker stops: the other subscribes once and serves every chat.
	if err := workers[h].Stop(); err != nil {
		t.Fatal(err)
	}
	workers[h] = nil
	poll(t, "the other worker holds the robot", func() bool { return holder() >= 0 && fake.Connected(bot) })
	round(r + 1)
	if n := fake.Subscribes(bot); n != before+1 {
		t.Fatalf("%d subscribes after the holder stopped, want 1", n-before)
	}
}
