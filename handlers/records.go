package handlers

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"time"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/ximd/ximd/subjects"
)

// Record states in BucketCompleted.
const (
	// StateDelivering is the intent: recorded before the target is touched for a final.
	StateDelivering = "delivering"
	// StateDone is a completed message_id: every side effect succeeded and `accepted` was sent.
	StateDone = "done"
	// StateUnknown is a final whose outcome could not be known after a crash: answered
	// delivery_outcome_unknown and never sent again.
	StateUnknown = "unknown"
)

// Record is one message's entry in BucketCompleted.
type Record struct {
	State           string `json:"state"`
	Digest          string `json:"digest"`
	PacketID        string `json:"packet_id"`
	TargetMessageID string `json:"target_message_id,omitempty"`
	Worker          string `json:"worker,omitempty"`
	At              int64  `json:"at"`
}

// displayRecord is a streamed message's target handle in BucketDisplay.
type displayRecord struct {
	TargetMessageID string `json:"target_message_id,omitempty"`
	At              int64  `json:"at"`
}

// Records keeps the stages' KV records.
type Records struct {
	completed jetstream.KeyValue
	display   jetstream.KeyValue
	js        jetstream.JetStream
}

// OpenRecords opens the buckets (provisioned by pipeline.Provision).
func OpenRecords(ctx context.Context, js jetstream.JetStream) (*Records, error) {
	c, err := js.KeyValue(ctx, subjects.BucketCompleted)
	if err != nil {
		return nil, fmt.Errorf("records: %w", err)
	}
	d, err := js.KeyValue(ctx, subjects.BucketDisplay)
	if err != nil {
		return nil, fmt.Errorf("records: %w", err)
	}
	return &Records{completed: c, display: d, js: js}, nil
}

// errExists is returned by CreateIntent when the message already has a record.
var errExists = errors.New("record exists")

// CreateIntent records the intent to deliver a final; errExists (with the current record) when
// the message_id already has one.
func (r *Records) CreateIntent(ctx context.Context, key string, rec Record) (uint64, Record, error) {
	b, _ := json.Marshal(rec)
	rev, err := r.completed.Create(ctx, key, b)
	if err == nil {
		return rev, rec, nil
	}
	if !errors.Is(err, jetstream.ErrKeyExists) {
		return 0, Record{}, fmt.Errorf("create intent: %w", err)
	}
	cur, curRev, gerr := r.Get(ctx, key)
	if gerr != nil {
		return 0, Record{}, gerr
	}
	if curRev == 0 { // expired or deleted between Create and Get: try once more
		rev, err = r.completed.Create(ctx, key, b)
		if err != nil {
			return 0, Record{}, fmt.Errorf("create intent: %w", err)
		}
		return rev, rec, nil
	}
	return curRev, cur, errExists
}

// Get returns a message's record and its revision (0 when there is none).
func (r *Records) Get(ctx context.Context, key string) (Record, uint64, error) {
	e, err := r.completed.Get(ctx, key)
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
	n, err := r.completed.Update(ctx, key, b, rev)
	if err != nil {
		return 0, fmt.Errorf("update record: %w", err)
	}
	return n, nil
}

// Release deletes an intent after a rejection, so a retransmission is processed afresh.
func (r *Records) Release(ctx context.Context, key string, rev uint64) error {
	if err := r.completed.Delete(ctx, key, jetstream.LastRevision(rev)); err != nil {
		return fmt.Errorf("release intent: %w", err)
	}
	return nil
}

// DisplayHandle returns a streamed message's target id ("" when none was recorded).
func (r *Records) DisplayHandle(ctx context.Context, key string) (string, bool, error) {
	e, err := r.display.Get(ctx, key)
	if errors.Is(err, jetstream.ErrKeyNotFound) || errors.Is(err, jetstream.ErrKeyDeleted) {
		return "", false, nil
	}
	if err != nil {
		return "", false, fmt.Errorf("get display handle: %w", err)
	}
	var d displayRecord
	if err := json.Unmarshal(e.Value(), &d); err != nil {
		return "", true, fmt.Errorf("display handle %s unreadable: %w", key, err)
	}
	return d.TargetMessageID, true, nil
}

// CreateDisplay records the intent to create a streamed message on the target. It reports an
// existing handle (a restarted worker resumes editing the same message).
func (r *Records) CreateDisplay(ctx context.Context, key string) (existing string, found bool, rev uint64, err error) {
	b, _ := json.Marshal(displayRecord{At: time.Now().UnixMilli()})
	rev, err = r.display.Create(ctx, key, b)
	if err == nil {
		return "", false, rev, nil
	}
	if !errors.Is(err, jetstream.ErrKeyExists) {
		return "", false, 0, fmt.Errorf("create display: %w", err)
	}
	id, _, gerr := r.DisplayHandle(ctx, key)
	return id, true, 0, gerr
}

// SetDisplay stores the target id of a streamed message.
func (r *Records) SetDisplay(ctx context.Context, key, targetID string) error {
	b, _ := json.Marshal(displayRecord{TargetMessageID: targetID, At: time.Now().UnixMilli()})
	if _, err := r.display.Put(ctx, key, b); err != nil {
		return fmt.Errorf("set display: %w", err)
	}
	return nil
}

// CountCompleted counts a channel's records (completed and in-flight message_ids).
func (r *Records) CountCompleted(ctx context.Context, channel string) (uint64, error) {
	keys, err := subjects.ChannelKeys(channel)
	if err != nil {
		return 0, err
	}
	c, err := r.js.OrderedConsumer(ctx, "KV_"+subjects.BucketCompleted, jetstream.OrderedConsumerConfig{
		FilterSubjects: []string{"$KV." + subjects.BucketCompleted + "." + keys},
		DeliverPolicy:  jetstream.DeliverLastPerSubjectPolicy,
		HeadersOnly:    true,
	})
	if err != nil {
		return 0, fmt.Errorf("count completed: %w", err)
	}
	info, err := c.Info(ctx)
	if err != nil {
		return 0, fmt.Errorf("count completed: %w", err)
	}
	return info.NumPending, nil
}

// PurgeChannel removes every record of a channel (P-STATE-7).
func (r *Records) PurgeChannel(ctx context.Context, channel string) error {
	keys, err := subjects.ChannelKeys(channel)
	if err != nil {
		return err
	}
	for _, b := range []string{subjects.BucketCompleted, subjects.BucketDisplay} {
		s, err := r.js.Stream(ctx, "KV_"+b)
		if err != nil {
			return fmt.Errorf("purge %s: %w", b, err)
		}
		if err := s.Purge(ctx, jetstream.WithPurgeSubject("$KV."+b+"."+keys)); err != nil {
			return fmt.Errorf("purge %s: %w", b, err)
		}
	}
	return nil
}
