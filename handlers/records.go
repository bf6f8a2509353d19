package handlers

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"time"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/ximd/ximd/profile"
	"github.com/ximd/ximd/subjects"
)

// RecordState is a message record's state in BucketMessages (the JSON "state"). A message's
// record moves forward only:
//
//	(none) -> displaying -> delivering -> done
//	(none) ------------------^        \-> unknown
//
// A rejected final moves its record back (to displaying, or to none) so a retransmission is
// processed afresh.
type RecordState string

// The record states.
const (
	// StateDisplaying: a streamed message is shown on an edit target; TargetMessageID is its
	// handle ("" while the create call's outcome is not known).
	StateDisplaying RecordState = "displaying"
	// StateDelivering is the intent: recorded before the target is touched for a final.
	StateDelivering RecordState = "delivering"
	// StateDone is a completed message_id: every side effect succeeded and `accepted` was sent.
	StateDone RecordState = "done"
	// StateUnknown is a final whose outcome could not be known after a crash: answered
	// delivery_outcome_unknown and never sent again.
	StateUnknown RecordState = "unknown"
	// StateRejected is a final (or tool invocation) the target refused for good (a rejection
	// with retryable false): every later arrival gets the same rejection, and the target is not
	// called again. Code and Message hold it.
	StateRejected RecordState = "rejected"
)

// Record is one message's entry in BucketMessages.
type Record struct {
	State    RecordState `json:"state"`
	Digest   string      `json:"digest,omitempty"`
	PacketID string      `json:"packet_id,omitempty"`
	// Seq is the XIM_IN stream sequence of the accepted packet: its redelivery is answered
	// accepted again, any other arrival (a frame sent again, byte for byte) duplicate.
	Seq             uint64 `json:"seq,omitempty"`
	TargetMessageID string `json:"target_message_id,omitempty"`
	Worker          string `json:"worker,omitempty"`
	At              int64  `json:"at"`
	// Until (Unix ms) is the display lease of a displaying record: a display call of Worker may
	// be in flight until then. A final delivered by another process waits for it (the stages
	// may run in different processes).
	Until int64 `json:"until,omitempty"`
	// Reply is a tool invocation's result "reply" ("degraded": sent as a plain message).
	Reply string `json:"reply,omitempty"`
	// DisplayUnknown marks an intent that took over a streamed message whose create call another
	// process started and never recorded (it died): while TargetMessageID is "", a part may be
	// shown under an id nobody knows, so the final is settled by the target or stays in doubt;
	// even the process holding the intent never sends it as a new message.
	DisplayUnknown bool `json:"display_unknown,omitempty"`
	// Code and Message are a StateRejected record's rejection.
	Code    string `json:"code,omitempty"`
	Message string `json:"message,omitempty"`
}

// Refuse records a final (or tool invocation) the target refused for good over its intent at
// rev; the returned error leaves the intent as it was.
func (r *Records) Refuse(ctx context.Context, key string, intent Record, rev uint64, pe *profile.Error) error {
	rec := intent
	rec.State, rec.Code, rec.Message, rec.At, rec.Until = StateRejected, pe.Code, pe.Message, time.Now().UnixMilli(), 0
	_, err := r.Update(ctx, key, rec, rev)
	return err
}

// rejection is a StateRejected record's rejection.
func (rec Record) rejection() *profile.Error {
	return profile.Errorf(rec.Code, "%s", rec.Message)
}

// Records keeps the stages' per-message records in one KV bucket, so a final needs one write to
// claim its message_id and one to complete it, whether or not it was streamed.
type Records struct {
	kv jetstream.KeyValue
	js jetstream.JetStream
}

// OpenRecords opens the bucket (provisioned by pipeline.Provision).
func OpenRecords(ctx context.Context, js jetstream.JetStream) (*Records, error) {
	kv, err := js.KeyValue(ctx, subjects.BucketMessages)
	if err != nil {
		return nil, fmt.Errorf("records: %w", err)
	}
	return &Records{kv: kv, js: js}, nil
}

// errExists is returned by Create when the message already has a record.
var errExists = errors.New("record exists")

// Create stores rec unless the message has a record: then it returns errExists with the current
// record and its revision.
func (r *Records) Create(ctx context.Context, key string, rec Record) (uint64, Record, error) {
	b, _ := json.Marshal(rec)
	for attempt := 0; ; attempt++ {
		rev, err := r.kv.Create(ctx, key, b)
		if err == nil {
			return rev, rec, nil
		}
		if !errors.Is(err, jetstream.ErrKeyExists) {
			return 0, Record{}, fmt.Errorf("create record: %w", err)
		}
		cur, curRev, err := r.Get(ctx, key)
		if err != nil {
			return 0, Record{}, err
		}
		if curRev != 0 || attempt > 0 {
			return curRev, cur, errExists
		}
		// Deleted or expired between Create and Get: try once more.
	}
}

// Get returns a message's record and its revision (0 when there is none).
func (r *Records) Get(ctx context.Context, key string) (Record, uint64, error) {
	e, err := r.kv.Get(ctx, key)
	if errors.Is(err, jetstream.ErrKeyNotFound) || errors.Is(err, jetstream.ErrKeyDeleted) {
		return Record{}, 0, nil
	}
	if err != nil {
		return Record{}, 0, fmt.Errorf("get record: %w", err)
	}
	var rec Record
	if err := json.Unmarshal(e.Value(), &rec); err != nil {
		return Record{}, 0, fmt.Errorf("record %s unreadable: %w", key, err)
	}
	return rec, e.Revision(), nil
}

// Update replaces a record if it is still at revision rev.
func (r *Records) Update(ctx context.Context, key string, rec Record, rev uint64) (uint64, error) {
	b, _ := json.Marshal(rec)
	n, err := r.kv.Update(ctx, key, b, rev)
	if err != nil {
		return 0, fmt.Errorf("update record: %w", err)
	}
	return n, nil
}

// Modify changes a message's record by compare-and-set: f gets the current record and returns
// whether to store its change; a concurrent change makes it read and try again (up to
// casAttempts). It returns the record as stored (or as found, when f declined) and its revision;
// revision 0 when the message has no record (f is not called).
func (r *Records) Modify(ctx context.Context, key string, f func(*Record) bool) (Record, uint64, error) {
	var rec Record
	var rev uint64
	err := compareAndSet(func() (bool, error) {
		var err error
		if rec, rev, err = r.Get(ctx, key); err != nil || rev == 0 || !f(&rec) {
			return true, err
		}
		n, err := r.Update(ctx, key, rec, rev)
		if errors.Is(err, jetstream.ErrKeyExists) {
			return false, nil // changed meanwhile: read again
		}
		rev = n
		return true, err
	})
	return rec, rev, err
}

// Undo takes back the intent of packetID on a message whose target refused its final: the record
// returns to prev (the displaying record the intent replaced), or goes when prev is nil, so a
// retransmission is processed afresh. A record that is no longer that intent is left alone.
func (r *Records) Undo(ctx context.Context, key, packetID string, prev *Record) error {
	return compareAndSet(func() (bool, error) {
		cur, rev, err := r.Get(ctx, key)
		if err != nil || rev == 0 || cur.State != StateDelivering || cur.PacketID != packetID {
			return true, err
		}
		if prev != nil {
			_, err = r.Update(ctx, key, *prev, rev)
		} else {
			err = r.Delete(ctx, key, rev)
		}
		if errors.Is(err, jetstream.ErrKeyExists) {
			return false, nil // a display release changed it meanwhile: read again
		}
		return true, err
	})
}

// casAttempts bounds a compare-and-set loop: beyond it the value changes faster than it can be
// read and written, which only a bug explains.
const casAttempts = 10

// errContention is returned when a compare-and-set lost casAttempts times in a row.
var errContention = errors.New("compare-and-set: too many concurrent changes")

// compareAndSet runs try (read, change, conditional write) until it reports done, at most
// casAttempts times. It is every read-modify-write of the stages' KV state.
func compareAndSet(try func() (done bool, err error)) error {
	for attempt := 0; attempt < casAttempts; attempt++ {
		done, err := try()
		if done || err != nil {
			return err
		}
	}
	return errContention
}

// Delete removes a record if it is still at revision rev.
func (r *Records) Delete(ctx context.Context, key string, rev uint64) error {
	if err := r.kv.Delete(ctx, key, jetstream.LastRevision(rev)); err != nil {
		return fmt.Errorf("delete record: %w", err)
	}
	return nil
}

// CountChannel counts a channel's records: completed message_ids, plus the few being streamed or
// delivered right now.
func (r *Records) CountChannel(ctx context.Context, channel string) (uint64, error) {
	keys, err := subjects.ChannelKeys(channel)
	if err != nil {
		return 0, err
	}
	c, err := r.js.OrderedConsumer(ctx, subjects.KVStream(subjects.BucketMessages), jetstream.OrderedConsumerConfig{
		FilterSubjects: []string{subjects.KVKeys(subjects.BucketMessages, keys)},
		DeliverPolicy:  jetstream.DeliverLastPerSubjectPolicy,
		HeadersOnly:    true,
	})
	if err != nil {
		return 0, fmt.Errorf("count records: %w", err)
	}
	info, err := c.Info(ctx)
	if err != nil {
		return 0, fmt.Errorf("count records: %w", err)
	}
	return info.NumPending, nil
}

// PurgeChannel removes every record of a channel (P-STATE-7).
func (r *Records) PurgeChannel(ctx context.Context, channel string) error {
	keys, err := subjects.ChannelKeys(channel)
	if err != nil {
		return err
	}
	s, err := r.js.Stream(ctx, subjects.KVStream(subjects.BucketMessages))
	if err != nil {
		return fmt.Errorf("purge records: %w", err)
	}
	if err := s.Purge(ctx, jetstream.WithPurgeSubject(subjects.KVKeys(subjects.BucketMessages, keys))); err != nil {
		return fmt.Errorf("purge records: %w", err)
	}
	return nil
}
