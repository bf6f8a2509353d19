package node

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"hash/fnv"
	"io"
	"log/slog"
	"runtime/debug"
	"slices"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/nats-io/nats.go/jetstream"
	"github.com/prometheus/client_golang/prometheus"

	"github.com/ximd/ximd/handlers"
	"github.com/ximd/ximd/handlers/adapter"
	"github.com/ximd/ximd/pipeline/bots"
	"github.com/ximd/ximd/pipeline/channels"
	"github.com/ximd/ximd/pipeline/files"
	"github.com/ximd/ximd/profile"
)

// Poll loop back-off after a failed Poll: from pollBackoffMin doubling to pollBackoffMax.
const (
	pollBackoffMin = time.Second
	pollBackoffMax = 30 * time.Second
)

// pollers runs the poll loops of the open channels whose adapter polls its platform
// (adapter.Poller): one loop per poll key (a Matrix room, a Telegram bot), on one live worker at a
// time, the key hashed over the live workers. A loop is started again when its key's set of
// channels changes (one opened, closed or re-bound). A worker starts no loop before its live set
// is settled (members.Settled: it has heard the others), else a worker just started would take
// every key for a moment. While the live set changes, two workers may poll a key for a moment;
// what both read is one message by its message_id.
type pollers struct {
	reg      *channels.Registry
	bots     *bots.Registry
	admit    adapter.Admitter
	adapters *adapter.Registry
	live     func() []string
	settled  func() bool // the live set is known: loops may start
	self     string
	inbox    func(channel string) adapter.Inbox
	cursors  jetstream.KeyValue
	logger   *slog.Logger
	polled   prometheus.Gauge
	failures *prometheus.CounterVec

	mu      sync.Mutex
	running map[pollID]*pollRun
	wg      sync.WaitGroup
	kick    chan struct{}
}

// pollID names one poll loop: an adapter's poll key.
type pollID struct{ adapter, key string }

// polled is what one poll loop serves: channels PUT and bots of its key.
type polled struct {
	chans []adapter.Channel
	bots  []adapter.Bot
}

type pollRun struct {
	version string                  // the key's channels and their revisions
	cancel  context.CancelCauseFunc // adapter.ErrPollMoved when the key moves to another worker
}

func newPollers(reg *channels.Registry, botReg *bots.Registry, admit adapter.Admitter, adapters *adapter.Registry, live func() []string, settled func() bool, self string, inbox func(string) adapter.Inbox, cursors jetstream.KeyValue, prom prometheus.Registerer, logger *slog.Logger) (*pollers, error) {
	p := &pollers{reg: reg, bots: botReg, admit: admit, adapters: adapters, live: live, settled: settled, self: self, inbox: inbox, cursors: cursors, logger: logger,
		running: map[pollID]*pollRun{}, kick: make(chan struct{}, 1),
		polled: prometheus.NewGauge(prometheus.GaugeOpts{Name: "ximd_polled_channels",
			Help: "Channels whose platform this worker polls for user messages (Matrix sync, Telegram getUpdates)."}),
		failures: prometheus.NewCounterVec(prometheus.CounterOpts{Name: "ximd_poll_failures_total",
			Help: "Poll loops that ended with an error and were started again after a back-off, by adapter."}, []string{"adapter"}),
	}
	for _, c := range []prometheus.Collector{p.polled, p.failures} {
		if err := prom.Register(c); err != nil {
			return nil, err
		}
	}
	kick := func() {
		select {
		case p.kick <- struct{}{}:
		default:
		}
	}
	reg.OnChange(func(string, bool) { kick() })
	botReg.OnChange(func(string) { kick() })
	return p, nil
}

// Run assigns and runs poll loops until ctx ends, then stops them all.
func (p *pollers) Run(ctx context.Context) {
	tick := time.NewTicker(time.Second) // the live set changes without notice
	defer tick.Stop()
	for {
		p.reconcile(ctx)
		select {
		case <-ctx.Done():
			var cause error // the others take the keys over when this worker leaves
			if len(p.live()) > 1 {
				cause = adapter.ErrPollMoved
			}
			p.mu.Lock()
			for id, r := range p.running {
				r.cancel(cause)
				delete(p.running, id)
			}
			p.mu.Unlock()
			p.wg.Wait()
			return
		case <-tick.C:
		case <-p.kick:
		}
	}
}

// owner is the live worker that polls key.
func owner(live []string, key string) string {
	if len(live) == 0 {
		return ""
	}
	h := fnv.New32a()
	_, _ = h.Write([]byte(key))
	return live[h.Sum32()%uint32(len(live))]
}

func (p *pollers) reconcile(ctx context.Context) {
	if ctx.Err() != nil || !p.settled() {
		return // a worker that just started hears only itself: it would take every key
	}
	live := p.live()
	want := map[pollID]*polled{}
	elsewhere := map[pollID]bool{} // keys another live worker polls
	served := 0
	add := func(ch adapter.Channel, b *adapter.Bot) {
		a, _ := p.adapters.Lookup(ch.Target.Adapter)
		poller, polls := a.(adapter.Poller)
		if !polls {
			return
		}
		key := poller.PollKey(ch)
		if key == "" {
			return
		}
		id := pollID{ch.Target.Adapter, key}
		if owner(live, key) != p.self {
			elsewhere[id] = true
			return
		}
		if want[id] == nil {
			want[id] = &polled{}
		}
		if b != nil {
			want[id].bots = append(want[id].bots, *b)
		} else {
			want[id].chans = append(want[id].chans, ch)
		}
		served++
	}
	for _, ch := range p.reg.ListPut() {
		add(ch, nil)
	}
	for _, b := range p.bots.List() {
		a, _ := p.adapters.Lookup(b.Target.Adapter)
		if taker, ok := a.(adapter.BotTaker); ok {
			if cfg, err := taker.Bind(b.Target.Config, adapter.Conversation{}); err == nil {
				add(adapter.Channel{ID: b.ID, Connection: b.Connection, Target: adapter.Binding{Adapter: b.Target.Adapter, Config: cfg}}, &b)
			}
		}
	}
	p.mu.Lock()
	defer p.mu.Unlock()
	for id, r := range p.running {
		if w, ok := want[id]; !ok || w.version() != r.version {
			var cause error
			if elsewhere[id] {
				cause = adapter.ErrPollMoved
			}
			r.cancel(cause)
			delete(p.running, id)
		}
	}
	for id, w := range want {
		if _, ok := p.running[id]; ok {
			continue
		}
		a, _ := p.adapters.Lookup(id.adapter)
		// Not from ctx: a loop ends by its cancel only, with its cause (the node's end too).
		rctx, cancel := context.WithCancelCause(context.WithoutCancel(ctx))
		p.running[id] = &pollRun{version: w.version(), cancel: cancel}
		p.wg.Add(1)
		go p.loop(rctx, id, &feed{pollers: p, key: id.key, chans: w.chans, bots: w.bots}, a.(adapter.Poller))
	}
	p.polled.Set(float64(served))
}

// version identifies a key's set of channels and bots and their revisions.
func (w *polled) version() string {
	ids := make([]string, 0, len(w.chans)+len(w.bots))
	for _, ch := range w.chans {
		ids = append(ids, ch.ID+"@"+strconv.FormatUint(ch.Revision, 10))
	}
	for _, b := range w.bots {
		// A bot's account and scope, not its policy: an approved pairing reaches the loop through Admit,
		// which reads the bot as it is now, without a new connection to the platform.
		sum := sha256.Sum256(append([]byte(b.Target.Adapter+"\x00"+string(b.Conversations.Scope)+"\x00"), b.Target.Config...))
		ids = append(ids, "bot:"+b.ID+"@"+hex.EncodeToString(sum[:8]))
	}
	slices.Sort(ids)
	return strings.Join(ids, ",")
}

// loop runs one key's Poll until ctx ends, starting it again after a failure.
func (p *pollers) loop(ctx context.Context, id pollID, f *feed, poller adapter.Poller) {
	defer p.wg.Done()
	log := p.logger.With("poll_key", id.key, "adapter", id.adapter, "channels", len(f.chans), "bots", len(f.bots), "stage", "poll")
	log.Info("poll_started")
	wait := pollBackoffMin
	for {
		start := time.Now()
		err := poll(ctx, poller, f, log)
		if ctx.Err() != nil {
			log.Info("poll_stopped")
			return
		}
		p.failures.WithLabelValues(id.adapter).Inc()
		if time.Since(start) > pollBackoffMax {
			wait = pollBackoffMin // it had been working
		}
		log.Warn("poll_failed", "err", err, "retry_in", wait)
		t := time.NewTimer(wait)
		select {
		case <-ctx.Done():
			t.Stop()
			return
		case <-t.C:
		}
		wait = min(2*wait, pollBackoffMax)
	}
}

// poll runs one Poll; a panic in it is its error, logged with its stack: one account's
// unexpected data ends that loop's run, not the process with every other account's.
func poll(ctx context.Context, poller adapter.Poller, f adapter.Feed, log *slog.Logger) (err error) {
	defer func() {
		if r := recover(); r != nil {
			log.Error("poll_panicked", "panic", fmt.Sprint(r), "stack", string(debug.Stack()))
			err = fmt.Errorf("poll panicked: %v", r)
		}
	}()
	return poller.Poll(ctx, f)
}

// feed is one poll loop's adapter.Feed: its key's cursor in KV xim_cursors.
type feed struct {
	pollers *pollers
	key     string
	chans   []adapter.Channel
	bots    []adapter.Bot
}

func (f *feed) Channels() []adapter.Channel { return f.chans }

func (f *feed) Bots() []adapter.Bot { return f.bots }

func (f *feed) Admit(ctx context.Context, b adapter.Bot, in adapter.Arrival) (adapter.Admission, error) {
	return f.pollers.admit.Admit(ctx, b, in)
}

func (f *feed) Inbox(channel string) adapter.Inbox { return f.pollers.inbox(channel) }

func (f *feed) Cursor(ctx context.Context) (string, error) {
	e, err := f.pollers.cursors.Get(ctx, f.key)
	if errors.Is(err, jetstream.ErrKeyNotFound) || errors.Is(err, jetstream.ErrKeyDeleted) {
		return "", nil
	}
	if err != nil {
		return "", err
	}
	return string(e.Value()), nil
}

func (f *feed) SaveCursor(ctx context.Context, cursor string) error {
	_, err := f.pollers.cursors.Put(ctx, f.key, []byte(cursor))
	return err
}

// channelInbox is a channel's adapter.Inbox (for its poller, or its adapter's inbound route):
// its files in the Transfer Plane, its user messages in the outbox (the send path).
type channelInbox struct {
	channel string
	opened  json.RawMessage // a bot's channel not yet announced: the channel.opened payload
	outbox  *handlers.Outbox
	files   *files.Store
	catalog *profile.Catalog
	logger  *slog.Logger
}

var _ adapter.Inbox = (*channelInbox)(nil)

func (in *channelInbox) Seen(ctx context.Context, messageID string) (bool, error) {
	return in.outbox.Exists(ctx, in.channel, messageID)
}

func (in *channelInbox) PutFile(ctx context.Context, f adapter.StoredFile, r io.Reader) (profile.File, error) {
	stored, err := in.files.Put(ctx, in.channel, f, r)
	if err != nil {
		return profile.File{}, err
	}
	return profile.File{Type: stored.Type, FileRef: stored.FileRef, Filename: stored.Filename, MimeType: stored.MimeType,
		ByteSize: stored.ByteSize, ExpiresAt: stored.ExpiresAt, DownloadURL: files.RefPath(stored.FileRef)}, nil
}

func (in *channelInbox) Discard(ctx context.Context, fileRef string) error {
	return in.files.Discard(ctx, fileRef)
}

// Submit validates m as a Connector -> xAgent chat.message and submits it; when it is refused or
// fails, its stored files are discarded (no orphans).
func (in *channelInbox) Submit(ctx context.Context, m profile.Message) (ok bool, err error) {
	defer func() {
		if err == nil {
			return
		}
		for _, f := range m.Files {
			if derr := in.files.Discard(context.WithoutCancel(ctx), f.FileRef); derr != nil {
				in.logger.Warn("file_discard_failed", "channel", in.channel, "file_ref", f.FileRef, "err", derr)
			}
		}
	}()
	raw, err := json.Marshal(m)
	if err != nil {
		return false, err
	}
	if _, err := in.catalog.DecodeMessage(raw, profile.ToAgent); err != nil {
		return false, err
	}
	ok, err = in.outbox.SubmitOpened(ctx, in.channel, m, in.opened)
	if ok {
		in.logger.Info("target_message_received", "channel", in.channel, "message_id", m.MessageID, "files", len(m.Files))
	}
	return ok, err
}
