package handlers

import (
	"context"
	"encoding/json"

	"github.com/ximd/ximd/profile"
)

// toolInvoke is the part of a tool.invoke payload (edge-api §8) the tool stage reads.
type toolInvoke struct {
	InvocationID string `json:"invocation_id"`
	Tool         string `json:"tool"`
}

// toolResult is the tool.result payload.
type toolResult struct {
	InvocationID string                `json:"invocation_id"`
	OK           bool                  `json:"ok"`
	Error        *profile.ErrorPayload `json:"error,omitempty"`
}

// answerTool answers a tool.invoke (edge-api §8). The Card's IM tools are not run yet: every
// invocation is answered tool.result ok=false, tool_not_supported; one without an
// invocation_id gets an error packet invalid_packet.
func (s *Stages) answerTool(ctx context.Context, from Origin, in profile.Envelope) error {
	var ti toolInvoke
	if err := json.Unmarshal(in.Payload, &ti); err != nil || ti.InvocationID == "" {
		return s.replies.Error(ctx, from, in, profile.Errorf(profile.CodeInvalidPacket, "tool.invoke payload needs an invocation_id"))
	}
	e := profile.ErrorPayloadOf(profile.Errorf(profile.CodeToolNotSupported, "tool %q is not available in this ximd", ti.Tool))
	return s.replies.send(ctx, from, in.ChannelID, profile.TypeToolResult, in.PacketID, toolResult{InvocationID: ti.InvocationID, Error: &e})
}
