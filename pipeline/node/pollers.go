package node

import (
	"context"
	"encoding/json"
	"errors"
	"hash/fnv"
	"io"
	"log/slog"
	"sync"
	"time"

	"github.com/nats-io/nats.go/jetstream"
	"github.com/prometheus/client_golang/prometheus"

	"github.com/ximd/ximd/handlers"
	"github.com/ximd/ximd/handlers/target"
	"github.com/ximd/ximd/pipeline/channels"
	"github.com/ximd/ximd/pipeline/files"
	"github.com/ximd/ximd/profile"
)

// Poll loop back-off after a failed Poll: from pollBackoffMin doubling to pollBackoffMax.
const (
	pollBackoffMin = time.Second
	pollBackoffMax = 30 * time.Second
)

// pollers runs the Poll loop of each open channel whose adapter polls its platform
// (target.Poller), on one live worker at a time: the channel id hashed over the live workers.
// While the live set changes, two workers may poll a channel for a moment; what both read is
// one message by its message_id.
type pollers struct {
	reg      *channels.Registry
	adapters *target.Registry
	live     func() []string
	self     string
	inbox    func(channel string) target.Inbox
	logger   *slog.Logger
	polled   prometheus.Gauge
	failures *prometheus.CounterVec

	mu      sync.Mutex
	running map[string]*pollRun
	wg      sync.WaitGroup
	kick    chan struct{}
}

type pollRun struct {
	rev    uint64
	cancel context.CancelFunc
}

func newPollers(reg *channels.Registry, adapters *target.Registry, live func() []string, self string, inbox func(string) target.Inbox, prom prometheus.Registerer, logger *slog.Logger) (*pollers, error) {
	p := &pollers{reg: reg, adapters: adapters, live: live, self: self, inbox: inbox, logger: logger,
		running: map[string]*pollRun{}, kick: make(chan struct{}, 1),
		polled: prometheus.NewGauge(prometheus.GaugeOpts{Name: "ximd_polled_channels",
			Help: "Channels whose platform this worker polls for user messages (Matrix sync, ...)."}),
		failures: prometheus.NewCounterVec(prometheus.CounterOpts{Name: "ximd_poll_failures_total",
			Help: "Poll loops that ended with an error and were started again after a back-off, by adapter."}, []string{"adapter"}),
	}
	for _, c := range []prometheus.Collector{p.polled, p.failures} {
		if err := prom.Register(c); err != nil {
			return nil, err
		}
	}
	reg.OnChange(func(string, bool) {
		select {
		case p.kick <- struct{}{}:
		default:
		}
	})
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
			p.mu.Lock()
			for id, r := range p.running {
				r.cancel()
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

// owner is the live worker that polls channel.
func owner(live []string, channel string) string {
	if len(live) == 0 {
		return ""
	}
	h := fnv.New32a()
	_, _ = h.Write([]byte(channel))
	return live[h.Sum32()%uint32(len(live))]
}

func (p *pollers) reconcile(ctx context.Context) {
	if ctx.Err() != nil {
		return
	}
	live := p.live()
	want := map[string]target.Channel{}
	for _, ch := range p.reg.List() {
		a, ok := p.adapters.Lookup(ch.Target.Adapter)
		if _, polls := a.(target.Poller); !ok || !polls || owner(live, ch.ID) != p.self {
			continue
		}
		want[ch.ID] = ch
	}
	p.mu.Lock()
	defer p.mu.Unlock()
	for id, r := range p.running {
		if ch, ok := want[id]; !ok || ch.Revision != r.rev {
			r.cancel()
			delete(p.running, id)
		}
	}
	for id, ch := range want {
		if _, ok := p.running[id]; ok {
			continue
		}
		a, _ := p.adapters.Lookup(ch.Target.Adapter)
		rctx, cancel := context.WithCancel(ctx)
		p.running[id] = &pollRun{rev: ch.Revision, cancel: cancel}
		p.wg.Add(1)
		go p.loop(rctx, ch, a.(target.Poller))
	}
	p.polled.Set(float64(len(p.running)))
}

// loop runs one channel's Poll until ctx ends, starting it again after a failure.
func (p *pollers) loop(ctx context.Context, ch target.Channel, poller target.Poller) {
	defer p.wg.Done()
	log := p.logger.With("channel", ch.ID, "adapter", ch.Target.Adapter, "stage", "poll")
	log.Info("poll_started")
	wait := pollBackoffMin
	for {
		start := time.Now()
		err := poller.Poll(ctx, ch, p.inbox(ch.ID))
		if ctx.Err() != nil {
			log.Info("poll_stopped")
			return
		}
		p.failures.WithLabelValues(ch.Target.Adapter).Inc()
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

// channelInbox is a channel's target.Inbox (for its poller, or its adapter's inbound route): its cursor in KV xim_cursors, its files in the
// Transfer Plane, its user messages in the outbox (the send path).
type channelInbox struct {
	channel string
	cursors jetstream.KeyValue
	outbox  *handlers.Outbox
	files   *files.Store
	catalog *profile.Catalog
	logger  *slog.Logger
}

var _ target.Inbox = (*channelInbox)(nil)

func (in *channelInbox) Cursor(ctx context.Context) (string, error) {
	e, err := in.cursors.Get(ctx, in.channel)
	if errors.Is(err, jetstream.ErrKeyNotFound) || errors.Is(err, jetstream.ErrKeyDeleted) {
		return "", nil
	}
	if err != nil {
		return "", err
	}
	return string(e.Value()), nil
}

func (in *channelInbox) SaveCursor(ctx context.Context, cursor string) error {
	_, err := in.cursors.Put(ctx, in.channel, []byte(cursor))
	return err
}

func (in *channelInbox) Seen(ctx context.Context, messageID string) (bool, error) {
	return in.outbox.Exists(ctx, in.channel, messageID)
}

func (in *channelInbox) PutFile(ctx context.Context, f target.StoredFile, r io.Reader) (profile.File, error) {
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
	ok, err = in.outbox.Submit(ctx, in.channel, m)
	if ok {
		in.logger.Info("target_message_received", "channel", in.channel, "message_id", m.MessageID, "files", len(m.Files))
	}
	return ok, err
}
