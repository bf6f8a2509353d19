package handlers

import (
	"testing"
	"time"
)

// P-STATE-2, edge-api §5.4: re-sends back off exponentially from XIM_ACK_TIMEOUT to the maximum,
// with jitter that only lengthens the wait (never a re-send before XIM_ACK_TIMEOUT); without a
// connection from 1s to 30s.
func TestOutboxDelayBacksOffWithJitter(t *testing.T) {
	o := &Outbox{cfg: OutboxConfig{AckTimeout: 10 * time.Second, BackoffMax: 5 * time.Minute}}
	tests := []struct {
		name     string
		attempts int
		sent     bool
		base     time.Duration
	}{
		{"first send", 1, true, 10 * time.Second},
		{"second send", 2, true, 20 * time.Second},
		{"fourth send", 4, true, 80 * time.Second},
		{"capped", 20, true, 5 * time.Minute},
		{"no connection first", 1, false, time.Second},
		{"no connection capped", 20, false, 30 * time.Second},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			lo, hi := tt.base, time.Duration(float64(tt.base)*1.21)
			for i := 0; i < 200; i++ {
				if d := o.delay(tt.attempts, tt.sent); d < lo || d > hi {
					t.Fatalf("delay(%d) = %s, want within %s..%s", tt.attempts, d, lo, hi)
				}
			}
		})
	}
}
