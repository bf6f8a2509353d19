package webchat

import (
	"context"
	"encoding/json"

	"github.com/ximd/ximd/handlers/adapter"
)

// ChannelSource looks channels up (the channel registry; handlers.ChannelSource).
type ChannelSource interface {
	Lookup(ctx context.Context, id string) (adapter.Channel, bool, error)
}

// WithChannelIDs wraps the channel registry the workers resolve targets from: a webchat
// binding's config gets the channel id stamped in (key [ChannelKey]), because
// [adapter.Opener.Open] sees only the config and a webchat target writes to its channel's own
// subjects. Other bindings pass through unchanged.
func WithChannelIDs(src ChannelSource) ChannelSource { return stamped{src} }

type stamped struct{ src ChannelSource }

func (s stamped) Lookup(ctx context.Context, id string) (adapter.Channel, bool, error) {
	ch, ok, err := s.src.Lookup(ctx, id)
	if err != nil || !ok || ch.Target.Adapter != Name {
		return ch, ok, err
	}
	fields := map[string]json.RawMessage{}
	if len(ch.Target.Config) > 0 && string(ch.Target.Config) != "null" {
		if err := json.Unmarshal(ch.Target.Config, &fields); err != nil {
			return ch, ok, nil // Open reports the bad config
		}
	}
	fields[ChannelKey], _ = json.Marshal(ch.ID)
	cfg, err := json.Marshal(fields)
	if err != nil {
		return ch, ok, nil
	}
	ch.Target.Config = cfg
	return ch, ok, nil
}
