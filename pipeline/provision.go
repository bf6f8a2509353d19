package pipeline

import (
	"context"
	"errors"
	"fmt"
	"maps"
	"slices"
	"strings"
	"time"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/ximd/ximd/profile"
	"github.com/ximd/ximd/subjects"
)

// StoreConfig bounds every stream and bucket ximd keeps (docs: README "State and limits").
type StoreConfig struct {
	// Partitions is the number of XIM_IN partitions (and partition consumers). All packets of a
	// channel share one partition, so per-channel order holds with any number of workers.
	Partitions int
	// Replicas of every stream and bucket (1 for a single node, 3 on a cluster).
	Replicas int
	// InMaxAge bounds how long an unprocessed inbound packet is kept (workers down that long lose it).
	InMaxAge time.Duration
	// InMaxBytes bounds XIM_IN; when full, publishes are refused (the gateway answers `unavailable`,
	// retryable), never silently dropped.
	InMaxBytes int64
	// CompletedTTL (XIM_COMPLETED_TTL) is how long completed message_ids are remembered.
	CompletedTTL time.Duration
	// CompletedMaxBytes bounds the per-message record bucket; when full new finals are refused
	// (`internal_error`, retryable) rather than forgetting IDs early.
	CompletedMaxBytes int64
	// PoisonMaxAge is how long poisoned messages stay for inspection.
	PoisonMaxAge time.Duration
	// OutboundMaxAge (XIM_OUTBOUND_MAX_AGE) is how long a user message stays pending before it
	// fails as `expired`; XIM_OUT keeps work items a day longer.
	OutboundMaxAge time.Duration
}

// DefaultStoreConfig returns the documented defaults.
func DefaultStoreConfig() StoreConfig {
	return StoreConfig{
		Partitions:        8,
		Replicas:          1,
		InMaxAge:          24 * time.Hour,
		InMaxBytes:        1 << 30,
		CompletedTTL:      24 * time.Hour,
		CompletedMaxBytes: 1 << 30,
		PoisonMaxAge:      7 * 24 * time.Hour,
		OutboundMaxAge:    24 * time.Hour,
	}
}

// Validate reports every configuration error at once.
func (c StoreConfig) Validate() error {
	var errs []error
	if c.Partitions < 1 || c.Partitions > 1024 {
		errs = append(errs, fmt.Errorf("partitions %d: must be 1..1024", c.Partitions))
	}
	if c.Replicas < 1 || c.Replicas > 5 {
		errs = append(errs, fmt.Errorf("replicas %d: must be 1..5", c.Replicas))
	}
	if c.InMaxAge < time.Minute {
		errs = append(errs, errors.New("inbound max age must be at least 1m"))
	}
	if c.OutboundMaxAge < time.Second {
		errs = append(errs, errors.New("outbound max age must be at least 1s"))
	}
	if c.CompletedTTL < time.Minute {
		errs = append(errs, errors.New("completed TTL must be at least 1m"))
	}
	for name, v := range map[string]int64{"inbound": c.InMaxBytes, "completed": c.CompletedMaxBytes} {
		if v < 1<<20 {
			errs = append(errs, fmt.Errorf("%s max bytes must be at least 1 MiB", name))
		}
	}
	return errors.Join(errs...)
}

// Provision creates or updates every stream, bucket and partition consumer; it is idempotent and
// safe to run from several processes at once.
func Provision(ctx context.Context, js jetstream.JetStream, c StoreConfig) error {
	if err := c.Validate(); err != nil {
		return fmt.Errorf("provision: %w", err)
	}
	for _, sc := range streamConfigs(c) {
		if _, err := js.CreateOrUpdateStream(ctx, sc); err != nil {
			return fmt.Errorf("provision stream %s: %w", sc.Name, err)
		}
	}
	for _, bc := range bucketConfigs(c) {
		if _, err := js.CreateOrUpdateKeyValue(ctx, bc); err != nil {
			return fmt.Errorf("provision bucket %s: %w", bc.Bucket, err)
		}
	}
	if err := provisionStages(ctx, js, c.Partitions); err != nil {
		return err
	}
	if _, err := js.CreateOrUpdateConsumer(ctx, subjects.StreamOut, OutboundConsumerConfig()); err != nil {
		return fmt.Errorf("provision consumer %s: %w", subjects.OutboundConsumer, err)
	}
	if _, err := js.CreateOrUpdateConsumer(ctx, subjects.StreamReplies, RepliesConsumerConfig()); err != nil {
		return fmt.Errorf("provision consumer %s: %w", subjects.RepliesConsumer, err)
	}
	return nil
}

// streamConfigs are the streams Provision creates or updates under c.
func streamConfigs(c StoreConfig) []jetstream.StreamConfig {
	src, dst := subjects.PartitionTransform(c.Partitions)
	return []jetstream.StreamConfig{{
		Name:             subjects.StreamIn,
		Description:      "ximd inbound packets from xAgent, partitioned by channel",
		Subjects:         []string{subjects.InAll},
		SubjectTransform: &jetstream.SubjectTransformConfig{Source: src, Destination: dst},
		Retention:        jetstream.WorkQueuePolicy,
		Discard:          jetstream.DiscardNew,
		Duplicates:       InDuplicates,
		MaxAge:           c.InMaxAge,
		MaxBytes:         c.InMaxBytes,
		Storage:          jetstream.FileStorage,
		Replicas:         c.Replicas,
	}, {
		Name:        subjects.StreamOut,
		Description: "ximd user messages pending for xAgent: one work item per message until its terminal ack",
		Subjects:    []string{subjects.OutAll},
		Retention:   jetstream.WorkQueuePolicy,
		Discard:     jetstream.DiscardNew,
		MaxAge:      c.OutboundMaxAge + 24*time.Hour,
		MaxBytes:    256 << 20,
		Duplicates:  2 * time.Minute,
		Storage:     jetstream.FileStorage,
		Replicas:    c.Replicas,
	}, {
		Name:        subjects.StreamReplies,
		Description: "ximd acks and error packets for xAgent that found no live connection: sent once one is back",
		Subjects:    []string{subjects.RepliesAll},
		Retention:   jetstream.WorkQueuePolicy,
		Discard:     jetstream.DiscardNew,
		MaxAge:      ReplyMaxAge,
		MaxBytes:    64 << 20,
		Duplicates:  2 * time.Minute,
		Storage:     jetstream.FileStorage,
		Replicas:    c.Replicas,
	}, {
		Name:        subjects.StreamPoison,
		Description: "ximd messages a pipeline stage gave up on (header reason_poisoned)",
		Subjects:    []string{subjects.PoisonAll},
		Retention:   jetstream.LimitsPolicy,
		Discard:     jetstream.DiscardOld,
		MaxAge:      c.PoisonMaxAge,
		MaxBytes:    256 << 20,
		Storage:     jetstream.FileStorage,
		Replicas:    c.Replicas,
	}}
}

// bucketConfigs are the key-value buckets Provision creates or updates under c.
func bucketConfigs(c StoreConfig) []jetstream.KeyValueConfig {
	return []jetstream.KeyValueConfig{{
		Bucket:      subjects.BucketChannels,
		Description: "ximd open channels and their target bindings",
		History:     1,
		Storage:     jetstream.FileStorage,
		Replicas:    c.Replicas,
	}, {
		Bucket:      subjects.BucketMessages,
		Description: "ximd per-message records: streamed display handle, final intent, completed message_id",
		History:     1,
		TTL:         c.CompletedTTL,
		MaxBytes:    c.CompletedMaxBytes,
		Storage:     jetstream.FileStorage,
		Replicas:    c.Replicas,
	}, {
		Bucket:      subjects.BucketOutbox,
		Description: "ximd user messages to xAgent: pending, delivered (kept to absorb target redeliveries), failed",
		History:     1,
		TTL:         c.CompletedTTL,
		MaxBytes:    c.CompletedMaxBytes,
		Storage:     jetstream.FileStorage,
		Replicas:    c.Replicas,
	}, {
		Bucket:      subjects.BucketActivity,
		Description: "ximd statuses shown on targets (thinking, tool): any worker clears one whose worker died before its timeout",
		History:     1,
		TTL:         c.CompletedTTL,
		Storage:     jetstream.FileStorage,
		Replicas:    c.Replicas,
	}, {
		Bucket:      subjects.BucketCursors,
		Description: "ximd polled channels' positions in their platforms (sync token, update offset)",
		History:     1,
		Storage:     jetstream.FileStorage,
		Replicas:    c.Replicas,
	}, {
		Bucket:      subjects.BucketBots,
		Description: "ximd bots: one platform account, every conversation (config, policy)",
		History:     1,
		Storage:     jetstream.FileStorage,
		Replicas:    c.Replicas,
	}, {
		Bucket:      subjects.BucketBotChannels,
		Description: "ximd channels bots opened: one conversation each (the config is the bot's)",
		History:     1,
		Storage:     jetstream.FileStorage,
		Replicas:    c.Replicas,
	}, {
		Bucket:      subjects.BucketBotStats,
		Description: "ximd bots' refusal counts by reason",
		History:     1,
		Storage:     jetstream.FileStorage,
		Replicas:    c.Replicas,
	}, {
		Bucket:      subjects.BucketBotRates,
		Description: "ximd bot conversations' messages of the minute (max_per_minute across processes)",
		History:     1,
		TTL:         2 * time.Minute,
		MaxBytes:    64 << 20,
		Storage:     jetstream.MemoryStorage, // a count lost with a server restart only lets a minute's messages through again
		Replicas:    c.Replicas,
	}, {
		Bucket:      subjects.BucketPairings,
		Description: "ximd bots' pending pairing codes (an hour each)",
		History:     1,
		TTL:         PairingTTL,
		Storage:     jetstream.FileStorage,
		Replicas:    c.Replicas,
	}, {
		Bucket:      subjects.BucketConfig,
		Description: "ximd cluster-wide settings (file link signing key)",
		History:     1,
		Storage:     jetstream.FileStorage,
		Replicas:    c.Replicas,
	}}
}

// PairingTTL is how long a bot's pairing code is valid (edge-api §4.1): the TTL of
// KV xim_pairings.
const PairingTTL = time.Hour

// InDuplicates is XIM_IN's duplicate window: a final or tool invocation published again by the
// gateway within it (same Nats-Msg-Id, unique to the frame's transmission) is not stored again. It outlasts the
// gateway's publish attempts (edge.GatewayConfig.PublishAttempts, 4 of at most 10s each). The
// server keeps each id for the window: about 150 bytes plus the id per answered packet, e.g.
// 1,000 finals a second hold about 25 MB.
const InDuplicates = 2 * time.Minute

// OutboundConsumerConfig is the durable consumer of XIM_OUT. Its work items are re-delivered by
// NakWithDelay, which schedules every re-send; AckWait only covers a worker dying mid-send.
func OutboundConsumerConfig() jetstream.ConsumerConfig {
	return jetstream.ConsumerConfig{
		Durable:       subjects.OutboundConsumer,
		Description:   "ximd sends pending user messages to xAgent and schedules their re-sends",
		FilterSubject: subjects.OutAll,
		AckPolicy:     jetstream.AckExplicitPolicy,
		DeliverPolicy: jetstream.DeliverAllPolicy,
		AckWait:       OutboundAckWait,
		MaxAckPending: 100000,
	}
}

// ReplyMaxAge is how long a queued reply waits for xAgent to connect: past it xAgent has long
// retransmitted its packet, which is answered afresh (duplicate).
const ReplyMaxAge = time.Hour

// RepliesConsumerConfig is the durable consumer of XIM_REPLIES: a reply is re-tried by
// NakWithDelay until a gateway with a live connection takes it.
func RepliesConsumerConfig() jetstream.ConsumerConfig {
	return jetstream.ConsumerConfig{
		Durable:       subjects.RepliesConsumer,
		Description:   "ximd sends acks and error packets queued while xAgent had no live connection",
		FilterSubject: subjects.RepliesAll,
		AckPolicy:     jetstream.AckExplicitPolicy,
		DeliverPolicy: jetstream.DeliverAllPolicy,
		AckWait:       OutboundAckWait,
		MaxAckPending: 10000,
	}
}

// OutboundAckWait is the outbound consumer's ack wait: a work item not acked or re-scheduled
// within it (its worker died) is taken by another worker.
const OutboundAckWait = 30 * time.Second

// Stage consumer settings. The subscriber extends AckWait with progress acks (every AckWait/2)
// while a stage works, however long its target retries take; a worker that died has its messages
// redelivered AckWait after its last progress ack. MaxAckPending bounds what one stage partition
// holds across its channels' lanes; the subscriber holds at most StageMaxHeld of it, since what
// it holds is handed back (Nak) at a hand-over and the more it is, the more the order of the
// redeliveries depends on the server (measured: the strict scale-out test fails more often at
// 512 than at 128).
const (
	StageAckWait       = 4 * time.Second
	StageMaxAckPending = 1024
	StageMaxHeld       = 128
)

// StageGroup is the pinned priority group of the stage consumers: however many workers subscribe,
// the server delivers a stage's partition to one of them at a time (per-channel order). The
// holder keeps pulling while busy; a worker that leaves hands its pins back at once, and one
// that dies loses them StagePinnedTTL after its last pull. StagePinnedTTL exceeds StageAckWait
// plus the subscriber's pull interval while busy (TTL/4, checked every AckWait/4): the dead
// worker's messages are due for redelivery before any other worker is pinned, and the server
// redelivers before it delivers newer messages, so each channel's order holds across the
// take-over.
const (
	StageGroup     = "workers"
	StagePinnedTTL = 10 * time.Second
)

// Stages is every worker stage and the packet kinds it consumes (from the profile catalog).
func Stages() map[string][]string { return profile.Default().Stages() }

// StageNames is the sorted list of the worker stages.
func StageNames() []string { return slices.Sorted(maps.Keys(Stages())) }

// StageConsumerConfig is the durable consumer of partition p of stage, which consumes kinds.
func StageConsumerConfig(stage string, p int, kinds []string) (jetstream.ConsumerConfig, error) {
	filters := make([]string, 0, len(kinds))
	for _, k := range kinds {
		f, err := subjects.StageFilter(p, k)
		if err != nil {
			return jetstream.ConsumerConfig{}, err
		}
		filters = append(filters, f)
	}
	cc := jetstream.ConsumerConfig{
		Durable:        subjects.StageConsumer(stage, p),
		Description:    fmt.Sprintf("ximd %s stage, inbound partition %d (%s)", stage, p, strings.Join(kinds, ", ")),
		AckPolicy:      jetstream.AckExplicitPolicy,
		DeliverPolicy:  jetstream.DeliverAllPolicy,
		AckWait:        StageAckWait,
		MaxAckPending:  StageMaxAckPending,
		PriorityGroups: []string{StageGroup},
		PriorityPolicy: jetstream.PriorityPolicyPinned,
		PinnedTTL:      StagePinnedTTL,
	}
	if len(filters) == 1 {
		cc.FilterSubject = filters[0]
	} else {
		cc.FilterSubjects = filters
	}
	return cc, nil
}

// provisionStages creates or updates every stage consumer, after deleting the single partition
// consumers of earlier versions (their filters overlap the stages', which a work-queue stream
// refuses; the packets they held stay in the stream for the stages).
func provisionStages(ctx context.Context, js jetstream.JetStream, partitions int) error {
	for p := 0; p < partitions; p++ {
		err := js.DeleteConsumer(ctx, subjects.StreamIn, subjects.LegacyPartitionConsumer(p))
		if err != nil && !errors.Is(err, jetstream.ErrConsumerNotFound) {
			return fmt.Errorf("provision: delete consumer %s: %w", subjects.LegacyPartitionConsumer(p), err)
		}
	}
	for stage, kinds := range Stages() {
		for p := 0; p < partitions; p++ {
			cc, err := StageConsumerConfig(stage, p, kinds)
			if err == nil {
				_, err = js.CreateOrUpdateConsumer(ctx, subjects.StreamIn, cc)
			}
			if err != nil {
				return fmt.Errorf("provision consumer %s: %w", subjects.StageConsumer(stage, p), err)
			}
		}
	}
	return nil
}

// Ready reports whether every stream, bucket and partition consumer exists (GET /readyz).
func Ready(ctx context.Context, js jetstream.JetStream, c StoreConfig) error {
	for _, s := range []string{subjects.StreamIn, subjects.StreamOut, subjects.StreamReplies, subjects.StreamPoison} {
		if _, err := js.Stream(ctx, s); err != nil {
			return fmt.Errorf("stream %s: %w", s, err)
		}
	}
	for _, b := range []string{subjects.BucketChannels, subjects.BucketMessages, subjects.BucketOutbox, subjects.BucketActivity, subjects.BucketCursors, subjects.BucketBots, subjects.BucketBotChannels, subjects.BucketBotStats, subjects.BucketBotRates, subjects.BucketPairings, subjects.BucketConfig} {
		if _, err := js.KeyValue(ctx, b); err != nil {
			return fmt.Errorf("bucket %s: %w", b, err)
		}
	}
	if _, err := js.ObjectStore(ctx, subjects.BucketFiles); err != nil {
		return fmt.Errorf("object store %s: %w", subjects.BucketFiles, err)
	}
	for _, stage := range StageNames() {
		for p := 0; p < c.Partitions; p++ {
			if _, err := js.Consumer(ctx, subjects.StreamIn, subjects.StageConsumer(stage, p)); err != nil {
				return fmt.Errorf("consumer %s: %w", subjects.StageConsumer(stage, p), err)
			}
		}
	}
	return nil
}
