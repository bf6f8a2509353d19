package node

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/ximd/ximd/handlers"
	"github.com/ximd/ximd/pipeline/edge"
	"github.com/ximd/ximd/pipeline/files"
	"github.com/ximd/ximd/profile"
	"github.com/ximd/ximd/subjects"
)

// channelState implements edge.ChannelState over NATS: it asks the workers for their in-memory
// counts and reads or purges the stores.
type channelState struct {
	nc      *nats.Conn
	js      jetstream.JetStream
	records *handlers.Records
	outbox  *handlers.Outbox
	files   *files.Store
	cursors jetstream.KeyValue
}

var _ edge.ChannelState = (*channelState)(nil)

// Stats gathers the workers' delta buffer counts (every worker answers the scatter request) and
// counts the channel's completed-ID records.
func (s *channelState) Stats(ctx context.Context, channel string) (edge.Stats, error) {
	var st edge.Stats
	inbox := s.nc.NewRespInbox()
	sub, err := s.nc.SubscribeSync(inbox)
	if err != nil {
		return st, err
	}
	defer sub.Unsubscribe()
	if err := s.nc.PublishRequest(subjects.StatsRequest, inbox, []byte(channel)); err != nil {
		return st, err
	}
	wait := 200 * time.Millisecond // until the first answer, then 20ms for the others
	for {
		m, err := sub.NextMsg(wait)
		if err != nil {
			break
		}
		var r struct {
			OpenDeltaBuffers int `json:"open_delta_buffers"`
		}
		if json.Unmarshal(m.Data, &r) == nil {
			st.OpenDeltaBuffers += r.OpenDeltaBuffers
		}
		wait = 20 * time.Millisecond
	}
	n, err := s.records.CountChannel(ctx, channel)
	st.CompletedIDs = n
	p, perr := s.outbox.Pending(ctx, channel)
	st.PendingOutbound = p
	return st, errors.Join(err, perr)
}

// Failures are the send path's terminal failures (those of the receive path are answered to
// xAgent directly).
func (s *channelState) Failures(ctx context.Context, channel string) ([]edge.Failure, error) {
	return s.outbox.Failures(ctx, channel)
}

// Purge removes a deleted channel's records, files, unprocessed packets and platform position
// (P-STATE-7).
func (s *channelState) Purge(ctx context.Context, channel string) error {
	var errs []error
	if err := s.cursors.Purge(ctx, channel); err != nil && !errors.Is(err, jetstream.ErrKeyNotFound) {
		errs = append(errs, err)
	}
	errs = append(errs, s.records.PurgeChannel(ctx, channel), s.outbox.PurgeChannel(ctx, channel))
	if _, err := s.files.PurgeChannel(ctx, channel); err != nil {
		errs = append(errs, err)
	}
	if subj, err := subjects.ChannelStored(channel); err == nil {
		if st, err := s.js.Stream(ctx, subjects.StreamIn); err == nil {
			errs = append(errs, st.Purge(ctx, jetstream.WithPurgeSubject(subj)))
		} else {
			errs = append(errs, err)
		}
	}
	return errors.Join(errs...)
}

// fileResolver adapts the Transfer Plane to the delivery stage.
type fileResolver struct{ s *files.Store }

func (f fileResolver) Resolve(ctx context.Context, channel, ref string) (handlers.FileInfo, error) {
	m, err := f.s.Stat(ctx, channel, ref)
	if err != nil {
		var pe *profile.Error
		if errors.As(err, &pe) {
			return handlers.FileInfo{}, pe
		}
		return handlers.FileInfo{}, fmt.Errorf("file %s: %w", ref, err)
	}
	return handlers.FileInfo{Type: m.Type, Filename: m.Filename, MimeType: m.MimeType, ByteSize: m.ByteSize, URL: f.s.SignedURL(ref, time.Now())}, nil
}
