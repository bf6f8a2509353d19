// Package members shares the XIM_IN partitions among the live worker processes. Every worker
// announces itself on a core NATS subject every Interval and says when it leaves; each keeps the
// set of workers it heard within Timeout and serves the partitions the set assigns it: with the
// instances sorted, partition p belongs to the worker at index p mod n. The assignment only
// spreads the load: the partition consumers' pinned group still guarantees that one worker at a
// time is served a partition, so views that briefly disagree cost a hand-over, never order.
package members

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"slices"
	"sync"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/prometheus/client_golang/prometheus"

	"github.com/ximd/ximd/subjects"
)

// Config configures [Members].
type Config struct {
	// Instance names this worker (XIM_INSTANCE); unique among the workers. Required.
	Instance string
	// Partitions is the number of partitions to share (XIM_PARTITIONS). Required.
	Partitions int
	// Stages are the pipeline stages this worker runs (XIM_STAGES). Each stage's partitions are
	// shared among the live workers that run it. Required.
	Stages []string
	// Interval is the heartbeat period. Default 1s.
	Interval time.Duration
	// Timeout is how long a worker that fell silent still counts (it died: its partitions move
	// after this). Default 3.5 intervals.
	Timeout time.Duration
}

func (c Config) withDefaults() Config {
	if c.Interval == 0 {
		c.Interval = time.Second
	}
	if c.Timeout == 0 {
		c.Timeout = c.Interval * 7 / 2
	}
	return c
}

// Validate reports every configuration error at once.
func (c Config) Validate() error {
	var errs []error
	if err := subjects.Token(c.Instance); err != nil {
		errs = append(errs, fmt.Errorf("instance: %w", err))
	}
	if len(c.Stages) == 0 {
		errs = append(errs, errors.New("stages: at least one is required"))
	}
	if c.Partitions < 1 {
		errs = append(errs, fmt.Errorf("partitions %d: must be positive", c.Partitions))
	}
	if c.Interval < 0 || c.Timeout < 0 || (c.Timeout > 0 && c.Timeout <= c.Interval) {
		errs = append(errs, errors.New("interval and timeout must be positive, timeout above interval"))
	}
	return errors.Join(errs...)
}

// beat is the heartbeat message.
type beat struct {
	Instance string   `json:"instance"`
	Stages   []string `json:"stages"`
	Leaving  bool     `json:"leaving,omitempty"`
}

// Members is one worker's view of the live workers and its share of the partitions.
type Members struct {
	cfg    Config
	nc     *nats.Conn
	logger *slog.Logger
	live   prometheus.Gauge
	owned  *prometheus.GaugeVec

	mu     sync.Mutex
	seen   map[string]peer  // other workers, by instance
	shares map[string]share // this worker's share of each of its stages
	// running is, per stage asked for, the sorted live instances that run it (Owner's, made
	// anew after each change).
	running map[string][]string
	n       int // live instances, this one included
	// changed is when the live set last changed (zero: never, a single worker).
	changed time.Time
	// started is when this worker first announced itself (zero: not yet).
	started time.Time
}

// peer is another live worker.
type peer struct {
	at     time.Time // last heard
	stages []string
}

// share is this worker's place among the live workers running one stage.
type share struct{ index, n int }

// New returns the view of the worker cfg.Instance; Run keeps it. Its gauges are registered with
// reg (ximd_workers_live, ximd_partitions_owned).
func New(nc *nats.Conn, cfg Config, reg prometheus.Registerer, logger *slog.Logger) (*Members, error) {
	if err := cfg.Validate(); err != nil {
		return nil, fmt.Errorf("members: %w", err)
	}
	m := &Members{
		cfg: cfg.withDefaults(), nc: nc, logger: logger, seen: map[string]peer{}, n: 1,
		live: prometheus.NewGauge(prometheus.GaugeOpts{Name: "ximd_workers_live",
			Help: "Worker processes this worker hears (itself included); the partitions are shared among them."}),
		owned: prometheus.NewGaugeVec(prometheus.GaugeOpts{Name: "ximd_partitions_owned",
			Help: "XIM_IN partitions assigned to this worker, per stage it runs."}, []string{"stage"}),
	}
	if err := reg.Register(m.live); err != nil {
		return nil, fmt.Errorf("members: %w", err)
	}
	if err := reg.Register(m.owned); err != nil {
		return nil, fmt.Errorf("members: %w", err)
	}
	m.update()
	return m, nil
}

// Owns reports whether partition p of stage is this worker's to serve: the partitions of a stage
// go round-robin to the sorted live workers that run it. Safe for concurrent use.
func (m *Members) Owns(stage string, p int) bool {
	m.mu.Lock()
	defer m.mu.Unlock()
	sh, ok := m.shares[stage]
	return ok && p%sh.n == sh.index
}

// Owner returns the instance serving partition p of stage ("" when no live worker runs the stage).
func (m *Members) Owner(stage string, p int) string {
	m.mu.Lock()
	defer m.mu.Unlock()
	running, ok := m.running[stage]
	if !ok {
		for _, inst := range m.liveLocked() {
			if m.runs(inst, stage) {
				running = append(running, inst)
			}
		}
		m.running[stage] = running
	}
	if len(running) == 0 {
		return ""
	}
	return running[p%len(running)]
}

// SteadyFor reports whether the live set has not changed for d: while it changes, the stages
// of one partition may be served by different workers for a while (each stage consumer's pin
// moves on its own).
func (m *Members) SteadyFor(d time.Duration) bool {
	m.mu.Lock()
	defer m.mu.Unlock()
	return time.Since(m.changed) >= d
}

// Settled reports whether this worker announced itself an Interval ago or more: every live worker
// answers a newcomer at once and beats every Interval, so by then the live set names them all.
// Until then a worker that just started hears only itself, and work one worker at a time may do
// (a poll loop: a WeCom robot's one connection, a Telegram bot's getUpdates) waits.
func (m *Members) Settled() bool {
	m.mu.Lock()
	defer m.mu.Unlock()
	return !m.started.IsZero() && time.Since(m.started) >= m.cfg.Interval
}

// Live returns the instances of the live workers, this one included, sorted.
func (m *Members) Live() []string {
	m.mu.Lock()
	defer m.mu.Unlock()
	return m.liveLocked()
}

func (m *Members) liveLocked() []string {
	live := []string{m.cfg.Instance}
	for inst := range m.seen {
		live = append(live, inst)
	}
	slices.Sort(live)
	return live
}

// runs reports whether instance runs stage (a heartbeat without stages: every stage).
func (m *Members) runs(instance, stage string) bool {
	if instance == m.cfg.Instance {
		return slices.Contains(m.cfg.Stages, stage)
	}
	p := m.seen[instance]
	return len(p.stages) == 0 || slices.Contains(p.stages, stage)
}

// update recomputes this worker's share; m.mu is held or m is not shared yet.
func (m *Members) update() {
	live := m.liveLocked()
	m.n = len(live)
	m.shares = make(map[string]share, len(m.cfg.Stages))
	m.running = map[string][]string{}
	for _, stage := range m.cfg.Stages {
		var sh share
		for _, inst := range live {
			if inst == m.cfg.Instance {
				sh.index = sh.n
			}
			if m.runs(inst, stage) {
				sh.n++
			}
		}
		m.shares[stage] = sh
		owned := 0
		for p := 0; p < m.cfg.Partitions; p++ {
			if p%sh.n == sh.index {
				owned++
			}
		}
		m.owned.WithLabelValues(stage).Set(float64(owned))
	}
	m.live.Set(float64(m.n))
}

// Run announces this worker and follows the others until ctx ends; then it announces that it
// leaves, so the others take its partitions over at once.
func (m *Members) Run(ctx context.Context) error {
	sub, err := m.nc.Subscribe(subjects.WorkerHeartbeat, func(msg *nats.Msg) {
		var b beat
		if json.Unmarshal(msg.Data, &b) != nil || b.Instance == "" || b.Instance == m.cfg.Instance {
			return
		}
		m.heard(b)
	})
	if err != nil {
		return fmt.Errorf("members: subscribe: %w", err)
	}
	defer func() { _ = sub.Unsubscribe() }()
	m.mu.Lock()
	m.started = time.Now()
	m.mu.Unlock()
	m.announce(false)
	tick := time.NewTicker(m.cfg.Interval)
	defer tick.Stop()
	for {
		select {
		case <-ctx.Done():
			m.announce(true)
			_ = m.nc.FlushTimeout(time.Second)
			return nil
		case now := <-tick.C:
			m.announce(false)
			m.expire(now)
		}
	}
}

// heard records a heartbeat of another worker. A newcomer is answered at once, so that it learns
// of this worker within a round trip rather than an interval.
func (m *Members) heard(b beat) {
	m.mu.Lock()
	old, known := m.seen[b.Instance]
	if b.Leaving {
		delete(m.seen, b.Instance)
	} else {
		m.seen[b.Instance] = peer{at: time.Now(), stages: b.Stages}
	}
	changed := known == b.Leaving || (known && !slices.Equal(old.stages, b.Stages))
	if changed {
		m.changed = time.Now()
		m.update()
	}
	live := m.liveLocked()
	m.mu.Unlock()
	if changed {
		m.logger.Info("workers_changed", "workers", live, "joined", !b.Leaving, "worker", b.Instance)
		if !b.Leaving {
			m.announce(false)
		}
	}
}

// expire forgets the workers not heard within Timeout.
func (m *Members) expire(now time.Time) {
	m.mu.Lock()
	var gone []string
	for inst, p := range m.seen {
		if now.Sub(p.at) > m.cfg.Timeout {
			delete(m.seen, inst)
			gone = append(gone, inst)
		}
	}
	if len(gone) > 0 {
		m.changed = time.Now()
		m.update()
	}
	live := m.liveLocked()
	m.mu.Unlock()
	if len(gone) > 0 {
		m.logger.Warn("workers_silent", "gone", gone, "workers", live)
	}
}

func (m *Members) announce(leaving bool) {
	b, _ := json.Marshal(beat{Instance: m.cfg.Instance, Stages: m.cfg.Stages, Leaving: leaving})
	if err := m.nc.Publish(subjects.WorkerHeartbeat, b); err != nil {
		m.logger.Debug("workers_announce_failed", "err", err)
	}
}
