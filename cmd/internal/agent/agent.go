package agent

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"math/rand/v2"
	"strings"
	"sync"
	"time"
	"unicode"

	"github.com/ximd/ximd/pipeline/xagent"
	"github.com/ximd/ximd/profile"
)

// Bounds of the agent's state and timing that are not flags.
const (
	// seenPerChannel and seenChannels bound the answered message_ids kept for
	// duplicate detection (P-ACK-4, P-STATE-4): per channel, and how many channels.
	seenPerChannel = 10000
	seenChannels   = 1000
	// reconnectMin and reconnectMax bound the pause before dialling again.
	reconnectMin = time.Second
	reconnectMax = 30 * time.Second
	// retryBackoffMax caps the pause before a final is sent again.
	retryBackoffMax = 30 * time.Second
	// dialTimeout bounds one WebSocket handshake, writeTimeout one frame write.
	dialTimeout  = 10 * time.Second
	writeTimeout = 10 * time.Second
	// fileTimeout bounds fetching and re-uploading one file to echo.
	fileTimeout = 30 * time.Second
	// ToolName is the tool the answer shows (Config.Tool).
	ToolName = "web_search"
	// DefaultReply is the default reply template: Markdown, as an agent writes it (a list,
	// bold, code spans, a small table), so a platform's rendering of it shows at once.
	DefaultReply = "You said: \"{text}\". This answer was streamed by **ximctl agent**, in Markdown:\n\n" +
		"- one `chat.message.delta` per word\n" +
		"- then the final `chat.message`\n\n" +
		"| packet | how many |\n" +
		"|---|---|\n" +
		"| `chat.message.delta` | one a word |\n" +
		"| `chat.message` | 1 |"
)

// Config configures the agent (ximctl agent has a flag for each field).
type Config struct {
	// Name prefixes its error lines ("ximctl agent"). Default "agent".
	Name string
	// Addr is ximd's HTTP address; the agent dials ws://Addr/v1/ws.
	Addr string
	// Token is the bearer token xAgent presents.
	Token string
	// Reply is the answer template; "{text}" is replaced by the user's text.
	Reply string
	// Chunk is the number of words per chat.message.delta.
	Chunk int
	// Delay is the pause between two deltas, and before the final.
	Delay time.Duration
	// Think is how long thinking (and then the tool status) is shown before the text streams.
	Think time.Duration
	// Tool shows chat.activity tool (web_search) after thinking.
	Tool bool
	// AckTimeout: a final with no ack within it is sent again (P-ACK-3).
	AckTimeout time.Duration
	// Retries is how many times a final is sent again after a timeout or a retryable refusal.
	Retries int
	// RetryBackoff is the first pause before a final is sent again; it doubles, up to 30s.
	RetryBackoff time.Duration
	// FailRate is the probability (0..1) of refusing a new user message with a rejected ack,
	// internal_error, retryable.
	FailRate float64
	// NoAckRate is the probability (0..1) of answering a new user message without acking it,
	// as if the ack were lost.
	NoAckRate float64
	// EchoFiles sends the user's files back with the answer: each is fetched from ximd
	// (download_url, with the bearer token) and uploaded to the channel again
	// (POST /files/uploads), and the final carries the new file_refs (profile P-MSG-7).
	// Otherwise they are only named in the text.
	EchoFiles bool
	// FileTool: a user message that asks for a file (its text says "file") is answered, before
	// the text, with a small text file sent by the im.send_file tool (tool.invoke, edge-api §8):
	// uploaded first (POST /files/uploads), then invoked with its file_ref.
	FileTool bool
}

// Validate reports every configuration error at once.
func (c *Config) Validate() error {
	var errs []error
	if c.Reply == "" {
		errs = append(errs, errors.New("-reply must not be empty"))
	}
	if c.Chunk < 1 {
		errs = append(errs, errors.New("-chunk must be at least 1"))
	}
	if c.Delay < 0 || c.Think < 0 {
		errs = append(errs, errors.New("-delay and -think must not be negative"))
	}
	if c.AckTimeout <= 0 || c.RetryBackoff <= 0 {
		errs = append(errs, errors.New("-ack-timeout and -retry-backoff must be positive"))
	}
	if c.Retries < 0 {
		errs = append(errs, errors.New("-retries must not be negative"))
	}
	if !(c.FailRate >= 0 && c.FailRate <= 1) || !(c.NoAckRate >= 0 && c.NoAckRate <= 1) {
		errs = append(errs, errors.New("-fail-rate and -no-ack-rate must be between 0 and 1"))
	}
	return errors.Join(errs...)
}

// Runner plays xAgent: it owns the connection loop, the dispatcher (the only caller of the
// connection's Next) and the answer goroutines it starts; Run returns after all of them ended.
type Runner struct {
	cfg  Config
	out  *output
	conn connHolder

	// seen maps channel -> message_id -> digest of the user messages accepted; dispatcher only.
	seen *fifoMap[*fifoMap[string]]

	pendingMu sync.Mutex
	pending   map[string]chan<- finalOutcome // packet_id of a sent final -> its answer goroutine

	wg sync.WaitGroup // answer goroutines
}

// New returns a runner; packets and notes are printed to stdout, errors to stderr. cfg must be
// valid (Validate).
func New(cfg Config, stdout, stderr io.Writer) *Runner {
	if cfg.Name == "" {
		cfg.Name = "agent"
	}
	return &Runner{
		cfg:     cfg,
		out:     &output{stdout: stdout, stderr: stderr, name: cfg.Name},
		conn:    connHolder{ready: make(chan struct{})},
		seen:    newFIFOMap[*fifoMap[string]](seenChannels),
		pending: make(map[string]chan<- finalOutcome),
	}
}

// Run connects, serves and reconnects until ctx ends, then waits for the answer goroutines.
func (r *Runner) Run(ctx context.Context) {
	defer r.wg.Wait()
	url := "ws://" + r.cfg.Addr + "/v1/ws"
	backoff := reconnectMin
	connected := false
	for {
		dctx, cancel := context.WithTimeout(ctx, dialTimeout)
		a, err := xagent.Dial(dctx, r.cfg.Addr, r.cfg.Token)
		cancel()
		if err != nil {
			if ctx.Err() != nil {
				return
			}
			r.out.errorf("connect %s: %v; retrying in %s", url, err, backoff)
		} else {
			backoff = reconnectMin
			if connected {
				r.out.notef("reconnected to %s", url)
			} else {
				r.out.notef("connected to %s; answering user messages (Ctrl-C to stop)", url)
				connected = true
			}
			err = r.serve(ctx, a)
			if ctx.Err() != nil {
				return
			}
			r.out.errorf("connection lost: %v; reconnecting in %s", err, backoff)
		}
		if !sleepCtx(ctx, backoff) {
			return
		}
		backoff = min(backoff*2, reconnectMax)
	}
}

// serve runs the dispatcher on a until the connection ends or ctx does.
func (r *Runner) serve(ctx context.Context, a *xagent.Client) error {
	r.conn.set(a)
	defer r.conn.set(nil)
	// Closing a on ctx's end wakes Next below; serve returns only after a is closed.
	closed := make(chan struct{})
	stop := context.AfterFunc(ctx, func() {
		defer close(closed)
		a.Close()
	})
	defer func() {
		if stop() {
			a.Close()
		} else {
			<-closed
		}
	}()
	for {
		env, err := a.Next(time.Minute)
		if err != nil {
			if a.Err() == nil && ctx.Err() == nil {
				continue // nothing for a minute; the connection is still up
			}
			return err
		}
		r.dispatch(ctx, a, env)
	}
}

// dispatch handles one received packet: user messages are acked here and answered by a new
// goroutine; acks and errors replying to a sent final go to the goroutine waiting for them.
func (r *Runner) dispatch(ctx context.Context, a *xagent.Client, env profile.Envelope) {
	r.out.packet("<-", env)
	switch env.Type {
	case profile.TypeMessage:
		r.userMessage(ctx, a, env)
	case profile.TypeAck, profile.TypeError:
		if env.ReplyTo == "" {
			return
		}
		ch := r.takePending(env.ReplyTo)
		if ch == nil {
			return
		}
		o, err := outcomeOf(env)
		if err != nil {
			r.out.errorf("%s %s replying to final packet %s: %v", env.Type, env.PacketID, env.ReplyTo, err)
			return
		}
		ch <- o // buffered for every packet_id of the final: never blocks
	}
}

// userMessage acks a Connector -> xAgent chat.message and starts its answer.
func (r *Runner) userMessage(ctx context.Context, a *xagent.Client, env profile.Envelope) {
	ack := func(ack profile.Ack) {
		err := r.sendPacket(ctx, a, xagent.NewID("pkt"), env.ChannelID, profile.TypeAck, env.PacketID, ack)
		if err != nil && ctx.Err() == nil {
			r.out.errorf("ack %s on %s: %v", ack.MessageID, env.ChannelID, err)
		}
	}
	msg, err := profile.Default().DecodeMessage(env.Payload, profile.ToAgent)
	if err != nil {
		r.out.errorf("invalid user message %s on %s: %v", env.PacketID, env.ChannelID, err)
		if id := profile.MessageIDOf(env.Payload); id != "" {
			ack(profile.Rejected(id, profile.AsError(err)))
		}
		return
	}
	seen, ok := r.seen.get(env.ChannelID)
	if !ok {
		seen = newFIFOMap[string](seenPerChannel)
		r.seen.put(env.ChannelID, seen)
	}
	digest := msg.Digest()
	if prev, ok := seen.get(msg.MessageID); ok {
		if prev == digest {
			ack(profile.Duplicate(msg.MessageID)) // P-ACK-4: no second answer
		} else {
			ack(profile.Rejected(msg.MessageID, profile.Errorf(profile.CodeMessageIDConflict,
				"message_id %s was answered with other content", msg.MessageID)))
		}
		return
	}
	if rand.Float64() < r.cfg.FailRate {
		ack(profile.Rejected(msg.MessageID, profile.Errorf(profile.CodeInternal, "failure injected by ximctl agent -fail-rate")))
		return
	}
	seen.put(msg.MessageID, digest)
	if rand.Float64() < r.cfg.NoAckRate {
		r.out.notef("withholding the ack of %s on %s (-no-ack-rate)", msg.MessageID, env.ChannelID)
	} else {
		ack(profile.Accepted(msg.MessageID))
	}
	r.wg.Add(1)
	go r.answer(ctx, env.ChannelID, msg)
}

// answer streams the assistant's answer to msg on channel and delivers its final.
func (r *Runner) answer(ctx context.Context, channel string, msg profile.Message) {
	defer r.wg.Done()
	id := xagent.NewID("asst")
	// A failed activity never affects the message (P-ACT-6).
	r.sendBestEffort(ctx, channel, profile.TypeActivity, profile.Activity{Status: profile.ActivityThinking})
	if !sleepCtx(ctx, r.cfg.Think) {
		return
	}
	if r.cfg.Tool {
		r.sendBestEffort(ctx, channel, profile.TypeActivity, profile.Activity{Status: profile.ActivityTool, ToolName: ToolName})
	}
	var echoed []profile.File
	var echoErr error
	if r.cfg.EchoFiles && len(msg.Files) > 0 {
		echoed, echoErr = r.echo(ctx, channel, msg.Files)
		if echoErr != nil && ctx.Err() == nil {
			r.out.errorf("echo files on %s: %v", channel, echoErr)
		}
	}
	if r.cfg.Tool && !sleepCtx(ctx, r.cfg.Think) {
		return
	}
	r.sendBestEffort(ctx, channel, profile.TypeActivity, profile.Activity{Status: profile.ActivityIdle})
	if r.cfg.FileTool && asksForFile(msg.Text) {
		r.sendFile(ctx, channel, msg)
	}
	text := r.cfg.render(msg, echoed, echoErr)
	for i, c := range chunks(text, r.cfg.Chunk) {
		if i > 0 && !sleepCtx(ctx, r.cfg.Delay) {
			return
		}
		// After a failed delta the rest would leave a sequence gap: the final alone carries the
		// whole text (P-DLT-3, P-MSG-13).
		if !r.sendBestEffort(ctx, channel, profile.TypeDelta, profile.Delta{MessageID: id, Sequence: int64(i + 1), Text: c}) {
			break
		}
	}
	if !sleepCtx(ctx, r.cfg.Delay) {
		return
	}
	r.deliver(ctx, channel, profile.Message{MessageID: id, Text: text, Files: echoed, CreatedAt: time.Now().UnixMilli()})
}

// deliver sends final until it is acked accepted or duplicate (P-STATE-1), refused for good, or
// the retries are spent. A timeout, a lost connection and a retryable refusal are not delivery
// (P-ACK-3, P-STATE-2): the same message_id is sent again with a new packet_id.
func (r *Runner) deliver(ctx context.Context, channel string, final profile.Message) {
	// One slot per packet_id: the dispatcher hands each at most one outcome, so it never blocks.
	outcomes := make(chan finalOutcome, r.cfg.Retries+1)
	var sent []string
	defer func() { r.forget(sent) }()
	backoff := r.cfg.RetryBackoff
	for attempt := 1; ; attempt++ {
		pid := xagent.NewID("pkt")
		r.expect(pid, outcomes)
		sent = append(sent, pid)
		a, err := r.conn.get(ctx)
		if err != nil {
			return
		}
		var again string
		if err := r.sendPacket(ctx, a, pid, channel, profile.TypeMessage, "", final); err != nil {
			again = fmt.Sprintf("send failed (%v)", err)
		} else if again = r.await(ctx, channel, final, pid, outcomes, r.cfg.AckTimeout); again == "" {
			return
		}
		if ctx.Err() != nil {
			return
		}
		if attempt > r.cfg.Retries {
			r.out.errorf("final %s on %s: %s; giving up after %d sends", final.MessageID, channel, again, attempt)
			r.sendBestEffort(ctx, channel, profile.TypeActivity, profile.Activity{Status: profile.ActivityIdle})
			return
		}
		r.out.notef("final %s on %s: %s; sending it again in %s (retry %d of %d)", final.MessageID, channel, again, backoff, attempt, r.cfg.Retries)
		// Still listening: a late answer to an earlier send can end the delivery meanwhile.
		if r.await(ctx, channel, final, "", outcomes, backoff) == "" {
			return
		}
		backoff = min(backoff*2, retryBackoffMax)
	}
}

// await waits up to d for the outcome of the final's send pid ("": of none, during a back-off).
// It returns "" when the delivery is over: acked accepted or duplicate, refused for good (by
// any send), or ctx ended. Otherwise it says why to send again: d ran out, or pid was refused
// with retryable=true. Retryable refusals of other sends are stale and ignored.
func (r *Runner) await(ctx context.Context, channel string, final profile.Message, pid string, outcomes <-chan finalOutcome, d time.Duration) string {
	timer := time.NewTimer(d)
	defer timer.Stop()
	for {
		var o finalOutcome
		select {
		case o = <-outcomes: // an outcome already in wins over the timer
		default:
			select {
			case <-ctx.Done():
				return ""
			case <-timer.C:
				return fmt.Sprintf("no ack within %s", d)
			case o = <-outcomes:
			}
		}
		if o.isAck && (o.messageID != final.MessageID || o.channel != channel) {
			r.out.errorf("ack %s for final %s on %s carries message_id %q on channel %q (P-ACK-1)",
				o.packetID, final.MessageID, channel, o.messageID, o.channel)
		}
		switch {
		case o.status == profile.AckAccepted || o.status == profile.AckDuplicate:
			r.out.notef("final %s on %s: %s", final.MessageID, channel, o.status)
			return ""
		case !o.retryable:
			r.out.errorf("final %s on %s: %s, not retryable; giving up (P-STATE-3)", final.MessageID, channel, o)
			r.sendBestEffort(ctx, channel, profile.TypeActivity, profile.Activity{Status: profile.ActivityIdle})
			return ""
		case pid != "" && o.replyTo == pid:
			return o.String()
		}
	}
}

// finalOutcome is what ximd answered to one send of a final.
type finalOutcome struct {
	packetID  string // of the answer
	replyTo   string // the final's packet_id
	isAck     bool   // a chat.message.ack (else an `error` packet)
	channel   string
	messageID string // of the ack
	status    string // accepted, duplicate, or rejected (also for an `error` packet)
	code      string
	retryable bool
}

func (o finalOutcome) String() string {
	kind := "rejected"
	if !o.isAck {
		kind = "error"
	}
	if o.retryable {
		return kind + " " + o.code + " (retryable)"
	}
	return kind + " " + o.code
}

// outcomeOf reads an ack or an `error` packet; an error packet counts as a rejection with its
// payload's retryable.
func outcomeOf(env profile.Envelope) (finalOutcome, error) {
	o := finalOutcome{packetID: env.PacketID, replyTo: env.ReplyTo, channel: env.ChannelID}
	if env.Type == profile.TypeError {
		var e profile.ErrorPayload
		if err := json.Unmarshal(env.Payload, &e); err != nil {
			return o, fmt.Errorf("error payload: %w", err)
		}
		o.status, o.code, o.retryable = profile.AckRejected, e.Code, e.Retryable
		return o, nil
	}
	ack, err := profile.Default().DecodeAck(env.Payload)
	if err != nil {
		return o, err
	}
	o.isAck, o.messageID, o.status, o.code = true, ack.MessageID, ack.Status, ack.Code
	o.retryable = ack.Retryable != nil && *ack.Retryable
	return o, nil
}

func (r *Runner) expect(pid string, ch chan<- finalOutcome) {
	r.pendingMu.Lock()
	defer r.pendingMu.Unlock()
	r.pending[pid] = ch
}

func (r *Runner) takePending(pid string) chan<- finalOutcome {
	r.pendingMu.Lock()
	defer r.pendingMu.Unlock()
	ch := r.pending[pid]
	delete(r.pending, pid)
	return ch
}

func (r *Runner) forget(pids []string) {
	r.pendingMu.Lock()
	defer r.pendingMu.Unlock()
	for _, pid := range pids {
		delete(r.pending, pid)
	}
}

// sendBestEffort sends a packet that needs no ack on the current connection (waiting for one);
// a failure is printed and reported as false.
func (r *Runner) sendBestEffort(ctx context.Context, channel, typ string, payload any) bool {
	a, err := r.conn.get(ctx)
	if err == nil {
		err = r.sendPacket(ctx, a, xagent.NewID("pkt"), channel, typ, "", payload)
	}
	if err != nil {
		if ctx.Err() == nil {
			r.out.errorf("send %s on %s: %v", typ, channel, err)
		}
		return false
	}
	return true
}

// sendPacket prints and writes one packet on a.
func (r *Runner) sendPacket(ctx context.Context, a *xagent.Client, pid, channel, typ, replyTo string, payload any) error {
	p, err := json.Marshal(payload)
	if err != nil {
		return err
	}
	env := profile.Envelope{Schema: profile.Schema, PacketID: pid, ReplyTo: replyTo, ChannelID: channel,
		Type: typ, Time: time.Now().UnixMilli(), Payload: p}
	b, err := json.Marshal(env)
	if err != nil {
		return err
	}
	r.out.packet("->", env)
	wctx, cancel := context.WithTimeout(ctx, writeTimeout)
	defer cancel()
	return a.SendRaw(wctx, b)
}

// render builds the answer to msg: the template with {text} replaced, and a paragraph of its own
// (the template may end in a Markdown table or list) naming the user's files and whether they
// were sent back (echoed, or echoErr).
func (c *Config) render(msg profile.Message, echoed []profile.File, echoErr error) string {
	text := strings.ReplaceAll(c.Reply, "{text}", msg.Text)
	if len(msg.Files) > 0 {
		names := make([]string, len(msg.Files))
		for i, f := range msg.Files {
			names[i] = f.Filename
			if names[i] == "" {
				names[i] = f.FileRef
			}
		}
		switch {
		case !c.EchoFiles:
			text += "\n\nFiles received (not downloaded): " + strings.Join(names, ", ")
		case echoErr != nil:
			text += "\n\nFiles received: " + strings.Join(names, ", ") + " (could not send them back: " + echoErr.Error() + ")"
		default:
			text += "\n\nFiles received and sent back: " + strings.Join(names, ", ")
		}
	}
	if strings.TrimSpace(text) == "" {
		text = "(empty answer)" // a delta's text and a final's text or files are never empty
	}
	return text
}

// chunks cuts text before every n-th word, so that each piece is n words with the whitespace
// that follows them (the first also with any leading whitespace). The pieces are never empty
// and concatenate to text.
func chunks(text string, n int) []string {
	var out []string
	start, words := 0, 0
	prevSpace := true
	for i, r := range text {
		space := unicode.IsSpace(r)
		if !space && prevSpace {
			if words > 0 && words%n == 0 {
				out = append(out, text[start:i])
				start = i
			}
			words++
		}
		prevSpace = space
	}
	if start < len(text) {
		out = append(out, text[start:])
	}
	return out
}

// connHolder is the current connection, nil while disconnected.
type connHolder struct {
	mu    sync.Mutex
	a     *xagent.Client
	ready chan struct{} // closed while a is set
}

func (h *connHolder) set(a *xagent.Client) {
	h.mu.Lock()
	defer h.mu.Unlock()
	switch {
	case a != nil && h.a == nil:
		close(h.ready)
	case a == nil && h.a != nil:
		h.ready = make(chan struct{})
	}
	h.a = a
}

// get returns the current connection, waiting for one; it fails only when ctx ends.
func (h *connHolder) get(ctx context.Context) (*xagent.Client, error) {
	for {
		h.mu.Lock()
		a, ready := h.a, h.ready
		h.mu.Unlock()
		if a != nil {
			return a, nil
		}
		select {
		case <-ready:
		case <-ctx.Done():
			return nil, ctx.Err()
		}
	}
}

// output serialises the agent's lines: packets and notes to stdout, errors to stderr.
type output struct {
	mu             sync.Mutex
	stdout, stderr io.Writer
	name           string // prefix of error lines
}

// packet prints "<dir> <type> <channel> <payload>[ reply_to=<packet_id>]".
func (o *output) packet(dir string, env profile.Envelope) {
	var p bytes.Buffer
	if json.Compact(&p, env.Payload) != nil {
		p.Reset()
		p.Write(env.Payload)
	}
	line := fmt.Sprintf("%s %-20s %s %s", dir, env.Type, env.ChannelID, p.Bytes())
	if env.ReplyTo != "" {
		line += " reply_to=" + env.ReplyTo
	}
	o.mu.Lock()
	defer o.mu.Unlock()
	fmt.Fprintln(o.stdout, line)
}

func (o *output) notef(format string, args ...any) {
	o.mu.Lock()
	defer o.mu.Unlock()
	fmt.Fprintf(o.stdout, "-- "+format+"\n", args...)
}

func (o *output) errorf(format string, args ...any) {
	o.mu.Lock()
	defer o.mu.Unlock()
	fmt.Fprintf(o.stderr, o.name+": "+format+"\n", args...)
}

// fifoMap is a map holding at most max keys: adding one more forgets the oldest.
type fifoMap[V any] struct {
	max   int
	m     map[string]V
	order []string // keys in insertion order, a ring once full
	next  int      // the oldest key's index in order once full
}

func newFIFOMap[V any](max int) *fifoMap[V] {
	return &fifoMap[V]{max: max, m: make(map[string]V)}
}

func (f *fifoMap[V]) get(k string) (V, bool) {
	v, ok := f.m[k]
	return v, ok
}

func (f *fifoMap[V]) put(k string, v V) {
	if _, ok := f.m[k]; !ok {
		if len(f.order) < f.max {
			f.order = append(f.order, k)
		} else {
			delete(f.m, f.order[f.next])
			f.order[f.next] = k
			f.next = (f.next + 1) % f.max
		}
	}
	f.m[k] = v
}

// sleepCtx pauses for d; false when ctx ended first.
func sleepCtx(ctx context.Context, d time.Duration) bool {
	if d <= 0 {
		return ctx.Err() == nil
	}
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-t.C:
		return true
	case <-ctx.Done():
		return false
	}
}
