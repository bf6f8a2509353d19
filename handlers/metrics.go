package handlers

import "github.com/prometheus/client_golang/prometheus"

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
	InboundAge    prometheus.Histogram     // ximd_inbound_age_seconds
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
		InboundAge: prometheus.NewHistogram(prometheus.HistogramOpts{
			Name:    "ximd_inbound_age_seconds",
			Help:    "Time from a gateway receiving a packet to a worker stage taking it (queueing in XIM_IN included).",
			Buckets: []float64{.0005, .001, .0025, .005, .01, .025, .05, .1, .25, .5, 1, 2.5, 5, 10, 30, 60},
		}),
	}
	if reg != nil {
		reg.MustRegister(m.Packets, m.Acks, m.Errors, m.TargetCalls, m.DeltaBuffers, m.DeltaEvicted, m.DeltasIgnored, m.Redeliveries, m.ActivityFails, m.InboundAge)
	}
	return m
}
