package test

import (
	"context"
	"fmt"
	"math"
	"net/http"
	"net/http/httptest"
	"slices"
	"strconv"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/ximd/ximd/internal/testkit"
	"github.com/ximd/ximd/pipeline/node"
	"github.com/ximd/ximd/profile"
)

// laneKind is how a lane's webhook target behaves.
type laneKind string

const (
	laneSlow    laneKind = "slow"    // every call takes laneSlowCall, then 200
	laneLimited laneKind = "limited" // 429 with Retry-After for laneRetryAfter from its first call (a rate-limit window), then 200
	laneFast    laneKind = "fast"    // 200 at once
)

const (
	laneSlowCall   = 5 * time.Second
	laneRetryAfter = 30 * time.Second // the limited targets' rate-limit window (Retry-After: 30)
	laneFinals     = 3                // finals sent on every channel (a fast one: in each measuring round)
)

// lane is one channel and its own webhook target.
type lane struct {
	kind    laneKind
	channel string
	target  *testkit.Target
	url     string       // the target's base url in the channel config
	limited atomic.Int64 // calls answered 429 (limited lanes)
	sent    int          // finals sent on the channel (the test goroutine's)
}

// newLane starts the lane's target. A limited lane puts a handler in front of the testkit target
// that answers every call itself with 429 and Retry-After (the seconds left) for laneRetryAfter
// from its first call, as a platform's rate-limit window does, so the target records only the
// calls it accepted: every recorded call is a delivery.
func newLane(t *testing.T, kind laneKind, i int) *lane {
	t.Helper()
	tg, err := testkit.NewTarget("s3cr3t-"+testkit.NewID("k"), testkit.TargetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(tg.Close)
	l := &lane{kind: kind, channel: fmt.Sprintf("cch_lane_%s_%02d", kind, i), target: tg, url: tg.URL}
	switch kind {
	case laneSlow:
		tg.SetAnswer(func(testkit.Call) int { time.Sleep(laneSlowCall); return http.StatusOK })
	case laneLimited:
		var mu sync.Mutex
		var windowEnd time.Time // the rate-limit window opens at the first call
		srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			mu.Lock()
			now := time.Now()
			if windowEnd.IsZero() {
				windowEnd = now.Add(laneRetryAfter)
			}
			left := windowEnd.Sub(now)
			mu.Unlock()
			if left > 0 {
				l.limited.Add(1)
				w.Header().Set("Retry-After", strconv.Itoa(int(math.Ceil(left.Seconds()))))
				w.WriteHeader(http.StatusTooManyRequests)
				return
			}
			tg.ServeHTTP(w, r)
		}))
		t.Cleanup(srv.Close)
		l.url = srv.URL + "/hook"
	}
	return l
}

// config is the lane's webhook channel config: no streaming, no activity.
func (l *lane) config() map[string]any {
	c := l.target.Config("none", "none")
	c["url"] = l.url
	return c
}

func (l *lane) text(i int) string { return fmt.Sprintf("%s final %d", l.channel, i) }

// sentFinal is a final sent and, once it came, its ack.
type sentFinal struct {
	lane   *lane
	round  int // the measuring round of a fast lane's final
	sent   time.Time
	acked  time.Time
	status string
	code   string
}

// percentile is the nearest-rank p-th percentile of sorted ds.
func percentile(sorted []time.Duration, p float64) time.Duration {
	if len(sorted) == 0 {
		return 0
	}
	rank := int(math.Ceil(p / 100 * float64(len(sorted))))
	return sorted[max(0, min(rank-1, len(sorted)-1))]
}

// The issue "no channel waits for another" (edge-api §5.1): a chat whose target is slow or rate
// limited delays only its own finals. 10 slow targets (5 s a call) and 5 rate-limited ones (429
// with Retry-After: 30 for 30 s) hold finals in flight on a node with 2 partitions; 35 fast
// channels' finals sent meanwhile (one every 5 ms, 200/s) are still accepted within 50 ms (p99),
// every channel's finals reach its target in send order, exactly once, the slow and limited ones
// included, and no limited target is called again before its Retry-After passed.
func TestLanes_SlowChannelDelaysOnlyItself(t *testing.T) {
	if testing.Short() {
		t.Skip("waits for 5 s target calls and 30 s Retry-After")
	}
	t.Parallel()
	const (
		nSlow, nLimited, nFast = 10, 5, 35
		fastP99                = 50 * time.Millisecond
		fastEvery              = 5 * time.Millisecond
		fastRounds             = 3                 // measuring rounds of the fast finals, best counts
		deadline               = 150 * time.Second // a limited lane waits out its 30 s window
	)
	n, err := testkit.StartNode(testkit.NodeOptions{DataDir: t.TempDir(), Mutate: func(c *node.Config) {
		c.Store.Partitions = 2                // XIM_PARTITIONS=2: 50 channels share 2 partitions
		c.TargetRetryBudget = 2 * time.Minute // XIM_TARGET_RETRY_BUDGET: a 429 is retried, not rejected
	}})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = n.Stop() })

	var slowAndLimited, fast, all []*lane
	for i := 0; i < nSlow; i++ {
		slowAndLimited = append(slowAndLimited, newLane(t, laneSlow, i))
	}
	for i := 0; i < nLimited; i++ {
		slowAndLimited = append(slowAndLimited, newLane(t, laneLimited, i))
	}
	for i := 0; i < nFast; i++ {
		fast = append(fast, newLane(t, laneFast, i))
	}
	all = append(append(all, slowAndLimited...), fast...)
	for _, l := range all {
		if err := n.OpenChannel(l.channel, l.config()); err != nil {
			t.Fatal(err)
		}
	}
	agent := dial(t, n)

	finals := map[string]*sentFinal{} // by packet_id
	send := func(lanes []*lane, every time.Duration, round int) {
		t.Helper()
		for range laneFinals { // pipelined: no ack awaited
			for _, l := range lanes {
				time.Sleep(every) // pacing, not waiting for anything
				sent, i := time.Now(), l.sent
				pid, err := agent.Send(context.Background(), l.channel, profile.TypeMessage, msg(fmt.Sprintf("m_%d", i), l.text(i)))
				if err != nil {
					t.Fatal(err)
				}
				l.sent++
				finals[pid] = &sentFinal{lane: l, round: round, sent: sent}
			}
		}
	}
	// take reads packets until every final of lanes is acked.
	take := func(lanes []*lane, timeout time.Duration) {
		t.Helper()
		want := 0
		for _, f := range finals {
			if slices.Contains(lanes, f.lane) && f.acked.IsZero() {
				want++
			}
		}
		end := time.Now().Add(timeout)
		for want > 0 {
			env, at, err := agent.NextAt(time.Until(end))
			if err != nil {
				t.Fatalf("%d acks missing: %v", want, err)
			}
			f, ok := finals[env.ReplyTo]
			if !ok || !f.acked.IsZero() {
				t.Fatalf("unexpected packet %s reply_to %q: %s", env.Type, env.ReplyTo, env.Payload)
			}
			ack, err := testkit.AckOf(env)
			if err != nil {
				t.Fatal(err)
			}
			f.acked, f.status, f.code = at, ack.Status, ack.Code
			if slices.Contains(lanes, f.lane) {
				want--
			}
		}
	}

	send(slowAndLimited, 0, 0)
	// Let every slow call get in flight and every limited target answer its 429 (up to 1 s; a node
	// that serves a partition's channels one after another never gets there, and the fast finals
	// then measure it), but at least one slow call must be under way.
	busy := func() (slow, limited int) {
		for _, l := range slowAndLimited {
			if l.kind == laneSlow && len(l.target.Calls()) > 0 {
				slow++
			}
			if l.kind == laneLimited && l.limited.Load() > 0 {
				limited++
			}
		}
		return slow, limited
	}
	pollFor(t, wait, "a slow target has a call in flight", func() bool { s, _ := busy(); return s > 0 })
	for end := time.Now().Add(time.Second); time.Now().Before(end); time.Sleep(10 * time.Millisecond) {
		if s, l := busy(); s == nSlow && l == nLimited {
			break
		}
	}
	// /metrics shows the lanes held up by their targets (refreshed every AckWait/4).
	pollFor(t, wait, "ximd_stage_lanes_busy and ximd_stage_oldest_held_seconds show the waiting lanes", func() bool {
		return gauge(t, n.Metrics(), "ximd_stage_lanes_busy") > 0 && gauge(t, n.Metrics(), "ximd_stage_oldest_held_seconds") > 0
	})
	s, l := busy()
	t.Logf("lanes: fast finals sent with %d/%d slow targets in a call, %d/%d limited targets answered 429", s, nSlow, l, nLimited)
	// The fast finals' latency is measured in rounds while the slow and limited finals stay in
	// flight (5 s a slow call, 3 a channel; a 30 s rate-limit window), and the best round counts:
	// a design that lets them hold up other channels is slow in every round, while a stall of the
	// machine (other test processes on 2 cores) spoils one round, not three.
	best := time.Duration(-1)
	for round := 0; round < fastRounds && (best < 0 || best > fastP99); round++ {
		if !slices.ContainsFunc(slowAndLimited, func(l *lane) bool { return len(l.target.MessageCalls()) < laneFinals }) {
			t.Fatalf("round %d: every slow and limited final was delivered: nothing left to measure beside", round)
		}
		send(fast, fastEvery, round)
		take(fast, deadline)
		var lat []time.Duration
		for _, f := range finals {
			if f.lane.kind == laneFast && f.round == round {
				lat = append(lat, f.acked.Sub(f.sent))
			}
		}
		slices.Sort(lat)
		p50, p99, worst := percentile(lat, 50), percentile(lat, 99), lat[len(lat)-1]
		t.Logf("lanes: round %d: %d fast finals beside %d slow + %d limited channels, 2 partitions: ack p50 %s p99 %s max %s",
			round, len(lat), nSlow, nLimited, p50.Round(time.Millisecond), p99.Round(time.Millisecond), worst.Round(time.Millisecond))
		if best < 0 || p99 < best {
			best = p99
		}
	}
	if best > fastP99 {
		t.Errorf("fast channels' finals ack p99 %s > %s in each of %d rounds: a slow or limited channel delays others", best.Round(time.Millisecond), fastP99, fastRounds)
	}

	pollFor(t, deadline, "every target got its channel's finals", func() bool {
		for _, l := range all {
			if len(l.target.MessageCalls()) < l.sent {
				return false
			}
		}
		return true
	})
	take(all, wait)
	if env, ok := agent.Quiet(300 * time.Millisecond); !ok {
		t.Fatalf("unexpected packet %s: %s", env.Type, env.Payload)
	}
	var slowest time.Duration
	for pid, f := range finals {
		if f.status != profile.AckAccepted {
			t.Errorf("%s %s: ack %s/%s, want accepted", f.lane.channel, pid, f.status, f.code)
		}
		if f.lane.kind != laneFast {
			slowest = max(slowest, f.acked.Sub(f.sent))
		}
	}
	t.Logf("lanes: slowest slow/limited final acked after %s", slowest.Round(time.Millisecond))
	for _, l := range all {
		calls := l.target.MessageCalls()
		var texts []string
		for _, c := range calls {
			texts = append(texts, c.Text())
		}
		var want []string
		for i := range l.sent {
			want = append(want, l.text(i))
		}
		if !slices.Equal(texts, want) {
			t.Errorf("%s (%s): target got %q, want %q (send order, exactly once)", l.channel, l.kind, texts, want)
		}
		if l.kind == laneLimited && l.limited.Load() != 1 {
			// Retry-After honoured: no call to the chat before the platform's retry time.
			t.Errorf("%s: %d calls answered 429, want 1 (a call before Retry-After passed)", l.channel, l.limited.Load())
		}
	}
}
