package handlers

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"time"

	"github.com/cenkalti/backoff/v4"
	"github.com/nats-io/nats.go/jetstream"
	"go.opentelemetry.io/otel/codes"
	"go.opentelemetry.io/otel/trace"

	"github.com/ximd/ximd/handlers/adapter"
	"github.com/ximd/ximd/handlers/spans"
	"github.com/ximd/ximd/profile"
	"github.com/ximd/ximd/subjects"
)

// waitDisplayLease waits until the display lease kept in the final's record (Record.Until) is
// released by the assemble stage of another process or has run out, and returns the record as it
// is then (the release may have brought the handle of a message created meanwhile).
func (d *Deliverer) waitDisplayLease(ctx context.Context, key string, rec Record, rev uint64) (Record, uint64, error) {
	for rec.Until > 0 && time.Now().Before(time.UnixMilli(rec.Until)) {
		t := time.NewTimer(leasePoll)
		select {
		case <-t.C:
		case <-ctx.Done():
			t.Stop()
			return rec, rev, ctx.Err()
		}
		cur, n, err := d.records.Get(ctx, key)
		if err != nil {
			return rec, rev, err
		}
		if n == 0 || cur.PacketID != rec.PacketID || cur.State != StateDelivering {
			return rec, rev, fmt.Errorf("record %s changed while its final waited for the display", key)
		}
		rec, rev = cur, n
	}
	rec.Until = 0
	return rec, rev, nil
}

// leasePoll is how often a final waiting for a display lease reads the record.
const leasePoll = 20 * time.Millisecond

// FileInfo is what the delivery stage needs of a stored file.
type FileInfo struct {
	Type, Filename, MimeType string
	ByteSize                 int64
	// URL is an absolute signed link the target can fetch the bytes from.
	URL string
}

// FileResolver resolves a channel's file_ref (the Transfer Plane); an unknown, expired or foreign
// ref is a *profile.Error file_not_found.
type FileResolver interface {
	Resolve(ctx context.Context, channel, fileRef string) (FileInfo, error)
}

// DeliverConfig configures the final delivery stage.
type DeliverConfig struct {
	// RetryBudget (XIM_TARGET_RETRY_BUDGET) is how long retryable target failures are retried
	// before the final is answered rejected with retryable=true.
	RetryBudget time.Duration
	// CallTimeout bounds one target call.
	CallTimeout time.Duration
	// CacheSize is the number of completed message_ids this worker also keeps in memory.
	CacheSize int
	// Worker names this worker in intent records.
	Worker string
	// Finished tells the assemble stage of another worker that a final was delivered here
	// (nil: every stage runs in this process).
	Finished FinishNotifier
}

// Deliverer delivers finals (chat.message from xAgent) exactly once per message_id:
// intent recorded before the target is touched, completion recorded before `accepted`.
type Deliverer struct {
	cfg      DeliverConfig
	records  *Records
	files    FileResolver
	assemble *Assembler
	clear    StatusClearer
	pacer    *Pacer
	replies  *Replier
	metrics  *Metrics
	logger   *slog.Logger
	done     *doneCache
	calls    *calls
}

// DelivererDeps are the final delivery stage's collaborators.
type DelivererDeps struct {
	// Records keeps the intent and completion records.
	Records *Records
	// Files resolves a final's file_refs.
	Files FileResolver
	// Assembler is the delta stage, whose display a final takes over.
	Assembler *Assembler
	// Clear clears a status shown by the activity stage (P-ACT-5).
	Clear StatusClearer
	// Pacer holds a chat's calls while its target asked to wait.
	Pacer *Pacer
	// Replies sends the finals' acks.
	Replies *Replier
	Metrics *Metrics
	Logger  *slog.Logger
}

// NewDeliverer returns the final delivery stage.
func NewDeliverer(cfg DeliverConfig, deps DelivererDeps) *Deliverer {
	if cfg.RetryBudget <= 0 {
		cfg.RetryBudget = 5 * time.Second
	}
	if cfg.CallTimeout <= 0 {
		cfg.CallTimeout = 10 * time.Second
	}
	if cfg.CacheSize <= 0 {
		cfg.CacheSize = 100000
	}
	d := &Deliverer{cfg: cfg, records: deps.Records, files: deps.Files, assemble: deps.Assembler, clear: deps.Clear, pacer: deps.Pacer,
		replies: deps.Replies, metrics: deps.Metrics, logger: deps.Logger, done: newDoneCache(cfg.CacheSize), calls: newCalls()}
	deps.Metrics.Completed.attach(d.done, deps.Records)
	return d
}

// Completed reports whether this worker knows the message as completed (deltas are then ignored).
func (d *Deliverer) Completed(channel, messageID string) bool {
	_, ok := d.done.get(bufKey{channel, messageID})
	return ok
}

// Deliver handles one validated final and sends its one ack. A returned error is an
// infrastructure failure (NATS unavailable): the packet is retried and, past the retries,
// answered by the poison stage.
func (d *Deliverer) Deliver(ctx context.Context, from Origin, in profile.Envelope, msg profile.Message, b Bound, at Place) error {
	ack, err := d.deliver(ctx, in, msg, b, at)
	if err != nil {
		return err
	}
	if ack.Status == profile.AckRejected {
		d.logger.Info("final_rejected", "channel", in.ChannelID, "message_id", msg.MessageID, "packet_id", in.PacketID, "stage", "deliver", "code", ack.Code)
	}
	return d.replies.Ack(ctx, from, in, ack)
}

func (d *Deliverer) deliver(ctx context.Context, in profile.Envelope, msg profile.Message, b Bound, at Place) (profile.Ack, error) {
	k := bufKey{b.Channel, msg.MessageID}
	digest := msg.Digest()
	key, err := subjects.MessageKey(b.Channel, msg.MessageID)
	if err != nil {
		return profile.Rejected(msg.MessageID, profile.Errorf(profile.CodeInvalidPacket, "message_id: %v", err)), nil
	}
	if mark, ok := d.done.get(k); ok {
		if err := d.calls.saveDone(ctx, d, key); err != nil {
			return profile.Ack{}, err // its completion is not recorded yet: no answer before it is
		}
		return mark.answer(in.PacketID, at.Seq, msg.MessageID, digest), nil
	}
	intent := Record{State: StateDelivering, Digest: digest, PacketID: in.PacketID, Worker: d.cfg.Worker, At: time.Now().UnixMilli()}
	rev, cur, err := d.records.Create(ctx, key, intent)
	var prev *Record // the displaying record the intent replaced, restored on a rejection
	if errors.Is(err, errExists) && cur.State == StateDisplaying {
		// A streamed message: take its record from the display by compare-and-set (a display
		// update may land meanwhile). From then on no display call starts.
		took := false
		cur, rev, err = d.records.Modify(ctx, key, func(r *Record) bool {
			if took = r.State == StateDisplaying; !took {
				return false
			}
			p := *r
			prev = &p
			next := intent
			next.TargetMessageID = r.TargetMessageID
			if r.Worker != d.cfg.Worker {
				next.Until = r.Until // another process's display call may be in flight: wait for it
				next.DisplayUnknown = r.TargetMessageID == ""
			}
			*r = next
			return true
		})
		switch {
		case err != nil:
		case rev == 0:
			err = fmt.Errorf("record %s vanished while the final took it", key) // retried
		case !took:
			err = errExists // another final took it first: answer from its record
		default:
			intent = cur
		}
	}
	switch {
	case errors.Is(err, errExists):
		return d.existing(ctx, in, msg, b, key, digest, cur, rev, at)
	case err != nil:
		return profile.Ack{}, err
	}
	if prev != nil && prev.Worker != d.cfg.Worker {
		// Shown by the assemble stage of another process: wait until its display call in flight
		// (if any) released the lease.
		if intent, rev, err = d.waitDisplayLease(ctx, key, intent, rev); err != nil {
			return profile.Ack{}, err
		}
		if intent.TargetMessageID == "" {
			// Its create's outcome is unknown (its process died, or it could not record the
			// handle): never create the message a second time; settle it like any interrupted
			// final.
			return d.existing(ctx, in, msg, b, key, digest, intent, rev, at)
		}
	}
	return d.send(ctx, in, msg, b, key, intent, rev, prev, at)
}

// send delivers a final whose intent (at revision rev) this process holds and for which it has
// not called the target yet. prev is the displaying record the intent replaced (nil: none, or
// not known), restored if the target refuses.
func (d *Deliverer) send(ctx context.Context, in profile.Envelope, msg profile.Message, b Bound, key string, intent Record, rev uint64, prev *Record, at Place) (profile.Ack, error) {
	k := bufKey{b.Channel, msg.MessageID}
	// The record is this final's: no display call starts from here on. Stop the streamed
	// display and wait for a call in flight; a message this process created but could not record
	// is edited, never created again.
	shownID, held, err := d.assemble.FinishHandle(ctx, b.Channel, msg.MessageID)
	if err != nil {
		return profile.Ack{}, err
	}
	if !held && d.cfg.Finished != nil {
		d.cfg.Finished.NotifyFinished(b.Channel, msg.MessageID, at)
	}
	if intent.TargetMessageID == "" && shownID != "" {
		intent.TargetMessageID = shownID
	}
	release := func() error { return d.records.Undo(ctx, key, in.PacketID, prev) }

	files, perr, err := d.resolveFiles(ctx, b.Channel, msg.Files)
	if perr != nil || err != nil {
		if rerr := release(); rerr != nil {
			return profile.Ack{}, errors.Join(err, rerr)
		}
		if err != nil {
			return profile.Ack{}, err
		}
		return profile.Rejected(msg.MessageID, perr), nil
	}
	d.clear.ClearStatus(ctx, b.Channel, at) // the final clears a shown status (P-ACT-5), after any status call in flight

	// From here the target may be touched: the intent stays unless the target refused.
	d.calls.start(key)
	targetID, terr := d.callTarget(ctx, b, intent.TargetMessageID, adapter.Message{Text: msg.Text, Files: files, Final: true, IdempotencyKey: idempotencyKey(b.Channel, msg.MessageID)})
	if terr != nil {
		var pe *profile.Error
		if !errors.As(terr, &pe) {
			pe = profile.Errorf(profile.CodeTargetUnavailable, "%v", terr)
		}
		// Refused for good: every later arrival gets the same rejection, without a call.
		if !pe.Retryable && d.records.Refuse(ctx, key, intent, rev, pe) == nil {
			d.calls.forget(key)
			return profile.Rejected(msg.MessageID, pe), nil
		}
		if adapter.IsAmbiguous(terr) && !b.Target.Capabilities().ResendSafe() && (intent.TargetMessageID == "" || !canEdit(b.Target)) {
			// The platform may show the message and cannot tell: it is never sent again
			// (P-STATE-8).
			intent.State, intent.At = StateUnknown, time.Now().UnixMilli()
			if _, err := d.records.Update(ctx, key, intent, rev); err != nil {
				return profile.Ack{}, err
			}
			d.calls.forget(key)
			d.logger.Warn("final_outcome_unknown", "channel", b.Channel, "message_id", msg.MessageID, "packet_id", in.PacketID, "stage", "deliver", "err", terr)
			return profile.Rejected(msg.MessageID, profile.Errorf(profile.CodeDeliveryOutcomeUnknown, "the target may show message %s: the call's outcome is unknown (%v); it is not sent again", msg.MessageID, pe.Message)), nil
		}
		// The webhook contract passes idempotency_key, so a later attempt of the same message
		// cannot create a second copy on a target that honours it: release the intent.
		if rerr := release(); rerr != nil {
			// The intent stays in the record; this process knows the target refused, so its own
			// next attempt goes ahead (another process would find it in doubt).
			d.calls.refused(key)
			d.logger.Warn("intent_release_failed", "channel", b.Channel, "message_id", msg.MessageID, "stage", "deliver", "err", rerr)
		} else {
			d.calls.forget(key)
		}
		return profile.Rejected(msg.MessageID, pe), nil
	}
	rec := Record{State: StateDone, Digest: intent.Digest, PacketID: in.PacketID, Seq: at.Seq, TargetMessageID: targetID, Worker: d.cfg.Worker, At: time.Now().UnixMilli()}
	d.done.put(k, rec)
	d.calls.shown(key, rec, rev)
	if err := d.calls.saveDone(ctx, d, key); err != nil {
		// Shown, but not recorded: no ack before it is (the packet is retried; this process
		// answers it from what it knows and records it then).
		return profile.Ack{}, err
	}
	return profile.Accepted(msg.MessageID), nil
}

// existing answers a final whose message_id already has a delivering, done or unknown record.
func (d *Deliverer) existing(ctx context.Context, in profile.Envelope, msg profile.Message, b Bound, key, digest string, cur Record, rev uint64, at Place) (profile.Ack, error) {
	if cur.Digest != digest {
		return profile.Rejected(msg.MessageID, profile.Errorf(profile.CodeMessageIDConflict, "message_id %s was already used with different text or files", msg.MessageID)), nil
	}
	switch cur.State {
	case StateRejected:
		return profile.Rejected(msg.MessageID, cur.rejection()), nil
	case StateDone:
		return d.done.put(bufKey{b.Channel, msg.MessageID}, cur).answer(in.PacketID, at.Seq, msg.MessageID, digest), nil
	case StateDelivering:
		if rec, ok := d.calls.shownRecord(key); ok && cur.Worker == d.cfg.Worker {
			// This process showed it; only the record is behind.
			if err := d.calls.saveDone(ctx, d, key); err != nil {
				return profile.Ack{}, err
			}
			return markOf(b.Channel, rec).answer(in.PacketID, at.Seq, msg.MessageID, digest), nil
		}
		if cur.Worker == d.cfg.Worker && d.calls.untouched(key) && !(cur.DisplayUnknown && cur.TargetMessageID == "") {
			// This process wrote the intent and has not shown the final (a write that timed out
			// but was stored, a refusal whose release failed): no doubt, it goes ahead.
			cur.PacketID, cur.At = in.PacketID, time.Now().UnixMilli()
			n, err := d.records.Update(ctx, key, cur, rev)
			if err != nil {
				return profile.Ack{}, err
			}
			d.logger.Info("final_intent_resumed", "channel", b.Channel, "message_id", msg.MessageID, "packet_id", in.PacketID, "stage", "deliver")
			return d.send(ctx, in, msg, b, key, cur, n, nil, at)
		}
		// An earlier attempt died between intent and outcome (crash, kill -9): the target may or
		// may not show the message. Never send blindly (P-STATE-8): ask the target if it can
		// tell, or redo the final edit of a displayed message, which replaces the whole content
		// and so shows the same thing however often it is applied.
		if ack, ok, err := d.reconcile(ctx, in, msg, b, key, digest, cur, rev, at); ok || err != nil {
			return ack, err
		}
		cur.State = StateUnknown
		cur.At = time.Now().UnixMilli()
		if _, err := d.records.Update(ctx, key, cur, rev); err != nil {
			return profile.Ack{}, err
		}
		d.logger.Warn("final_outcome_unknown", "channel", b.Channel, "message_id", msg.MessageID, "packet_id", in.PacketID, "stage", "deliver")
		fallthrough
	default: // StateUnknown
		return profile.Rejected(msg.MessageID, profile.Errorf(profile.CodeDeliveryOutcomeUnknown, "an earlier delivery of message %s was interrupted; it is not sent again", msg.MessageID)), nil
	}
}

// reconcile settles an in-doubt final where the target's in-doubt rule makes it safe: ok
// reports whether it did (ack is its answer). Lookup: final shown → done; the message exists →
// the final is applied by an edit; nothing shown → delivered afresh. Dedupe (within the
// platform's window): sent again, which cannot show two. Any rule: a final whose message was
// displayed (the record holds its target id) on an editing target is applied again by an edit.
// Anything else stays in doubt.
func (d *Deliverer) reconcile(ctx context.Context, in profile.Envelope, msg profile.Message, b Bound, key, digest string, cur Record, rev uint64, at Place) (profile.Ack, bool, error) {
	targetID, final := cur.TargetMessageID, false
	if r, ok := adapter.ReconcilerOf(b.Target); ok {
		shown, found, err := r.Lookup(ctx, idempotencyKey(b.Channel, msg.MessageID))
		if err != nil {
			return profile.Ack{}, false, fmt.Errorf("reconcile: %w", err)
		}
		if !found {
			if err := d.records.Delete(ctx, key, rev); err != nil {
				return profile.Ack{}, false, err
			}
			d.logger.Info("final_reconciled", "channel", b.Channel, "message_id", msg.MessageID, "packet_id", in.PacketID, "stage", "deliver", "outcome", string(reconciledNotShown))
			ack, err := d.deliver(ctx, in, msg, b, at)
			return ack, true, err
		}
		if shown.ID != "" {
			targetID = shown.ID
		}
		final = shown.Final && shown.ShowsText(msg.Text)
	}
	if dedupes(b.Target, cur) && !final && targetID == "" {
		// The target shows one message per idempotency key: sending again cannot show two.
		if err := d.records.Delete(ctx, key, rev); err != nil {
			return profile.Ack{}, false, err
		}
		d.logger.Info("final_reconciled", "channel", b.Channel, "message_id", msg.MessageID, "packet_id", in.PacketID, "stage", "deliver", "outcome", string(reconciledDeduped))
		ack, err := d.deliver(ctx, in, msg, b, at)
		return ack, true, err
	}
	if _, canEdit := adapter.EditorOf(b.Target); !final && (targetID == "" || !canEdit) {
		return profile.Ack{}, false, nil
	}
	if !final {
		files, perr, err := d.resolveFiles(ctx, b.Channel, msg.Files)
		if err != nil {
			return profile.Ack{}, false, err
		}
		if perr != nil {
			return profile.Ack{}, false, nil // the files are gone: the outcome stays unknown
		}
		if _, err := d.callTarget(ctx, b, targetID, adapter.Message{Text: msg.Text, Files: files, Final: true, IdempotencyKey: idempotencyKey(b.Channel, msg.MessageID)}); err != nil {
			var pe *profile.Error
			if !errors.As(err, &pe) {
				pe = profile.Errorf(profile.CodeTargetUnavailable, "%v", err)
			}
			return profile.Rejected(msg.MessageID, pe), true, nil // still delivering: a retransmission tries again
		}
	}
	done := Record{State: StateDone, Digest: digest, PacketID: in.PacketID, Seq: at.Seq, TargetMessageID: targetID, Worker: d.cfg.Worker, At: time.Now().UnixMilli()}
	d.done.put(bufKey{b.Channel, msg.MessageID}, done)
	d.calls.shown(key, done, rev)
	if err := d.calls.saveDone(ctx, d, key); err != nil {
		return profile.Ack{}, false, err
	}
	outcome := reconciledEdited
	if final {
		outcome = reconciledShown
	}
	d.logger.Info("final_reconciled", "channel", b.Channel, "message_id", msg.MessageID, "packet_id", in.PacketID, "stage", "deliver", "outcome", string(outcome))
	return profile.Accepted(msg.MessageID), true, nil
}

// complete records the completed message_id, retrying briefly. rev is the intent's revision as
// this stage last wrote it: a display lease released meanwhile (another process) changed it, and
// then the record is read again.
func (d *Deliverer) complete(ctx context.Context, key string, rec Record, rev uint64) error {
	op := func() error {
		if rev != 0 {
			_, err := d.records.Update(ctx, key, rec, rev)
			if rev = 0; !errors.Is(err, jetstream.ErrKeyExists) {
				return err
			}
		}
		_, _, err := d.records.Modify(ctx, key, func(r *Record) bool {
			if r.State != StateDelivering || r.Digest != rec.Digest {
				return false // not this message's intent any more: nothing to complete
			}
			*r = rec
			return true
		})
		return err
	}
	bo := backoff.WithContext(backoff.WithMaxRetries(backoff.NewExponentialBackOff(backoff.WithInitialInterval(50*time.Millisecond)), 5), ctx)
	if err := backoff.Retry(op, bo); err != nil {
		d.logger.Warn("completed_record_failed", "stage", "deliver", "key", key, "err", err)
		return fmt.Errorf("record completion: %w", err)
	}
	return nil
}

// dedupes reports whether t's in-doubt rule is to send again (the platform shows one message
// per idempotency key) and the intent in cur is still inside the platform's window.
// canEdit reports whether t streams by editing (a final can be applied to a shown message).
func canEdit(t adapter.Target) bool {
	_, ok := adapter.EditorOf(t)
	return ok
}

func dedupes(t adapter.Target, cur Record) bool {
	c := t.Capabilities()
	if c.InDoubtRule() != adapter.InDoubtDedupe {
		return false
	}
	return c.InDoubtWindow <= 0 || time.Since(time.UnixMilli(cur.At)) < c.InDoubtWindow
}

// callTarget edits the streamed message, or sends the final, retrying retryable failures within
// the budget. A failure that names its retry time (adapter.RetryAfterError) is retried no sooner:
// only this channel's lane waits (and its display calls, through the pacer); a retry time past the
// budget ends the retries at once.
func (d *Deliverer) callTarget(ctx context.Context, b Bound, targetID string, m adapter.Message) (string, error) {
	editor, canEdit := adapter.EditorOf(b.Target)
	call := func() error {
		if err := d.pacer.Wait(ctx, b.Channel); err != nil {
			return err
		}
		name := "send"
		if targetID != "" && canEdit {
			name = "edit"
		}
		cctx, span := spans.Start(ctx, tracer, trace.SpanKindClient, "target", name)
		defer span.End()
		cctx, cancel := context.WithTimeout(cctx, d.cfg.CallTimeout)
		defer cancel()
		start := time.Now()
		var err error
		if name == "edit" {
			err = editor.Edit(cctx, targetID, m)
		} else {
			var id string
			id, err = b.Target.Send(cctx, m)
			if err == nil {
				targetID = id
			}
		}
		outcome := callOK
		if err != nil {
			outcome = errorCode(err)
			span.SetStatus(codes.Error, outcome)
		}
		if span.IsRecording() {
			span.SetAttributes(attrAdapter.String(b.Adapter), attrOutcome.String(outcome))
		}
		d.metrics.TargetCalls.WithLabelValues(b.Adapter, name, outcome).Observe(time.Since(start).Seconds())
		return err
	}
	deadline := time.Now().Add(d.cfg.RetryBudget)
	bo := backoff.NewExponentialBackOff(backoff.WithInitialInterval(100*time.Millisecond), backoff.WithMaxInterval(2*time.Second), backoff.WithMaxElapsedTime(0))
	for {
		err := call()
		var pe *profile.Error
		if err == nil || ctx.Err() != nil || (errors.As(err, &pe) && !pe.Retryable) {
			return targetID, err
		}
		if adapter.IsAmbiguous(err) && !(targetID != "" && canEdit) && !b.Target.Capabilities().ResendSafe() {
			return targetID, err // a send that may have been shown is not made again
		}
		wait := bo.NextBackOff()
		if after, ok := adapter.RetryAfterOf(err); ok {
			wait = after
			d.pacer.Pause(b.Channel, after)
			d.metrics.LaneWaits.WithLabelValues(b.Adapter).Inc()
		}
		if time.Now().Add(wait).After(deadline) {
			return targetID, err
		}
		t := time.NewTimer(wait)
		select {
		case <-t.C:
		case <-ctx.Done():
			t.Stop()
			return targetID, err
		}
	}
}

func (d *Deliverer) resolveFiles(ctx context.Context, channel string, in []profile.File) ([]adapter.File, *profile.Error, error) {
	if len(in) == 0 {
		return nil, nil, nil
	}
	out := make([]adapter.File, 0, len(in))
	for i, f := range in {
		info, err := d.files.Resolve(ctx, channel, f.FileRef)
		var pe *profile.Error
		if errors.As(err, &pe) {
			return nil, profile.Errorf(pe.Code, "files[%d].file_ref %s: %s", i, f.FileRef, pe.Message), nil
		}
		if err != nil {
			return nil, nil, err
		}
		tf := adapter.File{Type: f.Type, FileRef: f.FileRef, Filename: f.Filename, MimeType: f.MimeType, ByteSize: info.ByteSize, URL: info.URL}
		if tf.Filename == "" {
			tf.Filename = info.Filename
		}
		if tf.MimeType == "" {
			tf.MimeType = info.MimeType
		}
		out = append(out, tf)
	}
	return out, nil, nil
}
