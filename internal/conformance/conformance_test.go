package conformance_test

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"net/http/httputil"
	"net/url"
	"os"
	"regexp"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/coder/websocket"

	"github.com/ximd/ximd/internal/conformance"
	"github.com/ximd/ximd/internal/testkit"
	"github.com/ximd/ximd/pipeline/node"
)

// The checklist proves something only if each check fails when the edge breaks its rule.
// These tests run checks against a real in-process ximd (they pass) and against edges broken
// on purpose by a proxy, either between xAgent (the checks) and ximd or between ximd and the
// target the checks serve; each broken edge must fail its matching check, with a detail that
// names what was wrong.

// startNode starts an all-in-one ximd whose XIM_ACK_TIMEOUT is short, so the user-message
// checks are quick.
func startNode(t *testing.T) *testkit.Node {
	t.Helper()
	n, err := testkit.StartNode(testkit.NodeOptions{DataDir: t.TempDir(), Mutate: func(c *node.Config) {
		c.AckTimeout = time.Second
	}})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = n.Stop() })
	return n
}

// edge is how a test puts itself between the checks and ximd: edgeProxy fronts ximd's HTTP
// edge, targetProxy (given the target's address) fronts the target.
type edge struct {
	edgeProxy   func(upstream string) http.Handler
	targetProxy func(upstream string) http.Handler
}

// run runs the checks only matches against n through e, each wait for ximd bounded by wait, and
// returns the report.
func run(t *testing.T, n *testkit.Node, only string, wait time.Duration, e edge) conformance.Report {
	t.Helper()
	cfg := conformance.Config{HTTPAddr: n.Addr, Token: n.Token, Only: regexp.MustCompile(only), Settle: 500 * time.Millisecond, Wait: wait}
	if e.edgeProxy != nil {
		srv := httptest.NewServer(e.edgeProxy(n.Addr))
		t.Cleanup(srv.Close)
		cfg.HTTPAddr = strings.TrimPrefix(srv.URL, "http://")
	}
	if e.targetProxy != nil {
		ln, err := net.Listen("tcp", "127.0.0.1:0")
		if err != nil {
			t.Fatal(err)
		}
		srv := httptest.NewServer(e.targetProxy(ln.Addr().String()))
		t.Cleanup(srv.Close)
		cfg.Listener, cfg.TargetURL = ln, srv.URL
	}
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	rep, err := conformance.Run(ctx, cfg)
	if err != nil {
		t.Fatal(err)
	}
	return rep
}

func result(t *testing.T, rep conformance.Report, id string) conformance.Result {
	t.Helper()
	for _, r := range rep.Checks {
		if r.ID == id {
			return r
		}
	}
	t.Fatalf("check %s did not run: %+v", id, rep.Checks)
	return conformance.Result{}
}

func TestAgainstNodeEveryCheckPasses(t *testing.T) {
	n := startNode(t)
	rep := run(t, n, ".", 20*time.Second, edge{})
	if len(rep.Checks) != len(conformance.Checks()) {
		t.Fatalf("%d checks ran, want all %d", len(rep.Checks), len(conformance.Checks()))
	}
	for _, r := range rep.Checks {
		want := conformance.Pass
		if r.ID == "state-bounded" {
			want = conformance.Skip
		}
		if r.Status != want || r.Detail == "" {
			t.Errorf("%s (%s): %s %q, want %s", r.ID, r.Rule, r.Status, r.Detail, want)
		}
	}
	// The channels the checks opened are gone.
	list, err := n.Channels()
	if err != nil {
		t.Fatalf("after the run: GET /v1/channels: %v", err)
	}
	for _, ch := range list {
		if strings.Contains(string(ch), "conformance-") {
			t.Fatalf("after the run: GET /v1/channels lists %s, want no conformance channel", ch)
		}
	}
}

// TestBrokenEdgesFailTheirChecks: each broken edge fails the check that watches its rule.
func TestBrokenEdgesFailTheirChecks(t *testing.T) {
	n := startNode(t)
	cases := []struct {
		name       string
		edge       edge
		check      string
		wantDetail string
	}{
		{"acks carry a rewritten reply_to", edge{edgeProxy: wsProxy(rewriteReplyTo)}, "ack-matches", "reply_to"},
		{"a target call is made twice", edge{targetProxy: targetProxy(duplicateMessageCalls)}, "direct-final", "2 target calls"},
		{"idle is not passed on", edge{targetProxy: targetProxy(dropIdle)}, "activity-shown-cleared", "did not clear"},
		{"accepted before the target answered", edge{targetProxy: targetProxy(answerEarly)}, "accepted-after-target", "before the target answered"},
		{"a target failure acked accepted", edge{targetProxy: targetProxy(answerEarly)}, "target-failure-codes", "target answering 503: accepted"},
		{"acked user messages sent again on reconnect", edge{edgeProxy: wsProxy(replayAcked())}, "reconnect-pending-only", "sent again after the reconnect"},
		{"target calls lose the V2 signature", edge{targetProxy: targetProxy(stripV2)}, "target-signatures", "X-Xim-Signature-V2 did not verify"},
		{"a retransmission is delivered again", edge{edgeProxy: wsProxy(renameRetransmission())}, "retransmit-duplicate", "want duplicate"},
		{"a sequence gap is spliced", edge{edgeProxy: wsProxy(spliceGaps())}, "delta-gap", "sequence 3 after 1: no error packet"},
		{"a retransmitted delta is appended", edge{edgeProxy: wsProxy(appendRetransmittedDeltas())}, "delta-retransmit-once", "applied twice"},
		{"user messages carry session_id", edge{edgeProxy: wsProxy(rewriteDown(func(m map[string]any) {
			if p := payloadOf(m); m["type"] == "chat.message" {
				p["session_id"] = "sess_1"
			}
		}))}, "internal-keys-absent", `payload carries "session_id"`},
		{"session sync passed on as a message", edge{edgeProxy: wsProxy(rewriteUp(func(m map[string]any) {
			if m["type"] == "session.sync_message" {
				m["type"] = "chat.message"
			}
		}))}, "session-sync-dropped", "answered with chat.message.ack"},
		{"user messages never sent again", edge{edgeProxy: wsProxy(dropResends())}, "user-msg-pending", "not sent again"},
		{"streaming none shows deltas", edge{edgeProxy: wsProxy(streamAnyway{})}, "no-text-before-final", "before the final, want none"},
		{"an in-flight retransmission is delivered again", edge{edgeProxy: wsProxy(renameRetransmission())}, "retransmit-in-flight", "want accepted and duplicate"},
		{"errors about unreadable frames are lost", edge{edgeProxy: wsProxy(dropDown(func(m map[string]any) bool { return m["type"] == "error" && m["reply_to"] == nil }))},
			"malformed-frame", "not JSON: no error packet"},
		{"another schema taken as ours", edge{edgeProxy: wsProxy(rewriteUp(func(m map[string]any) {
			if m["schema"] == "xagent.connector.packet/v2" {
				m["schema"] = "xagent.connector.packet/v1"
			}
		}))}, "unsupported-schema", "want an error packet"},
		{"a tool overtakes a final", edge{edgeProxy: wsProxy(&finalHolder{})}, "tool-after-final", "want the final, then the tool's"},
		{"typing shown as a status", edge{targetProxy: targetProxy(typingAsThinking)}, "activity-degraded", `status "thinking"`},
		{"channel.opened lost", edge{edgeProxy: wsProxy(dropDown(func(m map[string]any) bool { return m["type"] == "channel.opened" }))},
			"bot-opens-channel", "want channel.opened"},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			rep := run(t, n, "^"+c.check+"$", 6*time.Second, c.edge)
			r := result(t, rep, c.check)
			if r.Status != conformance.Fail || !strings.Contains(r.Detail, c.wantDetail) {
				t.Fatalf("%s: %s %q, want fail naming %q", c.check, r.Status, r.Detail, c.wantDetail)
			}
			t.Logf("%s: fail: %s", c.check, r.Detail)
		})
	}
}

// --- the xAgent-side proxy: ximd's HTTP edge, with the packet stream rewritten ---

// frames rewrites the packet stream: down are ximd's frames to xAgent (conn counts the
// connections, from 1), up xAgent's to ximd; each returns the frames to pass on. opened is
// called when a connection is up, with a writer to xAgent.
type frames interface {
	down(conn int, f []byte) [][]byte
	up(f []byte) [][]byte
	opened(conn int, toAgent func([]byte))
}

// wsProxy passes HTTP through and the WebSocket /v1/ws frame by frame through fr.
func wsProxy(fr frames) func(upstream string) http.Handler {
	return func(upstream string) http.Handler {
		rp := httputil.NewSingleHostReverseProxy(&url.URL{Scheme: "http", Host: upstream})
		var mu sync.Mutex
		conns := 0
		return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			if r.URL.Path != "/v1/ws" {
				if rw, ok := fr.(requestRewriter); ok {
					rw.rewrite(r)
				}
				rp.ServeHTTP(w, r)
				return
			}
			ctx, cancel := context.WithCancel(context.Background())
			defer cancel()
			up, _, err := websocket.Dial(ctx, "ws://"+upstream+"/v1/ws", &websocket.DialOptions{
				Subprotocols: []string{"xagent.connector.packet.v1"}, HTTPHeader: http.Header{"Authorization": r.Header["Authorization"]}})
			if err != nil {
				http.Error(w, err.Error(), http.StatusBadGateway)
				return
			}
			defer up.CloseNow()
			up.SetReadLimit(64 << 20)
			agent, err := websocket.Accept(w, r, &websocket.AcceptOptions{Subprotocols: []string{"xagent.connector.packet.v1"}})
			if err != nil {
				return
			}
			defer agent.CloseNow()
			agent.SetReadLimit(64 << 20)
			mu.Lock()
			conns++
			conn := conns
			mu.Unlock()
			var wmu sync.Mutex
			toAgent := func(f []byte) {
				wmu.Lock()
				defer wmu.Unlock()
				_ = agent.Write(ctx, websocket.MessageText, f)
			}
			fr.opened(conn, toAgent)
			go func() {
				defer cancel()
				for {
					_, f, err := up.Read(ctx)
					if err != nil {
						return
					}
					for _, out := range fr.down(conn, f) {
						toAgent(out)
					}
				}
			}()
			for {
				_, f, err := agent.Read(ctx)
				if err != nil {
					return
				}
				for _, out := range fr.up(f) {
					if up.Write(ctx, websocket.MessageText, out) != nil {
						return
					}
				}
			}
		})
	}
}

// requestRewriter is a frames that also rewrites the HTTP requests it passes on.
type requestRewriter interface{ rewrite(r *http.Request) }

// streamAnyway binds every channel with streaming edit, whatever the Descriptor says.
type streamAnyway struct{ passThrough }

func (streamAnyway) rewrite(r *http.Request) {
	if r.Method != http.MethodPut {
		return
	}
	body, _ := io.ReadAll(r.Body)
	body = bytes.ReplaceAll(body, []byte(`"streaming":"none"`), []byte(`"streaming":"edit"`))
	r.Body, r.ContentLength = io.NopCloser(bytes.NewReader(body)), int64(len(body))
}

// passThrough passes every frame unchanged; the broken edges override what they break.
type passThrough struct{}

func (passThrough) down(_ int, f []byte) [][]byte { return [][]byte{f} }
func (passThrough) up(f []byte) [][]byte          { return [][]byte{f} }
func (passThrough) opened(int, func([]byte))      {}

// envelope decodes a frame loosely.
func envelope(f []byte) map[string]any {
	var m map[string]any
	_ = json.Unmarshal(f, &m)
	return m
}

func encode(m map[string]any) []byte { b, _ := json.Marshal(m); return b }

func payloadOf(m map[string]any) map[string]any { p, _ := m["payload"].(map[string]any); return p }

// rewriteReplyTo gives every ack a reply_to that is not its final's packet_id.
var rewriteReplyTo = rewriteDown(func(m map[string]any) {
	if m["type"] == "chat.message.ack" {
		m["reply_to"] = "pkt_rewritten_by_the_edge"
	}
})

type downRewriter struct {
	passThrough
	f func(map[string]any)
}

func rewriteDown(f func(map[string]any)) frames { return downRewriter{f: f} }

func (d downRewriter) down(_ int, f []byte) [][]byte {
	m := envelope(f)
	d.f(m)
	return [][]byte{encode(m)}
}

type upRewriter struct {
	passThrough
	f func(map[string]any)
}

func rewriteUp(f func(map[string]any)) frames { return upRewriter{f: f} }

func (u upRewriter) up(f []byte) [][]byte {
	m := envelope(f)
	u.f(m)
	return [][]byte{encode(m)}
}

type downDropper struct {
	passThrough
	drop func(map[string]any) bool
}

// dropDown never passes on ximd's packets that drop accepts.
func dropDown(drop func(map[string]any) bool) frames { return downDropper{drop: drop} }

func (d downDropper) down(_ int, f []byte) [][]byte {
	if d.drop(envelope(f)) {
		return nil
	}
	return [][]byte{f}
}

// finalHolder passes each chat.message from xAgent after the frame that follows it.
type finalHolder struct {
	passThrough
	mu   sync.Mutex
	held [][]byte
}

func (h *finalHolder) up(f []byte) [][]byte {
	h.mu.Lock()
	defer h.mu.Unlock()
	if envelope(f)["type"] == "chat.message" && len(h.held) == 0 {
		h.held = append(h.held, f)
		return nil
	}
	out := append([][]byte{f}, h.held...)
	h.held = nil
	return out
}

// spliceGaps renumbers deltas so that their sequences have no gap: 1, 3 becomes 1, 2.
func spliceGaps() frames {
	next := map[string]float64{}
	var mu sync.Mutex
	return rewriteUp(func(m map[string]any) {
		p := payloadOf(m)
		if m["type"] != "chat.message.delta" {
			return
		}
		mu.Lock()
		defer mu.Unlock()
		id := fmt.Sprint(p["message_id"])
		next[id]++
		p["sequence"] = next[id]
	})
}

// appendRetransmittedDeltas gives every delta the next sequence of its message, so a
// retransmission is appended.
func appendRetransmittedDeltas() frames { return spliceGaps() }

// dropResends passes each user message to xAgent once only.
func dropResends() frames { return &dropper{seen: map[string]bool{}} }

type dropper struct {
	passThrough
	mu   sync.Mutex
	seen map[string]bool
}

func (d *dropper) down(_ int, f []byte) [][]byte {
	m := envelope(f)
	if m["type"] != "chat.message" {
		return [][]byte{f}
	}
	id := fmt.Sprint(payloadOf(m)["message_id"])
	d.mu.Lock()
	defer d.mu.Unlock()
	if d.seen[id] {
		return nil
	}
	d.seen[id] = true
	return [][]byte{f}
}

// replayAcked resends, on every new connection, the user messages xAgent acked accepted.
func replayAcked() frames { return &replayer{sent: map[string]map[string]any{}} }

type replayer struct {
	passThrough
	mu    sync.Mutex
	sent  map[string]map[string]any // message_id -> the user message as sent
	acked []string
}

func (r *replayer) down(_ int, f []byte) [][]byte {
	if m := envelope(f); m["type"] == "chat.message" {
		r.mu.Lock()
		r.sent[fmt.Sprint(payloadOf(m)["message_id"])] = m
		r.mu.Unlock()
	}
	return [][]byte{f}
}

func (r *replayer) up(f []byte) [][]byte {
	if m := envelope(f); m["type"] == "chat.message.ack" && payloadOf(m)["status"] == "accepted" {
		r.mu.Lock()
		r.acked = append(r.acked, fmt.Sprint(payloadOf(m)["message_id"]))
		r.mu.Unlock()
	}
	return [][]byte{f}
}

func (r *replayer) opened(conn int, toAgent func([]byte)) {
	if conn == 1 {
		return
	}
	r.mu.Lock()
	defer r.mu.Unlock()
	for _, id := range r.acked {
		if m, ok := r.sent[id]; ok {
			m["packet_id"] = "pkt_replayed_" + id
			toAgent(encode(m))
		}
	}
}

// renameRetransmission gives a final sent again (same message_id) a new message_id, as an
// edge that keyed idempotency by packet_id or content would see it: ximd then delivers it.
func renameRetransmission() frames { return &renamer{seen: map[string]bool{}} }

type renamer struct {
	passThrough
	mu   sync.Mutex
	seen map[string]bool
	n    int
}

func (r *renamer) up(f []byte) [][]byte {
	m := envelope(f)
	if m["type"] != "chat.message" {
		return [][]byte{f}
	}
	p := payloadOf(m)
	id := fmt.Sprint(p["message_id"])
	r.mu.Lock()
	defer r.mu.Unlock()
	if !r.seen[id] {
		r.seen[id] = true
		return [][]byte{f}
	}
	r.n++
	p["message_id"] = fmt.Sprintf("%s_again_%d", id, r.n)
	return [][]byte{encode(m)}
}

func (r *renamer) down(_ int, f []byte) [][]byte {
	// The ack of the renamed final names the message xAgent sent.
	m := envelope(f)
	if p := payloadOf(m); m["type"] == "chat.message.ack" {
		if id, _, ok := strings.Cut(fmt.Sprint(p["message_id"]), "_again_"); ok {
			p["message_id"] = id
			return [][]byte{encode(m)}
		}
	}
	return [][]byte{f}
}

// --- the target-side proxy: ximd's calls to the target, broken ---

// targetProxy forwards every request to upstream (the checks' target) through broken, which
// gets the request (its body read into body) and a function that forwards it with a body.
func targetProxy(broken func(w http.ResponseWriter, r *http.Request, body []byte, forward func([]byte) (*http.Response, error))) func(string) http.Handler {
	return func(upstream string) http.Handler {
		return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			body, _ := io.ReadAll(r.Body)
			forward := func(body []byte) (*http.Response, error) {
				req, _ := http.NewRequest(r.Method, "http://"+upstream+r.URL.RequestURI(), bytes.NewReader(body))
				req.Header = r.Header.Clone()
				return http.DefaultClient.Do(req)
			}
			broken(w, r, body, forward)
		})
	}
}

// relay writes resp to w.
func relay(w http.ResponseWriter, resp *http.Response, err error) {
	if err != nil {
		http.Error(w, err.Error(), http.StatusBadGateway)
		return
	}
	defer resp.Body.Close()
	for k, v := range resp.Header {
		w.Header()[k] = v
	}
	w.WriteHeader(resp.StatusCode)
	_, _ = io.Copy(w, resp.Body)
}

func isMessages(r *http.Request) bool { return strings.Contains(r.URL.Path, "/messages") }

// duplicateMessageCalls makes every POST /messages twice.
func duplicateMessageCalls(w http.ResponseWriter, r *http.Request, body []byte, forward func([]byte) (*http.Response, error)) {
	resp, err := forward(body)
	if r.Method == http.MethodPost && isMessages(r) && err == nil {
		if again, err := forward(body); err == nil {
			again.Body.Close()
		}
	}
	relay(w, resp, err)
}

// dropIdle answers activity idle itself and never passes it on.
func dropIdle(w http.ResponseWriter, r *http.Request, body []byte, forward func([]byte) (*http.Response, error)) {
	if strings.HasSuffix(r.URL.Path, "/activity") && bytes.Contains(body, []byte(`"idle"`)) {
		w.WriteHeader(http.StatusNoContent)
		return
	}
	resp, err := forward(body)
	relay(w, resp, err)
}

// answerEarly answers message calls 200 at once and passes them on afterwards.
func answerEarly(w http.ResponseWriter, r *http.Request, body []byte, forward func([]byte) (*http.Response, error)) {
	if !isMessages(r) || r.Method == http.MethodGet {
		resp, err := forward(body)
		relay(w, resp, err)
		return
	}
	go func() {
		if resp, err := forward(body); err == nil {
			resp.Body.Close()
		}
	}()
	w.Header().Set("Content-Type", "application/json")
	_, _ = w.Write([]byte(`{"message_id":"early"}`))
}

// typingAsThinking passes typing on as thinking.
func typingAsThinking(w http.ResponseWriter, r *http.Request, body []byte, forward func([]byte) (*http.Response, error)) {
	if strings.HasSuffix(r.URL.Path, "/activity") {
		body = bytes.ReplaceAll(body, []byte(`"typing"`), []byte(`"thinking"`))
	}
	resp, err := forward(body)
	relay(w, resp, err)
}

// stripV2 removes the V2 signature from every call.
func stripV2(w http.ResponseWriter, r *http.Request, body []byte, forward func([]byte) (*http.Response, error)) {
	r.Header.Del("X-Xim-Signature-V2")
	resp, err := forward(body)
	relay(w, resp, err)
}

// TestDocsListEveryCheck: docs/ximctl.md has a row for every check, with its rule.
func TestDocsListEveryCheck(t *testing.T) {
	doc, err := os.ReadFile("../../docs/ximctl.md")
	if err != nil {
		t.Fatal(err)
	}
	for _, c := range conformance.Checks() {
		if row := fmt.Sprintf("| `%s` | %s | %s |", c.ID, c.Rule, c.Detail); !strings.Contains(string(doc), row) {
			t.Errorf("docs/ximctl.md lacks the row %s", row)
		}
	}
}

// TestInternalTargetNamedByHostNameIsExplained: ximd refuses to download user files from a host
// name that resolves to an internal address, so inbound-file-url fails against a target URL
// such as http://localhost:…, and its detail says to give the IP instead.
func TestInternalTargetNamedByHostNameIsExplained(t *testing.T) {
	n := startNode(t)
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	_, port, _ := net.SplitHostPort(ln.Addr().String())
	cfg := conformance.Config{HTTPAddr: n.Addr, Token: n.Token, Only: regexp.MustCompile("^inbound-file-url$"),
		Listener: ln, TargetURL: "http://localhost:" + port, Wait: 15 * time.Second}
	rep, err := conformance.Run(context.Background(), cfg)
	if err != nil {
		t.Fatal(err)
	}
	r := result(t, rep, "inbound-file-url")
	if r.Status != conformance.Fail || !strings.Contains(r.Detail, "file_download_failed") || !strings.Contains(r.Detail, "give its IP address instead") {
		t.Fatalf("inbound-file-url with a localhost target: %s %q, want a failure that says to give the IP", r.Status, r.Detail)
	}
}

func TestMalformedTargetURLIsRefusedBeforeAnyCheck(t *testing.T) {
	_, err := conformance.Run(context.Background(), conformance.Config{HTTPAddr: "127.0.0.1:1", Token: "t", TargetURL: "ftp://example.com"})
	if err == nil || !strings.Contains(err.Error(), "want http(s)://host[:port]") {
		t.Fatalf("ftp target URL: %v, want a refusal", err)
	}
}
