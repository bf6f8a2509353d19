// Package load is ximd's load tool (ximctl bench and BenchmarkEndToEnd): it drives deltas and
// finals through a real ximd edge into a fast loopback webhook target and reports throughput and
// latency next to the raw JetStream async-publish rate measured on the same server in the same run.
package load

import (
	"context"
	"errors"
	"fmt"
	"io"
	"sort"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/ximd/ximd/internal/testkit"
	"github.com/ximd/ximd/profile"
)

// Config sizes a run.
type Config struct {
	Channels      int           // channels (each bound to the loopback webhook target)
	Messages      int           // streamed messages per channel in the delta phase
	Streams       int           // messages of a channel streaming at once (0: all Messages)
	Deltas        int           // deltas per streamed message
	Finals        int           // direct finals in the finals phase
	DeltaBytes    int           // text bytes per delta
	Window        int           // finals in flight (sent, not yet acked)
	PacedDuration time.Duration // length of each half-load phase
	RawMessages   int           // messages of the raw JetStream baseline
	Buffers       int           // delta buffers held open at once for the RSS figure (Env.RSS set; 0: none)
	Progress      io.Writer     // a line with each phase's result (nil: none)
	// Sweep, if set, adds a paced finals phase and a paced deltas phase (each PacedDuration long)
	// at each of these fractions of the measured maximum rates (Report.Sweep; Plot draws it).
	Sweep []float64
	// OnProgress, if set, is called as the run advances: once when a phase starts (Done 0) and
	// after each item of it (publish, delta sent, final acked). It is called from the run's
	// goroutine and must return quickly.
	OnProgress func(Progress)
}

// Progress is how far a run is.
type Progress struct {
	Phase string // one of the Phase* names
	Done  int    // items of the phase done so far
	Total int    // items of the phase
}

// The phases of a run, in order.
const (
	PhaseRaw        = "raw publish"
	PhaseDeltasMax  = "deltas at max"
	PhaseFinalsMax  = "finals at max"
	PhaseFinalsHalf = "finals at half load"
	PhaseDeltasHalf = "deltas at half load"
	PhaseSweep      = "sweep"
	PhaseBuffers    = "open buffers"
)

// DefaultSweep is the offered loads of ximctl bench -plot, as fractions of the maximum rates.
var DefaultSweep = []float64{0.1, 0.25, 0.4, 0.5, 0.6, 0.75, 0.9, 1}

// SweepPoint is what one offered load achieved.
type SweepPoint struct {
	Load float64 // fraction of the maximum rate
	// Finals: offered and achieved per second, ack latency percentiles.
	FinalsOffered, FinalsPerSec float64
	AckP50, AckP99              time.Duration
	// Deltas: offered and achieved (until all displayed) per second, display latency percentiles.
	DeltasOffered, DeltasPerSec float64
	DisplayP50, DisplayP99      time.Duration
	// FirstP50, FirstP99: from a message's first delta sent until its first display.
	FirstP50, FirstP99 time.Duration
}

// DefaultConfig is a run of a few seconds.
func DefaultConfig() Config {
	return Config{Channels: 16, Messages: 20, Deltas: 100, Finals: 20000, DeltaBytes: 16, Window: 512, PacedDuration: 3 * time.Second, RawMessages: 200000, Buffers: 10000}
}

// Report holds one run's figures.
type Report struct {
	RawPublishPerSec float64 // raw JetStream async publishes/s, same server, same payload size
	DeltasPerSec     float64 // end to end: sent until every message's text is displayed
	FinalsPerSec     float64 // end to end: sent until every final is acked
	DeltaRatio       float64 // DeltasPerSec / RawPublishPerSec
	FinalRatio       float64 // FinalsPerSec / RawPublishPerSec
	// At half the measured maximum rates:
	AckP50, AckP99         time.Duration
	DisplayP50, DisplayP99 time.Duration
	// FirstP50, FirstP99: from a message's first delta sent until the message is first
	// displayed (its create call), at half load.
	FirstP50, FirstP99 time.Duration
	Deltas, Finals     int
	// DisplayCallsPerDelta is the target's display calls (create and edits before the final)
	// per delta of the max-rate delta phase: how much the node coalesced.
	DisplayCallsPerDelta float64
	// What the node under test spent (Env.Usage set): per raw publish (the NATS server's own
	// cost), per delta and per final of the max-rate phases.
	Raw, Delta, Final Cost
	// Sweep is one point per Config.Sweep load, in order.
	Sweep []SweepPoint
	// RSS is the node's resident set size with Buffers delta buffers open (Env.RSS set).
	RSS     int64
	Buffers int
}

func (r Report) String() string {
	var b strings.Builder
	fmt.Fprintf(&b, "raw JetStream async publish   %10.0f msg/s\n", r.RawPublishPerSec)
	fmt.Fprintf(&b, "deltas end to end             %10.0f /s   ratio %.3f (target >= 0.25)\n", r.DeltasPerSec, r.DeltaRatio)
	fmt.Fprintf(&b, "finals end to end             %10.0f /s   ratio %.3f (target >= 0.10)\n", r.FinalsPerSec, r.FinalRatio)
	fmt.Fprintf(&b, "ack latency at half load      p50 %-9s p99 %-9s (target p99 <= 25ms)\n", round(r.AckP50), round(r.AckP99))
	fmt.Fprintf(&b, "delta display at half load    p50 %-9s p99 %-9s (target p99 <= 10ms)\n", round(r.DisplayP50), round(r.DisplayP99))
	fmt.Fprintf(&b, "first display at half load    p50 %-9s p99 %-9s (a message's first delta)\n", round(r.FirstP50), round(r.FirstP99))
	fmt.Fprintf(&b, "display calls per delta       %10.2f      (at max rate; fewer: more coalesced)\n", r.DisplayCallsPerDelta)
	if r.Final.CPU > 0 {
		us := func(d time.Duration) float64 { return float64(d) / float64(time.Microsecond) }
		fmt.Fprintf(&b, "node CPU per raw publish      %10.1f µs  (the NATS server's share)\n", us(r.Raw.CPU))
		fmt.Fprintf(&b, "node CPU per delta            %10.1f µs  %6.0f allocations %7.0f bytes\n", us(r.Delta.CPU), r.Delta.Allocs, r.Delta.Bytes)
		fmt.Fprintf(&b, "node CPU per final            %10.1f µs  %6.0f allocations %7.0f bytes\n", us(r.Final.CPU), r.Final.Allocs, r.Final.Bytes)
	}
	if r.RSS > 0 {
		fmt.Fprintf(&b, "node RSS, %5d buffers open  %10.1f MB  (target <= 200 MB)\n", r.Buffers, float64(r.RSS)/1e6)
	}
	return b.String()
}

func round(d time.Duration) string { return d.Round(10 * time.Microsecond).String() }

// Env is what a run drives: a ximd edge, the NATS server its raw baseline publishes to, and
// how much CPU the node under test has used.
type Env struct {
	// Node is the edge (its Addr and Token; an in-process node also gives its NATS server).
	Node *testkit.Node
	// NATSURL and NATSOptions name the NATS server of the raw baseline ("": Node's own).
	NATSURL     string
	NATSOptions []nats.Option
	// Usage returns what the node under test (ximd, with its embedded NATS server) has spent so
	// far: CPU time and heap allocations; nil: not measured (the node runs in this process).
	Usage func() (Usage, error)
	// RSS returns the node's resident set size in bytes; nil: not measured.
	RSS func() (int64, error)
}

// Run performs the phases in order: raw baseline, max deltas, max finals, half-load finals,
// half-load deltas.
func Run(ctx context.Context, cfg Config, e Env) (Report, error) {
	var rep Report
	r := &runner{cfg: cfg, env: e, displays: map[string]*msgTrack{}}
	tg, err := testkit.NewTarget("bench-secret", testkit.TargetOptions{Discard: true, OnCall: r.onCall})
	if err != nil {
		return rep, err
	}
	defer tg.Close()
	r.target = tg
	for i := 0; i < cfg.Channels; i++ {
		ch := fmt.Sprintf("bench_%02d_%s", i, strings.TrimPrefix(testkit.NewID("r"), "r_"))
		if err := e.Node.OpenChannel(ch, tg.Config("edit", "none")); err != nil {
			return rep, err
		}
		r.channels = append(r.channels, ch)
	}
	r.phase = PhaseRaw
	url, opts := e.NATSURL, e.NATSOptions
	if url == "" {
		url, opts = e.Node.NATSURL(), e.Node.NATSOptions()
	}
	cost := r.meter()
	if rep.RawPublishPerSec, err = rawPublish(ctx, url, opts, cfg.RawMessages, 200+cfg.DeltaBytes, r.tick); err != nil {
		return rep, fmt.Errorf("raw baseline: %w", err)
	}
	if rep.Raw, err = cost(cfg.RawMessages); err != nil {
		return rep, err
	}
	r.progress("raw JetStream async publish: %.0f msg/s", rep.RawPublishPerSec)
	agent, err := testkit.Dial(ctx, e.Node.Addr, e.Node.Token)
	if err != nil {
		return rep, err
	}
	defer agent.Close()
	r.agent = agent

	r.phase = PhaseDeltasMax
	calls0 := r.displayCalls.Load()
	cost = r.meter()
	n, d, err := r.deltas(ctx, 0, cfg.Messages)
	if err != nil {
		return rep, err
	}
	if rep.Delta, err = cost(n); err != nil {
		return rep, err
	}
	rep.DeltasPerSec = float64(n) / d.Seconds()
	rep.DisplayCallsPerDelta = float64(r.displayCalls.Load()-calls0) / float64(max(n, 1))
	r.progress("deltas: %d in %s = %.0f/s", n, d.Round(time.Millisecond), rep.DeltasPerSec)
	r.phase = PhaseFinalsMax
	cost = r.meter()
	n, d, _, err = r.finals(ctx, cfg.Finals, 0)
	if err != nil {
		return rep, err
	}
	if rep.Final, err = cost(n); err != nil {
		return rep, err
	}
	rep.FinalsPerSec = float64(n) / d.Seconds()
	r.progress("finals: %d in %s = %.0f/s", n, d.Round(time.Millisecond), rep.FinalsPerSec)

	half, err := r.paced(ctx, 0.5, rep.FinalsPerSec, rep.DeltasPerSec, PhaseFinalsHalf, PhaseDeltasHalf)
	if err != nil {
		return rep, err
	}
	rep.AckP50, rep.AckP99, rep.DisplayP50, rep.DisplayP99 = half.AckP50, half.AckP99, half.DisplayP50, half.DisplayP99
	rep.FirstP50, rep.FirstP99 = half.FirstP50, half.FirstP99
	r.progress("finals at %.0f/s: ack p50 %s p99 %s", half.FinalsOffered, rep.AckP50, rep.AckP99)
	r.progress("deltas at %.0f/s: display p50 %s p99 %s, first display p50 %s p99 %s", half.DeltasOffered, rep.DisplayP50, rep.DisplayP99, rep.FirstP50, rep.FirstP99)

	if e.RSS != nil && cfg.Buffers > 0 {
		r.phase = PhaseBuffers
		if err := r.openBuffers(ctx, cfg.Buffers, func() (err error) {
			rep.RSS, err = e.RSS()
			return err
		}); err != nil {
			return rep, fmt.Errorf("open buffers: %w", err)
		}
		rep.Buffers = cfg.Buffers
		r.progress("%d delta buffers open: node RSS %.1f MB", cfg.Buffers, float64(rep.RSS)/1e6)
	}
	for _, f := range cfg.Sweep {
		pt, err := r.paced(ctx, f, rep.FinalsPerSec, rep.DeltasPerSec, PhaseSweep, PhaseSweep)
		if err != nil {
			return rep, fmt.Errorf("sweep at %.0f%%: %w", 100*f, err)
		}
		rep.Sweep = append(rep.Sweep, pt)
		r.progress("load %3.0f%%: finals %.0f/s offered, %.0f/s done, ack p99 %s; deltas %.0f/s offered, %.0f/s done, display p99 %s",
			100*f, pt.FinalsOffered, pt.FinalsPerSec, round(pt.AckP99), pt.DeltasOffered, pt.DeltasPerSec, round(pt.DisplayP99))
	}

	rep.DeltaRatio = rep.DeltasPerSec / rep.RawPublishPerSec
	rep.FinalRatio = rep.FinalsPerSec / rep.RawPublishPerSec
	rep.Deltas, rep.Finals = r.sentDeltas, r.sentFinals
	return rep, nil
}

// paced offers fraction f of the maximum rates, finals (phase finalsPhase) then deltas
// (deltasPhase), each for PacedDuration: the half-load phases and each point of a sweep.
func (r *runner) paced(ctx context.Context, f, maxFinals, maxDeltas float64, finalsPhase, deltasPhase string) (SweepPoint, error) {
	pt := SweepPoint{Load: f, FinalsOffered: f * maxFinals, DeltasOffered: f * maxDeltas}
	r.phase = finalsPhase
	n, d, acks, err := r.finals(ctx, max(int(pt.FinalsOffered*r.cfg.PacedDuration.Seconds()), 100), pt.FinalsOffered)
	if err != nil {
		return pt, err
	}
	pt.FinalsPerSec = float64(n) / d.Seconds()
	pt.AckP50, pt.AckP99 = percentile(acks, 0.50), percentile(acks, 0.99)
	r.resetDisplay()
	msgs := int(pt.DeltasOffered * r.cfg.PacedDuration.Seconds() / float64(r.cfg.Deltas*r.cfg.Channels))
	r.phase = deltasPhase
	n, d, err = r.deltas(ctx, pt.DeltasOffered, max(msgs, 1))
	if err != nil {
		return pt, err
	}
	pt.DeltasPerSec = float64(n) / d.Seconds()
	lat, first := r.displayLatencies()
	pt.DisplayP50, pt.DisplayP99 = percentile(lat, 0.50), percentile(lat, 0.99)
	pt.FirstP50, pt.FirstP99 = percentile(first, 0.50), percentile(first, 0.99)
	return pt, nil
}

// streamed is a message of the delta phase.
type streamed struct{ channel, id, key string }

type runner struct {
	cfg      Config
	env      Env
	target   *testkit.Target
	agent    *testkit.Agent
	channels []string
	seq      int
	phase    string // the phase under way, for OnProgress

	mu         sync.Mutex
	displays   map[string]*msgTrack // idempotency key -> deltas awaiting display
	latencies  []time.Duration      // every delta's display latency
	firsts     []time.Duration      // every message's first display latency
	pendingMsg int
	allShown   chan struct{}

	sentDeltas, sentFinals int
	displayCalls           atomic.Int64 // display calls (not final) the target answered
}

type msgTrack struct {
	sent  []time.Time // send time of delta i
	cum   []int       // cumulative text length after delta i
	shown int         // deltas displayed so far
	total int         // deltas that will be sent
}

// Cost is what the node under test spent per item of a phase (zero where not measured).
type Cost struct {
	CPU time.Duration
	// Allocs and Bytes are the heap objects and bytes the node allocated (its Go runtime's
	// counts, the embedded NATS server's included): unlike CPU time they do not vary with what
	// else the machine is doing, so they show a change that the CPU's noise hides.
	Allocs, Bytes float64
}

// Usage is what the node under test has spent so far.
type Usage struct {
	CPU           time.Duration
	Allocs, Bytes uint64
}

// meter starts measuring what the node spends: the returned function gives the cost per item
// since (zero when the environment does not measure it).
func (r *runner) meter() func(items int) (Cost, error) {
	if r.env.Usage == nil {
		return func(int) (Cost, error) { return Cost{}, nil }
	}
	start, err := r.env.Usage()
	return func(items int) (Cost, error) {
		if err != nil {
			return Cost{}, err
		}
		end, err := r.env.Usage()
		if err != nil || items == 0 {
			return Cost{}, err
		}
		n := float64(items)
		return Cost{CPU: (end.CPU - start.CPU) / time.Duration(items), Allocs: float64(end.Allocs-start.Allocs) / n, Bytes: float64(end.Bytes-start.Bytes) / n}, nil
	}
}

func (r *runner) progress(format string, args ...any) {
	if r.cfg.Progress != nil {
		fmt.Fprintf(r.cfg.Progress, format+"\n", args...)
	}
}

// tick reports done of total items of the current phase.
func (r *runner) tick(done, total int) {
	if r.cfg.OnProgress != nil {
		r.cfg.OnProgress(Progress{Phase: r.phase, Done: done, Total: total})
	}
}

func (r *runner) resetDisplay() {
	r.mu.Lock()
	r.latencies, r.firsts = nil, nil
	r.mu.Unlock()
}

// displayLatencies returns the display latencies of every delta and of every message's first
// display since resetDisplay.
func (r *runner) displayLatencies() (deltas, firsts []time.Duration) {
	r.mu.Lock()
	defer r.mu.Unlock()
	return append([]time.Duration(nil), r.latencies...), append([]time.Duration(nil), r.firsts...)
}

// onCall records display latencies: a call showing text of length L displays every delta whose
// cumulative length is <= L.
func (r *runner) onCall(c testkit.Call) {
	if c.Key == "" || c.Path == "/activity" || c.Final() {
		return
	}
	r.displayCalls.Add(1)
	now := c.At
	l := len(c.Text())
	r.mu.Lock()
	defer r.mu.Unlock()
	t := r.displays[c.Key]
	if t == nil {
		return
	}
	if t.shown == 0 && len(t.cum) > 0 && t.cum[0] <= l {
		r.firsts = append(r.firsts, now.Sub(t.sent[0]))
	}
	for t.shown < len(t.cum) && t.cum[t.shown] <= l {
		r.latencies = append(r.latencies, now.Sub(t.sent[t.shown]))
		t.shown++
	}
	if t.shown == t.total {
		delete(r.displays, c.Key)
		r.pendingMsg--
		if r.pendingMsg == 0 && r.allShown != nil {
			close(r.allShown)
			r.allShown = nil
		}
	}
}

// deltas streams perChannel messages on every channel, Config.Streams of them at once with their
// deltas interleaved (all of them: 0), at rate deltas/s (0: as fast as possible), waits until
// every text is displayed, then completes each message with a final. It returns the deltas sent
// and the time until all were displayed.
func (r *runner) deltas(ctx context.Context, rate float64, perChannel int) (int, time.Duration, error) {
	var msgs []streamed
	for _, ch := range r.channels {
		for i := 0; i < perChannel; i++ {
			r.seq++
			id := fmt.Sprintf("s%07d", r.seq)
			msgs = append(msgs, streamed{ch, id, ch + ":" + id})
		}
	}
	done := make(chan struct{})
	r.mu.Lock()
	for _, x := range msgs {
		r.displays[x.key] = &msgTrack{total: r.cfg.Deltas}
	}
	r.pendingMsg = len(msgs)
	r.allShown = done
	r.mu.Unlock()
	text := strings.Repeat("x", r.cfg.DeltaBytes-1) + " "
	pace := newPacer(rate)
	start := time.Now()
	n := 0
	total := r.cfg.Deltas * len(msgs)
	r.tick(0, total)
	streams := r.cfg.Streams
	if streams <= 0 || streams > perChannel {
		streams = perChannel
	}
	for first := 0; first < perChannel; first += streams {
		// msgs holds each channel's messages in turn: the round is messages first..first+streams
		// of every channel.
		var round []streamed
		for c := range r.channels {
			round = append(round, msgs[c*perChannel+first:c*perChannel+min(first+streams, perChannel)]...)
		}
		if err := r.streamRound(ctx, round, r.cfg.Deltas, text, pace, &n, total); err != nil {
			return n, 0, err
		}
	}
	select {
	case <-done:
	case <-time.After(2 * time.Minute):
		return n, 0, errors.New("deltas not all displayed within 2 minutes")
	case <-ctx.Done():
		return n, 0, ctx.Err()
	}
	elapsed := time.Since(start)
	r.sentDeltas += n
	// Complete the messages so no buffer stays open.
	full := strings.Repeat(text, r.cfg.Deltas)
	pending := map[string]bool{}
	for _, x := range msgs {
		pid, err := r.agent.Send(ctx, x.channel, profile.TypeMessage, map[string]any{"message_id": x.id, "text": full})
		if err != nil {
			return n, 0, err
		}
		pending[pid] = true
	}
	if err := r.drainAcks(pending, nil); err != nil {
		return n, 0, err
	}
	return n, elapsed, nil
}

// openBuffers starts n streamed messages over the channels with one delta each, waits until the
// node shows them all (each is then an open delta buffer), calls measure, and completes them.
func (r *runner) openBuffers(ctx context.Context, n int, measure func() error) error {
	var msgs []streamed
	r.mu.Lock()
	for i := 0; i < n; i++ {
		ch := r.channels[i%len(r.channels)]
		r.seq++
		id := fmt.Sprintf("b%07d", r.seq)
		msgs = append(msgs, streamed{ch, id, ch + ":" + id})
		r.displays[ch+":"+id] = &msgTrack{total: 1}
	}
	done := make(chan struct{})
	r.pendingMsg, r.allShown = n, done
	r.mu.Unlock()
	text := strings.Repeat("z", r.cfg.DeltaBytes-1) + " "
	sent := 0
	r.tick(0, n)
	if err := r.streamRound(ctx, msgs, 1, text, newPacer(0), &sent, n); err != nil {
		return err
	}
	select {
	case <-done:
	case <-time.After(2 * time.Minute):
		return errors.New("the buffers' deltas not all displayed within 2 minutes")
	case <-ctx.Done():
		return ctx.Err()
	}
	if err := measure(); err != nil {
		return err
	}
	pending := map[string]bool{}
	for _, x := range msgs {
		pid, err := r.agent.Send(ctx, x.channel, profile.TypeMessage, map[string]any{"message_id": x.id, "text": text})
		if err != nil {
			return err
		}
		pending[pid] = true
	}
	return r.drainAcks(pending, nil)
}

// streamRound sends deltas deltas of each of msgs, all interleaved: every message's delta 1, then
// 2, ...; n counts the deltas sent (of total, for the progress).
func (r *runner) streamRound(ctx context.Context, msgs []streamed, deltas int, text string, pace *pacer, n *int, total int) error {
	for seq := 1; seq <= deltas; seq++ {
		for _, x := range msgs {
			pace.wait()
			r.mu.Lock()
			t := r.displays[x.key]
			if t != nil {
				t.sent = append(t.sent, time.Now())
				t.cum = append(t.cum, seq*len(text))
			}
			r.mu.Unlock()
			if _, err := r.agent.Send(ctx, x.channel, profile.TypeDelta, map[string]any{"message_id": x.id, "sequence": seq, "text": text}); err != nil {
				return err
			}
			*n++
			r.tick(*n, total)
		}
	}
	return nil
}

// finals sends count direct finals round-robin over the channels with at most Window in flight,
// at rate/s (0: as fast as possible); it returns the ack latencies.
func (r *runner) finals(ctx context.Context, count int, rate float64) (int, time.Duration, []time.Duration, error) {
	sentAt := make(map[string]time.Time, count)
	var lat []time.Duration
	inflight := 0
	pace := newPacer(rate)
	start := time.Now()
	r.tick(0, count)
	recv := func() error {
		env, at, err := r.agent.NextAt(30 * time.Second)
		if err != nil {
			return err
		}
		if t, ok := sentAt[env.ReplyTo]; ok {
			if env.Type != profile.TypeAck {
				return fmt.Errorf("final answered %s: %s", env.Type, env.Payload)
			}
			lat = append(lat, at.Sub(t))
			delete(sentAt, env.ReplyTo)
			inflight--
			r.tick(len(lat), count)
		}
		return nil
	}
	text := strings.Repeat("y", r.cfg.DeltaBytes)
	for i := 0; i < count; i++ {
		for inflight >= r.cfg.Window {
			if err := recv(); err != nil {
				return i, 0, nil, err
			}
		}
		pace.wait()
		r.seq++
		ch := r.channels[i%len(r.channels)]
		id := testkit.NewID("pkt")
		b, err := testkit.Packet(id, ch, profile.TypeMessage, map[string]any{"message_id": fmt.Sprintf("f%07d", r.seq), "text": text})
		if err != nil {
			return i, 0, nil, err
		}
		sentAt[id] = time.Now()
		if err := r.agent.SendRaw(ctx, b); err != nil {
			return i, 0, nil, err
		}
		inflight++
	}
	for inflight > 0 {
		if err := recv(); err != nil {
			return count, 0, nil, err
		}
	}
	r.sentFinals += count
	return count, time.Since(start), lat, nil
}

func (r *runner) drainAcks(pending map[string]bool, _ []time.Duration) error {
	for len(pending) > 0 {
		env, err := r.agent.Next(60 * time.Second)
		if err != nil {
			return fmt.Errorf("%d acks missing: %w", len(pending), err)
		}
		delete(pending, env.ReplyTo)
	}
	return nil
}

// rawPublish measures JetStream async publishes of size-byte payloads to a scratch file stream.
// tick(done, n) is called after each publish.
func rawPublish(ctx context.Context, url string, opts []nats.Option, n, size int, tick func(done, total int)) (float64, error) {
	nc, err := nats.Connect(url, append(append([]nats.Option(nil), opts...), nats.Name("ximctl-bench-raw"))...)
	if err != nil {
		return 0, err
	}
	defer nc.Close()
	js, err := jetstream.New(nc, jetstream.WithPublishAsyncMaxPending(8192))
	if err != nil {
		return 0, err
	}
	name := "BENCH_RAW"
	_ = js.DeleteStream(ctx, name)
	if _, err := js.CreateStream(ctx, jetstream.StreamConfig{Name: name, Subjects: []string{"bench.raw.>"}, Storage: jetstream.FileStorage}); err != nil {
		return 0, err
	}
	defer js.DeleteStream(context.Background(), name)
	data := make([]byte, size)
	tick(0, n)
	start := time.Now()
	for i := 0; i < n; i++ {
		if _, err := js.PublishAsync(fmt.Sprintf("bench.raw.%d", i%16), data); err != nil {
			return 0, err
		}
		tick(i+1, n)
	}
	select {
	case <-js.PublishAsyncComplete():
	case <-time.After(time.Minute):
		return 0, errors.New("raw publishes not acked within a minute")
	}
	return float64(n) / time.Since(start).Seconds(), nil
}

func percentile(d []time.Duration, p float64) time.Duration {
	if len(d) == 0 {
		return 0
	}
	s := append([]time.Duration(nil), d...)
	sort.Slice(s, func(i, j int) bool { return s[i] < s[j] })
	i := int(float64(len(s)-1) * p)
	return s[i]
}

// pacer spaces calls at rate per second (0: no pacing).
type pacer struct {
	every time.Duration
	next  time.Time
}

func newPacer(rate float64) *pacer {
	p := &pacer{next: time.Now()}
	if rate > 0 {
		p.every = time.Duration(float64(time.Second) / rate)
	}
	return p
}

func (p *pacer) wait() {
	if p.every == 0 {
		return
	}
	p.next = p.next.Add(p.every)
	if d := time.Until(p.next); d > 0 {
		time.Sleep(d)
	}
}
