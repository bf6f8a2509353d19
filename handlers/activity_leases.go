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

// ActivityLeases records, in KV bucket xim_activity, the channels whose target shows a status
// (thinking, tool): one key per channel, written when a status is shown and deleted once idle is
// shown. A worker's own timer clears what it showed (P-ACT-6); the leases let any worker clear,
// at its timeout, a status whose worker died before clearing it, so no typing indicator stays
// stuck across crashes and restarts.
type ActivityLeases struct {
	kv jetstream.KeyValue
}

// lease is the value of one key: when the status was last shown.
type lease struct {
	Shown int64 `json:"shown"` // unix ms
}

// dueLease is a lease past its timeout.
type dueLease struct {
	channel string
	rev     uint64
}

// OpenActivityLeases opens the bucket (provisioned by pipeline.Provision).
func OpenActivityLeases(ctx context.Context, js jetstream.JetStream) (*ActivityLeases, error) {
	kv, err := js.KeyValue(ctx, subjects.BucketActivity)
	if err != nil {
		return nil, fmt.Errorf("activity leases: %w", err)
	}
	return &ActivityLeases{kv: kv}, nil
}

// shown records that channel's target shows a status since at.
func (l *ActivityLeases) shown(ctx context.Context, channel string, at time.Time) error {
	b, _ := json.Marshal(lease{Shown: at.UnixMilli()})
	_, err := l.kv.Put(ctx, channel, b)
	return err
}

// cleared forgets channel's lease (idle was shown).
func (l *ActivityLeases) cleared(ctx context.Context, channel string) error {
	err := l.kv.Delete(ctx, channel)
	if errors.Is(err, jetstream.ErrKeyNotFound) {
		return nil
	}
	return err
}

// due returns the leases of statuses shown before before.
func (l *ActivityLeases) due(ctx context.Context, before time.Time) ([]dueLease, error) {
	keys, err := l.kv.ListKeys(ctx)
	if err != nil {
		return nil, err
	}
	var out []dueLease
	for key := range keys.Keys() {
		e, err := l.kv.Get(ctx, key)
		if errors.Is(err, jetstream.ErrKeyNotFound) {
			continue
		}
		if err != nil {
			return out, err
		}
		var v lease
		if json.Unmarshal(e.Value(), &v) != nil || time.UnixMilli(v.Shown).Before(before) {
			out = append(out, dueLease{channel: key, rev: e.Revision()})
		}
	}
	return out, nil
}

// take deletes a due lease unless it changed since it was read: true for exactly one of the
// workers that race to clear it.
func (l *ActivityLeases) take(ctx context.Context, d dueLease) (bool, error) {
	err := l.kv.Delete(ctx, d.channel, jetstream.LastRevision(d.rev))
	switch {
	case err == nil:
		return true, nil
	case errors.Is(err, jetstream.ErrKeyExists), errors.Is(err, jetstream.ErrKeyNotFound):
		return false, nil
	default:
		var apiErr *jetstream.APIError
		if errors.As(err, &apiErr) && (apiErr.ErrorCode == jetstream.JSErrCodeStreamWrongLastSequence || apiErr.ErrorCode == jetstream.JSErrCodeStreamWrongLastSequenceConstant) {
			return false, nil
		}
		return false, err
	}
}
