package pipeline

import (
	"context"
	"errors"
	"sync"
	"time"

	"github.com/nats-io/nats.go/jetstream"
	"github.com/prometheus/client_golang/prometheus"

	"github.com/ximd/ximd/subjects"
)

// StreamCollector exports what JetStream knows of ximd's streams and consumers as Prometheus
// metrics: how much inbound work waits (consumer lag), how many user messages are pending, how
// many packets were poisoned. Figures are read from the server at most
// every MaxAge, so frequent scrapes cost nothing; a scrape that cannot reach the server within
// a second reports the last figures read.
type StreamCollector struct {
	js     jetstream.JetStream
	maxAge time.Duration

	mu     sync.Mutex
	readAt time.Time
	last   []prometheus.Metric
}

var (
	descStreamMessages  = prometheus.NewDesc("ximd_stream_messages", "Messages in a JetStream stream of ximd (XIM_IN: inbound packets not yet processed; XIM_OUT: pending user messages; XIM_POISON: poisoned packets).", []string{"stream"}, nil)
	descStreamBytes     = prometheus.NewDesc("ximd_stream_bytes", "Bytes stored in a JetStream stream of ximd.", []string{"stream"}, nil)
	descStreamMaxBytes  = prometheus.NewDesc("ximd_stream_max_bytes", "The bound of a JetStream stream of ximd (its MaxBytes; streams without one are not reported): past it XIM_IN refuses packets, the completed-ID store (KV_xim_messages) and the file store (OBJ_xim_files) refuse new entries.", []string{"stream"}, nil)
	descConsumerLag     = prometheus.NewDesc("ximd_consumer_pending", "Messages a consumer has not been delivered yet (its lag).", []string{"stream", "consumer"}, nil)
	descConsumerAcks    = prometheus.NewDesc("ximd_consumer_ack_pending", "Messages delivered to a consumer and not yet acknowledged (in the workers' hands).", []string{"stream", "consumer"}, nil)
	descConsumerRedel   = prometheus.NewDesc("ximd_consumer_redelivered", "Messages of a consumer delivered more than once and not yet acknowledged.", []string{"stream", "consumer"}, nil)
	descOutboundPending = prometheus.NewDesc("ximd_outbound_pending_messages", "User messages waiting for xAgent's ack (work items in XIM_OUT).", nil, nil)
	descStatsUp         = prometheus.NewDesc("ximd_stream_stats_up", "1 if the last read of stream and consumer figures from JetStream succeeded.", nil, nil)
)

// NewStreamCollector returns a collector over ximd's streams and their consumers.
func NewStreamCollector(js jetstream.JetStream) *StreamCollector {
	return &StreamCollector{js: js, maxAge: 5 * time.Second}
}

// Describe implements prometheus.Collector.
func (c *StreamCollector) Describe(ch chan<- *prometheus.Desc) {
	for _, d := range []*prometheus.Desc{descStreamMessages, descStreamBytes, descStreamMaxBytes, descConsumerLag, descConsumerAcks, descConsumerRedel, descOutboundPending, descStatsUp} {
		ch <- d
	}
}

// Collect implements prometheus.Collector.
func (c *StreamCollector) Collect(ch chan<- prometheus.Metric) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if time.Since(c.readAt) >= c.maxAge {
		ctx, cancel := context.WithTimeout(context.Background(), time.Second)
		metrics, err := c.read(ctx)
		cancel()
		up := 1.0
		if err != nil {
			up = 0
			metrics = c.last // keep the last figures rather than none
		} else {
			c.last, c.readAt = metrics, time.Now()
		}
		ch <- prometheus.MustNewConstMetric(descStatsUp, prometheus.GaugeValue, up)
	} else {
		ch <- prometheus.MustNewConstMetric(descStatsUp, prometheus.GaugeValue, 1)
	}
	for _, m := range c.last {
		ch <- m
	}
}

func (c *StreamCollector) read(ctx context.Context) ([]prometheus.Metric, error) {
	var out []prometheus.Metric
	gauge := func(d *prometheus.Desc, v float64, labels ...string) {
		out = append(out, prometheus.MustNewConstMetric(d, prometheus.GaugeValue, v, labels...))
	}
	streams := []struct {
		name      string
		consumers bool // report its consumers (the KV and Object Store streams have only watchers)
	}{
		{subjects.StreamIn, true}, {subjects.StreamOut, true}, {subjects.StreamReplies, true}, {subjects.StreamPoison, true},
		{subjects.KVStream(subjects.BucketMessages), false}, {subjects.ObjectStream(subjects.BucketFiles), false},
	}
	for _, st := range streams {
		name := st.name
		s, err := c.js.Stream(ctx, name)
		if errors.Is(err, jetstream.ErrStreamNotFound) && !st.consumers {
			continue // its store is provisioned by the roles that use it
		}
		if err != nil {
			return nil, err
		}
		info := s.CachedInfo()
		gauge(descStreamMessages, float64(info.State.Msgs), name)
		gauge(descStreamBytes, float64(info.State.Bytes), name)
		if info.Config.MaxBytes > 0 {
			gauge(descStreamMaxBytes, float64(info.Config.MaxBytes), name)
		}
		if name == subjects.StreamOut {
			gauge(descOutboundPending, float64(info.State.Msgs))
		}
		if !st.consumers {
			continue
		}
		consumers := s.ListConsumers(ctx)
		for ci := range consumers.Info() {
			gauge(descConsumerLag, float64(ci.NumPending), name, ci.Name)
			gauge(descConsumerAcks, float64(ci.NumAckPending), name, ci.Name)
			gauge(descConsumerRedel, float64(ci.NumRedelivered), name, ci.Name)
		}
		if err := consumers.Err(); err != nil {
			return nil, err
		}
	}
	return out, nil
}
