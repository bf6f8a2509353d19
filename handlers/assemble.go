package handlers

import (
	"container/list"
	"context"
	"errors"
	"hash/maphash"
	"log/slog"
	"sync"
	"time"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/ximd/ximd/handlers/adapter"
	"github.com/ximd/ximd/profile"
	"github.com/ximd/ximd/subjects"
)

// AssembleConfig bounds the delta buffers (P-DLT-7, P-STATE-4).
type AssembleConfig struct {
	// TTL (XIM_DELTA_TTL) drops a buffer whose message saw no delta for that long.
	TTL time.Duration
	// MaxBuffers (XIM_MAX_DELTA_BUFFERS) caps buffers held by one worker; the oldest is evicted.
	MaxBuffers int
	// MaxBytes (XIM_MAX_DELTA_BYTES) caps the text of one buffer; past it the message stops being
	// displayed until its final.
	MaxBytes int
	// EditInterval (XIM_EDIT_INTERVAL) is the least time between two display calls of a message.
	EditInterval time.Duration
	// CallTimeout bounds one display call.
	CallTimeout time.Duration
	// Worker names this worker in records.
	Worker string
	// DeliverLocal reports whether this process has served partition p of the deliver stage
	// since `since`, with no change among the live workers since a hand-over window before it:
	// every final of the partition since then is delivered in this process, which stops the
	// message's display and waits for a display call in flight first. A display edit of a
	// message whose buffer opened since then needs no read of its record; when the deliver stage
	// is not local now, each edit takes a display lease in the record first (one KV write), which
	// a final delivered elsewhere waits out. nil: always local.
	DeliverLocal func(p int, since time.Time) bool
}

// Assembler applies deltas in sequence order (P-DLT-1/2, P-ERR-4) and displays them on `edit`
// targets (the first displayed delta creates the target message, later ones edit it) and on
// `draft` targets (each display is a preview that creates nothing), at most once per
// EditInterval and with at most one call in flight per message (latest text wins); a platform's
// retry-after pauses the display, never ends it. On `none` targets it keeps only what sequence
// checks need.
type Assembler struct {
	cfg     AssembleConfig
	records *Records
	clear   StatusClearer
	pacer   *Pacer
	metrics *Metrics
	logger  *slog.Logger
	seed    maphash.Seed
	worker  string

	ctx    context.Context
	cancel context.CancelFunc
	wg     sync.WaitGroup

	// mu guards the set of buffers; each buffer's own mu its state (taken after a.mu).
	mu      sync.Mutex
	buffers map[bufKey]*buffer
	lru     *list.List // of *buffer, the most recently used first
	// draining holds evicted buffers whose display call is still in flight, or whose created
	// target message has no recorded handle: the final must wait for the one and edit the other.
	draining map[bufKey]*buffer
	evicted  *keyRing // buffers dropped before their final: their later deltas are ignored
}

type bufKey struct{ channel, messageID string }

// buffer is one message's delta buffer. Its fields above mu are set when it opens; mu guards
// what Apply, the final and the display share: the sequence state, the text, and the view
// while no display goroutine holds it.
type buffer struct {
	key    bufKey
	kv     string // KV key of the message
	bind   Bound
	edit   adapter.Editor  // streaming edit (nil: not)
	draft  adapter.Drafter // streaming draft (nil: not); with neither, nothing is displayed
	opened time.Time       // when this worker opened the buffer (and read the message's record)
	// stop is closed (under mu, once) when the final takes the buffer or it is evicted: the
	// display ends after any call in flight. nil when nothing is displayed.
	stop chan struct{}

	elem *list.Element // in Assembler.lru; a.mu guards it

	mu       sync.Mutex
	next     int64    // next expected sequence
	hashes   []uint64 // hashes[i]: text hash of sequence i+1
	text     []byte
	at       Place // place of the latest applied delta
	lastSeen time.Time
	broken   bool // gap, cap or display failure: no more display
	lost     bool // resumed after a restart: state before it is unknown
	finished bool // taken by its final (or a finish notice): nothing more is applied or shown

	// view is what the target shows, parked here while no display goroutine runs; nil while
	// one holds it (and for a buffer that displays nothing).
	view *view
	done chan struct{} // closed when the display goroutine started last has ended
}

// view is the display state of one streamed message. It has one owner at a time: the
// message's display goroutine while one runs (kick hands the view over, the goroutine parks it
// back in its buffer when it ends), else its buffer, under the buffer's mu.
type view struct {
	targetID   string
	drafted    bool      // a draft was shown (streaming draft creates no target message)
	unrecorded bool      // targetID was created but its record update failed
	shown      int       // bytes of text the target shows
	lastCall   time.Time // end of the last display call
}

// displayed reports whether the message's streamed text is shown.
func (v *view) displayed() bool { return v.targetID != "" || v.drafted }

// running reports whether a display goroutine holds the buffer's view (buf.mu held).
func (b *buffer) running() bool { return b.stop != nil && b.view == nil }

// stopDisplay ends the display after any call in flight (buf.mu held).
func (b *buffer) stopDisplay() {
	if b.stop != nil && !isClosed(b.stop) {
		close(b.stop)
	}
}

// AssemblerDeps are the delta stage's collaborators.
type AssemblerDeps struct {
	Records *Records      // the display records
	Clear   StatusClearer // clears a status a displayed delta replaces (P-ACT-5)
	Pacer   *Pacer        // holds a chat's calls while its target asked to wait
	Metrics *Metrics
	Logger  *slog.Logger
}

// NewAssembler returns the delta stage; Run evicts expired buffers, Close stops display.
func NewAssembler(cfg AssembleConfig, deps AssemblerDeps) *Assembler {
	rec, clear, pacer, m, logger := deps.Records, deps.Clear, deps.Pacer, deps.Metrics, deps.Logger
	if cfg.TTL <= 0 {
		cfg.TTL = 10 * time.Minute
	}
	if cfg.MaxBuffers <= 0 {
		cfg.MaxBuffers = 10000
	}
	if cfg.MaxBytes <= 0 {
		cfg.MaxBytes = 1 << 20
	}
	if cfg.CallTimeout <= 0 {
		cfg.CallTimeout = 10 * time.Second
	}
	ctx, cancel := context.WithCancel(context.Background())
	if cfg.DeliverLocal == nil {
		cfg.DeliverLocal = func(int, time.Time) bool { return true }
	}
	return &Assembler{cfg: cfg, records: rec, clear: clear, pacer: pacer, metrics: m, logger: logger, seed: maphash.MakeSeed(), worker: cfg.Worker,
		ctx: ctx, cancel: cancel, buffers: map[bufKey]*buffer{}, lru: list.New(), draining: map[bufKey]*buffer{}, evicted: newKeyRing(cfg.MaxBuffers)}
}

// Apply applies one validated delta. It returns a *profile.Error to send as an `error` packet
// (delta_sequence_gap, delta_sequence_conflict), or nil. completed reports whether the
// message already has a final record in this worker's memory. at is the delta's place in XIM_IN.
func (a *Assembler) Apply(ctx context.Context, b Bound, d profile.Delta, at Place, completed bool) (*profile.Error, error) {
	k := bufKey{b.Channel, d.MessageID}
	if completed {
		a.metrics.DeltasIgnored.WithLabelValues(string(deltaCompleted)).Inc()
		return nil, nil
	}
	a.mu.Lock()
	buf := a.buffers[k]
	if buf != nil {
		a.lru.MoveToFront(buf.elem)
	}
	evicted := buf == nil && a.evicted.has(k)
	a.mu.Unlock()
	if evicted {
		a.metrics.DeltasIgnored.WithLabelValues(string(deltaEvicted)).Inc()
		return nil, nil
	}
	if buf == nil {
		var perr *profile.Error
		var err error
		buf, perr, err = a.open(ctx, b, d)
		if perr != nil || err != nil || buf == nil {
			return perr, err
		}
	}
	h := maphash.String(a.seed, d.Text)

	buf.mu.Lock()
	defer buf.mu.Unlock()
	buf.lastSeen = time.Now()
	switch {
	case buf.lost:
		a.metrics.DeltasIgnored.WithLabelValues(string(deltaEvicted)).Inc()
		return nil, nil
	case buf.finished: // its final took the buffer while this delta was on its way to it
		a.metrics.DeltasIgnored.WithLabelValues(string(deltaCompleted)).Inc()
		return nil, nil
	case d.Sequence < buf.next:
		if buf.hashes != nil && d.Sequence <= int64(len(buf.hashes)) && buf.hashes[d.Sequence-1] != h {
			return profile.Errorf(profile.CodeDeltaSequenceConflict, "sequence %d of message %s was already received with different text", d.Sequence, d.MessageID), nil
		}
		a.metrics.DeltasIgnored.WithLabelValues(string(deltaRetransmit)).Inc()
		return nil, nil
	case buf.broken && buf.next == 0:
		a.metrics.DeltasIgnored.WithLabelValues(string(deltaAfterGap)).Inc()
		return nil, nil
	case d.Sequence > buf.next:
		expected := buf.next
		buf.broken = true
		buf.next = 0 // no further sequence is applied
		a.metrics.DeltasIgnored.WithLabelValues(string(deltaAfterGap)).Inc()
		return profile.Errorf(profile.CodeDeltaSequenceGap, "expected sequence %d, got %d", expected, d.Sequence), nil
	}
	buf.next++
	buf.at = at
	if buf.hashes != nil || buf.next == 2 {
		buf.hashes = append(buf.hashes, h)
	}
	// MaxBytes bounds a buffer's memory: the text (edit targets) and 8 bytes a sequence for
	// conflict detection. Past it the display stops, then conflict detection.
	if size := 8*len(buf.hashes) + len(buf.text) + len(d.Text); size > a.cfg.MaxBytes {
		if !buf.broken {
			buf.broken = true
			a.metrics.DeltaEvicted.WithLabelValues(string(evictBytes)).Inc()
		}
		buf.text = nil
		if 8*len(buf.hashes) > a.cfg.MaxBytes {
			buf.hashes = nil
		}
	}
	if (buf.edit == nil && buf.draft == nil) || buf.broken {
		return nil, nil
	}
	buf.text = append(buf.text, d.Text...)
	a.kick(buf)
	return nil, nil
}

// open creates the buffer of a message's first delta seen by this worker.
func (a *Assembler) open(ctx context.Context, b Bound, d profile.Delta) (*buffer, *profile.Error, error) {
	kv, err := subjects.MessageKey(b.Channel, d.MessageID)
	if err != nil {
		return nil, profile.Errorf(profile.CodeInvalidPacket, "message_id: %v", err), nil
	}
	now := time.Now()
	buf := &buffer{key: bufKey{b.Channel, d.MessageID}, kv: kv, bind: b, next: 1, opened: now, lastSeen: now}
	if e, ok := adapter.EditorOf(b.Target); ok {
		buf.edit = e
	} else if d, ok := adapter.DrafterOf(b.Target); ok {
		buf.draft = d
	}
	if buf.edit != nil || buf.draft != nil {
		buf.view, buf.stop = &view{}, make(chan struct{})
	}
	// The message may have begun before this worker held it (restart, eviction, rebalance) or
	// be complete already (its final delivered by another worker, or forgotten here): its record
	// tells. One read per message this worker sees begin.
	rec, rev, err := a.records.Get(ctx, kv)
	if err != nil {
		return nil, nil, err
	}
	switch {
	case rev != 0 && rec.State != StateDisplaying:
		a.metrics.DeltasIgnored.WithLabelValues(string(deltaCompleted)).Inc()
		return nil, nil, nil
	case d.Sequence == 1:
	case rev != 0:
		buf.lost = true
	default:
		buf.broken = true
		buf.next = 0
		a.insert(buf)
		a.metrics.DeltasIgnored.WithLabelValues(string(deltaAfterGap)).Inc()
		return nil, profile.Errorf(profile.CodeDeltaSequenceGap, "expected sequence 1, got %d", d.Sequence), nil
	}
	a.insert(buf)
	return buf, nil, nil
}

func (a *Assembler) insert(buf *buffer) {
	a.mu.Lock()
	defer a.mu.Unlock()
	for len(a.buffers) >= a.cfg.MaxBuffers {
		a.evictLocked(a.lru.Back().Value.(*buffer), evictCapacity) // the least recently used
	}
	a.buffers[buf.key] = buf
	buf.elem = a.lru.PushFront(buf)
	a.metrics.DeltaBuffers.Set(float64(len(a.buffers)))
}

func (b *buffer) lastSeenUnlocked() time.Time {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.lastSeen
}

// evictLocked drops a buffer before its final; its display stops. a.mu is held.
func (a *Assembler) evictLocked(buf *buffer, reason evictReason) {
	delete(a.buffers, buf.key)
	a.lru.Remove(buf.elem)
	if reason != "channel_closed" {
		a.evicted.add(buf.key)
	}
	a.metrics.DeltaEvicted.WithLabelValues(string(reason)).Inc()
	a.metrics.DeltaBuffers.Set(float64(len(a.buffers)))
	buf.mu.Lock()
	buf.broken = true
	buf.text = nil
	buf.stopDisplay()
	if buf.running() || (buf.view != nil && buf.view.unrecorded) {
		a.draining[buf.key] = buf // its final waits for the call in flight, or edits what it created
	}
	buf.mu.Unlock()
}

// FinishHandle ends a message's buffer at its final (P-STATE-5): it stops the display and
// waits for a call in flight, so the message's record holds the final word on what the target
// shows. It returns the target message this worker created for the message ("" when none) and
// whether this worker held a buffer of it.
func (a *Assembler) FinishHandle(ctx context.Context, channel, messageID string) (string, bool, error) {
	buf, done := a.take(channel, messageID)
	if buf == nil {
		return "", false, nil
	}
	if done != nil {
		select {
		case <-done:
		case <-ctx.Done():
			return "", true, ctx.Err()
		}
	}
	buf.mu.Lock()
	defer buf.mu.Unlock()
	if buf.view == nil { // a target that displays nothing
		return "", true, nil
	}
	return buf.view.targetID, true, nil // parked: the display has ended
}

// Forget drops a message's buffer because its final was delivered by another worker (a finish
// notice): the display stops after any call in flight, which the message's record keeps from
// touching the final (P-STATE-5).
func (a *Assembler) Forget(channel, messageID string) { a.take(channel, messageID) }

// take removes a message's buffer (live or draining), marks it finished and stops its display;
// nil when there is none. done, when not nil, is closed once the display has ended.
func (a *Assembler) take(channel, messageID string) (buf *buffer, done <-chan struct{}) {
	k := bufKey{channel, messageID}
	a.mu.Lock()
	buf = a.buffers[k]
	if buf != nil {
		delete(a.buffers, k)
		a.lru.Remove(buf.elem)
	} else {
		buf = a.draining[k]
	}
	delete(a.draining, k)
	a.metrics.DeltaBuffers.Set(float64(len(a.buffers)))
	a.mu.Unlock()
	if buf == nil {
		return nil, nil
	}
	buf.mu.Lock()
	defer buf.mu.Unlock()
	buf.finished = true
	buf.stopDisplay()
	if buf.running() {
		done = buf.done
	}
	return buf, done
}

// kick hands the buffer's view to a new display goroutine unless one holds it, the buffer
// displays nothing, or its final took it; buf.mu is held.
func (a *Assembler) kick(buf *buffer) {
	v := buf.view
	if v == nil || buf.finished || a.ctx.Err() != nil {
		return
	}
	buf.view = nil
	buf.done = make(chan struct{})
	a.wg.Add(1)
	go a.display(buf, v, buf.done)
}

// display is the goroutine that owns the message's view while it runs: it sends the buffer's
// latest text to the target until the target shows everything, then parks the view back in the
// buffer and exits. The next delta (or preview renewal) kicks another.
func (a *Assembler) display(buf *buffer, v *view, done chan<- struct{}) {
	defer a.wg.Done()
	defer close(done)
	defer a.undrain(buf)
	for {
		caps, ok := a.due(buf, v)
		if !ok {
			return
		}
		a.pace(buf, v, caps)
		text, at, ok := a.latest(buf, v)
		if !ok {
			return
		}
		if !v.displayed() {
			// The first displayed delta clears the status (P-ACT-5): after any status call in
			// flight, and no older status is shown after it.
			a.clear.ClearStatus(a.ctx, buf.key.channel, at)
		}
		var err error
		if buf.draft != nil {
			err = a.showDraft(buf, text, at)
		} else {
			err = a.show(buf, v, text, at)
		}
		// The interval runs from the end of a call, so the target never sees two calls of a
		// message closer than EditInterval, however long each took.
		v.lastCall = time.Now()
		if after, ok := adapter.RetryAfterOf(err); ok && !errors.Is(err, errDisplayInDoubt) {
			// The platform asked to wait (its rate limit): no call to the chat before then,
			// and the preview goes on with the text it has by then.
			a.pacer.Pause(buf.key.channel, after)
			continue
		}
		if err != nil {
			// A failed display never affects the final: stop displaying this message.
			a.fail(buf, v, err)
			return
		}
		v.drafted = buf.draft != nil
		v.shown = len(text)
	}
}

// due reports whether the target is to be shown more of the buffer's text, and the target's
// capabilities. When not (it shows all of it, the text is not ready for a first preview, or the
// display ended) it parks the view in the buffer: the next delta kicks the display again.
func (a *Assembler) due(buf *buffer, v *view) (adapter.Capabilities, bool) {
	buf.mu.Lock()
	defer buf.mu.Unlock()
	caps := buf.bind.Target.Capabilities()
	if buf.broken || len(buf.text) == v.shown || isClosed(buf.stop) || a.ctx.Err() != nil ||
		(!v.displayed() && !caps.PreviewReady(string(buf.text))) {
		buf.view = v
		return caps, false
	}
	return caps, true
}

// pace waits until the next display call of the message may start: EditInterval (or the
// target's MinEditInterval) after the last one, and not before the chat's pacer allows, unless
// the display stops meanwhile.
func (a *Assembler) pace(buf *buffer, v *view, caps adapter.Capabilities) {
	wait := time.Until(v.lastCall.Add(max(a.cfg.EditInterval, caps.MinEditInterval)))
	if until := a.pacer.Until(buf.key.channel); !until.IsZero() {
		wait = max(wait, time.Until(until)) // the platform's retry-after
	}
	if wait <= 0 {
		return
	}
	t := time.NewTimer(wait)
	defer t.Stop()
	select {
	case <-t.C:
	case <-buf.stop:
	case <-a.ctx.Done():
	}
}

// latest is the buffer's text to show now and the place of its latest delta; when the display
// ended meanwhile it parks the view in the buffer and reports false.
func (a *Assembler) latest(buf *buffer, v *view) (string, Place, bool) {
	buf.mu.Lock()
	defer buf.mu.Unlock()
	if isClosed(buf.stop) || a.ctx.Err() != nil || buf.broken {
		buf.view = v
		return "", Place{}, false
	}
	return string(buf.text), buf.at, true
}

// fail ends the message's display after a failed call and parks the view in the buffer.
func (a *Assembler) fail(buf *buffer, v *view, err error) {
	buf.mu.Lock()
	buf.broken = true
	buf.view = v
	buf.mu.Unlock()
	if !errors.Is(err, errMessageFinal) {
		a.logger.Warn("delta_display_failed", "channel", buf.key.channel, "message_id", buf.key.messageID, "stage", "assemble", "err", err)
	}
}

// undrain drops an evicted buffer whose display has ended from the draining set, unless the
// target message it created has no recorded handle (its final edits that message). When a later
// display goroutine holds the view, that one undrains the buffer as it ends.
func (a *Assembler) undrain(buf *buffer) {
	a.mu.Lock()
	defer a.mu.Unlock()
	if a.draining[buf.key] != buf {
		return
	}
	buf.mu.Lock()
	defer buf.mu.Unlock()
	if v := buf.view; v != nil && !v.unrecorded {
		delete(a.draining, buf.key)
	}
}

// showDraft shows the text as a draft preview: no record, no target message. A final delivered
// meanwhile by another worker (after a partition hand-over) ends the drafts: its record tells,
// one read per call as for edits.
func (a *Assembler) showDraft(buf *buffer, text string, at Place) error {
	ctx, cancel := context.WithTimeout(a.ctx, a.cfg.CallTimeout)
	defer cancel()
	if a.cfg.DeliverLocal(at.Partition, buf.opened) {
		// Its final can only come through this process, which stops the drafts first.
	} else if cur, rev, err := a.records.Get(ctx, buf.kv); err != nil {
		return err
	} else if rev != 0 && cur.State != StateDisplaying {
		return errMessageFinal
	}
	start := time.Now()
	err := buf.draft.Draft(ctx, idempotencyKey(buf.key.channel, buf.key.messageID), text)
	a.observe(buf.bind.Adapter, "draft", start, err)
	return err
}

// show creates (first call, after recording the display intent) or edits the target message.
func (a *Assembler) show(buf *buffer, v *view, text string, at Place) error {
	ctx, cancel := context.WithTimeout(a.ctx, a.cfg.CallTimeout)
	defer cancel()
	lease := time.Now().Add(a.cfg.CallTimeout).UnixMilli()
	if v.targetID == "" {
		return a.create(ctx, buf, v, text, lease)
	}
	return a.edit(ctx, buf, v.targetID, text, at, lease)
}

// create records the display intent, then creates the target message, keeping its handle in v
// (and v.unrecorded when its record update failed).
func (a *Assembler) create(ctx context.Context, buf *buffer, v *view, text string, lease int64) error {
	rev, cur, err := a.records.Create(ctx, buf.kv, Record{State: StateDisplaying, Worker: a.worker, At: time.Now().UnixMilli(), Until: lease})
	switch {
	case errors.Is(err, errExists) && cur.State == StateDisplaying && cur.TargetMessageID != "":
		// Shown by an earlier process, which may have shown more than this buffer holds
		// (deltas sent again from sequence 1 after a restart): editing now could shrink
		// the text. The final replaces it in full.
		return errDisplayInDoubt
	case errors.Is(err, errExists) && cur.State == StateDisplaying:
		// An earlier create's outcome is unknown (crash between intent and handle):
		// creating again could show the partial text twice.
		return errDisplayInDoubt
	case errors.Is(err, errExists):
		return errMessageFinal // finalized by now: the final shows the text
	case err != nil:
		return err
	}
	start := time.Now()
	id, err := buf.bind.Target.Send(ctx, adapter.Message{Text: text, IdempotencyKey: idempotencyKey(buf.key.channel, buf.key.messageID)})
	a.observe(buf.bind.Adapter, "send", start, err)
	if _, wait := adapter.RetryAfterOf(err); wait {
		// Refused for its rate, so nothing was created: withdraw the intent, and the
		// next display call creates the message afresh.
		if derr := a.records.Delete(ctx, buf.kv, rev); derr != nil {
			return errors.Join(err, errDisplayInDoubt)
		}
	}
	if err != nil {
		return err
	}
	v.targetID = id // the message exists: a final must edit it, never create another
	_, err = a.records.Update(ctx, buf.kv, Record{State: StateDisplaying, TargetMessageID: id, Worker: a.worker, At: time.Now().UnixMilli()}, rev)
	if errors.Is(err, jetstream.ErrKeyExists) {
		// A final took the record while the create was under way: hand it the handle
		// (and end the lease it may wait out), so it edits this message.
		if err = a.release(ctx, buf.kv, id); err == nil {
			return errMessageFinal
		}
	}
	if err != nil {
		v.unrecorded = true
	}
	return err
}

// edit shows the text in the target message id, after making sure no final was delivered
// meanwhile by another process.
func (a *Assembler) edit(ctx context.Context, buf *buffer, id, text string, at Place, lease int64) error {
	if a.cfg.DeliverLocal(at.Partition, buf.opened) {
		// Every final of the message since its buffer opened (with a read of its record) comes
		// through this process, whose FinishHandle stops this display and waits for this call
		// before the final's own: no read needed.
		start := time.Now()
		err := buf.edit.Edit(ctx, id, adapter.Message{Text: text})
		a.observe(buf.bind.Adapter, "edit", start, err)
		return err
	}
	// Another worker may have taken the message's partition over and delivered its final: an
	// edit now would show partial text after it. The record tells (one read per display call,
	// which XIM_EDIT_INTERVAL spaces out).
	cur, rev, err := a.records.Get(ctx, buf.kv)
	if err != nil {
		return err
	}
	if rev != 0 && (cur.State != StateDisplaying || cur.TargetMessageID != id) {
		return errMessageFinal
	}
	leased := rev != 0 && !a.cfg.DeliverLocal(at.Partition, time.Now())
	if leased {
		// The final may be delivered by another process: take the display lease it waits out.
		cur.Until = lease
		if _, err := a.records.Update(ctx, buf.kv, cur, rev); errors.Is(err, jetstream.ErrKeyExists) {
			return errMessageFinal // the final took the record meanwhile
		} else if err != nil {
			return err
		}
	}
	start := time.Now()
	err = buf.edit.Edit(ctx, id, adapter.Message{Text: text})
	a.observe(buf.bind.Adapter, "edit", start, err)
	if leased {
		if rerr := a.release(ctx, buf.kv, id); rerr != nil {
			a.logger.Warn("display_lease_release_failed", "channel", buf.key.channel, "message_id", buf.key.messageID, "stage", "assemble", "err", rerr)
		}
	}
	return err
}

// release ends this worker's display lease on a message's record, whoever holds the record now
// (a final that took it waits for the release), and records the handle of the target message if
// the record has none. A done or unknown record is left alone.
func (a *Assembler) release(ctx context.Context, key, targetID string) error {
	_, _, err := a.records.Modify(ctx, key, func(r *Record) bool {
		if r.State != StateDisplaying && r.State != StateDelivering {
			return false
		}
		r.Until = 0
		if r.TargetMessageID == "" {
			r.TargetMessageID = targetID
		}
		return true
	})
	return err
}

func (a *Assembler) observe(adapter, op string, start time.Time, err error) {
	outcome := callOK
	if err != nil {
		outcome = errorCode(err)
	}
	a.metrics.TargetCalls.WithLabelValues(adapter, op, outcome).Observe(time.Since(start).Seconds())
}

// Run evicts buffers idle longer than the TTL until ctx ends.
func (a *Assembler) Run(ctx context.Context) error {
	period := a.cfg.TTL / 10
	if period < time.Second {
		period = time.Second
	}
	t := time.NewTicker(period)
	defer t.Stop()
	renew := time.NewTicker(time.Second)
	defer renew.Stop()
	for {
		select {
		case <-ctx.Done():
			return nil
		case <-t.C:
			a.expire(time.Now().Add(-a.cfg.TTL))
		case now := <-renew.C:
			a.renewPreviews(now)
		}
	}
}

// renewPreviews shows again the draft previews that would expire by themselves
// (Capabilities.PreviewRenewal) while their message waits for more deltas.
func (a *Assembler) renewPreviews(now time.Time) {
	a.mu.Lock()
	defer a.mu.Unlock()
	for _, buf := range a.buffers {
		if buf.draft == nil {
			continue
		}
		renewal := buf.bind.Target.Capabilities().PreviewRenewal
		buf.mu.Lock()
		if v := buf.view; renewal > 0 && v != nil && v.drafted && !buf.broken && now.Sub(v.lastCall) >= renewal {
			v.shown = -1 // the same text, shown again
			a.kick(buf)
		}
		buf.mu.Unlock()
	}
}

func (a *Assembler) expire(before time.Time) {
	a.mu.Lock()
	defer a.mu.Unlock()
	for e := a.lru.Back(); e != nil; {
		b, prev := e.Value.(*buffer), e.Prev()
		if !b.lastSeenUnlocked().Before(before) {
			break // the rest were used later
		}
		a.evictLocked(b, evictTTL)
		e = prev
	}
	for k, b := range a.draining { // evicted buffers whose final never came
		if b.lastSeenUnlocked().Before(before) {
			delete(a.draining, k)
		}
	}
}

// DropChannel evicts every buffer of a closed channel (P-STATE-7).
func (a *Assembler) DropChannel(channel string) {
	a.mu.Lock()
	defer a.mu.Unlock()
	for k, b := range a.buffers {
		if k.channel == channel {
			a.evictLocked(b, evictChannelClosed)
		}
	}
}

// Count returns the number of buffers of a channel ("" for all).
func (a *Assembler) Count(channel string) int {
	a.mu.Lock()
	defer a.mu.Unlock()
	if channel == "" {
		return len(a.buffers)
	}
	n := 0
	for k := range a.buffers {
		if k.channel == channel {
			n++
		}
	}
	return n
}

// Close stops every display loop and waits (bounded by ctx).
func (a *Assembler) Close(ctx context.Context) error {
	a.cancel()
	return waitGroup(ctx, &a.wg)
}

// keyRing is a bounded set of keys; the oldest leaves when it is full.
type keyRing struct {
	set  map[bufKey]struct{}
	ring []bufKey
	next int
}

func newKeyRing(n int) *keyRing {
	return &keyRing{set: make(map[bufKey]struct{}, n), ring: make([]bufKey, n)}
}

func (r *keyRing) has(k bufKey) bool { _, ok := r.set[k]; return ok }

func (r *keyRing) add(k bufKey) {
	if r.has(k) {
		return
	}
	if old := r.ring[r.next]; old != (bufKey{}) {
		delete(r.set, old)
	}
	r.ring[r.next] = k
	r.next = (r.next + 1) % len(r.ring)
	r.set[k] = struct{}{}
}

func isClosed(c <-chan struct{}) bool {
	select {
	case <-c:
		return true
	default:
		return false
	}
}

// Reasons a message stops being displayed before its final.
var (
	// errDisplayInDoubt: a streamed message's creation was started but its handle never recorded.
	errDisplayInDoubt = errors.New("display handle in doubt after a restart")
	// errMessageFinal: the message's final is being or was delivered.
	errMessageFinal = errors.New("message already final")
)

func idempotencyKey(channel, messageID string) string { return channel + ":" + messageID }
