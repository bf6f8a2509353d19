package handlers

import (
	"context"
	"log/slog"
	"sync"
	"time"

	"github.com/ximd/ximd/handlers/adapter"
	"github.com/ximd/ximd/profile"
)

// ActivityConfig configures the activity stage.
type ActivityConfig struct {
	// Timeout (XIM_ACTIVITY_TIMEOUT) clears a shown status that nothing else cleared (P-ACT-6).
	Timeout time.Duration
	// CallTimeout bounds one target call.
	CallTimeout time.Duration
	// Leases, when set, records every shown status durably, and Run clears, at its timeout, a
	// status whose worker died before clearing it (any worker does, once). nil: memory only.
	Leases *ActivityLeases
	// Resolve finds a channel's target for such a clear (Targets.Resolve). Required with Leases.
	Resolve func(ctx context.Context, channel string) (Bound, error)
	// Pacer, when set, holds a channel's status calls while its target asked to wait (a rate
	// limit); the latest status is shown after.
	Pacer *Pacer
}

// Activity shows chat.activity on targets that can (P-ACT-4) and clears it on idle, the final,
// the first displayed delta and a local timeout (P-ACT-5/6). It runs beside the message stages:
// calls are asynchronous, latest-wins per channel, and a failure is only counted and logged, so
// activity can never reject, delay or repeat a message.
type Activity struct {
	cfg     ActivityConfig
	metrics *Metrics
	logger  *slog.Logger

	ctx    context.Context
	cancel context.CancelFunc
	wg     sync.WaitGroup

	mu    sync.Mutex
	state map[string]*activityState
	// cleared is, per channel, the stream sequence of the last packet that cleared its status
	// (a final, a first displayed delta): an older snapshot is never shown after it.
	cleared map[string]uint64
}

type activityState struct {
	bound   Bound
	shower  adapter.ActivityShower
	want    adapter.Activity
	sent    adapter.Activity
	running bool
	timer   *time.Timer
	// renew shows the status again before the platform's indicator expires (ActivityRenewal).
	renew *time.Timer
	// showing is closed when the status call in flight ends (nil: none, or an idle one).
	showing chan struct{}
}

// NewActivity returns the activity stage; Close stops it.
func NewActivity(cfg ActivityConfig, m *Metrics, logger *slog.Logger) *Activity {
	if cfg.Timeout <= 0 {
		cfg.Timeout = 30 * time.Second
	}
	if cfg.CallTimeout <= 0 {
		cfg.CallTimeout = 5 * time.Second
	}
	ctx, cancel := context.WithCancel(context.Background())
	return &Activity{cfg: cfg, metrics: m, logger: logger, ctx: ctx, cancel: cancel, state: map[string]*activityState{}, cleared: map[string]uint64{}}
}

// Show displays a validated activity snapshot on the channel's target, per its capability. seq
// is its stream sequence: a snapshot older than the packet that last cleared the channel's status
// is stale and not shown (the stages run apart, so it may be processed after that packet).
func (a *Activity) Show(b Bound, act profile.Activity, seq uint64) {
	shower, ok := adapter.ShowerOf(b.Target)
	if !ok {
		return
	}
	want := adapter.Activity{Status: adapter.Status(act.Status), ToolName: act.ToolName}
	if b.Target.Capabilities().Activity == adapter.ActivityTyping && want.Status != adapter.StatusIdle {
		want = adapter.Activity{Status: adapter.StatusTyping}
	}
	a.mu.Lock()
	defer a.mu.Unlock()
	if seq < a.cleared[b.Channel] {
		a.metrics.ActivityStale.Inc()
		return
	}
	s := a.state[b.Channel]
	if s == nil {
		if want.Status == adapter.StatusIdle {
			return // nothing shown, nothing to clear
		}
		s = &activityState{sent: adapter.Activity{Status: adapter.StatusIdle}}
		a.state[b.Channel] = s
	}
	s.bound, s.shower, s.want = b, shower, want
	if s.timer != nil {
		s.timer.Stop()
		s.timer = nil
	}
	if want.Status != adapter.StatusIdle {
		ch := b.Channel
		s.timer = time.AfterFunc(a.cfg.Timeout, func() { a.Clear(ch, 0) })
	}
	a.kick(b.Channel, s)
}

// ClearWait clears the channel's status like Clear, then waits (bounded by ctx) until no status
// call of the channel is in flight: whatever the caller shows next (a final, a first displayed
// delta) reaches the target after any status shown before it (P-ACT-5).
func (a *Activity) ClearWait(ctx context.Context, channel string, seq uint64) error {
	a.mu.Lock()
	a.clearLocked(channel, seq)
	var showing chan struct{}
	if s := a.state[channel]; s != nil {
		showing = s.showing
	}
	a.mu.Unlock()
	if showing == nil {
		return nil
	}
	select {
	case <-showing:
		return nil
	case <-ctx.Done():
		return ctx.Err()
	}
}

// Clear clears a shown status of the channel (idle, final, first displayed delta, timeout). seq is
// the stream sequence of the packet that clears it (0 for the timeout): snapshots older than it
// are not shown afterwards.
func (a *Activity) Clear(channel string, seq uint64) {
	a.mu.Lock()
	defer a.mu.Unlock()
	a.clearLocked(channel, seq)
}

func (a *Activity) clearLocked(channel string, seq uint64) {
	if seq > a.cleared[channel] {
		a.cleared[channel] = seq
	}
	s := a.state[channel]
	if s == nil || s.want.Status == adapter.StatusIdle {
		return
	}
	if s.timer != nil {
		s.timer.Stop()
		s.timer = nil
	}
	if s.renew != nil {
		s.renew.Stop()
		s.renew = nil
	}
	s.want = adapter.Activity{Status: adapter.StatusIdle}
	a.kick(channel, s)
}

// Drop forgets a closed channel without calling its adapter.
func (a *Activity) Drop(channel string) {
	a.mu.Lock()
	if s := a.state[channel]; s != nil {
		if s.timer != nil {
			s.timer.Stop()
		}
		if s.renew != nil {
			s.renew.Stop()
		}
	}
	delete(a.state, channel)
	delete(a.cleared, channel)
	a.mu.Unlock()
}

// Shown returns the status last sent to the channel's target ("" when none).
func (a *Activity) Shown(channel string) adapter.Status {
	a.mu.Lock()
	defer a.mu.Unlock()
	if s := a.state[channel]; s != nil {
		return s.sent.Status
	}
	return ""
}

// renewLocked shows want again after every, if it is still what the channel shows then (the
// platform's indicator expires by itself); a.mu is held.
func (a *Activity) renewLocked(channel string, s *activityState, want adapter.Activity, every time.Duration) {
	if s.renew != nil {
		s.renew.Stop()
	}
	s.renew = time.AfterFunc(every, func() {
		a.mu.Lock()
		defer a.mu.Unlock()
		if a.state[channel] == s && s.want == want && s.sent == want {
			s.sent = adapter.Activity{} // not shown any more: the sender shows want again
			a.kick(channel, s)
		}
	})
}

// kick starts the channel's sender unless one runs; a.mu is held.
func (a *Activity) kick(channel string, s *activityState) {
	if s.running || a.ctx.Err() != nil {
		return
	}
	s.running = true
	a.wg.Add(1)
	go a.send(channel, s)
}

func (a *Activity) send(channel string, s *activityState) {
	defer a.wg.Done()
	for {
		if until := a.cfg.Pacer.Until(channel); !until.IsZero() {
			t := time.NewTimer(time.Until(until))
			select {
			case <-t.C:
			case <-a.ctx.Done():
				t.Stop()
			}
		}
		a.mu.Lock()
		if s.want == s.sent || a.ctx.Err() != nil {
			s.running = false
			if s.sent.Status == adapter.StatusIdle && a.state[channel] == s {
				delete(a.state, channel)
			}
			a.mu.Unlock()
			return
		}
		want, shower, adapterName := s.want, s.shower, s.bound.Adapter
		// Marked under the lock that read want: a ClearWait from now on waits for this call.
		var showing chan struct{}
		if want.Status != adapter.StatusIdle {
			showing = make(chan struct{})
			s.showing = showing
		}
		a.mu.Unlock()
		if showing != nil {
			a.lease(channel, want) // before the call: a crash during it leaves the lease behind
		}
		ctx, cancel := context.WithTimeout(a.ctx, a.cfg.CallTimeout)
		start := time.Now()
		err := shower.ShowActivity(ctx, want)
		cancel()
		outcome := callOK
		if err != nil {
			outcome = errorCode(err)
			a.metrics.ActivityFails.Inc()
			a.logger.Warn("activity_display_failed", "channel", channel, "stage", "activity", "status", want.Status, "err", err)
		} else if want.Status == adapter.StatusIdle {
			a.lease(channel, want)
		}
		a.metrics.TargetCalls.WithLabelValues(adapterName, "activity", outcome).Observe(time.Since(start).Seconds())

		a.mu.Lock()
		s.sent = want // never retried: a status is a hint, the next snapshot replaces it
		if showing != nil {
			close(showing)
			s.showing = nil
		}
		if every := s.bound.Target.Capabilities().ActivityRenewal; err == nil && want.Status != adapter.StatusIdle && every > 0 {
			a.renewLocked(channel, s, want, every)
		}
		a.mu.Unlock()
	}
}

// lease records a status about to be shown, or forgets it once idle is shown (Leases).
func (a *Activity) lease(channel string, shown adapter.Activity) {
	if a.cfg.Leases == nil {
		return
	}
	ctx, cancel := context.WithTimeout(context.WithoutCancel(a.ctx), a.cfg.CallTimeout)
	defer cancel()
	var err error
	if shown.Status == adapter.StatusIdle {
		err = a.cfg.Leases.cleared(ctx, channel)
	} else {
		err = a.cfg.Leases.shown(ctx, channel, time.Now())
	}
	if err != nil {
		a.logger.Warn("activity_lease_failed", "channel", channel, "stage", "activity", "err", err)
	}
}

// Run clears, until ctx ends, the statuses other workers showed and left behind: every quarter
// of the timeout it takes the leases older than the timeout (plus a quarter, so a live worker's
// own timer goes first) of channels this worker shows nothing on, and shows idle there.
func (a *Activity) Run(ctx context.Context) error {
	if a.cfg.Leases == nil {
		<-ctx.Done()
		return nil
	}
	every := max(a.cfg.Timeout/4, time.Second)
	tick := time.NewTicker(every)
	defer tick.Stop()
	for {
		a.sweep(ctx)
		select {
		case <-ctx.Done():
			return nil
		case <-tick.C:
		}
	}
}

func (a *Activity) sweep(ctx context.Context) {
	due, err := a.cfg.Leases.due(ctx, time.Now().Add(-a.cfg.Timeout-a.cfg.Timeout/4))
	if err != nil && ctx.Err() == nil {
		a.logger.Warn("activity_sweep_failed", "stage", "activity", "err", err)
	}
	for _, d := range due {
		a.mu.Lock()
		mine := a.state[d.channel] != nil
		a.mu.Unlock()
		if mine {
			continue // this worker's timer clears it
		}
		if won, err := a.cfg.Leases.take(ctx, d); err != nil || !won {
			continue
		}
		b, err := a.cfg.Resolve(ctx, d.channel)
		if err != nil {
			continue // closed: nothing to clear
		}
		shower, ok := adapter.ShowerOf(b.Target)
		if !ok {
			continue
		}
		a.logger.Info("activity_cleared_left_behind", "channel", d.channel, "stage", "activity")
		a.mu.Lock()
		if a.state[d.channel] == nil {
			s := &activityState{bound: b, shower: shower, sent: adapter.Activity{Status: "left_behind"}, want: adapter.Activity{Status: adapter.StatusIdle}}
			a.state[d.channel] = s
			a.kick(d.channel, s)
		}
		a.mu.Unlock()
	}
}

// Close drains the stage: it clears the statuses it shows (so a stopped worker leaves none
// behind), waits (bounded by ctx) for the calls in flight, and stops.
func (a *Activity) Close(ctx context.Context) error {
	a.mu.Lock()
	for ch, s := range a.state {
		if s.timer != nil {
			s.timer.Stop()
			s.timer = nil
		}
		if s.want.Status != adapter.StatusIdle {
			s.want = adapter.Activity{Status: adapter.StatusIdle}
			a.kick(ch, s)
		}
	}
	a.mu.Unlock()
	err := waitGroup(ctx, &a.wg)
	a.cancel()
	return err
}

func waitGroup(ctx context.Context, wg *sync.WaitGroup) error {
	done := make(chan struct{})
	go func() { wg.Wait(); close(done) }()
	select {
	case <-done:
		return nil
	case <-ctx.Done():
		return ctx.Err()
	}
}
