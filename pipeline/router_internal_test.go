package pipeline

import (
	"bytes"
	"log/slog"
	"strings"
	"testing"

	"github.com/ThreeDotsLabs/watermill"
)

// The router's Trace lines reach the log only when its level takes them, with their fields.
func TestTraceChecked(t *testing.T) {
	for _, level := range []slog.Level{watermill.LevelTrace, slog.LevelDebug} {
		var buf bytes.Buffer
		logger := slog.New(slog.NewTextHandler(&buf, &slog.HandlerOptions{Level: level}))
		l := traceChecked{watermill.NewSlogLogger(logger), logger}.With(watermill.LogFields{"handler": "deliver-p00"})
		l.Trace("Received message", watermill.LogFields{"uuid": "u1"})
		l.Debug("debug line", nil)
		got := buf.String()
		shown, want := strings.Contains(got, "Received message"), level == watermill.LevelTrace
		if shown != want || want && !(strings.Contains(got, "uuid=u1") && strings.Contains(got, "handler=deliver-p00")) {
			t.Errorf("level %v: trace shown %v, want %v (with its fields):\n%s", level, shown, want, got)
		}
		if !strings.Contains(got, "debug line") {
			t.Errorf("level %v: debug line lost:\n%s", level, got)
		}
	}
}
