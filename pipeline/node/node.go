// Package node assembles a ximd process of one role (all, gateway, worker) from the pipeline's
// parts and runs it until its context ends, then drains (edge-api §1: SIGTERM drains).
package node

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"runtime/debug"
	"slices"
	"strings"
	"sync"
	"time"

	"github.com/ThreeDotsLabs/watermill/message"
	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/collectors"

	"github.com/ximd/ximd/handlers"
	"github.com/ximd/ximd/handlers/adapter"
	"github.com/ximd/ximd/handlers/adapter/dingtalk"
	"github.com/ximd/ximd/handlers/adapter/discord"
	"github.com/ximd/ximd/handlers/adapter/download"
	"github.com/ximd/ximd/handlers/adapter/feishu"
	"github.com/ximd/ximd/handlers/adapter/matrix"
	"github.com/ximd/ximd/handlers/adapter/slack"
	"github.com/ximd/ximd/handlers/adapter/telegram"
	"github.com/ximd/ximd/handlers/adapter/webchat"
	"github.com/ximd/ximd/handlers/adapter/webhook"
	"github.com/ximd/ximd/handlers/adapter/wecom"
	"github.com/ximd/ximd/pipeline"
	"github.com/ximd/ximd/pipeline/bots"
	"github.com/ximd/ximd/pipeline/bus"
	"github.com/ximd/ximd/pipeline/channels"
	"github.com/ximd/ximd/pipeline/edge"
	"github.com/ximd/ximd/pipeline/files"
	"github.com/ximd/ximd/pipeline/members"
	"github.com/ximd/ximd/pipeline/relay"
	"github.com/ximd/ximd/profile"
	"github.com/ximd/ximd/subjects"
)

// Version is the product version reported in the Card (set at build time with -ldflags).
var Version = "dev"

// Node is one ximd process.
type Node struct {
	cfg    Config
	logger *slog.Logger
	reg    *prometheus.Registry

	ready     chan struct{}
	httpAddr  string
	pprofAddr string
	natsURL   string
	natsCreds pipeline.Credentials
	token     string
}

// New validates cfg and returns a node; Run starts it.
func New(cfg Config, logger *slog.Logger) (*Node, error) {
	if cfg.Instance == "" {
		host, _ := os.Hostname()
		cfg.Instance = subjects.Gateway(host) + "-" + randomHex(3)
	}
	if err := cfg.Validate(); err != nil {
		return nil, err
	}
	reg := prometheus.NewRegistry()
	reg.MustRegister(collectors.NewGoCollector(), collectors.NewProcessCollector(collectors.ProcessCollectorOpts{}))
	return &Node{cfg: cfg, logger: logger, reg: reg, ready: make(chan struct{})}, nil
}

// Ready is closed once the node serves (tests wait on it).
func (n *Node) Ready() <-chan struct{} { return n.ready }

// HTTPAddr is the edge's bound address (after Ready; "" for a worker).
func (n *Node) HTTPAddr() string { return n.httpAddr }

// NATSURL is the NATS URL the node uses (the embedded server's when it runs one).
func (n *Node) NATSURL() string { return n.natsURL }

// NATSOptions are the client options that authenticate to NATSURL as this node does.
func (n *Node) NATSOptions() []nats.Option {
	opts, err := n.natsCreds.Options()
	if err != nil { // read at start; gone since (the data dir removed under a running node)
		n.logger.Warn("nats_credentials_unreadable", "err", err)
	}
	return opts
}

// Metrics is the node's Prometheus registry (what GET /metrics serves).
func (n *Node) Metrics() prometheus.Gatherer { return n.reg }

// Token is the bearer token xAgent must present (after Ready; "" for a worker).
func (n *Node) Token() string { return n.token }

// Run runs the node until ctx ends, then drains: the edge stops taking packets, stored packets
// are flushed, handlers in flight finish (or their messages are handed back), and NATS closes.
func (n *Node) Run(ctx context.Context) error {
	var cl closers // added to as the node starts: run when Run returns
	defer func() { cl.run(45 * time.Second) }()
	closePprof, err := n.servePprof(n.logger)
	if err != nil {
		return err
	}
	cl.add(closePprof)
	nc, err := n.connect(&cl)
	if err != nil {
		return err
	}
	p, err := n.open(ctx, nc, &cl)
	if err != nil {
		return err
	}
	errc := make(chan error, 8)
	if err := n.startRoles(ctx, p, errc, &cl); err != nil {
		return err
	}
	close(n.ready)
	// Loading every channel and bot left garbage the size of the records read (100,000 channels:
	// tens of MB); hand it back to the OS now, so the process holds what it keeps, not its
	// start's peak, until the heap grows again.
	debug.FreeOSMemory()
	n.logger.Info("ximd_ready", "role", string(n.cfg.Role), "instance", n.cfg.Instance, "http_addr", n.httpAddr, "version", Version)
	select {
	case <-ctx.Done():
		n.logger.Info("ximd_draining")
		return nil
	case err := <-errc:
		return err
	}
}

// closers are what a running node undoes when it stops, in reverse order.
type closers []func(context.Context)

func (c *closers) add(f func(context.Context)) { *c = append(*c, f) }

// run runs the closers, last added first, within d in all.
func (c closers) run(d time.Duration) {
	dctx, cancel := context.WithTimeout(context.Background(), d)
	defer cancel()
	for i := len(c) - 1; i >= 0; i-- {
		c[i](dctx)
	}
}

// parts are what every role of a node uses: its NATS connection and what it opened on it.
type parts struct {
	nc       *nats.Conn
	js       jetstream.JetStream
	reg      *channels.Registry
	bots     *bots.Registry
	pairings *bots.Pairings
	admitter *bots.Admitter
	records  *handlers.Records
	outbox   *handlers.Outbox
	files    *files.Store
	adapters *adapter.Registry
}

// connect connects to XIM_NATS_URL, or starts the embedded NATS server and connects to it in
// process; the connection drains when the node stops.
func (n *Node) connect(cl *closers) (*nats.Conn, error) {
	name := fmt.Sprintf("ximd-%s-%s", n.cfg.Role, n.cfg.Instance)
	var nc *nats.Conn
	if n.cfg.NATSURL == "" {
		url, opts, err := n.startEmbedded(cl)
		if err != nil {
			return nil, err
		}
		if nc, err = pipeline.Connect(url, name, n.logger, opts...); err != nil {
			return nil, err
		}
	} else {
		n.natsURL, n.natsCreds = n.cfg.NATSURL, pipeline.Credentials{File: n.cfg.NATSCreds, CA: n.cfg.NATSCA}
		auth, err := n.natsCreds.Options()
		if err != nil {
			return nil, fmt.Errorf("XIM_NATS_CREDS / XIM_NATS_CA: %w", err)
		}
		if nc, err = pipeline.Connect(n.cfg.NATSURL, name, n.logger, auth...); err != nil {
			return nil, err
		}
	}
	cl.add(func(context.Context) { _ = nc.Drain(); waitClosed(nc, 10*time.Second) })
	return nc, nil
}

// startEmbedded starts the embedded NATS server in the data dir (its user's seed created once)
// and returns its client URL and the options that connect to it in process.
func (n *Node) startEmbedded(cl *closers) (string, []nats.Option, error) {
	seedFile := filepath.Join(n.cfg.DataDir, NATSSeedFile)
	user, err := pipeline.EnsureUserSeed(seedFile, n.logger)
	if err != nil {
		return "", nil, err
	}
	srv, err := pipeline.StartServer(pipeline.ServerConfig{DataDir: n.cfg.DataDir, Port: n.cfg.NATSPort, MonitorPort: n.cfg.NATSMonitorPort,
		PortFallback: !n.cfg.NATSPortSet, MonitorPortFallback: !n.cfg.NATSMonitorPortSet,
		SyncInterval: n.cfg.NATSSync, SyncAlways: n.cfg.NATSSyncAlways, UserNkeys: []string{user}}, n.logger)
	var inUse *pipeline.PortInUseError
	if errors.As(err, &inUse) {
		name := map[string]string{"client": "XIM_NATS_PORT", "monitor": "XIM_NATS_MONITOR_PORT"}[inUse.Which]
		return "", nil, fmt.Errorf("%s: %s is in use (set another port, or -1 for any free one): %w", name, inUse.Addr, inUse.Err)
	}
	if err != nil {
		return "", nil, err
	}
	cl.add(func(context.Context) { srv.Shutdown() })
	n.natsURL, n.natsCreds = srv.ClientURL(), pipeline.Credentials{File: seedFile}
	n.logger.Info("nats_embedded", "client_url", srv.ClientURL(), "monitor_url", srv.MonitorURL(),
		"store_dir", filepath.Join(n.cfg.DataDir, "jetstream"), "credentials", seedFile)
	remove, err := writeNATSURLs(n.cfg.DataDir, srv.ClientURL(), srv.MonitorURL())
	if err != nil {
		return "", nil, err
	}
	cl.add(func(context.Context) { remove() })
	auth, err := n.natsCreds.Options()
	if err != nil {
		return "", nil, err
	}
	return srv.ClientURL(), append(auth, srv.InProcess()), nil
}

// open provisions the streams and buckets and opens what every role uses: the channel registry
// (watched until the node stops), the message records, the Transfer Plane, the adapters and the
// send path's outbox.
func (n *Node) open(ctx context.Context, nc *nats.Conn, cl *closers) (*parts, error) {
	js, err := jetstream.New(nc)
	if err != nil {
		return nil, err
	}
	if err := n.provision(ctx, js); err != nil {
		return nil, err
	}
	reg, err := channels.Open(ctx, js, n.logger)
	if err != nil {
		return nil, err
	}
	botReg, err := bots.Open(ctx, js, n.logger)
	if err != nil {
		return nil, err
	}
	var wg sync.WaitGroup
	rctx, stopRegistry := context.WithCancel(context.Background())
	wg.Add(2)
	go func() { defer wg.Done(); _ = reg.Run(rctx) }()
	go func() { defer wg.Done(); _ = botReg.Run(rctx) }()
	cl.add(func(context.Context) { stopRegistry(); wg.Wait() })

	p := &parts{nc: nc, js: js, reg: reg, bots: botReg}
	if p.pairings, err = bots.OpenPairings(ctx, js, pipeline.PairingTTL); err != nil {
		return nil, err
	}
	if p.records, err = handlers.OpenRecords(ctx, js); err != nil {
		return nil, err
	}
	if p.files, err = n.files(ctx, js); err != nil {
		return nil, err
	}
	if p.adapters, err = n.openAdapters(nc, js, reg, p.files); err != nil {
		return nil, err
	}
	cl.add(func(context.Context) { _ = p.adapters.Close() }) // after the roles that use them stopped
	p.outbox, err = handlers.OpenOutbox(ctx, handlers.OutboxConfig{AckTimeout: n.cfg.AckTimeout, BackoffMax: n.cfg.OutboundBackoff, MaxAge: n.cfg.Store.OutboundMaxAge},
		handlers.OutboxDeps{JetStream: js, Conn: nc, Announced: reg.MarkAnnounced, Registerer: n.reg, Logger: n.logger.With("stage", "outbound")})
	if err != nil {
		return nil, err
	}
	if err := n.startAdmitter(p, cl); err != nil {
		return nil, err
	}
	return p, nil
}

// startAdmitter builds what applies the bots' policies (for the poll loops and the receive
// routes alike) and runs its stats flush until the node stops.
func (n *Node) startAdmitter(p *parts, cl *closers) error {
	log := n.logger.With("stage", "bots")
	rates, err := p.js.KeyValue(context.Background(), subjects.BucketBotRates)
	if err != nil {
		return fmt.Errorf("bucket %s: %w", subjects.BucketBotRates, err)
	}
	p.admitter, err = bots.NewAdmitter(bots.AdmitterDeps{Bots: p.bots, Pairings: p.pairings, Channels: p.reg, Adapters: p.adapters, Rates: rates,
		Inbox: func(channel string, opened json.RawMessage) adapter.Inbox {
			return &channelInbox{channel: channel, opened: opened, outbox: p.outbox, files: p.files, catalog: profile.Default(), logger: log}
		}, Registerer: n.reg, Logger: log})
	if err != nil {
		return err
	}
	ctx, stop := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() { defer close(done); _ = p.admitter.Run(ctx) }()
	cl.add(func(context.Context) { stop(); <-done })
	return nil
}

// openAdapters builds the registry of every platform adapter.
func (n *Node) openAdapters(nc *nats.Conn, js jetstream.JetStream, reg *channels.Registry, fileStore *files.Store) (*adapter.Registry, error) {
	fetcher := download.New(download.Config{MaxBytes: n.cfg.MaxFileBytes, Timeout: n.cfg.DownloadTimeout, AllowPrivate: n.cfg.DownloadAllowPrivate}, nil)
	hook := webhook.New(webhook.Options{Logger: n.logger, Fetcher: fetcher})
	chat, err := n.openWebchat(js, reg)
	if err != nil {
		return nil, err
	}
	renders := renderFallbacks{prometheus.NewCounterVec(prometheus.CounterOpts{Name: "ximd_render_fallbacks_total",
		Help: "Messages sent in a simpler form because the platform refused the richer one (edge-api §7.3), by adapter and reason."}, []string{"adapter", "reason"})}
	if err := n.reg.Register(renders); err != nil {
		return nil, err
	}
	calls, err := relay.New(nc, n.reg, n.logger.With("stage", "relay"))
	if err != nil {
		return nil, err
	}
	common := func(name string) adapter.Common {
		return adapter.Common{Logger: n.logger.With("adapter", name), Files: fileStore, Renders: renders, Relay: calls}
	}
	return adapter.NewRegistry(hook, chat,
		matrix.New(matrix.Options{Common: common(matrix.Name)}),
		telegram.New(telegram.Options{Common: common(telegram.Name), PublicURL: n.cfg.PublicURL}),
		feishu.New(feishu.Options{Common: common(feishu.Name)}),
		slack.New(slack.Options{Common: common(slack.Name)}),
		dingtalk.New(dingtalk.Options{Common: common(dingtalk.Name)}),
		wecom.New(wecom.Options{Common: common(wecom.Name)}),
		discord.New(discord.Options{Common: common(discord.Name)})), nil
}

// renderFallbacks is ximd_render_fallbacks_total, the adapters' adapter.RenderFallbacks.
type renderFallbacks struct{ *prometheus.CounterVec }

func (r renderFallbacks) Fallback(adapter, reason string) { r.WithLabelValues(adapter, reason).Inc() }

// startRoles starts the node's role: the worker (stage consumers, outbound and replies loops,
// pollers), with the ops endpoints alone, or the edge (gateway, HTTP API), or both.
func (n *Node) startRoles(ctx context.Context, p *parts, errc chan<- error, cl *closers) error {
	if n.cfg.Role != RoleGateway {
		closeWorker, err := n.startWorker(ctx, p, errc)
		if err != nil {
			return err
		}
		cl.add(closeWorker)
	}
	if n.cfg.Role == RoleWorker {
		closeOps, err := n.serve(edge.Ops(n.reg, n.readiness(p.nc, p.js)), n.logger.With("role", "worker"), errc)
		if err != nil {
			return err
		}
		cl.add(closeOps)
	}
	if n.cfg.Role != RoleWorker {
		closeEdge, err := n.startEdge(ctx, p, errc)
		if err != nil {
			return err
		}
		cl.add(closeEdge)
	}
	return nil
}

func (n *Node) provision(ctx context.Context, js jetstream.JetStream) error {
	// A new cluster may still be electing its leaders and leave a request unanswered: each attempt
	// has its own deadline, and attempts go on for two minutes.
	pctx, cancel := context.WithTimeout(ctx, 2*time.Minute)
	defer cancel()
	for attempt := 1; ; attempt++ {
		actx, acancel := context.WithTimeout(pctx, 10*time.Second)
		err := pipeline.Provision(actx, js, n.cfg.Store)
		if err == nil {
			err = files.Provision(actx, js, n.fileConfig())
		}
		if err == nil {
			err = n.provisionWebchat(actx, js)
		}
		acancel()
		if err == nil {
			return nil
		}
		if nc := js.Conn(); nc.IsClosed() { // given up: refused credentials, most likely
			err := nc.LastError()
			if errors.Is(err, nats.ErrAuthorization) || errors.Is(err, nats.ErrAuthExpired) || errors.Is(err, nats.ErrAuthRevoked) {
				return fmt.Errorf("nats refused the credentials (XIM_NATS_CREDS, or the user in XIM_NATS_URL): %w", err)
			}
			return fmt.Errorf("nats connection closed: %v", err)
		}
		if pctx.Err() != nil {
			return fmt.Errorf("provision: %w", err)
		}
		n.logger.Warn("provision_retry", "attempt", attempt, "err", err)
		select {
		case <-time.After(time.Second):
		case <-pctx.Done():
			return fmt.Errorf("provision: %w", err)
		}
	}
}

func (n *Node) fileConfig() files.Config {
	return files.Config{Bucket: subjects.BucketFiles, TTL: n.cfg.FileTTL, MaxFileBytes: n.cfg.MaxFileBytes, MaxBucketBytes: n.cfg.FilesMaxBytes,
		Replicas: n.cfg.Store.Replicas, PublicURL: n.cfg.PublicURL, LinkTTL: n.cfg.FileLinkTTL}
}

// files opens the Transfer Plane with the cluster-wide signing key (created once, in KV).
func (n *Node) files(ctx context.Context, js jetstream.JetStream) (*files.Store, error) {
	kv, err := js.KeyValue(ctx, subjects.BucketConfig)
	if err != nil {
		return nil, err
	}
	key := make([]byte, 32)
	_, _ = rand.Read(key)
	if _, err := kv.Create(ctx, subjects.ConfigSigningKey, key); err != nil {
		if !errors.Is(err, jetstream.ErrKeyExists) {
			return nil, fmt.Errorf("signing key: %w", err)
		}
		e, err := kv.Get(ctx, subjects.ConfigSigningKey)
		if err != nil {
			return nil, fmt.Errorf("signing key: %w", err)
		}
		key = e.Value()
	}
	return files.New(js, n.fileConfig(), key, n.logger)
}

// worker is the running worker role of a node: its stage consumers, the send path's outbound
// loop and their helpers.
type worker struct {
	instance string
	log      *slog.Logger
	mem      *members.Members
	sub      *bus.Subscriber
	poison   *bus.Subscriber
	pub      *bus.Publisher
	router   *message.Router
	asm      *handlers.Assembler
	activity *handlers.Activity
	outbox   *handlers.Outbox
	replies  *handlers.ReplyQueue
	pollers  *pollers
	subs     []*nats.Subscription
	// runsActivity: this worker runs the activity stage and answers clear requests (clears
	// counts those being answered).
	runsActivity bool
	clears       sync.WaitGroup
	// runsAssemble: this worker runs the assemble stage and takes finish notices.
	runsAssemble bool
}

func (n *Node) startWorker(ctx context.Context, p *parts, errc chan<- error) (func(context.Context), error) {
	nc, js, reg, outbox, fs, adapters := p.nc, p.js, p.reg, p.outbox, p.files, p.adapters
	w := &worker{log: n.logger.With("role", "worker"), outbox: outbox, instance: n.cfg.Instance}
	mem, err := members.New(nc, members.Config{Instance: n.cfg.Instance, Partitions: n.cfg.Store.Partitions, Stages: n.cfg.Stages}, n.reg, w.log.With("stage", "members"))
	if err != nil {
		return nil, err
	}
	w.mem = mem
	cursors, err := js.KeyValue(ctx, subjects.BucketCursors)
	if err != nil {
		return nil, err
	}
	inbox := func(channel string) adapter.Inbox {
		return &channelInbox{channel: channel, outbox: outbox, files: fs, catalog: profile.Default(), logger: w.log}
	}
	if w.pollers, err = newPollers(reg, p.bots, p.admitter, adapters, mem.Live, mem.Settled, n.cfg.Instance, inbox, cursors, n.reg, w.log); err != nil {
		return nil, err
	}
	stages, err := n.buildStages(ctx, p, w)
	if err != nil {
		return nil, err
	}
	if err := n.subscribeStages(js, stages, w); err != nil {
		return nil, err
	}
	if err := w.listen(nc, stages); err != nil {
		return nil, err
	}
	return w.run(ctx, errc), nil
}

// runs reports whether this worker runs stage.
func (n *Node) runs(stage string) bool { return slices.Contains(n.cfg.Stages, stage) }

// buildStages makes the stages' parts and their shared helpers.
func (n *Node) buildStages(ctx context.Context, p *parts, w *worker) (*handlers.Stages, error) {
	nc, js, reg, records, fs, adapters := p.nc, p.js, p.reg, p.records, p.files, p.adapters
	m := handlers.NewMetrics(n.reg)
	n.reg.MustRegister(pipeline.NewStreamCollector(js)) // consumer lag, pending user messages
	w.replies = handlers.NewReplyQueue(js, nc, m.Replies, w.log.With("stage", "reply"))
	replies := handlers.NewReplier(nc, w.replies, m, w.log)
	// The records name the process that wrote them: an instance name may be reused by the next
	// process (XIM_INSTANCE), and a record of an earlier process is one whose outcome it took along.
	process := n.cfg.Instance + "/" + randomHex(4)
	leases, err := handlers.OpenActivityLeases(ctx, js)
	if err != nil {
		return nil, err
	}
	targets := handlers.NewTargets(webchat.WithChannelIDs(reg), adapters)
	pacer := handlers.NewPacer()
	w.activity = handlers.NewActivity(handlers.ActivityConfig{Timeout: n.cfg.ActivityTimeout, CallTimeout: n.cfg.TargetTimeout,
		Leases: leases, Resolve: targets.Resolve, Pacer: pacer}, m, w.log)
	clear := &handlers.Clearer{Owner: func(p int) string { return w.mem.Owner(stageActivity, p) }, Self: n.cfg.Instance, Req: nc, Logger: w.log}
	w.runsAssemble = n.runs(stageAssemble)
	if w.runsActivity = n.runs(stageActivity); w.runsActivity {
		clear.Local = w.activity
	}
	w.asm = handlers.NewAssembler(handlers.AssembleConfig{TTL: n.cfg.DeltaTTL, MaxBuffers: n.cfg.MaxDeltaBuffers, MaxBytes: n.cfg.MaxDeltaBytes,
		EditInterval: n.cfg.EditInterval, CallTimeout: n.cfg.TargetTimeout, Worker: process,
		// The deliver stage of p is this worker's, and has been for a while: a hand-over can leave
		// a partition's deliver and assemble stages on different workers until every pin moved.
		DeliverLocal: func(p int, since time.Time) bool {
			return w.mem.Owns(stageDeliver, p) && w.mem.SteadyFor(handOverWindow+time.Since(since))
		}}, handlers.AssemblerDeps{Records: records, Clear: clear, Pacer: pacer, Metrics: m, Logger: w.log})
	finisher := &handlers.Finisher{Owner: func(p int) string { return w.mem.Owner(stageAssemble, p) }, Self: n.cfg.Instance, Pub: nc, Logger: w.log}
	del := handlers.NewDeliverer(handlers.DeliverConfig{RetryBudget: n.cfg.TargetRetryBudget, CallTimeout: n.cfg.TargetTimeout, Worker: process, Finished: finisher},
		handlers.DelivererDeps{Records: records, Files: fileResolver{fs}, Assembler: w.asm, Clear: clear, Pacer: pacer, Replies: replies, Metrics: m, Logger: w.log})
	stages := handlers.NewStages(handlers.StagesDeps{Catalog: profile.Default(), Targets: targets, Assembler: w.asm, Deliverer: del,
		Activity: w.activity, Outbox: w.outbox, Replies: replies, Metrics: m, Logger: w.log})
	reg.OnChange(func(id string, open bool) {
		if !open {
			stages.ChannelClosed(id)
			pacer.Drop(id)
		}
	})
	return stages, nil
}

// handOverWindow is how long after the live workers changed a worker still treats a partition's
// stages as possibly served by different workers (display leases on): the pins move within
// StagePinnedTTL plus a pull, and a dead worker's packets come back after StageAckWait.
const handOverWindow = 3 * pipeline.StagePinnedTTL

// Stage names the worker treats specially (the catalog names them all).
const (
	stageDeliver  = "deliver"
	stageActivity = "activity"
	stageAssemble = "assemble"
)

// subscribeStages adds a router handler per partition of every stage this worker runs: each a
// durable consumer of its own (`deliver-p03`), with a lane per channel.
func (n *Node) subscribeStages(js jetstream.JetStream, stages *handlers.Stages, w *worker) error {
	var err error
	if w.pub, err = bus.NewPublisher(js, bus.PublisherConfig{}, w.log); err != nil {
		return err
	}
	kinds := pipeline.Stages()
	w.sub, err = bus.NewSubscriber(js, bus.SubscriberConfig{
		Consumer: func(topic string) bus.Consumer { return stageConsumer(topic, kinds) },
		AckWait:  pipeline.StageAckWait,
		// The consumers are provisioned with these settings (pipeline.StageConsumerConfig).
		MaxAckPending: pipeline.StageMaxAckPending,
		Active: func(topic string) bool {
			stage, p, _ := subjects.ParseStageConsumer(topic)
			return w.mem.Owns(stage, p)
		},
		Lane:     subjects.ChannelOfStored,
		MaxLanes: n.cfg.MaxLanes,
		MaxHeld:  pipeline.StageMaxHeld,
		// XIM_IN is a work queue (a stored packet is one no stage settled yet): a channel's
		// packets reach its stage in stream order even when the server redelivers out of it.
		LaneSubjects: laneSubjects(kinds),
	}, w.log)
	if err != nil {
		return err
	}
	poisonTopic, _ := subjects.Poison("in")
	if w.router, err = pipeline.NewRouter(pipeline.DefaultRouterConfig(), w.pub, poisonTopic, w.log); err != nil {
		return err
	}
	for _, stage := range n.cfg.Stages {
		for p := 0; p < n.cfg.Store.Partitions; p++ {
			name := subjects.StageConsumer(stage, p)
			w.router.AddNoPublisherHandler(name, name, w.sub, handlers.Route(stages.Handle))
		}
	}
	if n.runs(stageDeliver) {
		if w.poison, err = bus.NewSubscriber(js, bus.SubscriberConfig{Consumer: stageConsumerOrPoison(kinds)}, w.log); err != nil {
			return err
		}
		w.router.AddNoPublisherHandler(poisonConsumer, poisonConsumer, w.poison, handlers.Route(stages.PoisonHandler))
	}
	n.reg.MustRegister(newLaneCollector(w.sub))
	return nil
}

// listen answers the per-channel stats scatter; with the assemble stage it takes the finish
// notices of deliver stages in other processes, with the activity stage their status clears.
func (w *worker) listen(nc *nats.Conn, stages *handlers.Stages) error {
	statsSub, err := nc.Subscribe(subjects.StatsRequest, func(msg *nats.Msg) {
		ch := string(msg.Data)
		_ = msg.Respond([]byte(fmt.Sprintf(`{"open_delta_buffers":%d}`, w.asm.Count(ch))))
	})
	if err != nil {
		return err
	}
	w.subs = append(w.subs, statsSub)
	if w.runsAssemble {
		subject, err := subjects.FinishNotices(w.instance)
		if err != nil {
			return err
		}
		finishSub, err := nc.Subscribe(subject, func(msg *nats.Msg) {
			if ch := subjects.ChannelOfFinishNotice(msg.Subject); ch != "" {
				w.asm.Forget(ch, string(msg.Data))
			}
		})
		if err != nil {
			return err
		}
		w.subs = append(w.subs, finishSub)
	}
	if !w.runsActivity {
		return nil
	}
	subject, err := subjects.ClearRequests(w.instance)
	if err != nil {
		return err
	}
	clearSub, err := nc.Subscribe(subject, func(msg *nats.Msg) {
		w.clears.Add(1)
		go func() { defer w.clears.Done(); handlers.ServeClear(context.Background(), w.activity, msg) }()
	})
	if err != nil {
		return err
	}
	w.subs = append(w.subs, clearSub)
	return nil
}

// run starts the worker's goroutines and returns the function that drains and stops them.
func (w *worker) run(ctx context.Context, errc chan<- error) func(context.Context) {
	var wg sync.WaitGroup
	mctx, stopMembers := context.WithCancel(context.Background())
	wg.Add(1)
	go func() {
		defer wg.Done()
		if err := w.mem.Run(mctx); err != nil {
			errc <- err
		}
	}()
	pctx, stopPollers := context.WithCancel(context.Background())
	wg.Add(1)
	go func() { defer wg.Done(); w.pollers.Run(pctx) }()
	actx, stopAsm := context.WithCancel(context.Background())
	wg.Add(5)
	go func() { defer wg.Done(); _ = w.asm.Run(actx) }()
	go func() {
		defer wg.Done()
		if err := w.replies.Run(actx); err != nil {
			errc <- err
		}
	}()
	go func() { defer wg.Done(); _ = w.activity.Run(actx) }()
	go func() {
		defer wg.Done()
		if err := w.outbox.Run(actx); err != nil {
			errc <- err
		}
	}()
	go func() {
		defer wg.Done()
		if err := w.router.Run(context.Background()); err != nil {
			errc <- fmt.Errorf("router: %w", err)
		}
	}()
	select {
	case <-w.router.Running():
	case <-ctx.Done():
	}
	return func(dctx context.Context) {
		for _, s := range w.subs {
			_ = s.Unsubscribe()
		}
		stopPollers()   // another worker polls these channels once this one has left
		w.clears.Wait() // each at most handlers.ClearTimeout
		stopMembers()   // the others take this worker's partitions over as its subscriptions hand them back
		if err := w.router.Close(); err != nil {
			w.log.Warn("router_close", "err", err)
		}
		_ = w.sub.Close()
		if w.poison != nil {
			_ = w.poison.Close()
		}
		_ = w.pub.Close()
		stopAsm()
		_ = w.asm.Close(dctx)
		_ = w.activity.Close(dctx)
		wg.Wait()
	}
}

const poisonConsumer = "poison-replies"

// stageConsumer maps a stage consumer's topic ("deliver-p03") to its stream and durable consumer.
func stageConsumer(topic string, kinds map[string][]string) bus.Consumer {
	stage, p, _ := subjects.ParseStageConsumer(topic)
	cfg, _ := pipeline.StageConsumerConfig(stage, p, kinds[stage])
	filters := cfg.FilterSubjects
	if cfg.FilterSubject != "" {
		filters = []string{cfg.FilterSubject}
	}
	return bus.Consumer{Stream: subjects.StreamIn, Durable: cfg.Durable, FilterSubjects: filters, Description: cfg.Description,
		PinnedGroup: pipeline.StageGroup, PinnedTTL: pipeline.StagePinnedTTL}
}

// stageConsumerOrPoison also maps the poison stream's consumer.
// laneSubjects maps a stored XIM_IN subject to its channel's subjects in the stage that
// consumes its kind.
func laneSubjects(stages map[string][]string) func(string) []string {
	byKind := map[string][]string{}
	for _, kinds := range stages {
		for _, k := range kinds {
			byKind[k] = kinds
		}
	}
	return func(stored string) []string {
		kind := stored[strings.LastIndexByte(stored, '.')+1:]
		return subjects.LaneSubjects(stored, byKind[kind])
	}
}

func stageConsumerOrPoison(kinds map[string][]string) func(string) bus.Consumer {
	return func(topic string) bus.Consumer {
		if topic == poisonConsumer {
			return bus.Consumer{Stream: subjects.StreamPoison, Durable: poisonConsumer, FilterSubjects: []string{subjects.PoisonAll},
				Description: "ximd answers finals a stage gave up on"}
		}
		return stageConsumer(topic, kinds)
	}
}

// payloadHeadroom is what a packet gains on its way through NATS over its own size: headers, and
// the envelope of a call relayed to the process holding a platform connection.
const payloadHeadroom = 16 << 10

// packetLimit is XIM_MAX_PACKET_BYTES, lowered to what the NATS server's max_payload carries with
// payloadHeadroom (logged as a warning): a larger packet is then packet_too_large at the edge
// instead of a publish NATS refuses.
func (n *Node) packetLimit(nc *nats.Conn, log *slog.Logger) int64 {
	limit := n.cfg.MaxPacketBytes
	if fit := nc.MaxPayload() - payloadHeadroom; fit < limit {
		log.Warn("nats_max_payload_small", "max_payload", nc.MaxPayload(), "max_packet_bytes", n.cfg.MaxPacketBytes, "packet_limit", fit,
			"fix", fmt.Sprintf("set max_payload to %d or more in the NATS server's config (the embedded server's is 8 MiB), or lower XIM_MAX_PACKET_BYTES", limit+payloadHeadroom))
		limit = fit
	}
	return limit
}

func (n *Node) startEdge(ctx context.Context, p *parts, errc chan<- error) (func(context.Context), error) {
	nc, js, reg, records, outbox, fs, adapters := p.nc, p.js, p.reg, p.records, p.outbox, p.files, p.adapters
	log := n.logger.With("role", "gateway")
	token, err := n.agentToken()
	if err != nil {
		return nil, err
	}
	n.token = token
	isOpen := func(ctx context.Context, id string) (bool, error) {
		_, ok, err := reg.Lookup(ctx, id)
		return ok, err
	}
	maxPacket := n.packetLimit(nc, log)
	gw, err := edge.NewGateway(edge.GatewayConfig{ID: n.cfg.Instance, MaxPacketBytes: maxPacket, MaxConnections: n.cfg.MaxConnections, PublishTimeout: n.cfg.PublishTimeout}, nc, profile.Default(), isOpen, n.reg, log)
	if err != nil {
		return nil, err
	}
	cursors, err := js.KeyValue(ctx, subjects.BucketCursors)
	if err != nil {
		return nil, err
	}
	state := &channelState{nc: nc, js: js, records: records, outbox: outbox, files: fs, cursors: cursors}
	inbox := func(channel string) adapter.Inbox {
		return &channelInbox{channel: channel, outbox: outbox, files: fs, catalog: profile.Default(), logger: log}
	}
	inbound := edge.NewReceivers(maxPacket, reg, p.bots, p.admitter, adapters, inbox, n.reg, log)
	chatPage, chatLink, err := n.webchatPage(ctx, js, reg, adapters, fs, outbox, botPages{p.bots, p.admitter}, maxPacket, log)
	if err != nil {
		return nil, err
	}
	var e *edge.Edge
	channelsAPI := edge.NewChannelsAPI(reg, adapters, state, log)
	e, err = edge.New(edge.Config{Token: token, Version: Version, MaxInboundRequests: n.cfg.MaxInbound, BodyTimeout: n.cfg.BodyTimeout, UploadTimeout: n.cfg.UploadTimeout}, edge.Parts{
		Gateway:  gw,
		Channels: channelsAPI,
		Bots: edge.NewBotsAPI(channelsAPI, p.bots, p.pairings, func(ctx context.Context, bot string) error {
			return p.pairings.PurgeBot(ctx, js, bot)
		}),
		Files:      fs.Handler(func(r *http.Request) bool { return e.Authorized(r) }, reg),
		Inbound:    inbound,
		Gatherer:   n.reg,
		Registerer: n.reg,
		Ready:      n.readiness(nc, js),

		Webchat:        chatPage,
		WebchatLink:    chatLink,
		WebchatBotLink: http.HandlerFunc(chatPage.BotLink),
	}, log)
	if err != nil {
		return nil, err
	}
	stop, err := n.serve(e, log, errc)
	if err != nil {
		return nil, err
	}
	return func(dctx context.Context) {
		chatPage.Close() // ends the webchat event streams, which Shutdown would wait for
		stop(dctx)
		gw.Close()
		if err := gw.Flush(dctx); err != nil {
			log.Warn("gateway_flush", "err", err)
		}
	}, nil
}

// readiness reports whether NATS is connected and every stream, bucket and consumer exists.
func (n *Node) readiness(nc *nats.Conn, js jetstream.JetStream) func(ctx context.Context) error {
	return func(ctx context.Context) error {
		if !nc.IsConnected() {
			return errors.New("nats not connected")
		}
		if err := pipeline.Ready(ctx, js, n.cfg.Store); err != nil {
			return err
		}
		return webchatReady(ctx, js)
	}
}

// serve listens on XIM_HTTP_ADDR and serves h until the returned function shuts it down.
func (n *Node) serve(h http.Handler, log *slog.Logger, errc chan<- error) (func(context.Context), error) {
	ln, err := net.Listen("tcp", n.cfg.HTTPAddr)
	if err != nil {
		return nil, fmt.Errorf("listen %s: %w", n.cfg.HTTPAddr, err)
	}
	n.httpAddr = ln.Addr().String()
	// Headers within 10s, an idle keep-alive connection closed after 2 minutes; bodies have
	// their own deadlines (edge.Config.BodyTimeout) and streams none.
	srv := &http.Server{Handler: h, ReadHeaderTimeout: 10 * time.Second, IdleTimeout: 2 * time.Minute, MaxHeaderBytes: 64 << 10,
		ErrorLog: slog.NewLogLogger(log.Handler(), slog.LevelWarn)}
	go func() {
		if err := srv.Serve(ln); err != nil && !errors.Is(err, http.ErrServerClosed) {
			errc <- fmt.Errorf("http: %w", err)
		}
	}()
	return func(ctx context.Context) { _ = srv.Shutdown(ctx) }, nil
}

// agentToken returns XIM_AGENT_TOKEN, or the token in <data dir>/agent-token (created 0600).
func (n *Node) agentToken() (string, error) {
	if n.cfg.AgentToken != "" {
		return n.cfg.AgentToken, nil
	}
	path := filepath.Join(n.cfg.DataDir, "agent-token")
	if b, err := os.ReadFile(path); err == nil && len(strings.TrimSpace(string(b))) > 0 {
		n.logger.Info("agent_token_loaded", "path", path)
		return strings.TrimSpace(string(b)), nil
	}
	if err := os.MkdirAll(n.cfg.DataDir, 0o700); err != nil {
		return "", fmt.Errorf("agent token: %w", err)
	}
	tok := "xim_" + randomHex(24)
	if err := os.WriteFile(path, []byte(tok+"\n"), 0o600); err != nil {
		return "", fmt.Errorf("agent token: %w", err)
	}
	n.logger.Info("agent_token_generated", "path", path)
	return tok, nil
}

func randomHex(n int) string {
	b := make([]byte, n)
	_, _ = rand.Read(b)
	return hex.EncodeToString(b)
}

func waitClosed(nc *nats.Conn, d time.Duration) {
	deadline := time.Now().Add(d)
	for !nc.IsClosed() && time.Now().Before(deadline) {
		time.Sleep(10 * time.Millisecond)
	}
	nc.Close()
}
