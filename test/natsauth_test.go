package test

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/nats-io/nats-server/v2/server"
	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
	"maunium.net/go/mautrix/event"

	"github.com/ximd/ximd/handlers/adapter/telegram/telegramtest"
	"github.com/ximd/ximd/handlers/adapter/webchat"
	"github.com/ximd/ximd/handlers/adapter/wecom/wecomtest"
	"github.com/ximd/ximd/internal/testkit"
	"github.com/ximd/ximd/pipeline/node"
	"github.com/ximd/ximd/profile"
	"github.com/ximd/ximd/subjects"
	"github.com/ximd/ximd/test/dendrite"
)

// The passwords the compose NATS config reads from the environment, for this test's server.
var composeUsers = map[string]string{"admin": "admin-pw-0123456789", "gateway": "gateway-pw-0123456789", "worker": "worker-pw-0123456789"}

// violations collects the permission violations the server logs.
type violations struct {
	mu    sync.Mutex
	lines []string
}

func (v *violations) Noticef(string, ...any) {}
func (v *violations) Warnf(string, ...any)   {}
func (v *violations) Fatalf(string, ...any)  {}
func (v *violations) Debugf(string, ...any)  {}
func (v *violations) Tracef(string, ...any)  {}
func (v *violations) Errorf(format string, a ...any) {
	line := fmt.Sprintf(format, a...)
	if strings.Contains(line, "Violation") {
		v.mu.Lock()
		v.lines = append(v.lines, line)
		v.mu.Unlock()
	}
}

func (v *violations) take() []string {
	v.mu.Lock()
	defer v.mu.Unlock()
	out := v.lines
	v.lines = nil
	return out
}

// startComposeNATS runs docs/compose/nats.conf (its users and permissions; not its cluster and
// store paths) as an in-process server on a free loopback port.
func startComposeNATS(t *testing.T) (*server.Server, *violations) {
	t.Helper()
	t.Setenv("NATS_NAME", "compose-test")
	for user, pw := range composeUsers {
		t.Setenv("XIM_NATS_"+strings.ToUpper(user)+"_PASSWORD", pw)
	}
	t.Setenv("XIM_NATS_ROUTE_PASSWORD", "route-pw-0123456789")
	opts, err := server.ProcessConfigFile("../docs/compose/nats.conf")
	if err != nil {
		t.Fatalf("docs/compose/nats.conf: %v", err)
	}
	opts.Host, opts.Port, opts.HTTPPort = "127.0.0.1", -1, 0
	opts.StoreDir = t.TempDir()
	opts.Cluster = server.ClusterOpts{}
	opts.Routes = nil
	opts.SyncAlways = false
	opts.NoSigs = true
	srv, err := server.NewServer(opts)
	if err != nil {
		t.Fatal(err)
	}
	v := &violations{}
	srv.SetLoggerV2(v, false, false, false)
	go srv.Start()
	if !srv.ReadyForConnections(10 * time.Second) {
		t.Fatal("compose nats not ready")
	}
	t.Cleanup(srv.Shutdown)
	return srv, v
}

// userURL is the server's URL with a compose user's credentials.
func userURL(srv *server.Server, user string) string {
	return strings.Replace(srv.ClientURL(), "nats://", "nats://"+user+":"+composeUsers[user]+"@", 1)
}

// NATS is inside the trust boundary (edge-api §2): the compose cluster's users, run for real. A
// gateway and a worker, each with its own user, carry every kind of traffic (streamed final with
// activity and a file, a tool invocation, a user message, a webchat page, an ack queued while
// xAgent is away, a channel deleted) without one
// permission violation (the permissions were trimmed against this test, one entry at a time);
// then each user is refused what its role must not do, and a client
// without credentials is refused outright.
func TestNATSAuth_ComposeRolesCarryEverythingAndNoMore(t *testing.T) {
	srv, viol := startComposeNATS(t)
	start := func(role node.Role, user string) *testkit.Node {
		n, err := testkit.StartNode(testkit.NodeOptions{DataDir: t.TempDir(), Mutate: func(c *node.Config) {
			c.Role, c.NATSURL = role, userURL(srv, user)
			c.EditInterval = 0
			c.AckTimeout = 300 * time.Millisecond
			c.TargetRetryBudget = 300 * time.Millisecond
		}})
		if err != nil {
			t.Fatalf("%s as NATS user %s: %v", role, user, err)
		}
		t.Cleanup(func() { _ = n.Stop() })
		return n
	}
	worker := start(node.RoleWorker, "worker")
	gw := start(node.RoleGateway, "gateway")
	poll(t, "the worker serves every partition", func() bool { return gauge(t, worker.Metrics(), "ximd_partitions_owned") == 4*8 })

	tg, err := testkit.NewTarget("s3cr3t-"+testkit.NewID("k"), testkit.TargetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(tg.Close)
	e := &env{t: t, node: gw, target: tg, channel: "cch_roles"}
	if err := gw.OpenChannel(e.channel, tg.Config("edit", "typing")); err != nil {
		t.Fatal(err)
	}
	e.connect()

	// xAgent -> IM: activity, deltas, a final with a file, a tool invocation.
	e.send(profile.TypeActivity, map[string]any{"status": "thinking"})
	e.send(profile.TypeDelta, delta("m_roles", 1, "hel"))
	ref := upload(t, gw, e.channel, "a.txt", []byte("file body"))
	final := map[string]any{"message_id": "m_roles", "text": "hello", "files": []any{map[string]any{"type": "file", "file_ref": ref}}}
	_, ack := e.final(final)
	wantAck(t, ack, profile.AckAccepted, "")
	if r := e.invoke("inv_roles", "im.send_message", map[string]any{"text": "from a tool"}); !r.OK {
		t.Fatalf("tool.result %+v", r)
	}
	// A final of the same message again: duplicate, from the record the worker wrote.
	_, ack = e.final(final)
	wantAck(t, ack, profile.AckDuplicate, "")

	// IM -> xAgent: a user message, acked.
	status, body := e.postUser(tg.Secret, map[string]any{"target_message_id": "T_roles", "text": "hi agent"})
	if status != http.StatusAccepted {
		t.Fatalf("user message: %d %v", status, body)
	}
	uenv, um := userMessage(t, e.agent, wait)
	ackUser(t, e.agent, uenv, map[string]any{"message_id": um.MessageID, "status": "accepted"})
	e.waitNoPending()

	// A webchat page: message in, answer streamed back, history replayed.
	path, key := openWebchat(t, gw, "wc-roles", nil)
	if status, m := pagePost(t, gw, path, key, map[string]any{"client_id": "client-roles-0001", "text": "page says hi"}); status != http.StatusAccepted {
		t.Fatalf("page post: %d %v", status, m)
	}
	penv, pm := userMessage(t, e.agent, wait)
	ackUser(t, e.agent, penv, map[string]any{"message_id": pm.MessageID, "status": "accepted"})
	pid := e.sendTo("wc-roles", profile.TypeMessage, msg("m_page_answer", "page answer"))
	if a := e.ackOf(pid); a.Status != profile.AckAccepted {
		t.Fatalf("webchat final: %+v", a)
	}
	events(t, gw, path, key, "", func(evs []sseEvent) bool {
		for _, ev := range evs {
			if ev.Event == "item" && ev.Item.Role == webchat.RoleAssistant && ev.Item.Final {
				return true
			}
		}
		return false
	})
	// An ack produced while xAgent is away waits in XIM_REPLIES (written and consumed by the
	// worker) and comes on the next connection.
	release := make(chan struct{})
	tg.SetAnswer(func(testkit.Call) int { <-release; return 200 })
	pid = e.send(profile.TypeMessage, msg("m_away", "while xAgent is away"))
	e.waitCalls("the final reached the target", func(calls []testkit.Call) bool {
		return len(calls) > 0 && calls[len(calls)-1].Text() == "while xAgent is away"
	})
	e.agent.Close()
	poll(t, "the gateway saw the connection go", func() bool { return metric(t, gw, "ximd_gateway_connections 0") })
	close(release)
	poll(t, "the ack was queued", func() bool { return metric(t, worker, `ximd_replies_total{outcome="queued"} 1`) })
	e.connect()
	if a := e.ackOf(pid); a.Status != profile.AckAccepted {
		t.Fatalf("queued ack: %+v", a)
	}

	// A Matrix room, polled by the worker: the sync position and an image it copies in.
	if dendrite.Available() {
		hs := dendrite.Start(t, dendrite.Options{})
		bot, alice := hs.Register(t, "bot"), hs.Register(t, "alice")
		room := hs.Room(t, bot, false, alice)
		if status, body, err := openMatrix(gw, "mx-roles", map[string]any{"homeserver": hs.URL, "access_token": bot.Token, "room_id": string(room)}); err != nil || status != http.StatusOK {
			t.Fatalf("PUT matrix: %d %s %v", status, body, err)
		}
		poll(t, "the worker polls the room", func() bool { return gauge(t, worker.Metrics(), "ximd_polled_channels") == 1 })
		ctx := context.Background()
		up, err := alice.Client.UploadBytes(ctx, []byte("png bytes"), "image/png")
		if err != nil {
			t.Fatal(err)
		}
		if _, err := alice.Client.SendMessageEvent(ctx, room, event.EventMessage, map[string]any{"msgtype": "m.image", "body": "p.png", "url": up.ContentURI.String()}); err != nil {
			t.Fatal(err)
		}
		menv, mm := userMessage(t, e.agent, wait)
		if len(mm.Files) != 1 {
			t.Fatalf("matrix image message %+v", mm)
		}
		ackUser(t, e.agent, menv, map[string]any{"message_id": mm.MessageID, "status": "accepted"})
		if status, _, _ := gw.Do(http.MethodDelete, "/v1/channels/mx-roles", nil); status != http.StatusNoContent {
			t.Fatalf("DELETE matrix channel: %d", status)
		}
	}

	// A webhook bot (the gateway admits what posts to it): a stranger's pairing code, its
	// approval, the conversation's channel opened, its message acked after channel.opened (the
	// worker records that), the refusals counted.
	if status, body := e.putBot("wb-roles", nil, nil); status != http.StatusOK {
		t.Fatalf("PUT webhook bot: %d %v", status, body)
	}
	if _, body := e.postBot("wb-roles", botPost{Conv: "dm-roles", Sender: "ann", TargetMessageID: "b1", Text: "hi"}); body["refused"] != "pairing_pending" {
		t.Fatalf("stranger: %v", body)
	}
	_, b, _ := gw.Do(http.MethodGet, "/v1/bots/wb-roles/pairings", nil)
	var pairings struct{ Pairings []struct{ Code string } }
	if json.Unmarshal(b, &pairings) != nil || len(pairings.Pairings) != 1 {
		t.Fatalf("pairings %s", b)
	}
	if status, b, _ := gw.Do(http.MethodPost, "/v1/bots/wb-roles/pairings/"+pairings.Pairings[0].Code, nil); status != http.StatusNoContent {
		t.Fatalf("approve: %d %s", status, b)
	}
	if _, body := e.postBot("wb-roles", botPost{Conv: "dm-roles", Sender: "ann", TargetMessageID: "b2", Text: "hi again"}); body["connector_channel_id"] != "wb-roles-dm-roles" {
		t.Fatalf("after approval: %v", body)
	}
	nextOf(t, e.agent, profile.TypeChannelOpened)
	benv, bm := userMessage(t, e.agent, wait)
	ackUser(t, e.agent, benv, map[string]any{"message_id": bm.MessageID, "status": "accepted"})
	poll(t, "the bot's refusal counted in its stats", func() bool {
		_, b, _ := gw.Do(http.MethodGet, "/v1/bots/wb-roles", nil)
		return strings.Contains(string(b), `"pairing_pending":1`)
	})
	// A Telegram bot, polled by the worker: the worker issues the code, opens the channel.
	fake := telegramtest.New()
	t.Cleanup(fake.Close)
	tgBot := fake.AddBot("8002:roles-token", "roles_bot")
	if status, b, _ := gw.Do(http.MethodPut, "/v1/bots/tg-roles", map[string]any{
		"connection": map[string]any{"target_type": "im", "profiles": []string{"xagent.im.v2"}},
		"target":     map[string]any{"adapter": "telegram", "config": map[string]any{"token": tgBot.Token, "api_url": fake.URL()}},
	}); status != http.StatusOK {
		t.Fatalf("PUT telegram bot: %d %s", status, b)
	}
	dave := fake.AddUser("Dave")
	dm := fake.AddChat("private", "", dave.ID)
	fake.Post(dm, dave, "hello")
	var code string
	poll(t, "the worker's pairing code", func() bool {
		_, b, _ := gw.Do(http.MethodGet, "/v1/bots/tg-roles/pairings", nil)
		var l struct{ Pairings []struct{ Code string } }
		if json.Unmarshal(b, &l) == nil && len(l.Pairings) == 1 {
			code = l.Pairings[0].Code
		}
		return code != ""
	})
	if status, b, _ := gw.Do(http.MethodPost, "/v1/bots/tg-roles/pairings/"+code, nil); status != http.StatusNoContent {
		t.Fatalf("approve: %d %s", status, b)
	}
	fake.Post(dm, dave, "hello again")
	nextOf(t, e.agent, profile.TypeChannelOpened)
	tenv, tm := userMessage(t, e.agent, wait)
	ackUser(t, e.agent, tenv, map[string]any{"message_id": tm.MessageID, "status": "accepted"})
	if status, _, _ := gw.Do(http.MethodDelete, "/v1/bots/tg-roles", nil); status != http.StatusNoContent {
		t.Fatalf("DELETE telegram bot: %d", status)
	}

	// A WeCom robot, its one connection held by the worker's poll loop: the gateway's probe of
	// the robot's second chat is relayed to the worker (xim.ctl.relay), a person's message comes
	// in and the answer goes out on that connection.
	wfake := wecomtest.New()
	t.Cleanup(wfake.Close)
	robot := wfake.AddBot("Helper")
	wcfg := func(user string) map[string]any {
		return map[string]any{"bot_id": robot.ID, "secret": robot.Secret, "user_id": user, "ws_url": wfake.URL()}
	}
	if status, b, err := openWeCom(gw, "wx-roles-1", wcfg("ann")); err != nil || status != http.StatusOK {
		t.Fatalf("PUT wecom: %d %s %v", status, b, err)
	}
	poll(t, "the worker holds the robot's connection", func() bool {
		return wfake.Connected(robot) && gauge(t, worker.Metrics(), "ximd_polled_channels") >= 1
	})
	if status, b, err := openWeCom(gw, "wx-roles-2", wcfg("ben")); err != nil || status != http.StatusOK {
		t.Fatalf("PUT wecom: %d %s %v", status, b, err)
	}
	if !metric(t, gw, `ximd_relayed_calls_total{way="sent"} 1`) {
		t.Fatal("the second chat's probe was not relayed to the worker holding the robot")
	}
	wfake.Say(robot, wecomtest.Single("ann"), "ann", "hi robot", false)
	wenv, wm := userMessage(t, e.agent, wait)
	ackUser(t, e.agent, wenv, map[string]any{"message_id": wm.MessageID, "status": "accepted"})
	if a := e.ackOf(e.sendTo("wx-roles-1", profile.TypeMessage, msg("m_wx_roles", "hello ann"))); a.Status != profile.AckAccepted {
		t.Fatalf("wecom final: %+v", a)
	}

	// Channel deleted: its state purged by the gateway.
	if status, b, err := gw.Do(http.MethodDelete, "/v1/channels/wc-roles", nil); err != nil || status != http.StatusNoContent {
		t.Fatalf("DELETE: %d %s %v", status, b, err)
	}
	if v := viol.take(); len(v) > 0 {
		t.Fatalf("permission violations while carrying traffic:\n%s", strings.Join(v, "\n"))
	}

	// What each role must not do.
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	refused := func(user, what string, do func(ctx context.Context, js jetstream.JetStream) error) {
		t.Helper()
		nc, err := nats.Connect(userURL(srv, user), nats.MaxReconnects(0), nats.ErrorHandler(func(*nats.Conn, *nats.Subscription, error) {}))
		if err != nil {
			t.Fatalf("%s: %v", user, err)
		}
		defer nc.Close()
		js, _ := jetstream.New(nc)
		octx, ocancel := context.WithTimeout(ctx, time.Second)
		defer ocancel()
		if err := do(octx, js); err == nil {
			t.Errorf("user %s could %s", user, what)
		}
	}
	inSubject, _ := subjects.In(e.channel, "message")
	refused("worker", "publish a packet as xAgent", func(ctx context.Context, js jetstream.JetStream) error {
		_, err := js.Publish(ctx, inSubject, []byte(`{}`))
		return err
	})
	refused("worker", "change a channel's config", func(ctx context.Context, js jetstream.JetStream) error {
		kv, err := js.KeyValue(ctx, subjects.BucketChannels)
		if err != nil {
			return err
		}
		_, err = kv.Put(ctx, e.channel, []byte(`{}`))
		return err
	})
	refused("worker", "change a bot's config", func(ctx context.Context, js jetstream.JetStream) error {
		kv, err := js.KeyValue(ctx, subjects.BucketBots)
		if err != nil {
			return err
		}
		_, err = kv.Put(ctx, "wb-roles", []byte(`{}`))
		return err
	})
	refused("gateway", "write a message record", func(ctx context.Context, js jetstream.JetStream) error {
		kv, err := js.KeyValue(ctx, subjects.BucketMessages)
		if err != nil {
			return err
		}
		_, err = kv.Put(ctx, e.channel+".m_forged", []byte(`{}`))
		return err
	})
	for _, user := range []string{"gateway", "worker"} {
		refused(user, "delete a stream", func(ctx context.Context, js jetstream.JetStream) error {
			return js.DeleteStream(ctx, subjects.StreamIn)
		})
	}
	if v := viol.take(); len(v) < 6 {
		t.Errorf("the server logged %d violations for 6 refused acts:\n%s", len(v), strings.Join(v, "\n"))
	}

	// No credentials, wrong password: refused at the door.
	for name, url := range map[string]string{"anonymous": srv.ClientURL(), "wrong password": strings.Replace(userURL(srv, "worker"), composeUsers["worker"], "guess", 1)} {
		nc, err := nats.Connect(url, nats.MaxReconnects(0))
		if err == nil {
			nc.Close()
			t.Errorf("%s client admitted", name)
		} else if !errors.Is(err, nats.ErrAuthorization) {
			t.Errorf("%s client: %v, want an authorization violation", name, err)
		}
	}
	// The admin (the nats CLI) sees everything.
	nc, err := nats.Connect(userURL(srv, "admin"))
	if err != nil {
		t.Fatal(err)
	}
	defer nc.Close()
	js, _ := jetstream.New(nc)
	if _, err := js.Stream(ctx, subjects.StreamIn); err != nil {
		t.Fatalf("admin: %v", err)
	}
}
