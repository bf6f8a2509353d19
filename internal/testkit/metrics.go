package testkit

import "github.com/prometheus/client_golang/prometheus"

// GaugeValue sums every series of the counter or gauge called name in g (0 when absent).
func GaugeValue(g prometheus.Gatherer, name string) float64 {
	mfs, err := g.Gather()
	if err != nil {
		return 0
	}
	n := 0.0
	for _, mf := range mfs {
		if mf.GetName() == name {
			for _, m := range mf.GetMetric() {
				n += m.GetCounter().GetValue() + m.GetGauge().GetValue()
			}
		}
	}
	return n
}
