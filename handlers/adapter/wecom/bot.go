package wecom

import (
	"context"
	"time"

	"github.com/ximd/ximd/handlers/adapter"
)

// toBots gives a message of a conversation no channel binds to the robot's bots.
func (a *Adapter) toBots(ctx context.Context, feed adapter.Feed, acct *config, m inMsg, at time.Time) (adapter.Received, error) {
	return adapter.Ignored, nil
}
