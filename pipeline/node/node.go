// Package node assembles a ximd process of one role (all, gateway, worker) from the pipeline's
// parts and runs it until its context ends, then drains (edge-api §1: SIGTERM drains).
package node

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/collectors"

	"github.com/ximd/ximd/handlers"
	"github.com/ximd/ximd/handlers/target"
	"github.com/ximd/ximd/handlers/target/webchat"
	"github.com/ximd/ximd/handlers/target/webhook"
	"github.com/ximd/ximd/pipeline"
	"github.com/ximd/ximd/pipeline/bus"
	"github.com/ximd/ximd/pipeline/channels"
	"github.com/ximd/ximd/pipeline/download"
	"github.com/ximd/ximd/pipeline/edge"
	"github.com/ximd/ximd/pipeline/files"
	"github.com/ximd/ximd/pipeline/members"
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

	ready    chan struct{}
	httpAddr string
	natsURL  string
	token    string
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

// Metrics is the node's Prometheus registry (what GET /metrics serves).
func (n *Node) Metrics() prometheus.Gatherer { return n.reg }

// Token is the bearer token xAgent must present (after Ready; "" for a worker).
func (n *Node) Token() string { return n.token }

// Run runs the node until ctx ends, then drains: the edge stops taking packets, stored packets
// are flushed, handlers in flight finish (or their messages are handed back), and NATS closes.
func (n *Node) Run(ctx context.Context) error {
	var closers []func(context.Context) // run in reverse order at the end
	defer func() {
		dctx, cancel := context.WithTimeout(context.Background(), 45*time.Second)
		defer cancel()
		for i := len(closers) - 1; i >= 0; i-- {
			closers[i](dctx)
		}
	}()
	var nc *nats.Conn
	var err error
	name := fmt.Sprintf("ximd-%s-%s", n.cfg.Role, n.cfg.Instance)
	if n.cfg.NATSURL == "" {
		srv, err := pipeline.StartServer(pipeline.ServerConfig{DataDir: n.cfg.DataDir, Port: n.cfg.NATSPort, MonitorPort: n.cfg.NATSMonitorPort, SyncInterval: n.cfg.NATSSync, SyncAlways: n.cfg.NATSSyncAlways}, n.logger)
		if err != nil {
			return err
		}
		closers = append(closers, func(context.Context) { srv.Shutdown() })
		n.natsURL = srv.ClientURL()
		n.logger.Info("nats_embedded", "client_url", srv.ClientURL(), "monitor_url", srv.MonitorURL(), "store_dir", filepath.Join(n.cfg.DataDir, "jetstream"))
		nc, err = pipeline.Connect(srv.ClientURL(), name, n.logger, srv.InProcess())
		if err != nil {
			return err
		}
	} else {
		n.natsURL = n.cfg.NATSURL
		if nc, err = pipeline.Connect(n.cfg.NATSURL, name, n.logger); err != nil {
			return err
		}
	}
	closers = append(closers, func(context.Context) { _ = nc.Drain(); waitClosed(nc, 10*time.Second) })
	js, err := jetstream.New(nc)
	if err != nil {
		return err
	}
	if err := n.provision(ctx, js); err != nil {
		return err
	}
	reg, err := channels.Open(ctx, js, n.logger)
	if err != nil {
		return err
	}
	var wg sync.WaitGroup
	errc := make(chan error, 8)
	rctx, stopRegistry := context.WithCancel(context.Background())
	wg.Add(1)
	go func() { defer wg.Done(); _ = reg.Run(rctx) }()
	closers = append(closers, func(context.Context) { stopRegistry(); wg.Wait() })

	records, err := handlers.OpenRecords(ctx, js)
	if err != nil {
		return err
	}
	fileStore, err := n.files(ctx, js)
	if err != nil {
		return err
	}
	hook := webhook.New(webhook.Options{Logger: n.logger})
	chat, err := n.openWebchat(js, reg)
	if err != nil {
		return err
	}
	adapters := target.NewRegistry(hook, chat)
	outbox, err := handlers.OpenOutbox(ctx, js, nc, handlers.OutboxConfig{AckTimeout: n.cfg.AckTimeout, BackoffMax: n.cfg.OutboundBackoff, MaxAge: n.cfg.Store.OutboundMaxAge}, n.reg, n.logger.With("stage", "outbound"))
	if err != nil {
		return err
	}

	if n.cfg.Role != RoleGateway {
		closeWorker, err := n.startWorker(ctx, nc, js, reg, records, outbox, fileStore, adapters, errc)
		if err != nil {
			return err
		}
		closers = append(closers, closeWorker)
	}
	if n.cfg.Role == RoleWorker {
		closeOps, err := n.serve(edge.Ops(n.reg, n.readiness(nc, js)), n.logger.With("role", "worker"), errc)
		if err != nil {
			return err
		}
		closers = append(closers, closeOps)
	}
	if n.cfg.Role != RoleWorker {
		closeEdge, err := n.startEdge(ctx, nc, js, reg, records, outbox, fileStore, hook, adapters, errc)
		if err != nil {
			return err
		}
		closers = append(closers, closeEdge)
	}
	close(n.ready)
	n.logger.Info("ximd_ready", "role", string(n.cfg.Role), "instance", n.cfg.Instance, "http_addr", n.httpAddr, "version", Version)
	select {
	case <-ctx.Done():
		n.logger.Info("ximd_draining")
		return nil
	case err := <-errc:
		return err
	}
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

func (n *Node) startWorker(ctx context.Context, nc *nats.Conn, js jetstream.JetStream, reg *channels.Registry, records *handlers.Records, outbox *handlers.Outbox, fs *files.Store, adapters *target.Registry, errc chan<- error) (func(context.Context), error) {
	m := handlers.NewMetrics(n.reg)
	n.reg.MustRegister(pipeline.NewStreamCollector(js)) // consumer lag, pending user messages
	log := n.logger.With("role", "worker")
	replies := handlers.NewReplier(nc, m, log)
	// The records name the process that wrote them: an instance name may be reused by the next
	// process (XIM_INSTANCE), and a record of an earlier process is one whose outcome it took along.
	process := n.cfg.Instance + "/" + randomHex(4)
	leases, err := handlers.OpenActivityLeases(ctx, js)
	if err != nil {
		return nil, err
	}
	targets := handlers.NewTargets(webchat.WithChannelIDs(reg), adapters)
	activity := handlers.NewActivity(handlers.ActivityConfig{Timeout: n.cfg.ActivityTimeout, CallTimeout: n.cfg.TargetTimeout,
		Leases: leases, Resolve: targets.Resolve}, m, log)
	asm := handlers.NewAssembler(handlers.AssembleConfig{TTL: n.cfg.DeltaTTL, MaxBuffers: n.cfg.MaxDeltaBuffers, MaxBytes: n.cfg.MaxDeltaBytes,
		EditInterval: n.cfg.EditInterval, CallTimeout: n.cfg.TargetTimeout, Worker: process}, records, activity, m, log)
	del := handlers.NewDeliverer(handlers.DeliverConfig{RetryBudget: n.cfg.TargetRetryBudget, CallTimeout: n.cfg.TargetTimeout, Worker: process},
		records, fileResolver{fs}, asm, activity, replies, m, log)
	stages := handlers.NewStages(profile.Default(), targets, asm, del, activity, outbox, replies, m, log)
	reg.OnChange(func(id string, open bool) {
		if !open {
			stages.ChannelClosed(id)
		}
	})

	pub, err := bus.NewPublisher(js, bus.PublisherConfig{}, log)
	if err != nil {
		return nil, err
	}
	mem, err := members.New(nc, members.Config{Instance: n.cfg.Instance, Partitions: n.cfg.Store.Partitions}, n.reg, log.With("stage", "members"))
	if err != nil {
		return nil, err
	}
	sub, err := bus.NewSubscriber(js, bus.SubscriberConfig{
		Consumer:      consumerOf,
		AckWait:       pipeline.PartitionAckWait,
		MaxAckPending: pipeline.PartitionMaxAckPending,
		Active:        func(topic string) bool { return mem.Owns(partitionOf(topic)) },
	}, log)
	if err != nil {
		return nil, err
	}
	poisonTopic, _ := subjects.Poison("in")
	router, err := pipeline.NewRouter(pipeline.DefaultRouterConfig(), pub, poisonTopic, log)
	if err != nil {
		return nil, err
	}
	for p := 0; p < n.cfg.Store.Partitions; p++ {
		name := subjects.PartitionConsumer(p)
		router.AddNoPublisherHandler(name, name, sub, stages.Handle)
	}
	poisonSub, err := bus.NewSubscriber(js, bus.SubscriberConfig{Consumer: consumerOf}, log)
	if err != nil {
		return nil, err
	}
	router.AddNoPublisherHandler(poisonConsumer, poisonConsumer, poisonSub, stages.PoisonHandler)

	statsSub, err := nc.Subscribe(subjects.StatsRequest, func(msg *nats.Msg) {
		ch := string(msg.Data)
		_ = msg.Respond([]byte(fmt.Sprintf(`{"open_delta_buffers":%d}`, asm.Count(ch))))
	})
	if err != nil {
		return nil, err
	}

	var wg sync.WaitGroup
	mctx, stopMembers := context.WithCancel(context.Background())
	wg.Add(1)
	go func() {
		defer wg.Done()
		if err := mem.Run(mctx); err != nil {
			errc <- err
		}
	}()
	actx, stopAsm := context.WithCancel(context.Background())
	wg.Add(4)
	go func() { defer wg.Done(); _ = asm.Run(actx) }()
	go func() { defer wg.Done(); _ = activity.Run(actx) }()
	go func() {
		defer wg.Done()
		if err := outbox.Run(actx); err != nil {
			errc <- err
		}
	}()
	go func() {
		defer wg.Done()
		if err := router.Run(context.Background()); err != nil {
			errc <- fmt.Errorf("router: %w", err)
		}
	}()
	select {
	case <-router.Running():
	case <-ctx.Done():
	}
	return func(dctx context.Context) {
		_ = statsSub.Unsubscribe()
		stopMembers() // the others take this worker's partitions over as its subscriptions hand them back
		if err := router.Close(); err != nil {
			log.Warn("router_close", "err", err)
		}
		_ = sub.Close()
		_ = poisonSub.Close()
		_ = pub.Close()
		stopAsm()
		_ = asm.Close(dctx)
		_ = activity.Close(dctx)
		wg.Wait()
	}, nil
}

const poisonConsumer = "poison-replies"

// partitionOf is the partition of a partition consumer's topic ("in-p03": 3).
func partitionOf(topic string) int {
	var p int
	_, _ = fmt.Sscanf(topic, "in-p%d", &p)
	return p
}

// consumerOf maps a router topic to its stream and durable consumer.
func consumerOf(topic string) bus.Consumer {
	if topic == poisonConsumer {
		return bus.Consumer{Stream: subjects.StreamPoison, Durable: poisonConsumer, FilterSubjects: []string{subjects.PoisonAll},
			Description: "ximd answers finals a partition gave up on"}
	}
	cfg := pipeline.PartitionConsumerConfig(partitionOf(topic))
	return bus.Consumer{Stream: subjects.StreamIn, Durable: cfg.Durable, FilterSubjects: []string{cfg.FilterSubject}, Description: cfg.Description,
		PinnedGroup: pipeline.PartitionGroup, PinnedTTL: pipeline.PartitionPinnedTTL}
}

func (n *Node) startEdge(ctx context.Context, nc *nats.Conn, js jetstream.JetStream, reg *channels.Registry, records *handlers.Records, outbox *handlers.Outbox, fs *files.Store, hook *webhook.Adapter, adapters *target.Registry, errc chan<- error) (func(context.Context), error) {
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
	gw, err := edge.NewGateway(edge.GatewayConfig{ID: n.cfg.Instance, MaxPacketBytes: n.cfg.MaxPacketBytes, MaxConnections: n.cfg.MaxConnections}, nc, profile.Default(), isOpen, n.reg, log)
	if err != nil {
		return nil, err
	}
	state := &channelState{nc: nc, js: js, records: records, outbox: outbox, files: fs}
	fetcher := download.New(download.Config{MaxBytes: n.cfg.MaxFileBytes, Timeout: n.cfg.DownloadTimeout}, nil)
	inbound := edge.NewInbound(edge.InboundConfig{MaxBodyBytes: n.cfg.MaxPacketBytes}, reg, hook, profile.Default(), fs, fetcher, outbox, n.reg, log)
	chatPage, chatLink, err := n.webchatPage(ctx, js, reg, adapters, fs, outbox, log)
	if err != nil {
		return nil, err
	}
	var e *edge.Edge
	e, err = edge.New(edge.Config{Token: token, Version: Version, MaxInboundRequests: n.cfg.MaxInbound}, edge.Parts{
		Gateway:  gw,
		Channels: edge.NewChannelsAPI(reg, adapters, state, log),
		Files:    fs.Handler(func(r *http.Request) bool { return e.Authorized(r) }, reg),
		Inbound:  inbound,
		Gatherer: n.reg,
		Ready:    n.readiness(nc, js),

		Webchat:     chatPage,
		WebchatLink: chatLink,
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
	srv := &http.Server{Handler: h, ReadHeaderTimeout: 10 * time.Second, ErrorLog: slog.NewLogLogger(log.Handler(), slog.LevelWarn)}
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
