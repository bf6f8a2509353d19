package node

import (
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/ximd/ximd/pipeline/bus"
	"github.com/ximd/ximd/subjects"
)

// laneCollector reports, per stage, the stage consumers' lanes at scrape time: lanes busy (a
// channel's packet in a handler), packets held, and the age of the oldest packet held.
type laneCollector struct {
	sub                 *bus.Subscriber
	busy, held, oldestD *prometheus.Desc
}

func newLaneCollector(sub *bus.Subscriber) *laneCollector {
	return &laneCollector{
		sub: sub,
		busy: prometheus.NewDesc("ximd_stage_lanes_busy",
			"Channels with a packet in a handler, per stage (summed over the stage's partitions this worker serves).", []string{"stage"}, nil),
		held: prometheus.NewDesc("ximd_stage_packets_held",
			"Packets this worker holds (fetched, not yet acked), per stage.", []string{"stage"}, nil),
		oldestD: prometheus.NewDesc("ximd_stage_oldest_held_seconds",
			"Age of the oldest packet this worker holds, per stage (0 when it holds none).", []string{"stage"}, nil),
	}
}

func (c *laneCollector) Describe(ch chan<- *prometheus.Desc) {
	ch <- c.busy
	ch <- c.held
	ch <- c.oldestD
}

func (c *laneCollector) Collect(ch chan<- prometheus.Metric) {
	type agg struct {
		busy, held int
		oldest     time.Time
	}
	by := map[string]*agg{}
	for _, s := range c.sub.Stats() {
		stage, _, ok := subjects.ParseStageConsumer(s.Topic)
		if !ok {
			continue
		}
		a := by[stage]
		if a == nil {
			a = &agg{}
			by[stage] = a
		}
		a.busy += s.Busy
		a.held += s.Held
		if !s.Oldest.IsZero() && (a.oldest.IsZero() || s.Oldest.Before(a.oldest)) {
			a.oldest = s.Oldest
		}
	}
	for stage, a := range by {
		age := 0.0
		if !a.oldest.IsZero() {
			age = time.Since(a.oldest).Seconds()
		}
		ch <- prometheus.MustNewConstMetric(c.busy, prometheus.GaugeValue, float64(a.busy), stage)
		ch <- prometheus.MustNewConstMetric(c.held, prometheus.GaugeValue, float64(a.held), stage)
		ch <- prometheus.MustNewConstMetric(c.oldestD, prometheus.GaugeValue, age, stage)
	}
}
