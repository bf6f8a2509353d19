package handlers

import (
	"bytes"
	"context"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"time"

	"github.com/ximd/ximd/handlers/adapter"
	"github.com/ximd/ximd/profile"
	"github.com/ximd/ximd/subjects"
)

// The IM tools (edge-api §8). A tool.invoke is stored in XIM_IN on its channel's partition and
// runs in the deliver stage, in the channel's lane, so it is ordered with the channel's finals.
// It is delivered like a direct final: an intent record (key subjects.InvocationKey) before the
// target is touched, the result recorded before tool.result is sent, the invocation_id the
// idempotency key for XIM_COMPLETED_TTL, an invocation a crash left in doubt settled by the
// target's lookup or idempotency key, or answered delivery_outcome_unknown.

// toolArguments are the arguments of the three tools, once their schema accepted them.
type toolArguments struct {
	Text    string `json:"text"`
	ReplyTo string `json:"reply_to_target_message_id"`
	Files   []struct {
		FileRef string `json:"file_ref"`
	} `json:"files"`
}

// toolResult is the tool.result payload.
type toolResult struct {
	InvocationID string                `json:"invocation_id"`
	OK           bool                  `json:"ok"`
	Result       *toolOutput           `json:"result,omitempty"`
	Error        *profile.ErrorPayload `json:"error,omitempty"`
}

// toolOutput is a successful tool's result.
type toolOutput struct {
	TargetMessageID string `json:"target_message_id"`
	// Reply is "degraded" when im.reply_message was sent as a plain message (the target has no
	// replies).
	Reply string `json:"reply,omitempty"`
}

// replyDegraded is toolOutput.Reply for a reply sent as a plain message.
const replyDegraded = "degraded"

// invokeTool answers one tool.invoke with exactly one tool.result (or, when no invocation_id can
// be read, an error packet invalid_packet).
func (s *Stages) invokeTool(ctx context.Context, from Origin, in profile.Envelope, b Bound, at Place) error {
	ti, err := s.catalog.DecodeToolInvoke(in.Payload)
	if err != nil {
		var probe struct {
			InvocationID string `json:"invocation_id"`
		}
		if json.Unmarshal(in.Payload, &probe) != nil || probe.InvocationID == "" || len(probe.InvocationID) > 256 {
			return s.replies.Error(ctx, from, in, profile.AsError(err))
		}
		ti.InvocationID = probe.InvocationID
		return s.toolResult(ctx, from, in, ti.InvocationID, nil, profile.AsError(err))
	}
	tool, ok := s.catalog.Tool(ti.Tool)
	if !ok {
		return s.toolResult(ctx, from, in, ti.InvocationID, nil, profile.Errorf(profile.CodeToolNotSupported, "tool %q is not one of the Card's tools", ti.Tool))
	}
	if perr := tool.CheckArguments(ti.Arguments); perr != nil {
		return s.toolResult(ctx, from, in, ti.InvocationID, nil, perr)
	}
	out, perr, err := s.deliver.Invoke(ctx, in, ti, b, at)
	if err != nil {
		return err
	}
	if perr != nil {
		s.logger.Info("tool_failed", "channel", in.ChannelID, "invocation_id", ti.InvocationID, "tool", ti.Tool, "stage", "deliver", "code", perr.Code)
	}
	return s.toolResult(ctx, from, in, ti.InvocationID, out, perr)
}

func (s *Stages) toolResult(ctx context.Context, from Origin, in profile.Envelope, invocationID string, out *toolOutput, perr *profile.Error) error {
	r := toolResult{InvocationID: invocationID, OK: perr == nil, Result: out}
	if perr != nil {
		e := profile.ErrorPayloadOf(perr)
		r.Error, r.Result = &e, nil
	}
	return s.replies.send(ctx, from, in.ChannelID, profile.TypeToolResult, in.PacketID, r)
}

// InvocationDigest identifies a tool and its arguments, whatever their key order and spacing.
func InvocationDigest(tool string, args json.RawMessage) string {
	var v any
	_ = json.Unmarshal(args, &v) // valid: the schema accepted it
	canon, _ := json.Marshal(v)  // maps marshal with sorted keys
	sum := sha256.Sum256(append([]byte(tool+"\x00"), canon...))
	return hex.EncodeToString(sum[:16])
}

// Invoke runs a validated tool invocation exactly once per (channel, invocation_id): its output,
// or its *profile.Error; an error is an infrastructure failure (the packet is retried).
func (d *Deliverer) Invoke(ctx context.Context, in profile.Envelope, ti profile.ToolInvoke, b Bound, at Place) (*toolOutput, *profile.Error, error) {
	var args toolArguments
	dec := json.NewDecoder(bytes.NewReader(ti.Arguments))
	if err := dec.Decode(&args); err != nil {
		return nil, profile.Errorf(profile.CodeInvalidArguments, "arguments: %v", err), nil
	}
	key, err := subjects.InvocationKey(b.Channel, ti.InvocationID)
	if err != nil {
		return nil, profile.Errorf(profile.CodeInvalidPacket, "invocation_id: %v", err), nil
	}
	job := invocation{in: in, ti: ti, args: args, b: b, key: key, digest: InvocationDigest(ti.Tool, ti.Arguments),
		idem: b.Channel + ":tool:" + ti.InvocationID}
	intent := Record{State: StateDelivering, Digest: job.digest, PacketID: in.PacketID, Worker: d.cfg.Worker, At: time.Now().UnixMilli()}
	rev, cur, err := d.records.Create(ctx, key, intent)
	switch {
	case errors.Is(err, errExists):
		return d.invokedBefore(ctx, job, cur, rev)
	case err != nil:
		return nil, nil, err
	}
	return d.invokeSend(ctx, job, intent, rev)
}

// invocation is one tool invocation on its way.
type invocation struct {
	in     profile.Envelope
	ti     profile.ToolInvoke
	args   toolArguments
	b      Bound
	key    string // record key
	digest string // tool + arguments
	idem   string // the target's idempotency key
}

// invokeSend calls the target for an invocation whose intent (at rev) this process holds.
func (d *Deliverer) invokeSend(ctx context.Context, job invocation, intent Record, rev uint64) (*toolOutput, *profile.Error, error) {
	release := func() {
		if err := d.records.Undo(ctx, job.key, intent.PacketID, nil); err != nil {
			d.calls.refused(job.key)
			d.logger.Warn("intent_release_failed", "channel", job.b.Channel, "invocation_id", job.ti.InvocationID, "stage", "deliver", "err", err)
			return
		}
		d.calls.forget(job.key)
	}
	refs := make([]profile.File, 0, len(job.args.Files))
	for _, f := range job.args.Files {
		refs = append(refs, profile.File{FileRef: f.FileRef})
	}
	files, perr, err := d.resolveFiles(ctx, job.b.Channel, refs)
	if perr != nil || err != nil {
		release()
		if perr != nil {
			perr.Message = "arguments." + perr.Message
		}
		return nil, perr, err
	}
	for i := range files {
		if files[i].Type == "" {
			files[i].Type = fileTypeOf(files[i].MimeType)
		}
	}
	out := &toolOutput{}
	m := adapter.Message{Text: job.args.Text, Files: files, Final: true, IdempotencyKey: job.idem}
	if job.ti.Tool == profile.ToolReplyMessage {
		if job.b.Target.Capabilities().Reply == adapter.ReplyNative {
			m.ReplyTo = job.args.ReplyTo
		} else {
			out.Reply = replyDegraded
		}
	}
	d.calls.start(job.key)
	id, terr := d.callTarget(ctx, job.b, "", m)
	if terr != nil {
		var pe *profile.Error
		if !errors.As(terr, &pe) {
			pe = profile.Errorf(profile.CodeTargetUnavailable, "%v", terr)
		}
		if !pe.Retryable && d.records.Refuse(ctx, job.key, intent, rev, pe) == nil {
			d.calls.forget(job.key)
			return nil, pe, nil // every later run of the invocation gets the same error
		}
		release()
		return nil, pe, nil
	}
	out.TargetMessageID = id
	done := Record{State: StateDone, Digest: job.digest, PacketID: job.in.PacketID, TargetMessageID: id, Reply: out.Reply, Worker: d.cfg.Worker, At: time.Now().UnixMilli()}
	d.calls.shown(job.key, done, rev)
	if err := d.calls.saveDone(ctx, d, job.key); err != nil {
		return nil, nil, err // shown, not recorded: no answer before it is
	}
	return out, nil, nil
}

// invokedBefore answers an invocation whose invocation_id already has a record.
func (d *Deliverer) invokedBefore(ctx context.Context, job invocation, cur Record, rev uint64) (*toolOutput, *profile.Error, error) {
	if cur.Digest != job.digest {
		return nil, profile.Errorf(profile.CodeInvocationIDConflict, "invocation_id %s was already used with another tool or other arguments", job.ti.InvocationID), nil
	}
	switch cur.State {
	case StateDone:
		return &toolOutput{TargetMessageID: cur.TargetMessageID, Reply: cur.Reply}, nil, nil
	case StateRejected:
		return nil, cur.rejection(), nil
	case StateDelivering:
		if rec, ok := d.calls.shownRecord(job.key); ok && cur.Worker == d.cfg.Worker {
			if err := d.calls.saveDone(ctx, d, job.key); err != nil {
				return nil, nil, err
			}
			return &toolOutput{TargetMessageID: rec.TargetMessageID, Reply: rec.Reply}, nil, nil
		}
		if cur.Worker == d.cfg.Worker && d.calls.untouched(job.key) {
			cur.PacketID, cur.At = job.in.PacketID, time.Now().UnixMilli()
			n, err := d.records.Update(ctx, job.key, cur, rev)
			if err != nil {
				return nil, nil, err
			}
			return d.invokeSend(ctx, job, cur, n)
		}
		// A process died between intent and outcome: ask the target if it can tell.
		if out, perr, settled, err := d.settleInvocation(ctx, job, cur, rev); settled || err != nil {
			return out, perr, err
		}
		cur.State, cur.At = StateUnknown, time.Now().UnixMilli()
		if _, err := d.records.Update(ctx, job.key, cur, rev); err != nil {
			return nil, nil, err
		}
		d.logger.Warn("tool_outcome_unknown", "channel", job.b.Channel, "invocation_id", job.ti.InvocationID, "stage", "deliver")
		fallthrough
	default: // StateUnknown
		return nil, profile.Errorf(profile.CodeDeliveryOutcomeUnknown, "an earlier run of invocation %s was interrupted; it is not run again", job.ti.InvocationID), nil
	}
}

// settleInvocation settles an invocation in doubt where the target can tell: found → done with
// its message; absent → run afresh; a target that shows one message per idempotency key → sent
// again.
func (d *Deliverer) settleInvocation(ctx context.Context, job invocation, cur Record, rev uint64) (*toolOutput, *profile.Error, bool, error) {
	if r, ok := adapter.ReconcilerOf(job.b.Target); ok {
		shown, found, err := r.Lookup(ctx, job.idem)
		switch {
		case err != nil:
			return nil, nil, false, fmt.Errorf("reconcile: %w", err)
		case found:
			done := cur
			done.State, done.TargetMessageID, done.At = StateDone, shown.ID, time.Now().UnixMilli()
			d.calls.shown(job.key, done, rev)
			if err := d.calls.saveDone(ctx, d, job.key); err != nil {
				return nil, nil, false, err
			}
			return &toolOutput{TargetMessageID: shown.ID, Reply: cur.Reply}, nil, true, nil
		default:
			if err := d.records.Delete(ctx, job.key, rev); err != nil {
				return nil, nil, false, err
			}
			out, perr, err := d.Invoke(ctx, job.in, job.ti, job.b, Place{})
			return out, perr, true, err
		}
	}
	if dedupes(job.b.Target, cur) {
		if err := d.records.Delete(ctx, job.key, rev); err != nil {
			return nil, nil, false, err
		}
		out, perr, err := d.Invoke(ctx, job.in, job.ti, job.b, Place{})
		return out, perr, true, err
	}
	return nil, nil, false, nil
}

// fileTypeOf is the profile's file type of a media type (tools name files by file_ref only).
func fileTypeOf(mime string) string {
	switch {
	case len(mime) >= 6 && mime[:6] == "image/":
		return "image"
	case len(mime) >= 6 && mime[:6] == "video/":
		return "video"
	case len(mime) >= 6 && mime[:6] == "audio/":
		return "audio"
	}
	return "file"
}
