package conformance

import (
	"bytes"
	"context"
	"crypto/rand"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"mime/multipart"
	"net"
	"net/http"
	"net/url"
	"regexp"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/ximd/ximd/handlers/adapter/webhook"
)

// Status is a check's outcome.
type Status string

// The outcomes: pass (the rule was seen to hold), fail (it was seen broken, or what should
// have happened did not within Config.Wait), skip (it cannot be observed through the edge API).
const (
	Pass Status = "pass"
	Fail Status = "fail"
	Skip Status = "skip"
)

// Result is one check's outcome. Detail is one line: what was sent and what was seen (for a
// failure, what was wrong; for a skip, why and where the rule's bound is documented).
type Result struct {
	ID     string `json:"id"`
	Rule   string `json:"rule"`
	Status Status `json:"status"`
	Detail string `json:"detail"`
}

// Report is a run's outcome, in check order; its JSON is what `ximctl conformance --json`
// prints.
type Report struct {
	Checks []Result `json:"checks"`
}

// Count returns how many checks ended with s.
func (r Report) Count(s Status) int {
	n := 0
	for _, c := range r.Checks {
		if c.Status == s {
			n++
		}
	}
	return n
}

// Config says where the ximd under test is and how to play the target system.
type Config struct {
	// HTTPAddr is host:port of ximd's HTTP edge; Token is xAgent's bearer token.
	HTTPAddr, Token string
	// TargetListen is where the webhook target listens (default 127.0.0.1:0); Listener, when
	// set, is used instead. TargetURL is the target's base URL as ximd must call it (default
	// http://<listen address>): set it when ximd runs on another machine.
	TargetListen string
	Listener     net.Listener
	TargetURL    string
	// Wait bounds every wait for something ximd must do: an ack, a target call, a user message
	// sent again. It must exceed the node's XIM_ACK_TIMEOUT (default 10s). Default 30s.
	Wait time.Duration
	// Settle is how long a check watches for something that must not happen (a second target
	// call, a packet sent again). Default 1s.
	Settle time.Duration
	// Only, when set, runs only the checks whose id it matches.
	Only *regexp.Regexp
	// Starting, when set, is called before each check with its index (from 0), the number of
	// checks that run and the check's id; Finished after it with its result.
	Starting func(index, total int, id string)
	Finished func(Result)
}

func (c *Config) defaults() error {
	if c.HTTPAddr == "" || c.Token == "" {
		return errors.New("conformance: HTTPAddr and Token are required")
	}
	if c.TargetListen == "" {
		c.TargetListen = "127.0.0.1:0"
	}
	if c.Wait <= 0 {
		c.Wait = 30 * time.Second
	}
	if c.Settle <= 0 {
		c.Settle = time.Second
	}
	return nil
}

// Checks lists every check: id, rule, and a one-line statement of what it proves (its Detail).
func Checks() []Result {
	out := make([]Result, len(checks))
	for i, c := range checks {
		out[i] = Result{ID: c.id, Rule: c.rule, Detail: c.title}
	}
	return out
}

// Run plays xAgent and the target system against the ximd at cfg.HTTPAddr and runs every check
// (or those cfg.Only matches) in order. Each check opens its own scratch channels, bound to the
// webhook target Run serves; they are deleted before Run returns, also when ctx is cancelled.
// The error is for a run that could not start (ximd unreachable, token refused, the target
// address taken) or was cancelled; failed checks are in the Report.
func Run(ctx context.Context, cfg Config) (Report, error) {
	if err := cfg.defaults(); err != nil {
		return Report{}, err
	}
	var todo []check
	for _, c := range checks {
		if cfg.Only == nil || cfg.Only.MatchString(c.id) {
			todo = append(todo, c)
		}
	}
	if len(todo) == 0 {
		return Report{}, fmt.Errorf("conformance: no check id matches %q", cfg.Only)
	}
	ln := cfg.Listener
	if ln == nil {
		var err error
		if ln, err = net.Listen("tcp", cfg.TargetListen); err != nil {
			return Report{}, fmt.Errorf("conformance: target: %w", err)
		}
	}
	if cfg.TargetURL == "" {
		cfg.TargetURL = "http://" + ln.Addr().String()
	}
	if u, err := url.Parse(cfg.TargetURL); err != nil || (u.Scheme != "http" && u.Scheme != "https") || u.Host == "" {
		ln.Close()
		return Report{}, fmt.Errorf("conformance: target URL %q: want http(s)://host[:port]", cfg.TargetURL)
	}
	s := &session{cfg: cfg, ctx: ctx, run: randomHex(4), secret: randomHex(16), http: &http.Client{Timeout: cfg.Wait}}
	s.target = newTarget(ln, strings.TrimSuffix(cfg.TargetURL, "/"), []byte(s.secret))
	defer s.target.close()
	if err := s.preflight(); err != nil {
		return Report{}, err
	}
	s.agent = newAgent(cfg.HTTPAddr, cfg.Token)
	defer s.agent.close()
	if err := s.agent.connect(ctx); err != nil {
		return Report{}, err
	}
	defer s.cleanup()
	var rep Report
	for i, c := range todo {
		if cfg.Starting != nil {
			cfg.Starting(i, len(todo), c.id)
		}
		v := s.check(c)
		if ctx.Err() != nil {
			return rep, ctx.Err()
		}
		r := Result{ID: c.id, Rule: c.rule, Status: v.status, Detail: v.detail}
		rep.Checks = append(rep.Checks, r)
		if cfg.Finished != nil {
			cfg.Finished(r)
		}
		if s.agent.current() == nil { // a check that reconnects failed half-way
			if err := s.agent.connect(ctx); err != nil {
				return rep, err
			}
		}
	}
	return rep, nil
}

// check runs c on a channel bound as c asks.
func (s *session) check(c check) verdict {
	if c.bind == noChannel {
		return c.run(s, "")
	}
	ch, err := s.channel(c.bind.streaming, c.bind.activity)
	if err != nil {
		return errored(err)
	}
	return c.run(s, ch)
}

// session is one run's state, shared by its checks (which run one at a time).
type session struct {
	cfg    Config
	ctx    context.Context
	run    string // names this run's channels
	secret string // every scratch channel's webhook secret
	http   *http.Client
	target *target
	agent  *agent

	mu       sync.Mutex
	channels []string // opened, to delete at the end
	n        int
}

func randomHex(n int) string {
	b := make([]byte, n)
	_, _ = rand.Read(b)
	return hex.EncodeToString(b)
}

// preflight fails fast when the edge is not there or refuses the token.
func (s *session) preflight() error {
	status, body, err := s.do(http.MethodGet, "/v1/card", nil, "")
	if err != nil {
		return fmt.Errorf("conformance: ximd at http://%s: %w", s.cfg.HTTPAddr, err)
	}
	if status == http.StatusUnauthorized {
		return fmt.Errorf("conformance: ximd at http://%s refuses the token (401 %s)", s.cfg.HTTPAddr, oneLine(body))
	}
	return nil
}

// cleanup deletes every scratch channel, with its own deadline (ctx may be cancelled).
func (s *session) cleanup() {
	s.mu.Lock()
	chs := s.channels
	s.channels = nil
	s.mu.Unlock()
	ctx, cancel := context.WithTimeout(context.Background(), 15*time.Second)
	defer cancel()
	for _, ch := range chs {
		req, _ := http.NewRequestWithContext(ctx, http.MethodDelete, "http://"+s.cfg.HTTPAddr+"/v1/channels/"+ch, nil)
		req.Header.Set("Authorization", "Bearer "+s.cfg.Token)
		if resp, err := s.http.Do(req); err == nil {
			resp.Body.Close()
		}
	}
}

// newID returns a fresh id with prefix, unique in this run.
func (s *session) newID(prefix string) string { return prefix + "_" + randomHex(8) }

// scratch returns the channel id conformance-<run>-<suffix>, deleted when the run ends (whether
// or not a check opens it).
func (s *session) scratch(suffix string) string {
	id := "conformance-" + s.run + "-" + suffix
	s.mu.Lock()
	s.channels = append(s.channels, id)
	s.mu.Unlock()
	return id
}

// channel opens a scratch channel bound to the target with the given streaming and activity
// capabilities (chat_id = the channel id); it is deleted when the run ends.
func (s *session) channel(streaming, activity string) (string, error) {
	s.mu.Lock()
	s.n++
	n := s.n
	s.mu.Unlock()
	id := s.scratch(strconv.Itoa(n))
	status, body, err := s.put(id, descriptor(id, s.webhookConfig(id, streaming, activity)))
	if err != nil {
		return "", err
	}
	if status != http.StatusOK {
		return "", fmt.Errorf("PUT /v1/channels/%s: %d %s", id, status, oneLine(body))
	}
	return id, nil
}

func (s *session) webhookConfig(chat, streaming, activity string) map[string]any {
	return map[string]any{"url": s.target.url, "chat_id": chat, "secret": s.secret, "streaming": streaming, "activity": activity}
}

// descriptor is a PUT /v1/channels body: the Descriptor declaring IM v2 and a webhook binding.
func descriptor(chat string, config map[string]any) map[string]any {
	return map[string]any{
		"connection": map[string]any{"target_type": "im", "profiles": []string{"xagent.im.v2"}},
		"target":     map[string]any{"adapter": "webhook", "config": config},
	}
}

func (s *session) put(id string, body any) (int, []byte, error) {
	return s.do(http.MethodPut, "/v1/channels/"+id, body, "")
}

// do calls the edge with the token; body is JSON unless it is []byte; contentType overrides.
func (s *session) do(method, path string, body any, contentType string) (int, []byte, error) {
	var rd io.Reader
	switch b := body.(type) {
	case nil:
	case []byte:
		rd = bytes.NewReader(b)
	default:
		j, err := json.Marshal(b)
		if err != nil {
			return 0, nil, err
		}
		rd = bytes.NewReader(j)
		contentType = "application/json"
	}
	req, err := http.NewRequestWithContext(s.ctx, method, "http://"+s.cfg.HTTPAddr+path, rd)
	if err != nil {
		return 0, nil, err
	}
	req.Header.Set("Authorization", "Bearer "+s.cfg.Token)
	if contentType != "" {
		req.Header.Set("Content-Type", contentType)
	}
	return s.roundTrip(req)
}

func (s *session) roundTrip(req *http.Request) (int, []byte, error) {
	resp, err := s.http.Do(req)
	if err != nil {
		return 0, nil, err
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(io.LimitReader(resp.Body, 64<<20))
	return resp.StatusCode, b, err
}

// upload posts b as a file of channel to /files/uploads and returns its file_ref.
func (s *session) upload(channel, filename string, b []byte) (string, error) {
	var buf bytes.Buffer
	mw := multipart.NewWriter(&buf)
	_ = mw.WriteField("connector_channel_id", channel)
	_ = mw.WriteField("mime_type", "text/plain")
	fw, _ := mw.CreateFormFile("file", filename)
	_, _ = fw.Write(b)
	_ = mw.Close()
	status, body, err := s.do(http.MethodPost, "/files/uploads", buf.Bytes(), mw.FormDataContentType())
	if err != nil {
		return "", err
	}
	var up struct {
		FileRef string `json:"file_ref"`
	}
	if status != http.StatusCreated || json.Unmarshal(body, &up) != nil || up.FileRef == "" {
		return "", fmt.Errorf("POST /files/uploads: %d %s", status, oneLine(body))
	}
	return up.FileRef, nil
}

// userMessage posts a user message as the target system does (signed V1 and V2, no token) and
// returns the message_id ximd answered with.
func (s *session) userMessage(channel, targetMessageID, text string, files []map[string]any) (string, error) {
	body := map[string]any{"target_message_id": targetMessageID, "text": text}
	if files != nil {
		body["files"] = files
	}
	raw, _ := json.Marshal(body)
	status, resp, err := s.postSigned(channel, raw, s.secret)
	if err != nil {
		return "", err
	}
	var got struct {
		MessageID string `json:"message_id"`
	}
	if status != http.StatusAccepted || json.Unmarshal(resp, &got) != nil || got.MessageID == "" {
		e := &edgeError{Request: "POST /v1/targets/webhook/" + channel + "/messages", Status: status, Body: oneLine(resp)}
		var body struct {
			Code string `json:"code"`
		}
		if json.Unmarshal(resp, &body) == nil {
			e.Code = body.Code
		}
		return "", e
	}
	return got.MessageID, nil
}

// edgeError is a refusal by the HTTP edge.
type edgeError struct {
	Request string
	Status  int
	Code    string // the error body's code, if any
	Body    string
}

func (e *edgeError) Error() string { return fmt.Sprintf("%s: %d %s", e.Request, e.Status, e.Body) }

// postSigned posts raw to the channel's webhook inbound route signed with secret.
func (s *session) postSigned(channel string, raw []byte, secret string) (int, []byte, error) {
	req, err := http.NewRequestWithContext(s.ctx, http.MethodPost, "http://"+s.cfg.HTTPAddr+"/v1/targets/webhook/"+channel+"/messages", bytes.NewReader(raw))
	if err != nil {
		return 0, nil, err
	}
	req.Header.Set("Content-Type", "application/json")
	req.Header.Set(webhook.SignatureHeader, webhook.Sign([]byte(secret), raw))
	ts, sig := webhook.SignV2([]byte(secret), raw, time.Now())
	req.Header.Set(webhook.TimestampHeader, ts)
	req.Header.Set(webhook.SignatureV2Header, sig)
	return s.roundTrip(req)
}

// send writes a packet to channel and returns its packet_id.
func (s *session) send(channel, typ string, payload any) (string, error) {
	id := s.newID("pkt")
	return id, s.agent.send(s.ctx, id, channel, typ, payload)
}

// final sends a chat.message; files are file_refs of the channel.
func (s *session) final(channel, messageID, text string, fileRefs ...string) (string, error) {
	p := map[string]any{"message_id": messageID, "text": text, "created_at": time.Now().UnixMilli()}
	if len(fileRefs) > 0 {
		files := make([]map[string]any, len(fileRefs))
		for i, ref := range fileRefs {
			files[i] = map[string]any{"type": "file", "file_ref": ref}
		}
		p["files"] = files
	}
	return s.send(channel, "chat.message", p)
}

func (s *session) delta(channel, messageID string, seq int, text string) (string, error) {
	return s.send(channel, "chat.message.delta", map[string]any{"message_id": messageID, "sequence": seq, "text": text})
}

func (s *session) activity(channel string, payload map[string]any) (string, error) {
	return s.send(channel, "chat.activity", payload)
}

// ackOf waits for the chat.message.ack answering the final packetID of messageID: the first ack
// on the channel with that reply_to or that message_id (so an ack with a wrong reply_to is still
// found, and reported by the check that looks at it).
func (s *session) ackOf(channel, packetID, messageID string) (packet, ack, error) {
	p, ok := s.agent.box(channel).within(s.ctx, s.cfg.Wait, func(p packet) bool {
		return p.Type == "chat.message.ack" && (p.ReplyTo == packetID || p.str("message_id") == messageID)
	})
	if !ok {
		return p, ack{}, fmt.Errorf("no chat.message.ack for %s (%s) within %s", messageID, packetID, s.cfg.Wait)
	}
	return p, p.ack(), nil
}

// refusal sends a packet and waits for the error packet answering it.
func (s *session) refusal(channel string, send func() (string, error)) (ack, error) {
	pkt, err := send()
	if err != nil {
		return ack{}, err
	}
	return s.errorOf(channel, pkt)
}

// errorOf waits for the error packet answering packetID.
func (s *session) errorOf(channel, packetID string) (ack, error) {
	p, ok := s.agent.box(channel).within(s.ctx, s.cfg.Wait, func(p packet) bool {
		return p.ReplyTo == packetID
	})
	if !ok {
		return ack{}, fmt.Errorf("no error packet answering %s within %s", packetID, s.cfg.Wait)
	}
	if p.Type != "error" {
		return ack{}, fmt.Errorf("%s answered with %s %s, want an error packet", packetID, p.Type, oneLine(p.Payload))
	}
	return p.ack(), nil
}

// quiet waits Settle for a packet on channel; it returns one if it came.
func (s *session) quiet(channel string, match func(packet) bool) (packet, bool) {
	return s.agent.box(channel).within(s.ctx, s.cfg.Settle, match)
}

// calls waits until done accepts the target calls of chat (within Wait).
func (s *session) calls(chat string, done func([]call) bool) ([]call, bool) {
	return s.target.await(s.ctx, chat, s.cfg.Wait, done)
}

// settled waits Settle, then returns the chat's target calls.
func (s *session) settled(chat string) []call {
	calls, _ := s.target.await(s.ctx, chat, s.cfg.Settle, func([]call) bool { return false })
	return calls
}

// oneLine shortens b to one line of at most 160 bytes.
func oneLine(b []byte) string {
	s := strings.Join(strings.Fields(string(b)), " ")
	if len(s) > 160 {
		s = s[:157] + "..."
	}
	return s
}
