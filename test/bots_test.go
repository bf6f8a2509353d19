package test

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/ximd/ximd/handlers/adapter/webhook"
	"github.com/ximd/ximd/internal/testkit"
	"github.com/ximd/ximd/pipeline"
	"github.com/ximd/ximd/pipeline/node"
	"github.com/ximd/ximd/profile"
	"github.com/ximd/ximd/subjects"
)

// putBot PUTs a webhook bot on e's target with the conversations policy and returns the answer.
func (e *env) putBot(id string, conversations map[string]any, extra map[string]any) (int, map[string]any) {
	e.t.Helper()
	cfg := e.target.Config("edit", "typing")
	delete(cfg, "chat_id")
	for k, v := range extra {
		cfg[k] = v
	}
	body := map[string]any{
		"connection": map[string]any{"target_type": "im", "profiles": []string{"xagent.im.v2"}},
		"target":     map[string]any{"adapter": "webhook", "config": cfg},
	}
	if conversations != nil {
		body["conversations"] = conversations
	}
	status, b, err := e.node.Do(http.MethodPut, "/v1/bots/"+id, body)
	if err != nil {
		e.t.Fatal(err)
	}
	return status, jsonOf(e.t, b)
}

// botPost is a target's post to a webhook bot's route.
type botPost struct {
	Conv, Kind, Sender string
	SenderIsBot        bool
	Mentioned          bool
	TargetMessageID    string
	Text               string
}

// postBot posts p to bot's route, signed with e's target secret.
func (e *env) postBot(bot string, p botPost) (int, map[string]any) {
	e.t.Helper()
	if p.Kind == "" {
		p.Kind = "direct"
	}
	raw, _ := json.Marshal(map[string]any{
		"conversation":      map[string]any{"id": p.Conv, "kind": p.Kind, "title": "Chat " + p.Conv},
		"sender":            map[string]any{"id": p.Sender, "is_bot": p.SenderIsBot, "display_name": "Person " + p.Sender},
		"mentioned":         p.Mentioned,
		"target_message_id": p.TargetMessageID,
		"text":              p.Text,
	})
	req, _ := http.NewRequest(http.MethodPost, "http://"+e.node.Addr+"/v1/targets/webhook/bots/"+bot+"/messages", bytes.NewReader(raw))
	req.Header.Set("Content-Type", "application/json")
	req.Header.Set(webhook.SignatureHeader, webhook.Sign([]byte(e.target.Secret), raw))
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

// nextOf waits for the next packet of type typ on a (others are skipped).
func nextOf(t *testing.T, a *testkit.Agent, typ string) profile.Envelope {
	t.Helper()
	deadline := time.Now().Add(wait)
	for {
		env, err := a.Next(time.Until(deadline))
		if err != nil {
			t.Fatalf("no %s: %v", typ, err)
		}
		if env.Type == typ {
			return env
		}
	}
}

// edge-api §4.1: a person nobody bound writes to an open bot -> a channel <bot>-<key> opens,
// xAgent gets channel.opened and then the chat.message on it, and the agent's streamed answer
// reaches that same conversation.
func TestBots_StrangerOpensChannelAndAgentAnswersThere(t *testing.T) {
	t.Parallel()
	e := newEnv(t, envOptions{mutate: fastAcks})
	if status, body := e.putBot("wb1", map[string]any{"direct": "open"}, nil); status != http.StatusOK {
		t.Fatalf("PUT bot: %d %v", status, body)
	}
	status, body := e.postBot("wb1", botPost{Conv: "alice-dm", Sender: "alice", TargetMessageID: "m1", Text: "hello bot"})
	if status != http.StatusAccepted || body["connector_channel_id"] != "wb1-alice-dm" {
		t.Fatalf("post: %d %v", status, body)
	}
	opened := nextOf(t, e.agent, profile.TypeChannelOpened)
	if opened.ChannelID != "wb1-alice-dm" {
		t.Fatalf("channel.opened on %s", opened.ChannelID)
	}
	var op struct {
		BotID        string `json:"bot_id"`
		Conversation struct {
			Kind, Title string
		} `json:"conversation"`
		Target struct {
			Adapter string `json:"adapter"`
		} `json:"target"`
	}
	if err := json.Unmarshal(opened.Payload, &op); err != nil || op.BotID != "wb1" || op.Conversation.Kind != "direct" ||
		op.Conversation.Title != "Chat alice-dm" || op.Target.Adapter != "webhook" {
		t.Fatalf("channel.opened payload %s (%v)", opened.Payload, err)
	}
	if bytes.Contains(opened.Payload, []byte("alice")) && !bytes.Contains(opened.Payload, []byte("Chat alice-dm")) { // P-ID-2
		t.Fatalf("channel.opened carries a platform id: %s", opened.Payload)
	}
	env, m := userMessage(t, e.agent, wait)
	if env.ChannelID != "wb1-alice-dm" || m.Text != "hello bot" {
		t.Fatalf("chat.message %+v %+v", env, m)
	}
	ackUser(t, e.agent, env, map[string]any{"message_id": m.MessageID, "status": "accepted"})

	// The agent answers, streamed, on the bot's channel: the target sees it in alice's chat.
	e.sendTo("wb1-alice-dm", profile.TypeDelta, map[string]any{"message_id": "a1", "sequence": 1, "text": "Hi "})
	pid := e.sendTo("wb1-alice-dm", profile.TypeMessage, msg("a1", "Hi Alice"))
	wantAck(t, e.ackOf(pid), "accepted", "")
	calls := e.waitCalls("the answer in alice's chat", func(cs []testkit.Call) bool {
		for _, c := range cs {
			if c.Final() && c.Text() == "Hi Alice" && c.Body["chat_id"] == "alice-dm" {
				return true
			}
		}
		return false
	})
	for _, c := range calls {
		if c.Path != "/activity" && c.Body["chat_id"] != nil && c.Body["chat_id"] != "alice-dm" && c.Body["chat_id"] != "room-1" {
			t.Fatalf("a call to another chat: %s", dump(calls))
		}
	}

	_, b, _ := e.node.Do(http.MethodGet, "/v1/channels/wb1-alice-dm", nil)
	ch := jsonOf(t, b)
	if ch["bot"] != "wb1" || ch["conversation"].(map[string]any)["id"] != "alice-dm" || strings.Contains(string(b), e.target.Secret) {
		t.Fatalf("channel representation: %s", b)
	}
	_, b, _ = e.node.Do(http.MethodGet, "/v1/bots/wb1", nil)
	if st := jsonOf(t, b)["stats"].(map[string]any); st["channels"] != float64(1) || strings.Contains(string(b), e.target.Secret) {
		t.Fatalf("bot representation: %s", b)
	}
}

// edge-api §4.1: channel.opened precedes every send of the channel's first message until xAgent
// acks it: a first message left unacked is sent again, each time after a channel.opened.
func TestBots_ChannelOpenedResentWithFirstMessageUntilAcked(t *testing.T) {
	t.Parallel()
	e := newEnv(t, envOptions{mutate: fastAcks})
	e.putBot("wb2", map[string]any{"direct": "open"}, nil)
	if status, body := e.postBot("wb2", botPost{Conv: "bob", Sender: "bob", TargetMessageID: "m1", Text: "first"}); status != http.StatusAccepted {
		t.Fatalf("post: %d %v", status, body)
	}
	var seq []string
	for len(seq) < 4 {
		env, err := e.agent.Next(wait)
		if err != nil {
			t.Fatalf("after %v: %v", seq, err)
		}
		seq = append(seq, env.Type)
		if env.Type == profile.TypeMessage && len(seq) == 4 {
			var m profile.Message
			_ = json.Unmarshal(env.Payload, &m)
			ackUser(t, e.agent, env, map[string]any{"message_id": m.MessageID, "status": "accepted"})
		}
	}
	want := []string{profile.TypeChannelOpened, profile.TypeMessage, profile.TypeChannelOpened, profile.TypeMessage}
	if fmt.Sprint(seq) != fmt.Sprint(want) {
		t.Fatalf("packets %v, want %v", seq, want)
	}
	// After the ack, a later message comes alone.
	poll(t, "announced", func() bool {
		e.postBot("wb2", botPost{Conv: "bob", Sender: "bob", TargetMessageID: fmt.Sprint("m", time.Now().UnixNano()), Text: "later"})
		env, err := e.agent.Next(wait)
		if err != nil {
			t.Fatal(err)
		}
		if env.Type == profile.TypeMessage {
			var m profile.Message
			_ = json.Unmarshal(env.Payload, &m)
			ackUser(t, e.agent, env, map[string]any{"message_id": m.MessageID, "status": "accepted"})
			return true
		}
		nextOf(t, e.agent, profile.TypeMessage) // after a channel.opened: the ack's record was not written yet
		return false
	})
}

// edge-api §4.1 pairing: a stranger gets one answer with a code and nothing reaches xAgent; the
// operator approves the code; the stranger's next message opens the channel.
func TestBots_PairingCodeThenApprovalOpens(t *testing.T) {
	t.Parallel()
	e := newEnv(t, envOptions{mutate: fastAcks})
	if status, body := e.putBot("wb3", nil, nil); status != http.StatusOK || body["conversations"].(map[string]any)["direct"] != "pairing" {
		t.Fatalf("PUT bot: %d %v", status, body)
	}
	for i := range 2 {
		status, body := e.postBot("wb3", botPost{Conv: "carol", Sender: "carol", TargetMessageID: fmt.Sprint("p", i), Text: "let me in"})
		if status != http.StatusAccepted || body["refused"] != "pairing_pending" {
			t.Fatalf("post %d: %d %v", i, status, body)
		}
	}
	calls := e.waitCalls("the pairing answer", func(cs []testkit.Call) bool {
		for _, c := range cs {
			if c.Body["system"] == true {
				return true
			}
		}
		return false
	})
	var answers []testkit.Call
	for _, c := range calls {
		if c.Body["system"] == true {
			answers = append(answers, c)
		}
	}
	if len(answers) != 1 || answers[0].Body["chat_id"] != "carol" || !answers[0].Final() {
		t.Fatalf("pairing answers: %s", dump(answers))
	}
	_, b, _ := e.node.Do(http.MethodGet, "/v1/bots/wb3/pairings", nil)
	var list struct {
		Pairings []struct {
			Code, User, DisplayName string
			ExpiresAt               int64 `json:"expires_at"`
		}
	}
	_ = json.Unmarshal(b, &list)
	if len(list.Pairings) != 1 || list.Pairings[0].User != "carol" || !strings.Contains(answers[0].Text(), list.Pairings[0].Code) ||
		time.Until(time.UnixMilli(list.Pairings[0].ExpiresAt)) < 59*time.Minute {
		t.Fatalf("pairings %s; answer %q", b, answers[0].Text())
	}
	e.quiet(300 * time.Millisecond)
	if env, err := e.agent.Next(0); err == nil && env.ChannelID == "wb3-carol" {
		t.Fatalf("xAgent got %s before approval", env.Type)
	}
	if status, b, _ := e.node.Do(http.MethodPost, "/v1/bots/wb3/pairings/AAAA2222", nil); status != http.StatusNotFound || !strings.Contains(string(b), "pairing_not_found") {
		t.Fatalf("unknown code: %d %s", status, b)
	}
	if status, b, _ := e.node.Do(http.MethodPost, "/v1/bots/wb3/pairings/"+list.Pairings[0].Code, nil); status != http.StatusNoContent {
		t.Fatalf("approve: %d %s", status, b)
	}
	_, b, _ = e.node.Do(http.MethodGet, "/v1/bots/wb3", nil)
	if !strings.Contains(string(b), `"allow_users":["carol"]`) {
		t.Fatalf("bot after approval: %s", b)
	}
	status, body := e.postBot("wb3", botPost{Conv: "carol", Sender: "carol", TargetMessageID: "p9", Text: "thanks"})
	if status != http.StatusAccepted || body["connector_channel_id"] != "wb3-carol" {
		t.Fatalf("post after approval: %d %v", status, body)
	}
	nextOf(t, e.agent, profile.TypeChannelOpened)
	if _, m := userMessage(t, e.agent, wait); m.Text != "thanks" {
		t.Fatalf("message %+v", m)
	}
	poll(t, "refusals counted in the bot's stats", func() bool {
		_, b, _ := e.node.Do(http.MethodGet, "/v1/bots/wb3", nil)
		return strings.Contains(string(b), `"pairing_pending":2`)
	})
	if !metric(t, e.node, `ximd_bot_refused_total{bot="wb3",reason="pairing_pending"} 2`) {
		t.Fatal("ximd_bot_refused_total not counted")
	}
}

// edge-api §4.1 groups: "mention" passes only a message that mentions the bot; a bot's message is
// never passed; allowlist refuses others; closed refuses all.
func TestBots_PolicyRefusesByReason(t *testing.T) {
	t.Parallel()
	e := newEnv(t, envOptions{mutate: fastAcks})
	e.putBot("wb4", map[string]any{"direct": "allowlist", "allow_users": []string{"dave"}, "groups": "mention"}, nil)
	cases := []struct {
		p       botPost
		refused string
	}{
		{botPost{Conv: "g1", Kind: "group", Sender: "erin", Text: "chatter"}, "not_mentioned"},
		{botPost{Conv: "g1", Kind: "group", Sender: "otherbot", SenderIsBot: true, Mentioned: true, Text: "beep"}, "from_bot"},
		{botPost{Conv: "erin", Sender: "erin", Text: "hi"}, "not_allowed"},
		{botPost{Conv: "g1", Kind: "group", Sender: "erin", Mentioned: true, Text: "bot, help"}, ""},
		{botPost{Conv: "dave", Sender: "dave", Text: "hi"}, ""},
	}
	for i, c := range cases {
		c.p.TargetMessageID = fmt.Sprint("t", i)
		status, body := e.postBot("wb4", c.p)
		if status != http.StatusAccepted || fmt.Sprint(body["refused"]) != fmt.Sprint(map[bool]any{true: nil, false: c.refused}[c.refused == ""]) {
			t.Fatalf("case %d (%+v): %d %v, want refused %q", i, c.p, status, body, c.refused)
		}
	}
	got := map[string]string{}
	for len(got) < 2 {
		env := nextOf(t, e.agent, profile.TypeMessage)
		var m profile.Message
		_ = json.Unmarshal(env.Payload, &m)
		got[env.ChannelID] = m.Text
		ackUser(t, e.agent, env, map[string]any{"message_id": m.MessageID, "status": "accepted"})
	}
	if got["wb4-g1"] != "bot, help" || got["wb4-dave"] != "hi" {
		t.Fatalf("passed on: %v", got)
	}
	e.putBot("wb4", map[string]any{"direct": "closed", "groups": "closed"}, nil)
	for i, want := range []string{"direct_closed", "group_closed"} {
		kind := []string{"direct", "group"}[i]
		if _, body := e.postBot("wb4", botPost{Conv: "dave", Kind: kind, Sender: "dave", Mentioned: true, TargetMessageID: "c" + kind, Text: "x"}); body["refused"] != want {
			t.Fatalf("%s: %v", kind, body)
		}
	}
}

// edge-api §4.1 errors: bad input is a clear error and changes nothing.
func TestBots_BadInputIsRefused(t *testing.T) {
	t.Parallel()
	e := newEnv(t, envOptions{})
	cases := []struct {
		name          string
		id            string
		conversations map[string]any
		extra         map[string]any
		status        int
		code, names   string
	}{
		{"config names a conversation", "b1", nil, map[string]any{"chat_id": "room-9"}, 400, "invalid_descriptor", "chat_id"},
		{"unknown direct policy", "b1", map[string]any{"direct": "maybe"}, nil, 400, "invalid_descriptor", `conversations.direct: must be "pairing", "allowlist", "open" or "closed"`},
		{"unknown groups policy", "b1", map[string]any{"groups": "loud"}, nil, 400, "invalid_descriptor", "conversations.groups"},
		{"unknown key", "b1", map[string]any{"dm": "open"}, nil, 400, "invalid_descriptor", "dm"},
		{"max_per_minute", "b1", map[string]any{"max_per_minute": 0}, nil, 400, "invalid_descriptor", "max_per_minute"},
		{"pairing text without code", "b1", map[string]any{"pairing_text": "hello"}, nil, 400, "invalid_descriptor", "{code}"},
		{"id not token-safe", "b.1", nil, nil, 400, "invalid_bot_id", "bot_id"},
		{"id too long", strings.Repeat("b", 49), nil, nil, 400, "invalid_bot_id", "bot_id"},
	}
	for _, c := range cases {
		status, body := e.putBot(c.id, c.conversations, c.extra)
		if status != c.status || body["code"] != c.code || !strings.Contains(fmt.Sprint(body["message"]), c.names) {
			t.Errorf("%s: %d %v, want %d %s naming %q", c.name, status, body, c.status, c.code, c.names)
		}
	}
	if status, b, _ := e.node.Do(http.MethodGet, "/v1/bots", nil); status != 200 || !strings.Contains(string(b), `"bots":[]`) {
		t.Fatalf("bots after refusals: %d %s", status, b)
	}
	for _, path := range []string{"/v1/bots/nobot", "/v1/bots/nobot/pairings"} {
		if status, b, _ := e.node.Do(http.MethodGet, path, nil); status != 404 || !strings.Contains(string(b), "bot_not_found") {
			t.Errorf("GET %s: %d %s", path, status, b)
		}
	}
	if status, b, _ := e.node.Do(http.MethodDelete, "/v1/bots/nobot", nil); status != 404 || !strings.Contains(string(b), "bot_not_found") {
		t.Errorf("DELETE: %d %s", status, b)
	}
	// A post to a bot's route with a wrong signature, or for no bot, is 401 alike.
	e.putBot("b2", map[string]any{"direct": "open"}, nil)
	for _, bot := range []string{"b2", "nobot"} {
		req, _ := http.NewRequest(http.MethodPost, "http://"+e.node.Addr+"/v1/targets/webhook/bots/"+bot+"/messages", strings.NewReader(`{}`))
		req.Header.Set(webhook.SignatureHeader, "sha256=00")
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		resp.Body.Close()
		if resp.StatusCode != http.StatusUnauthorized {
			t.Errorf("post to %s with a bad signature: %d", bot, resp.StatusCode)
		}
	}
}

// edge-api §4.1 exactly once: 50 new conversations writing at once (3 messages each) -> 50
// channels, 50 channel.opened, each before its conversation's first chat.message.
func TestBots_ConcurrentOpeningsAreExactlyOnce(t *testing.T) {
	t.Parallel()
	e := newEnv(t, envOptions{mutate: fastAcks})
	e.putBot("wb5", map[string]any{"direct": "open"}, nil)
	const convs, each = 50, 3
	var wg sync.WaitGroup
	for c := range convs {
		for m := range each {
			wg.Add(1)
			go func() {
				defer wg.Done()
				conv := fmt.Sprint("u", c)
				if status, body := e.postBot("wb5", botPost{Conv: conv, Sender: conv, TargetMessageID: fmt.Sprint(conv, "-", m), Text: fmt.Sprint(m)}); status != http.StatusAccepted {
					t.Errorf("post: %d %v", status, body)
				}
			}()
		}
	}
	wg.Wait()
	openedFirst := map[string]bool{}
	msgs := map[string]int{}
	total := 0
	for total < convs*each {
		env, err := e.agent.Next(wait)
		if err != nil {
			t.Fatalf("after %d messages: %v", total, err)
		}
		switch env.Type {
		case profile.TypeChannelOpened:
			openedFirst[env.ChannelID] = true
		case profile.TypeMessage:
			if !openedFirst[env.ChannelID] {
				t.Fatalf("chat.message on %s before its channel.opened", env.ChannelID)
			}
			var m profile.Message
			_ = json.Unmarshal(env.Payload, &m)
			if msgs[env.ChannelID+m.MessageID] == 0 {
				total++
			}
			msgs[env.ChannelID+m.MessageID]++
			ackUser(t, e.agent, env, map[string]any{"message_id": m.MessageID, "status": "accepted"})
		}
	}
	if len(openedFirst) != convs {
		t.Fatalf("%d channels announced, want %d", len(openedFirst), convs)
	}
	_, b, _ := e.node.Do(http.MethodGet, "/v1/bots/wb5", nil)
	if st := jsonOf(t, b)["stats"].(map[string]any); st["channels"] != float64(convs) {
		t.Fatalf("bot stats %v", st)
	}
	if !metric(t, e.node, fmt.Sprintf(`ximd_bot_channels_opened_total{bot="wb5"} %d`, convs)) {
		t.Fatal("ximd_bot_channels_opened_total")
	}
	// DELETE the bot: every channel it opened is closed.
	if status, b, _ := e.node.Do(http.MethodDelete, "/v1/bots/wb5", nil); status != http.StatusNoContent {
		t.Fatalf("DELETE: %d %s", status, b)
	}
	if status, _, _ := e.node.Do(http.MethodGet, "/v1/channels/wb5-u7", nil); status != http.StatusNotFound {
		t.Fatalf("a deleted bot's channel: %d", status)
	}
}

// edge-api §4.1 exactly once across processes: two gateways and two workers on one NATS; 50 new
// conversations write at once, each message posted to either gateway -> 50 channels, each
// announced by channel.opened before its first chat.message, no message doubled or lost.
func TestBots_TwoGatewaysTwoWorkersOpenEachConversationOnce(t *testing.T) {
	t.Parallel()
	srv, err := pipeline.StartServer(pipeline.ServerConfig{DataDir: t.TempDir(), Port: -1}, discardLogger())
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(srv.Shutdown)
	start := func(role node.Role) *testkit.Node {
		n, err := testkit.StartNode(testkit.NodeOptions{DataDir: t.TempDir(), Mutate: func(c *node.Config) {
			c.Role, c.NATSURL = role, srv.ClientURL()
			fastAcks(c)
		}})
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { _ = n.Stop() })
		return n
	}
	start(node.RoleWorker)
	start(node.RoleWorker)
	gws := []*testkit.Node{start(node.RoleGateway), start(node.RoleGateway)}
	tg, err := testkit.NewTarget("s3cr3t-mw", testkit.TargetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	defer tg.Close()
	e := &env{t: t, node: gws[0], target: tg}
	if status, body := e.putBot("mw", map[string]any{"direct": "open", "max_per_minute": 1000}, nil); status != http.StatusOK {
		t.Fatalf("PUT bot: %d %v", status, body)
	}
	e.connect()
	const convs, each = 50, 3
	var wg sync.WaitGroup
	for c := range convs {
		for m := range each {
			wg.Add(1)
			go func() {
				defer wg.Done()
				g := &env{t: t, node: gws[(c+m)%2], target: tg}
				conv := fmt.Sprint("p", c)
				if status, body := g.postBot("mw", botPost{Conv: conv, Sender: conv, TargetMessageID: fmt.Sprint(conv, "-", m), Text: fmt.Sprint(m)}); status != http.StatusAccepted {
					t.Errorf("post: %d %v", status, body)
				}
			}()
		}
	}
	wg.Wait()
	announced := map[string]bool{}
	seen := map[string]bool{}
	for len(seen) < convs*each {
		env, err := e.agent.Next(wait)
		if err != nil {
			t.Fatalf("after %d messages: %v", len(seen), err)
		}
		switch env.Type {
		case profile.TypeChannelOpened:
			announced[env.ChannelID] = true
		case profile.TypeMessage:
			if !announced[env.ChannelID] {
				t.Fatalf("chat.message on %s before its channel.opened", env.ChannelID)
			}
			var m profile.Message
			_ = json.Unmarshal(env.Payload, &m)
			seen[env.ChannelID+"/"+m.Text] = true
			ackUser(t, e.agent, env, map[string]any{"message_id": m.MessageID, "status": "accepted"})
		}
	}
	if len(announced) != convs {
		t.Fatalf("%d channels announced, want %d", len(announced), convs)
	}
	status, b, _ := gws[1].Do(http.MethodGet, "/v1/channels?limit=1000", nil)
	var list struct {
		Channels []struct {
			ID  string `json:"connector_channel_id"`
			Bot string `json:"bot"`
		} `json:"channels"`
	}
	_ = json.Unmarshal(b, &list)
	n := 0
	for _, ch := range list.Channels {
		if ch.Bot == "mw" {
			n++
		}
	}
	if status != 200 || n != convs {
		t.Fatalf("%d channels of the bot listed (status %d), want %d", n, status, convs)
	}
}

// edge-api §4.1: a bot's second PUT reaches every channel it opened (a moved target, a rotated
// secret); DELETE of a bot's channel closes it, and the conversation's next message opens it again
// with a new channel.opened.
func TestBots_RePutReachesChannelsAndDeletedChannelReopens(t *testing.T) {
	t.Parallel()
	e := newEnv(t, envOptions{mutate: fastAcks})
	e.putBot("wb6", map[string]any{"direct": "open"}, nil)
	e.postBot("wb6", botPost{Conv: "gus", Sender: "gus", TargetMessageID: "g1", Text: "one"})
	nextOf(t, e.agent, profile.TypeChannelOpened)
	env, m := userMessage(t, e.agent, wait)
	ackUser(t, e.agent, env, map[string]any{"message_id": m.MessageID, "status": "accepted"})

	moved, err := testkit.NewTarget(e.target.Secret, testkit.TargetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	defer moved.Close()
	if status, body := e.putBot("wb6", map[string]any{"direct": "open"}, map[string]any{"url": moved.URL}); status != http.StatusOK {
		t.Fatalf("second PUT: %d %v", status, body)
	}
	pid := e.sendTo("wb6-gus", profile.TypeMessage, msg("a1", "to the moved target"))
	wantAck(t, e.ackOf(pid), "accepted", "")
	if _, ok := moved.WaitFor(wait, func(cs []testkit.Call) bool {
		return len(cs) > 0 && cs[len(cs)-1].Text() == "to the moved target" && cs[len(cs)-1].Body["chat_id"] == "gus"
	}); !ok {
		t.Fatalf("the moved target got %s", dump(moved.Calls()))
	}

	if status, b, _ := e.node.Do(http.MethodDelete, "/v1/channels/wb6-gus", nil); status != http.StatusNoContent {
		t.Fatalf("DELETE: %d %s", status, b)
	}
	e.agent.Drain()
	if status, body := e.postBot("wb6", botPost{Conv: "gus", Sender: "gus", TargetMessageID: "g2", Text: "two"}); status != http.StatusAccepted || body["connector_channel_id"] != "wb6-gus" {
		t.Fatalf("post after DELETE: %d %v", status, body)
	}
	if opened := nextOf(t, e.agent, profile.TypeChannelOpened); opened.ChannelID != "wb6-gus" {
		t.Fatalf("channel.opened on %s", opened.ChannelID)
	}
	if _, m := userMessage(t, e.agent, wait); m.Text != "two" {
		t.Fatalf("message %+v", m)
	}
}

// edge-api §4.1: GET /v1/bots pages as GET /v1/channels does.
func TestBots_ListPages(t *testing.T) {
	t.Parallel()
	e := newEnv(t, envOptions{})
	for _, id := range []string{"pb-c", "pb-a", "pb-b"} {
		if status, body := e.putBot(id, map[string]any{"direct": "open"}, nil); status != http.StatusOK {
			t.Fatalf("PUT %s: %d %v", id, status, body)
		}
	}
	var ids []string
	after := ""
	for range 3 {
		path := "/v1/bots?limit=2"
		if after != "" {
			path += "&after=" + after
		}
		_, b, _ := e.node.Do(http.MethodGet, path, nil)
		var page struct {
			Bots []struct {
				ID string `json:"bot_id"`
			} `json:"bots"`
			Next *string `json:"next"`
		}
		if err := json.Unmarshal(b, &page); err != nil {
			t.Fatal(err)
		}
		for _, bt := range page.Bots {
			ids = append(ids, bt.ID)
		}
		if page.Next == nil {
			break
		}
		after = *page.Next
	}
	if strings.Join(ids, ",") != "pb-a,pb-b,pb-c" {
		t.Fatalf("listed %v", ids)
	}
	for path, code := range map[string]string{"/v1/bots?limit=0": "bad_request", "/v1/bots?limit=1001": "bad_request", "/v1/bots?after=a.b": "invalid_bot_id"} {
		if status, b, _ := e.node.Do(http.MethodGet, path, nil); status != http.StatusBadRequest || !strings.Contains(string(b), code) {
			t.Errorf("GET %s: %d %s, want 400 %s", path, status, b, code)
		}
	}
}

// DELETE /v1/bots/{id} closes every channel the bot opened, thousands of them, even when the
// client gives up before the answer; a DELETE repeated after an interrupted one (the bot gone,
// some of its channels left) finishes the job instead of answering bot_not_found.
func TestBots_DeleteClosesThousandsOfChannelsWhateverTheClientDoes(t *testing.T) {
	t.Parallel()
	e := newEnv(t, envOptions{})
	e.putBot("big", map[string]any{"direct": "open"}, nil)
	nc := e.natsConn()
	js, _ := jetstream.New(nc)
	const n = 3000
	seedBotChannels(t, js, "big", n)
	channels := func() float64 {
		_, b, _ := e.node.Do(http.MethodGet, "/v1/bots/big", nil)
		st, _ := jsonOf(t, b)["stats"].(map[string]any)
		c, _ := st["channels"].(float64)
		return c
	}
	poll(t, "the node holds the bot's channels", func() bool { return channels() == n })

	// An interrupted DELETE: the bot's record gone, its channels left.
	kv, err := js.KeyValue(context.Background(), subjects.BucketBots)
	if err != nil {
		t.Fatal(err)
	}
	if err := kv.Purge(context.Background(), "big"); err != nil {
		t.Fatal(err)
	}
	poll(t, "the bot is gone", func() bool {
		status, _, _ := e.node.Do(http.MethodGet, "/v1/bots/big", nil)
		return status == http.StatusNotFound
	})
	// A client that leaves after 50 ms.
	start := time.Now()
	ctx, cancel := context.WithTimeout(context.Background(), 50*time.Millisecond)
	req, _ := http.NewRequestWithContext(ctx, http.MethodDelete, "http://"+e.node.Addr+"/v1/bots/big", nil)
	req.Header.Set("Authorization", "Bearer "+e.node.Token)
	if resp, err := http.DefaultClient.Do(req); err == nil {
		resp.Body.Close()
		if resp.StatusCode != http.StatusNoContent {
			t.Fatalf("DELETE of the bot whose channels are left: %d", resp.StatusCode)
		}
	}
	cancel()
	// The channels of a bot gone are hidden from the API at once: count their records.
	records, err := js.KeyValue(context.Background(), subjects.BucketBotChannels)
	if err != nil {
		t.Fatal(err)
	}
	left := func() int {
		keys, err := records.ListKeys(context.Background())
		if err != nil {
			t.Fatal(err)
		}
		n := 0
		for k := range keys.Keys() {
			if strings.HasPrefix(k, "big-") {
				n++
			}
		}
		return n
	}
	deadline := time.Now().Add(2 * time.Minute)
	for left() > 0 {
		if time.Now().After(deadline) {
			t.Fatalf("%d of %d channels left 2 min after the DELETE", left(), n)
		}
		time.Sleep(100 * time.Millisecond)
	}
	t.Logf("%d channels closed in %s", n, time.Since(start).Round(time.Millisecond))
	if status, b, _ := e.node.Do(http.MethodDelete, "/v1/bots/big", nil); status != http.StatusNotFound || !strings.Contains(string(b), "bot_not_found") {
		t.Fatalf("DELETE once nothing is left: %d %s", status, b)
	}
}
