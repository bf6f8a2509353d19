package pipeline

import (
	"context"
	"errors"
	"log/slog"
	"time"

	"github.com/ThreeDotsLabs/watermill"
	"github.com/ThreeDotsLabs/watermill/message"
	"github.com/ThreeDotsLabs/watermill/message/router/middleware"

	"github.com/ximd/ximd/handlers"
)

// RouterConfig configures the worker's Watermill router.
type RouterConfig struct {
	// Retries is how many times a failing handler is retried (with exponential back-off) before
	// its message goes to the poison stream.
	Retries int
	// RetryInitial and RetryMax bound the back-off between retries.
	RetryInitial, RetryMax time.Duration
	// CloseTimeout bounds how long Close waits for handlers in flight.
	CloseTimeout time.Duration
}

// DefaultRouterConfig: 6 retries, 100ms doubling to 5s (about 15s in all, inside AckWait).
func DefaultRouterConfig() RouterConfig {
	return RouterConfig{Retries: 6, RetryInitial: 100 * time.Millisecond, RetryMax: 5 * time.Second, CloseTimeout: 30 * time.Second}
}

// NewRouter returns a router whose handlers are wrapped, outermost first, in: the poison queue
// (a message whose handler still fails after the retries is published to poisonTopic with the
// reason in metadata "reason_poisoned", then acked, so it never hot-loops), the retry with
// back-off, and the recoverer (a panic becomes an error). The handlers are the stages' outcomes
// routed by handlers.Route: a retry is an error (retried, then poisoned with its text as the
// reason), a poisoning a *handlers.PoisonError (poisoned at once, not retried), anything else
// nil (acked).
func NewRouter(cfg RouterConfig, poison message.Publisher, poisonTopic string, logger *slog.Logger) (*message.Router, error) {
	if cfg.Retries < 0 || cfg.RetryInitial <= 0 || cfg.RetryMax < cfg.RetryInitial {
		return nil, errors.New("router: retries >= 0 and 0 < retry initial <= retry max required")
	}
	r, err := message.NewRouter(message.RouterConfig{CloseTimeout: cfg.CloseTimeout},
		traceChecked{watermill.NewSlogLoggerWithLevelMapping(logger, map[slog.Level]slog.Level{slog.LevelInfo: slog.LevelDebug}), logger})
	if err != nil {
		return nil, err
	}
	pq, err := middleware.PoisonQueue(poison, poisonTopic)
	if err != nil {
		return nil, err
	}
	retry := middleware.Retry{
		MaxRetries:      cfg.Retries,
		InitialInterval: cfg.RetryInitial,
		MaxInterval:     cfg.RetryMax,
		Multiplier:      2,
		Logger:          watermill.NewSlogLogger(logger),
	}
	r.AddMiddleware(pq, retryUnlessPoisoned(retry), middleware.Recoverer)
	return r, nil
}

// retryUnlessPoisoned is retry's middleware for every failure but a poisoning
// (*handlers.PoisonError), which it hands on to the poison queue at once, not retried. (Retry's
// own ShouldRetry would do, but calling it advances the back-off: the retries would come later.)
func retryUnlessPoisoned(retry middleware.Retry) message.HandlerMiddleware {
	return func(h message.HandlerFunc) message.HandlerFunc {
		return func(msg *message.Message) ([]*message.Message, error) {
			var poisoned error
			out, err := retry.Middleware(func(msg *message.Message) ([]*message.Message, error) {
				out, err := h(msg)
				var pe *handlers.PoisonError
				if errors.As(err, &pe) {
					poisoned = err
					return out, nil
				}
				return out, err
			})(msg)
			if poisoned != nil {
				return out, poisoned
			}
			return out, err
		}
	}
}

// traceChecked is a Watermill logger whose Trace lines (two a message: received, acked) are
// dropped unless the slog logger takes watermill.LevelTrace: Watermill's slog adapter turns a
// line's fields into attributes before slog checks the level: allocations on every message for
// nothing at ximd's levels.
type traceChecked struct {
	watermill.LoggerAdapter
	logger *slog.Logger
}

func (t traceChecked) Trace(msg string, fields watermill.LogFields) {
	if t.logger.Enabled(context.Background(), watermill.LevelTrace) {
		t.LoggerAdapter.Trace(msg, fields)
	}
}

func (t traceChecked) With(fields watermill.LogFields) watermill.LoggerAdapter {
	return traceChecked{t.LoggerAdapter.With(fields), t.logger}
}
