package wecom

import (
	"context"
	"strings"
	"time"

	"github.com/ximd/ximd/handlers/adapter"
)

// Activity (edge-api §7.2.7, activity "status"): while xAgent thinks, the reply to the person's
// latest message opens with a stream frame whose content is a <think></think> block, which
// WeCom shows as the robot thinking (W-PR: "<think></think> renders as thinking"); a tool's
// status names the tool inside it. The answer that takes that reply streams into the same
// bubble (its stream id is the thinking frame's, recorded in the answer's target message id),
// so the thinking turns into the answer. Cleared (idle) with no answer taking the bubble within
// Timing.ThinkGrace, the bubble is finished as it is and the answer goes as a proactive message.
// With nothing to reply to (no message from the person in 24 hours, or an answer already took
// it) nothing is shown: a stream frame needs a callback's req_id.

// showActivity is Target.ShowActivity on the connection.
func (l *line) showActivity(ctx context.Context, a adapter.Activity) error {
	conv := l.cfg.conversation()
	switch a.Status {
	case adapter.StatusIdle:
		l.cli.idle(conv)
		return nil
	case adapter.StatusTool:
		return l.cli.think(ctx, conv, thinkContent(a.ToolName))
	default:
		return l.cli.think(ctx, conv, thinkContent(""))
	}
}

// thinkContent is a thinking frame's content: an empty <think></think> block, or one naming the
// tool in use (angle brackets removed, so the block stays one).
func thinkContent(tool string) string {
	tool = strings.NewReplacer("<", "", ">", "").Replace(strings.TrimSpace(tool))
	if tool == "" {
		return "<think></think>"
	}
	return "<think>" + tool + "</think>"
}

// thinkID is the stream id of the thinking bubble replying to the callback reqID: the same in
// every process, so an answer settles it by the id it recorded.
func thinkID(reqID string) string { return streamID("think:" + reqID) }

// think shows content as a stream frame of the thinking bubble replying to conv's latest
// message, unless an answer took that reply already. The check and the frame go under the
// req_id's order, so no thinking frame lands after an answer's frame.
func (c *client) think(ctx context.Context, conv, content string) error {
	c.mu.Lock()
	r := c.replies[conv]
	c.mu.Unlock()
	if r == nil || time.Since(r.at) > replyWindow {
		return nil
	}
	defer c.lockReq(r.reqID)()
	c.mu.Lock()
	if c.replies[conv] != r || r.by != "" {
		c.mu.Unlock()
		return nil // an answer (or a finished thinking bubble) has the reply
	}
	if r.idle != nil {
		r.idle.Stop()
		r.idle = nil
	}
	sid := thinkID(r.reqID)
	r.think = sid
	c.mu.Unlock()
	if c.streamAge(sid) > streamLife-10*time.Second {
		return nil
	}
	return c.budgeted(ctx, conv, false, true, cmdRespond, r.reqID, thinkFrame(sid, content, false))
}

func thinkFrame(sid, content string, finish bool) map[string]any {
	return map[string]any{"msgtype": "stream", "stream": map[string]any{"id": sid, "finish": finish, "content": content}}
}

// idle clears the thinking status of conv: a thinking bubble no answer took is finished after
// ThinkGrace, unless an answer takes it (or thinking shows again) first.
func (c *client) idle(conv string) {
	c.mu.Lock()
	defer c.mu.Unlock()
	r := c.replies[conv]
	if r == nil || r.think == "" || r.by != "" || r.idle != nil {
		return
	}
	r.idle = time.AfterFunc(c.timing.ThinkGrace, func() { c.endThink(conv, r) })
}

// endThink finishes r's thinking bubble as it is, if no answer took it: the reply is spent, an
// answer after it goes as a proactive message.
func (c *client) endThink(conv string, r *reply) {
	defer c.lockReq(r.reqID)()
	c.mu.Lock()
	if r.by != "" || r.think == "" || r.idle == nil {
		c.mu.Unlock()
		return
	}
	r.by, r.idle = r.think, nil
	sid := r.think
	c.mu.Unlock()
	c.start() // so that done exists
	select {
	case <-c.done:
		return // closed
	default:
	}
	if c.streamAge(sid) > streamLife-10*time.Second {
		return // it ends by itself
	}
	ctx, cancel := context.WithTimeout(context.Background(), c.timing.Connect+c.timing.Answer)
	defer cancel()
	if err := c.budgeted(ctx, conv, true, true, cmdRespond, r.reqID, thinkFrame(sid, thinkContent(""), true)); err != nil {
		c.log.Warn("wecom_think_finish_failed", "bot_id", c.botID, "err", err)
	}
}
