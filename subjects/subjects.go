package subjects

import (
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"strconv"
	"strings"
	"unicode"
)

// ErrUnsafeToken is returned (wrapped) when a value cannot be used as a NATS subject token.
var ErrUnsafeToken = errors.New("unsafe subject token")

// Stream, bucket and subject roots. Names read well in `nats stream ls` and `nats kv ls`.
const (
	StreamIn       = "XIM_IN"
	StreamPoison   = "XIM_POISON"
	StreamOut      = "XIM_OUT"
	StreamReplies  = "XIM_REPLIES"
	BucketChannels = "xim_channels"
	BucketMessages = "xim_messages"
	BucketOutbox   = "xim_outbox"
	BucketConfig   = "xim_config"
	BucketActivity = "xim_activity"
	BucketFiles    = "xim_files"
	// BucketCursors keeps each polled channel's position in its platform (Matrix sync token,
	// Telegram update offset), by channel id.
	BucketCursors = "xim_cursors"
	// BucketBots holds the bots (key: the bot id): accounts, configs, policies.
	BucketBots = "xim_bots"
	// BucketBotChannels holds the channels bots opened (key: the channel id): a conversation
	// each, no config or secret (those are the bot's), so workers may write it.
	BucketBotChannels = "xim_bot_channels"
	// BucketBotStats holds each bot's refusal counts (key: the bot id).
	BucketBotStats = "xim_bot_stats"
	// BucketBotRates counts each bot conversation's messages of the clock minute (key: the
	// channel id, a dot, the Unix minute), so max_per_minute holds across processes.
	BucketBotRates = "xim_bot_rates"
	// BucketPairings holds the pending pairing codes of bots (edge-api §4.1): each for an hour,
	// the bucket's TTL.
	BucketPairings = "xim_pairings"

	inRoot     = "xim.in"
	partRoot   = "xim.part"
	poisonRoot = "xim.poison"
	gwRoot     = "xim.gw"
	outRoot    = "xim.out"
	replyRoot  = "xim.reply"
	clearRoot  = "xim.ctl.clear"
	finishRoot = "xim.ctl.finished"
	relayRoot  = "xim.ctl.relay"

	// StatsRequest is the scatter subject every worker answers with its per-channel counts.
	StatsRequest = "xim.ctl.stats"
	// WorkerHeartbeat is where every worker announces itself (and its leaving); the workers
	// share the partitions among those they hear.
	WorkerHeartbeat = "xim.ctl.workers"
	// GatewaySend is the request subject on which a gateway with a live xAgent connection takes
	// an outbound packet (queue group GatewayQueue); no responder means no live connection.
	GatewaySend  = gwRoot + ".send"
	GatewayQueue = "gateways"
	// OutAll matches every outbound work item (the XIM_OUT stream's subject).
	OutAll = outRoot + ".*"
	// OutboundConsumer is the durable consumer of XIM_OUT.
	OutboundConsumer = "outbound"
	// RepliesAll matches every queued reply (the XIM_REPLIES stream's subject).
	RepliesAll = replyRoot + ".*"
	// RepliesConsumer is the durable consumer of XIM_REPLIES.
	RepliesConsumer = "replies"
	// InAll matches every inbound subject a gateway publishes (the XIM_IN stream's subject).
	InAll = inRoot + ".*.*"
	// PoisonAll matches every poison subject.
	PoisonAll = poisonRoot + ".>"
	// ConfigSigningKey is the key in BucketConfig holding the shared file-link signing key.
	ConfigSigningKey = "signing-key"
)

// Token checks that s can be one NATS subject token.
func Token(s string) error {
	if s == "" {
		return fmt.Errorf("%w: empty", ErrUnsafeToken)
	}
	for _, r := range s {
		if r == '.' || r == '*' || r == '>' || unicode.IsSpace(r) || unicode.IsControl(r) || r == unicode.ReplacementChar {
			return fmt.Errorf("%w: %q", ErrUnsafeToken, s)
		}
	}
	return nil
}

// In is the subject a gateway publishes an inbound packet of kind (a catalog PacketType.Kind) to.
func In(channel, kind string) (string, error) {
	if err := tokens(channel, kind); err != nil {
		return "", err
	}
	return inRoot + "." + channel + "." + kind, nil
}

// ClearRequest is the core NATS subject on which a deliver or assemble stage asks the activity
// stage of worker instance (the one serving the channel's activity partition) to clear the
// channel's status up to a stream sequence (the payload, decimal) and answer once no status call
// is in flight.
func ClearRequest(instance, channel string) (string, error) {
	if err := tokens(instance, channel); err != nil {
		return "", err
	}
	return clearRoot + "." + instance + "." + channel, nil
}

// ClearRequests is the subject of every clear request addressed to worker instance.
func ClearRequests(instance string) (string, error) {
	if err := Token(instance); err != nil {
		return "", err
	}
	return clearRoot + "." + instance + ".*", nil
}

// ChannelOfClearRequest is the channel of a ClearRequest subject ("" when it has another form).
func ChannelOfClearRequest(subject string) string { return channelAfter(clearRoot, subject) }

// FinishNotice is the core NATS subject on which a deliver stage tells worker instance (the one
// serving the channel's assemble partition) that a message of the channel is final, so that it
// drops the message's delta buffer (P-STATE-5); the payload is the message_id.
func FinishNotice(instance, channel string) (string, error) {
	if err := tokens(instance, channel); err != nil {
		return "", err
	}
	return finishRoot + "." + instance + "." + channel, nil
}

// FinishNotices is the subject of every finish notice addressed to worker instance.
func FinishNotices(instance string) (string, error) {
	if err := Token(instance); err != nil {
		return "", err
	}
	return finishRoot + "." + instance + ".*", nil
}

// ChannelOfFinishNotice is the channel of a FinishNotice subject ("" when it has another form).
func ChannelOfFinishNotice(subject string) string { return channelAfter(finishRoot, subject) }

// Relay is the core NATS subject on which the process holding an account's one connection (the
// poll loop of poll key key, a name of '.'-separated tokens) takes the calls of other processes
// (queue group RelayQueue, so one holder runs each call).
func Relay(key string) (string, error) {
	for _, t := range strings.Split(key, ".") {
		if err := Token(t); err != nil {
			return "", err
		}
	}
	return relayRoot + "." + key, nil
}

// RelayQueue is the queue group of a Relay subject's holders.
const RelayQueue = "holder"

// channelAfter is the channel of a subject root.<instance>.<channel> ("" when it has another form).
func channelAfter(root, subject string) string {
	rest, ok := strings.CutPrefix(subject, root+".")
	if !ok {
		return ""
	}
	_, channel, ok := strings.Cut(rest, ".")
	if !ok || Token(channel) != nil {
		return ""
	}
	return channel
}

// Out is the subject of a channel's outbound work items (one per pending user message).
func Out(channel string) (string, error) {
	if err := Token(channel); err != nil {
		return "", err
	}
	return outRoot + "." + channel, nil
}

// QueuedReply is the subject of a channel's replies (acks, error packets) queued in XIM_REPLIES
// until xAgent has a live connection.
func QueuedReply(channel string) (string, error) {
	if err := Token(channel); err != nil {
		return "", err
	}
	return replyRoot + "." + channel, nil
}

// FailuresKey is the BucketOutbox key holding a channel's recent terminal failures. No message
// key has this form: hashed keys are "=" and hex.
func FailuresKey(channel string) (string, error) {
	if err := Token(channel); err != nil {
		return "", err
	}
	return channel + ".=failures", nil
}

// PairingUserKey is the BucketPairings key of the pending code of one person (userKey: a digest
// of their platform id, token-safe) of a bot; PairingCodeKey that of a code, naming the person.
func PairingUserKey(bot, userKey string) (string, error) {
	if err := tokens(bot, userKey); err != nil {
		return "", err
	}
	return bot + ".user." + userKey, nil
}

// PairingCodeKey: see PairingUserKey.
func PairingCodeKey(bot, code string) (string, error) {
	if err := tokens(bot, code); err != nil {
		return "", err
	}
	return bot + ".code." + code, nil
}

// PairingUsers matches the BucketPairings keys of every person of a bot with a pending code.
func PairingUsers(bot string) (string, error) {
	if err := Token(bot); err != nil {
		return "", err
	}
	return bot + ".user.*", nil
}

// PairingKeys matches every BucketPairings key of a bot.
func PairingKeys(bot string) (string, error) {
	if err := Token(bot); err != nil {
		return "", err
	}
	return bot + ".>", nil
}

// PartitionTransform is the XIM_IN subject transform that spreads channels over n partitions and
// keeps every packet of one channel in one partition (so one consumer sees them in order).
func PartitionTransform(n int) (src, dst string) {
	return InAll, fmt.Sprintf("%s.{{partition(%d,1)}}.{{wildcard(1)}}.{{wildcard(2)}}", partRoot, n)
}

// StageFilter is the filter subject of the packets of one kind in partition p (0-based), e.g.
// "xim.part.3.*.delta": a stage consumer filters its partition by the kinds it processes.
func StageFilter(p int, kind string) (string, error) {
	if err := Token(kind); err != nil {
		return "", err
	}
	return fmt.Sprintf("%s.%d.*.%s", partRoot, p, kind), nil
}

// ChannelOfStored is the channel of a stored XIM_IN subject ("xim.part.3.<channel>.<kind>"), or
// "" when subject has another form. The stage consumers' lanes are channels.
func ChannelOfStored(subject string) string {
	rest, ok := strings.CutPrefix(subject, partRoot+".")
	if !ok {
		return ""
	}
	parts := strings.Split(rest, ".")
	if len(parts) != 3 {
		return ""
	}
	return parts[1]
}

// LaneSubjects are the stored XIM_IN subjects of stored's channel and partition for each of
// kinds (a stage's kinds): a stage consumer's lane, whose order the subscriber keeps. nil when
// stored has another form.
func LaneSubjects(stored string, kinds []string) []string {
	i := strings.LastIndexByte(stored, '.')
	if i < 0 || ChannelOfStored(stored) == "" {
		return nil
	}
	out := make([]string, 0, len(kinds))
	for _, k := range kinds {
		out = append(out, stored[:i+1]+k)
	}
	return out
}

// ChannelStored matches every stored XIM_IN subject of one channel (for purges).
func ChannelStored(channel string) (string, error) {
	if err := Token(channel); err != nil {
		return "", err
	}
	return partRoot + ".*." + channel + ".>", nil
}

// PartitionOfStored is the partition of a stored XIM_IN subject ("xim.part.3.<channel>.<kind>":
// 3), or -1 when subject has another form.
func PartitionOfStored(subject string) int {
	rest, ok := strings.CutPrefix(subject, partRoot+".")
	if !ok {
		return -1
	}
	tok, _, _ := strings.Cut(rest, ".")
	p, err := strconv.Atoi(tok)
	if err != nil || p < 0 {
		return -1
	}
	return p
}

// StageConsumer is the durable consumer name of a stage's partition p, e.g. "deliver-p03".
func StageConsumer(stage string, p int) string { return fmt.Sprintf("%s-p%02d", stage, p) }

// ParseStageConsumer splits a StageConsumer name into its stage and partition.
func ParseStageConsumer(name string) (stage string, p int, ok bool) {
	i := strings.LastIndex(name, "-p")
	if i <= 0 || len(name) < i+4 {
		return "", 0, false
	}
	for _, c := range name[i+2:] {
		if c < '0' || c > '9' {
			return "", 0, false
		}
		p = p*10 + int(c-'0')
	}
	return name[:i], p, true
}

// LegacyPartitionConsumer is the name of partition p's single consumer of ximd before the stages
// became consumers ("in-p03"). Its filter overlaps theirs, so provisioning deletes it.
func LegacyPartitionConsumer(p int) string { return fmt.Sprintf("in-p%02d", p) }

// Poison is the subject a stage's poisoned messages go to.
func Poison(consumer string) (string, error) {
	if err := Token(consumer); err != nil {
		return "", err
	}
	return poisonRoot + "." + consumer, nil
}

// Reply is the core NATS subject on which gateway id receives replies for its connections.
func Reply(gateway string) (string, error) {
	if err := Token(gateway); err != nil {
		return "", err
	}
	return gwRoot + "." + gateway + ".reply", nil
}

// MessageKey is the KV key of one message of a channel in BucketMessages and BucketOutbox:
// "<channel>.<message_id>" when message_id is itself a safe key, otherwise "<channel>.=<hex>" with
// the first 16 bytes of its SHA-256 (a raw id never contains '=', so the two never collide).
func MessageKey(channel, messageID string) (string, error) {
	if err := Token(channel); err != nil {
		return "", err
	}
	if messageID == "" {
		return "", fmt.Errorf("%w: empty message_id", ErrUnsafeToken)
	}
	if plainKey(messageID) {
		return channel + "." + messageID, nil
	}
	sum := sha256.Sum256([]byte(messageID))
	return channel + ".=" + hex.EncodeToString(sum[:16]), nil
}

// InvocationKey is the BucketMessages key of a tool invocation of a channel (edge-api §8):
// "<channel>.tool.<invocation_id>", or "<channel>.tool.=<hex>" as in MessageKey. It has three
// tokens, so it never equals a message's key (two), and ChannelKeys matches it.
func InvocationKey(channel, invocationID string) (string, error) {
	k, err := MessageKey(channel, invocationID)
	if err != nil {
		return "", err
	}
	return channel + ".tool." + k[len(channel)+1:], nil
}

// ChannelKeys matches every key of one channel in BucketMessages and BucketOutbox.
func ChannelKeys(channel string) (string, error) {
	if err := Token(channel); err != nil {
		return "", err
	}
	return channel + ".>", nil
}

func plainKey(s string) bool {
	if len(s) > 128 {
		return false
	}
	for i := 0; i < len(s); i++ {
		c := s[i]
		if !(c >= 'a' && c <= 'z' || c >= 'A' && c <= 'Z' || c >= '0' && c <= '9' || c == '_' || c == '-') {
			return false
		}
	}
	return true
}

func tokens(ts ...string) error {
	for _, t := range ts {
		if err := Token(t); err != nil {
			return err
		}
	}
	return nil
}

// Gateway makes a gateway or worker instance id safe as a token (host names may contain dots).
func Gateway(name string) string {
	return strings.Map(func(r rune) rune {
		if r == '.' || r == '*' || r == '>' || unicode.IsSpace(r) || unicode.IsControl(r) {
			return '_'
		}
		return r
	}, name)
}

// Header names ximd sets on NATS messages.
const (
	// HeaderGateway names the gateway instance that received an inbound packet (replies go back there).
	HeaderGateway = "Xim-Gateway"
	// HeaderConn names the WebSocket connection (within its gateway) a packet arrived on.
	HeaderConn = "Xim-Conn"
	// HeaderReceived is the gateway's receive time of a packet, Unix nanoseconds.
	HeaderReceived = "Xim-Received"
	// HeaderFrames marks an inbound message that carries several packets of its channel, all of
	// one kind (a gateway stores a channel's deltas that arrive together as one message): the
	// packets' byte lengths, comma-separated, in order; the payload is the packets one after the
	// other. Absent, the payload is one packet. See JoinFrames and SplitFrames.
	HeaderFrames = "Xim-Frames"
)

// JoinFrames makes the payload and the HeaderFrames value of an inbound message carrying
// frames (at least two; one packet goes as it is, without the header).
func JoinFrames(frames [][]byte) (payload []byte, lengths string) {
	n := 0
	for _, f := range frames {
		n += len(f)
	}
	payload = make([]byte, 0, n)
	l := make([]byte, 0, 5*len(frames))
	for i, f := range frames {
		payload = append(payload, f...)
		if i > 0 {
			l = append(l, ',')
		}
		l = strconv.AppendInt(l, int64(len(f)), 10)
	}
	return payload, string(l)
}

// ErrFrames reports an HeaderFrames value that does not describe its payload.
var ErrFrames = errors.New("subjects: " + HeaderFrames + " does not match the payload")

// SplitFrames returns the packets of an inbound message: its payload when lengths (its
// HeaderFrames value) is empty, else the payload cut at the given lengths, which must add up to
// it. The frames share the payload's memory.
func SplitFrames(lengths string, payload []byte) ([][]byte, error) {
	if lengths == "" {
		return [][]byte{payload}, nil
	}
	frames := make([][]byte, 0, strings.Count(lengths, ",")+1)
	rest := payload
	for l := range strings.SplitSeq(lengths, ",") {
		n, err := strconv.Atoi(l)
		if err != nil || n <= 0 || n > len(rest) {
			return nil, ErrFrames
		}
		frames = append(frames, rest[:n:n])
		rest = rest[n:]
	}
	if len(rest) != 0 {
		return nil, ErrFrames
	}
	return frames, nil
}

// Metadata keys the bus subscriber sets on every message it delivers to a stage (they replace NATS
// headers of the same name).
const (
	// MetaStream is the name of the stream the message was read from.
	MetaStream = "Xim-Stream"
	// MetaSubject is the subject the message is stored under (after any subject transform), e.g.
	// "xim.part.3.<channel>.<kind>".
	MetaSubject = "Xim-Subject"
	// MetaStreamSeq is the message's stream sequence, in decimal.
	MetaStreamSeq = "Xim-Stream-Seq"
	// MetaNumDelivered is the message's delivery count, in decimal: JetStream's plus the
	// subscriber's in-process redeliveries after Nack. "1" on the first delivery.
	MetaNumDelivered = "Xim-Num-Delivered"
)

// KVStream is the stream that holds KV bucket b ("KV_<b>").
func KVStream(b string) string { return "KV_" + b }

// KVKeys is the stream subject of the keys of KV bucket b that match keys ("$KV.<b>.<keys>").
func KVKeys(b, keys string) string { return "$KV." + b + "." + keys }

// ObjectStream is the stream that holds Object Store bucket b ("OBJ_<b>").
func ObjectStream(b string) string { return "OBJ_" + b }
