package webchat

import (
	"encoding/json"

	"github.com/ximd/ximd/handlers/adapter"
	"github.com/ximd/ximd/profile"
)

var (
	_ adapter.BotTaker      = (*Adapter)(nil)
	_ adapter.PolicyChecker = (*Adapter)(nil)
)

// ConversationKeys implements adapter.BotTaker: a webchat config names no conversation (its
// channel is stamped by ximd, [WithChannelIDs]).
func (a *Adapter) ConversationKeys() []string { return nil }

// Bind implements adapter.BotTaker: every visitor's conversation has the bot's config (title,
// frame_ancestors); the channel it writes to is stamped when the channel is looked up.
func (a *Adapter) Bind(bot json.RawMessage, _ adapter.Conversation) (json.RawMessage, error) {
	if adapter.NoConfig(bot) {
		return json.RawMessage("{}"), nil
	}
	return adapter.BindConfig(bot, nil)
}

// CheckPolicy implements adapter.PolicyChecker: a webchat bot's visitors are anonymous (a random
// id in a cookie), so none can be approved or listed: direct is "open" or "closed".
func (a *Adapter) CheckPolicy(p adapter.Policy) error {
	if p.Direct != adapter.DirectOpen && p.Direct != adapter.DirectClosed {
		return profile.Errorf(profile.CodeInvalidDescriptor, `conversations.direct: a webchat bot's visitors are anonymous: must be "open" or "closed"`)
	}
	return nil
}
