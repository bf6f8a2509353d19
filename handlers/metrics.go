package handlers

import (
	"context"
	"sync"
	"time"

	"github.com/prometheus/client_golang/prometheus"
)

// Metrics are the worker stages' Prometheus metrics.
type Metrics struct {
	Packets       *prometheus.CounterVec   // ximd_worker_packets_total{type}
	Acks          *prometheus.CounterVec   // ximd_acks_sent_total{status,code}
	Errors        *prometheus.CounterVec   // ximd_error_packets_total{code}
	TargetCalls   *prometheus.HistogramVec // ximd_target_call_seconds{adapter,op,outcome}
	DeltaBuffers  prometheus.Gauge         // ximd_delta_buffers_open
	DeltaEvicted  *prometheus.CounterVec   // ximd_delta_buffers_evicted_total{reason}
	DeltasIgnored *prometheus.CounterVec   // ximd_deltas_ignored_total{reason}
	Redeliveries  prometheus.Counter       // ximd_redeliveries_total
	ActivityFails prometheus.Counter       // ximd_activity_failures_total
	ActivityStale prometheus.Counter       // ximd_activity_stale_total
	LaneWaits     *prometheus.CounterVec   // ximd_lane_rate_limit_waits_total{adapter}
	Replies       *prometheus.CounterVec   // ximd_replies_total{outcome}
	InboundAge    prometheus.Histogram     // ximd_inbound_age_seconds
	AckLatency    prometheus.Histogram     // ximd_ack_latency_seconds
	// Completed reports the completed-ID stores' sizes at scrape time: ximd_completed_ids_cached,
	// ximd_message_records, ximd_message_records_bytes (see completedCollector).
	Completed *completedCollector
}

// NewMetrics creates the metrics and registers them on reg (nil: not registered).
func NewMetrics(reg prometheus.Registerer) *Metrics {
	m := &Metrics{
		Packets: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "ximd_worker_packets_total", Help: "Inbound packets processed by the worker stages, by type.",
		}, []string{"type"}),
		Acks: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "ximd_acks_sent_total", Help: "chat.message.ack packets sent to xAgent, by status and code.",
		}, []string{"status", "code"}),
		Errors: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "ximd_error_packets_total", Help: "error packets sent to xAgent by the worker stages, by code.",
		}, []string{"code"}),
		TargetCalls: prometheus.NewHistogramVec(prometheus.HistogramOpts{
			Name:    "ximd_target_call_seconds",
			Help:    "Target adapter calls, by adapter, operation (send, edit, activity) and outcome (ok or ack code).",
			Buckets: []float64{.0005, .001, .0025, .005, .01, .025, .05, .1, .25, .5, 1, 2.5, 5, 10},
		}, []string{"adapter", "op", "outcome"}),
		DeltaBuffers: prometheus.NewGauge(prometheus.GaugeOpts{
			Name: "ximd_delta_buffers_open", Help: "Delta buffers held in this worker's memory.",
		}),
		DeltaEvicted: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "ximd_delta_buffers_evicted_total", Help: "Delta buffers dropped before their final, by reason (ttl, capacity, bytes, channel_closed).",
		}, []string{"reason"}),
		DeltasIgnored: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "ximd_deltas_ignored_total", Help: "Deltas not applied, by reason (retransmit, completed, after_gap, evicted).",
		}, []string{"reason"}),
		Redeliveries: prometheus.NewCounter(prometheus.CounterOpts{
			Name: "ximd_redeliveries_total", Help: "Inbound packets the worker saw more than once (JetStream redeliveries).",
		}),
		ActivityFails: prometheus.NewCounter(prometheus.CounterOpts{
			Name: "ximd_activity_failures_total", Help: "Activity display calls that failed (never affect messages).",
		}),
		ActivityStale: prometheus.NewCounter(prometheus.CounterOpts{
			Name: "ximd_activity_stale_total", Help: "Activity snapshots not shown because a later final or displayed delta of their channel had cleared the status.",
		}),
		LaneWaits: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "ximd_lane_rate_limit_waits_total", Help: "Times a channel's lane waited for its target's retry-after (rate limit) before calling it again, by adapter.",
		}, []string{"adapter"}),
		Replies: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "ximd_replies_total", Help: "Acks and error packets for xAgent, by outcome: sent (written to a connection), queued (no live connection: kept in XIM_REPLIES), sent_late (a queued one sent), unknown (the gateway did not answer in time; xAgent's retransmission recovers it).",
		}, []string{"outcome"}),
		InboundAge: prometheus.NewHistogram(prometheus.HistogramOpts{
			Name:    "ximd_inbound_age_seconds",
			Help:    "Time from a gateway receiving a packet to a worker stage taking it (queueing in XIM_IN included).",
			Buckets: []float64{.0005, .001, .0025, .005, .01, .025, .05, .1, .25, .5, 1, 2.5, 5, 10, 30, 60},
		}),
		AckLatency: prometheus.NewHistogram(prometheus.HistogramOpts{
			Name:    "ximd_ack_latency_seconds",
			Help:    "Time from a gateway receiving a final (chat.message) to its ack handed back to a gateway (first deliveries; the target call and the records included).",
			Buckets: []float64{.001, .0025, .005, .01, .025, .05, .1, .25, .5, 1, 2.5, 5, 10, 30, 60, 120},
		}),
		Completed: newCompletedCollector(),
	}
	if reg != nil {
		reg.MustRegister(m.Packets, m.Acks, m.Errors, m.TargetCalls, m.DeltaBuffers, m.DeltaEvicted, m.DeltasIgnored, m.Redeliveries, m.ActivityFails, m.ActivityStale, m.LaneWaits, m.Replies, m.InboundAge, m.AckLatency, m.Completed)
	}
	return m
}

// completedCollector reports the size of the completed-ID stores when scraped: the worker's
// in-memory cache (bounded by its capacity) and the KV bucket of message records (bounded by
// XIM_COMPLETED_TTL and XIM_COMPLETED_MAX_BYTES). It reports nothing until a Deliverer is
// attached, and no bucket figures when NATS does not answer within statusTimeout.
type completedCollector struct {
	cached, records, bytes *prometheus.Desc

	mu    sync.Mutex
	cache *doneCache
	store *Records
}

const statusTimeout = time.Second

func newCompletedCollector() *completedCollector {
	return &completedCollector{
		cached: prometheus.NewDesc("ximd_completed_ids_cached",
			"Completed message_ids this worker keeps in memory (bounded; older ones are answered from KV xim_messages).", nil, nil),
		records: prometheus.NewDesc("ximd_message_records",
			"Records in KV xim_messages: completed message_ids plus messages being streamed or delivered.", nil, nil),
		bytes: prometheus.NewDesc("ximd_message_records_bytes",
			"Bytes of KV xim_messages (bounded by XIM_COMPLETED_MAX_BYTES).", nil, nil),
	}
}

// attach makes the collector report cache and store.
func (c *completedCollector) attach(cache *doneCache, store *Records) {
	c.mu.Lock()
	c.cache, c.store = cache, store
	c.mu.Unlock()
}

// Describe implements prometheus.Collector.
func (c *completedCollector) Describe(ch chan<- *prometheus.Desc) {
	ch <- c.cached
	ch <- c.records
	ch <- c.bytes
}

// Collect implements prometheus.Collector.
func (c *completedCollector) Collect(ch chan<- prometheus.Metric) {
	c.mu.Lock()
	cache, store := c.cache, c.store
	c.mu.Unlock()
	if cache != nil {
		ch <- prometheus.MustNewConstMetric(c.cached, prometheus.GaugeValue, float64(cache.len()))
	}
	if store == nil || store.kv == nil {
		return
	}
	ctx, cancel := context.WithTimeout(context.Background(), statusTimeout)
	defer cancel()
	st, err := store.kv.Status(ctx)
	if err != nil {
		return
	}
	ch <- prometheus.MustNewConstMetric(c.records, prometheus.GaugeValue, float64(st.Values()))
	ch <- prometheus.MustNewConstMetric(c.bytes, prometheus.GaugeValue, float64(st.Bytes()))
}

// The stages' outcome vocabulary: the label values of their metrics and the outcomes their log
// lines name. The values are the metrics' label values, unchanged.

// packetLabel is a ximd_worker_packets_total{type} value that is not a packet type: a stored
// packet no stage takes.
type packetLabel string

const (
	packetUndecodable packetLabel = "undecodable" // not a packet (or not a frame list)
	packetDropped     packetLabel = "dropped"     // a packet type the stages do not take from xAgent
)

// replyOutcome is a ximd_replies_total{outcome} value: what became of an ack or error packet.
type replyOutcome string

const (
	replySent     replyOutcome = "sent"      // written to a connection
	replyQueued   replyOutcome = "queued"    // no live connection: kept in XIM_REPLIES
	replySentLate replyOutcome = "sent_late" // a queued one sent
	replyUnknown  replyOutcome = "unknown"   // the gateway did not answer in time
)

// sendOutcome is a ximd_outbound_sends_total{outcome} value: one send of a user message.
type sendOutcome string

const (
	sendSent         sendOutcome = "sent"          // a gateway wrote it to xAgent
	sendNoConnection sendOutcome = "no_connection" // no gateway holds a live connection
)

// ackIgnored is a ximd_outbound_acks_ignored_total{reason} value: why an ack from xAgent changed
// nothing.
type ackIgnored string

const (
	ackUnknown  ackIgnored = "unknown"  // no such user message
	ackFinished ackIgnored = "finished" // the message is no longer pending
)

// callOK is the ximd_target_call_seconds{outcome} value of a call that succeeded (a failed one
// is labelled with its error code).
const callOK = "ok"

// reconcileOutcome is how an in-doubt final was settled (log final_reconciled, key outcome).
type reconcileOutcome string

const (
	reconciledNotShown reconcileOutcome = "not_shown"          // the target shows nothing: delivered afresh
	reconciledDeduped  reconcileOutcome = "sent_again_deduped" // sent again; the target shows one per key
	reconciledEdited   reconcileOutcome = "edited"             // applied by an edit of the shown message
	reconciledShown    reconcileOutcome = "shown"              // the target already shows the final
)

// gatewaySent is a gateway's answer to xim.gw.<gateway>.reply and xim.gw.send when it wrote the
// packet to a connection.
const gatewaySent = "sent"

// deltaIgnored is a ximd_deltas_ignored_total{reason} value: why a delta was not applied.
type deltaIgnored string

const (
	deltaCompleted  deltaIgnored = "completed"  // its message is final already
	deltaEvicted    deltaIgnored = "evicted"    // its message's buffer was evicted
	deltaRetransmit deltaIgnored = "retransmit" // a sequence applied before, with the same text
	deltaAfterGap   deltaIgnored = "after_gap"  // its message's stream has a gap (P-DLT-2)
)

// evictReason is a ximd_delta_buffers_evicted_total{reason} value: why a delta buffer was dropped
// before its final.
type evictReason string

const (
	evictCapacity      evictReason = "capacity"       // XIM_MAX_DELTA_BUFFERS reached: the least recently used
	evictBytes         evictReason = "bytes"          // a buffer over XIM_MAX_DELTA_BYTES
	evictTTL           evictReason = "ttl"            // no delta for XIM_DELTA_TTL
	evictChannelClosed evictReason = "channel_closed" // its channel was deleted
)
