package main

import (
	"context"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"strings"
	"time"
	"unicode/utf8"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/ximd/ximd/handlers"
	"github.com/ximd/ximd/profile"
	"github.com/ximd/ximd/subjects"
)

// Directions shown by tail.
const (
	dirIn     = "xAgent→ximd" // a packet from xAgent, as the gateway stores it in XIM_IN
	dirOut    = "ximd→xAgent" // a reply (ack, error) or a user message sent to xAgent
	dirTarget = "target→ximd" // a user message posted by a target, queued for xAgent
	dirOutbox = "outbox"      // a user message's state changed (delivered, failed, pending)
)

// excerptRunes bounds the text shown per packet.
const excerptRunes = 48

func runTail(ctx context.Context, args []string, stdout, stderr io.Writer) error {
	fs := flag.NewFlagSet("ximctl tail", flag.ContinueOnError)
	nf := natsFlag(fs)
	channel := channelFlag(fs, "to show (required unless -all)")
	all := fs.Bool("all", false, "show every channel")
	setUsage(fs, stderr, "-channel ID [flags]", "Prints one line per packet of a channel as it passes through NATS, both ways; read-only.")
	if err := parse(fs, args, stderr); err != nil {
		return err
	}
	if fs.NArg() > 0 || (*channel == "") == !*all {
		fmt.Fprintln(stderr, "ximctl tail: pass -channel ID or -all")
		fs.Usage()
		return errUsage
	}
	if *channel != "" && !profile.ValidChannelID(*channel) {
		return fmt.Errorf("-channel %q: not a connector_channel_id", *channel)
	}
	nc, err := nf.connect(nats.Name("ximctl-tail"), nats.MaxReconnects(-1),
		nats.ErrorHandler(func(_ *nats.Conn, _ *nats.Subscription, err error) {
			fmt.Fprintf(stderr, "ximctl tail: %v\n", err) // e.g. a slow consumer: packets were skipped
		}))
	if err != nil {
		return err
	}
	defer nc.Close()
	t := &tailer{channel: *channel, out: stdout, now: time.Now, attempts: map[string]int{}}
	return t.run(ctx, nc, stderr)
}

// tailer prints what passes on one NATS connection. Its core NATS subscriptions (inbound
// subjects, gateway reply subjects) see packets as they are published and take nothing away: the
// work-queue stream XIM_IN and its partition consumers are untouched. User messages to xAgent
// are followed by watching their records in KV xim_outbox (an ephemeral ordered consumer), not
// by subscribing to the gateways' send subject, whose "no responders" answer tells the sender
// that no xAgent is connected: a passive subscriber there would hide that.
type tailer struct {
	channel  string // "" for all
	out      io.Writer
	now      func() time.Time
	attempts map[string]int // outbox key -> sends seen (bounded by the messages pending while tail runs)
}

func (t *tailer) run(ctx context.Context, nc *nats.Conn, stderr io.Writer) error {
	msgs := make(chan *nats.Msg, 4096)
	in := subjects.InAll
	if t.channel != "" {
		var err error
		if in, err = subjects.InChannel(t.channel); err != nil {
			return err
		}
	}
	for _, subj := range []string{in, subjects.ReplyAll} {
		sub, err := nc.ChanSubscribe(subj, msgs)
		if err != nil {
			return fmt.Errorf("subscribe %s: %w", subj, err)
		}
		defer sub.Unsubscribe()
	}
	var updates <-chan jetstream.KeyValueEntry
	if w, err := t.watchOutbox(ctx, nc); err != nil {
		fmt.Fprintf(stderr, "ximctl tail: user messages to xAgent not shown: %v\n", err)
	} else {
		defer w.Stop()
		updates = w.Updates()
	}
	if err := nc.FlushTimeout(5 * time.Second); err != nil {
		return fmt.Errorf("subscribe: %w", err)
	}
	what := "channel " + t.channel
	if t.channel == "" {
		what = "every channel"
	}
	fmt.Fprintf(stderr, "tailing %s on %s (Ctrl-C to stop)\n", what, nc.ConnectedUrlRedacted())
	for {
		select {
		case <-ctx.Done():
			return nil
		case m := <-msgs:
			t.message(m)
		case e, ok := <-updates:
			if !ok {
				return errors.New("outbox watch ended")
			}
			if e != nil { // nil marks the end of the initial values (none: updates only)
				t.outbox(e)
			}
		}
	}
}

func (t *tailer) watchOutbox(ctx context.Context, nc *nats.Conn) (jetstream.KeyWatcher, error) {
	js, err := jetstream.New(nc)
	if err != nil {
		return nil, err
	}
	kv, err := js.KeyValue(ctx, subjects.BucketOutbox)
	if err != nil {
		return nil, fmt.Errorf("bucket %s: %w", subjects.BucketOutbox, err)
	}
	keys := ">"
	if t.channel != "" {
		if keys, err = subjects.ChannelKeys(t.channel); err != nil {
			return nil, err
		}
	}
	// The watcher's context is the tail's: its consumer is ephemeral and ends with it.
	return kv.Watch(ctx, keys, jetstream.UpdatesOnly(), jetstream.IgnoreDeletes())
}

// message prints the packets of an inbound message (xim.in.<channel>.<kind>: one packet, or a
// channel's deltas stored together) or a reply (xim.gw.<gw>.reply).
func (t *tailer) message(m *nats.Msg) {
	dir := dirIn
	if strings.HasSuffix(m.Subject, ".reply") {
		dir = dirOut
	}
	frames, err := subjects.SplitFrames(m.Header.Get(subjects.HeaderFrames), m.Data)
	if err != nil {
		t.line(dir, "?", "?", "", "", fmt.Sprintf("unreadable message on %s: %v", m.Subject, err))
		return
	}
	for _, f := range frames {
		t.packet(dir, m.Subject, f)
	}
}

// packet prints one packet.
func (t *tailer) packet(dir, subject string, data []byte) {
	var env profile.Envelope
	if err := json.Unmarshal(data, &env); err != nil {
		t.line(dir, "?", "?", "", "", fmt.Sprintf("unreadable packet on %s: %v", subject, err))
		return
	}
	if t.channel != "" && env.ChannelID != t.channel { // replies of every channel share a subject
		return
	}
	var p packetSummary
	_ = json.Unmarshal(env.Payload, &p)
	var detail string
	switch env.Type {
	case profile.TypeAck:
		detail = p.Status
		if p.Code != "" {
			detail += " " + p.Code
		}
		if p.Retryable != nil && *p.Retryable {
			detail += " (retryable)"
		}
		if p.Message != "" {
			detail += ": " + excerpt(p.Message)
		}
	case profile.TypeError:
		detail = p.Code
		if p.Message != "" {
			detail += ": " + excerpt(p.Message)
		}
	case profile.TypeActivity:
		detail = strings.TrimSpace(p.Status + " " + p.ToolName)
	default:
		detail = quoted(p.Text)
		if len(p.Files) > 0 {
			detail += fmt.Sprintf(" +%d file(s)", len(p.Files))
		}
	}
	seq := ""
	if p.Sequence > 0 {
		seq = fmt.Sprintf("#%d", p.Sequence)
	}
	t.line(dir, env.Type, env.ChannelID, p.MessageID, seq, detail)
}

// outbox prints a change of a user message's record: queued, each send, and its outcome.
func (t *tailer) outbox(e jetstream.KeyValueEntry) {
	key := e.Key()
	if strings.HasSuffix(key, ".=failures") {
		return // the failure is shown by its record
	}
	var r handlers.OutRecord
	if err := json.Unmarshal(e.Value(), &r); err != nil {
		return
	}
	var m profile.Message
	_ = json.Unmarshal(r.Payload, &m)
	channel, _, _ := strings.Cut(key, ".")
	switch r.State {
	case handlers.OutPending:
		prev, seen := t.attempts[key]
		t.attempts[key] = r.Attempts
		switch {
		case r.Attempts == 0:
			t.line(dirTarget, profile.TypeMessage, channel, m.MessageID, "", "queued "+quoted(m.Text))
		case !seen || r.Attempts > prev:
			t.line(dirOut, profile.TypeMessage, channel, m.MessageID, fmt.Sprintf("send %d", r.Attempts), quoted(m.Text))
		case r.Code != "":
			t.line(dirOutbox, profile.TypeMessage, channel, m.MessageID, "", "pending, to be sent again after "+r.Code)
		}
	default:
		delete(t.attempts, key)
		detail := string(r.State)
		if r.Code != "" {
			detail += " " + r.Code
		}
		if r.Message != "" {
			detail += ": " + excerpt(r.Message)
		}
		t.line(dirOutbox, profile.TypeMessage, channel, m.MessageID, "", detail)
	}
}

func (t *tailer) line(dir, typ, channel, messageID, seq, detail string) {
	if messageID == "" {
		messageID = "-"
	}
	fmt.Fprintf(t.out, "%s %-11s %-18s %-16s %-20s %-6s %s\n",
		t.now().Format("15:04:05.000"), dir, typ, channel, messageID, seq, detail)
}

// packetSummary holds the payload members tail shows, of any packet type.
type packetSummary struct {
	MessageID string            `json:"message_id"`
	Sequence  int64             `json:"sequence"`
	Text      string            `json:"text"`
	Files     []json.RawMessage `json:"files"`
	Status    string            `json:"status"`
	ToolName  string            `json:"tool_name"`
	Code      string            `json:"code"`
	Message   string            `json:"message"`
	Retryable *bool             `json:"retryable"`
}

// excerpt shortens s to excerptRunes runes.
func excerpt(s string) string {
	if utf8.RuneCountInString(s) <= excerptRunes {
		return s
	}
	r := []rune(s)
	return string(r[:excerptRunes-1]) + "…"
}

// quoted is an excerpt of s, quoted with Go escapes (newlines stay on the line).
func quoted(s string) string {
	short := excerpt(s)
	q := fmt.Sprintf("%q", strings.TrimSuffix(short, "…"))
	if short != s {
		q += "…"
	}
	return q
}
