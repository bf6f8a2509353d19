package adapter

import (
	"bytes"
	"context"
	"crypto/sha256"
	"encoding/base32"
	"encoding/json"
	"errors"
	"fmt"
	"slices"
	"strings"

	"github.com/ximd/ximd/profile"
)

// Bot is one bot binding (edge-api §4.1): a platform account (the adapter's channel config without
// the key that names one conversation) and the policy by which the conversations that reach it
// open channels. The registry's record, KV xim_bots.
type Bot struct {
	ID            string     `json:"bot_id"`
	Connection    Connection `json:"connection"`
	Target        Binding    `json:"target"`
	Conversations Policy     `json:"conversations"`
	OpenedAt      int64      `json:"opened_at"`
	// Revision is the KV revision of this record (changes with every PUT that changes it and
	// with every pairing approved).
	Revision uint64 `json:"-"`
}

// ConversationKind is what kind of conversation a message was written in.
type ConversationKind string

// The conversation kinds.
const (
	// Direct is a one-to-one conversation of a person with the bot.
	Direct ConversationKind = "direct"
	// Group is a conversation of several people (a group chat, a channel, a room).
	Group ConversationKind = "group"
	// Thread is a thread or forum topic of a group, with the bot's scope "thread".
	Thread ConversationKind = "thread"
)

// Conversation is where a platform message was written, as a bot sees it: its kind, the platform's
// id of the chat or room, the thread in it (scope "thread" only) and a title to show.
type Conversation struct {
	Kind   ConversationKind `json:"kind"`
	ID     string           `json:"id"`
	Thread string           `json:"thread,omitempty"`
	Title  string           `json:"title,omitempty"`
}

// Key is the conversation's part of its channel id (edge-api §4.1): the platform's id (a thread's:
// "<id>_<thread>", with every '.' of the thread as '_') when it matches ^[A-Za-z0-9_-]{1,64}$,
// else "h_" and the first 26 characters of the lowercase unpadded base32 of its SHA-256.
func (c Conversation) Key() string {
	id := c.ID
	if c.Thread != "" {
		id += "_" + strings.ReplaceAll(c.Thread, ".", "_")
	}
	if len(id) <= 64 && profile.ValidChannelID(id) {
		return id
	}
	sum := sha256.Sum256([]byte(id))
	return "h_" + strings.ToLower(base32.StdEncoding.WithPadding(base32.NoPadding).EncodeToString(sum[:]))[:26]
}

// ChannelID is the id of the channel a bot opens for conversation c: "<bot_id>-<key>".
func (c Conversation) ChannelID(botID string) string { return botID + "-" + c.Key() }

// Author is who wrote a platform message, as a bot's policy sees them.
type Author struct {
	// ID is the platform's id of the person (or bot) who wrote.
	ID string
	// DisplayName is their name to show to an operator approving a pairing ("": none).
	DisplayName string
	// IsBot: written by a bot account (the bot itself included); never passed on.
	IsBot bool
}

// Arrival is a platform message that reached a bot from a conversation no channel PUT binds: what
// its policy decides on.
type Arrival struct {
	Conversation Conversation
	Author       Author
	// Mentioned: the message addresses the bot (its platform mention, a reply to one of its
	// messages, a command to it); the adapter has removed the bot's mention from the text.
	Mentioned bool
}

// Refusal is why a bot's policy did not pass a message on (ximd_bot_refused_total{reason}).
type Refusal string

// The refusal reasons of edge-api §4.1.
const (
	RefusedDirectClosed    Refusal = "direct_closed"
	RefusedNotAllowed      Refusal = "not_allowed"
	RefusedPairingPending  Refusal = "pairing_pending"
	RefusedGroupClosed     Refusal = "group_closed"
	RefusedGroupNotAllowed Refusal = "group_not_allowed"
	RefusedNotMentioned    Refusal = "not_mentioned"
	RefusedFromBot         Refusal = "from_bot"
	RefusedRateLimited     Refusal = "rate_limited"
)

// Refusals lists every refusal reason.
var Refusals = []Refusal{RefusedDirectClosed, RefusedNotAllowed, RefusedPairingPending, RefusedGroupClosed,
	RefusedGroupNotAllowed, RefusedNotMentioned, RefusedFromBot, RefusedRateLimited}

// Admission is what a bot made of an arrival: the channel of its conversation and that channel's
// inbox (opened for it when it had none), or the reason it was refused.
type Admission struct {
	Refused Refusal
	Channel Channel
	Inbox   Inbox
}

// Admitted reports whether the message is to be submitted (through Inbox).
func (a Admission) Admitted() bool { return a.Refused == "" }

// Bots are the bots a poll loop or a receive route serves (those of its account, for a poll key)
// and the way their arrivals are admitted.
type Bots interface {
	// Bots are the bots served.
	Bots() []Bot
	Admitter
}

// Admitter admits what reaches a bot.
type Admitter interface {
	// Admit applies bot's policy to an arrival: it refuses it (counted by reason; a stranger
	// under "pairing" gets the bot's one answer with a code), or returns the inbox of the
	// conversation's channel, opening that channel when it has none (exactly once, whatever
	// crashes and however many workers see it at once). An error is an infrastructure failure:
	// the platform's message is read again.
	Admit(ctx context.Context, bot Bot, a Arrival) (Admission, error)
}

// BotTaker is implemented by an adapter that takes bots (edge-api §4.1).
type BotTaker interface {
	// ConversationKeys are the config keys that name one conversation (chat_id, room_id, ...):
	// a bot's config holding one is refused.
	ConversationKeys() []string
	// Bind is the channel config of conversation c of a bot whose config is bot: the bot's config
	// with the conversation named. With the zero Conversation it names a placeholder, so that a
	// bot's config can be checked, and its poll key found, as a channel config.
	Bind(bot json.RawMessage, c Conversation) (json.RawMessage, error)
}

// BotProber is optional for a [BotTaker]: it checks a bot's account against the platform at PUT
// (a token that works), as [Prober] checks a channel's binding.
type BotProber interface {
	ProbeBot(ctx context.Context, b Bot) error
}

// BindConfig is bot, a JSON object, with the members of set added (or replaced): an adapter's
// [BotTaker.Bind].
func BindConfig(bot json.RawMessage, set map[string]any) (json.RawMessage, error) {
	obj := map[string]json.RawMessage{}
	if !NoConfig(bot) {
		if err := json.Unmarshal(bot, &obj); err != nil {
			return nil, profile.Errorf(profile.CodeInvalidDescriptor, "target.config: must be a JSON object")
		}
	}
	for k, v := range set {
		b, err := json.Marshal(v)
		if err != nil {
			return nil, err
		}
		obj[k] = b
	}
	return json.Marshal(obj)
}

// NamedConversationKey is the first of keys that config (a JSON object) holds, or "".
func NamedConversationKey(config json.RawMessage, keys []string) string {
	obj := map[string]json.RawMessage{}
	if NoConfig(config) || json.Unmarshal(config, &obj) != nil {
		return ""
	}
	for k := range obj {
		for _, want := range keys {
			if strings.EqualFold(k, want) { // keys match as the config decoder matches them
				return want
			}
		}
	}
	return ""
}

// DirectPolicy is how a bot treats one-to-one conversations.
type DirectPolicy string

// The direct policies.
const (
	DirectPairing   DirectPolicy = "pairing"
	DirectAllowlist DirectPolicy = "allowlist"
	DirectOpen      DirectPolicy = "open"
	DirectClosed    DirectPolicy = "closed"
)

// GroupPolicy is how a bot treats conversations of several people.
type GroupPolicy string

// The group policies.
const (
	GroupsMention GroupPolicy = "mention"
	GroupsAll     GroupPolicy = "all"
	GroupsClosed  GroupPolicy = "closed"
)

// Scope is what one channel of a bot is: a whole conversation, or each thread of it.
type Scope string

// The scopes.
const (
	ScopeConversation Scope = "conversation"
	ScopeThread       Scope = "thread"
)

// Policy defaults and bounds (edge-api §4.1).
const (
	DefaultPairingText  = "This assistant is private. Your pairing code is {code}: ask its operator to approve it."
	DefaultMaxPerMinute = 20
	MaxMaxPerMinute     = 10000
	maxAllowEntries     = 10000
	maxPairingText      = 1000
)

// Policy is a bot's `conversations` object: which conversations it passes on.
type Policy struct {
	Direct       DirectPolicy `json:"direct"`
	Groups       GroupPolicy  `json:"groups"`
	AllowUsers   []string     `json:"allow_users"`
	AllowGroups  []string     `json:"allow_groups"`
	Scope        Scope        `json:"scope"`
	PairingText  string       `json:"pairing_text"`
	MaxPerMinute int          `json:"max_per_minute"`
}

// ParsePolicy decodes a bot's `conversations` object (absent: every default). A bad one is a
// *profile.Error invalid_descriptor naming the key (and, for a policy value, the allowed ones).
func ParsePolicy(raw json.RawMessage) (Policy, error) {
	var w struct {
		Direct       *string  `json:"direct"`
		Groups       *string  `json:"groups"`
		AllowUsers   []string `json:"allow_users"`
		AllowGroups  []string `json:"allow_groups"`
		Scope        *string  `json:"scope"`
		PairingText  *string  `json:"pairing_text"`
		MaxPerMinute *int     `json:"max_per_minute"`
	}
	if !NoConfig(raw) {
		dec := json.NewDecoder(bytes.NewReader(raw))
		dec.DisallowUnknownFields()
		if err := dec.Decode(&w); err != nil {
			return Policy{}, profile.Errorf(profile.CodeInvalidDescriptor, "conversations: %s", policyDecodeError(err))
		}
	}
	p := Policy{
		Direct:       enumOf("direct", w.Direct, DirectPairing, DirectPairing, DirectAllowlist, DirectOpen, DirectClosed),
		Groups:       enumOf("groups", w.Groups, GroupsMention, GroupsMention, GroupsAll, GroupsClosed),
		Scope:        enumOf("scope", w.Scope, ScopeConversation, ScopeConversation, ScopeThread),
		AllowUsers:   w.AllowUsers,
		AllowGroups:  w.AllowGroups,
		PairingText:  DefaultPairingText,
		MaxPerMinute: DefaultMaxPerMinute,
	}
	for _, bad := range []string{string(p.Direct), string(p.Groups), string(p.Scope)} {
		if strings.HasPrefix(bad, "!") {
			return Policy{}, profile.Errorf(profile.CodeInvalidDescriptor, "%s", bad[1:])
		}
	}
	if w.PairingText != nil {
		if !strings.Contains(*w.PairingText, "{code}") || len(*w.PairingText) > maxPairingText {
			return Policy{}, profile.Errorf(profile.CodeInvalidDescriptor, "conversations.pairing_text: must contain {code} and be at most %d bytes", maxPairingText)
		}
		p.PairingText = *w.PairingText
	}
	if w.MaxPerMinute != nil {
		if *w.MaxPerMinute < 1 || *w.MaxPerMinute > MaxMaxPerMinute {
			return Policy{}, profile.Errorf(profile.CodeInvalidDescriptor, "conversations.max_per_minute: must be a whole number from 1 to %d", MaxMaxPerMinute)
		}
		p.MaxPerMinute = *w.MaxPerMinute
	}
	for key, list := range map[string][]string{"allow_users": p.AllowUsers, "allow_groups": p.AllowGroups} {
		if len(list) > maxAllowEntries {
			return Policy{}, profile.Errorf(profile.CodeInvalidDescriptor, "conversations.%s: at most %d entries", key, maxAllowEntries)
		}
		if slices.Contains(list, "") {
			return Policy{}, profile.Errorf(profile.CodeInvalidDescriptor, "conversations.%s: an entry is empty", key)
		}
	}
	if p.AllowUsers == nil {
		p.AllowUsers = []string{}
	}
	if p.AllowGroups == nil {
		p.AllowGroups = []string{}
	}
	return p, nil
}

// enumOf is *v (def when absent) when it is one of allowed, else "!" and the refusal's message.
func enumOf[T ~string](key string, v *string, def T, allowed ...T) T {
	if v == nil {
		return def
	}
	names := make([]string, len(allowed))
	for i, a := range allowed {
		if *v == string(a) {
			return a
		}
		names[i] = string(a)
	}
	return T("!conversations." + key + ": must be " + OneOf(names...))
}

func policyDecodeError(err error) string {
	var te *json.UnmarshalTypeError
	if errors.As(err, &te) && te.Field != "" {
		return fmt.Sprintf("%s: must be %s", te.Field, te.Type.String())
	}
	msg := err.Error()
	if i := strings.Index(msg, "unknown field "); i >= 0 {
		return msg[i:] + " (known: direct, groups, allow_users, allow_groups, scope, pairing_text, max_per_minute)"
	}
	return "must be a JSON object"
}

// Decision is what a policy makes of an arrival before any state is consulted.
type Decision struct {
	// Refused is the reason, when the policy refuses it outright.
	Refused Refusal
	// Pair: a stranger writing directly under "pairing": refused pairing_pending, and the bot
	// answers once with a code.
	Pair bool
}

// Decide applies p to a: from_bot first (no agent-to-agent loops), then the direct or group
// rules. It admits (the zero Decision) or refuses; a stranger under "pairing" is Pair.
func (p Policy) Decide(a Arrival) Decision {
	if a.Author.IsBot {
		return Decision{Refused: RefusedFromBot}
	}
	if a.Conversation.Kind == Direct {
		allowed := slices.Contains(p.AllowUsers, a.Author.ID)
		switch {
		case p.Direct == DirectClosed:
			return Decision{Refused: RefusedDirectClosed}
		case p.Direct == DirectOpen || allowed:
			return Decision{}
		case p.Direct == DirectPairing:
			return Decision{Refused: RefusedPairingPending, Pair: true}
		default:
			return Decision{Refused: RefusedNotAllowed}
		}
	}
	switch {
	case p.Groups == GroupsClosed:
		return Decision{Refused: RefusedGroupClosed}
	case len(p.AllowGroups) > 0 && !slices.Contains(p.AllowGroups, a.Conversation.ID):
		return Decision{Refused: RefusedGroupNotAllowed}
	case p.Groups == GroupsMention && !a.Mentioned:
		return Decision{Refused: RefusedNotMentioned}
	}
	return Decision{}
}

// PairingAnswer is the bot's answer to a stranger under "pairing": its text with the code in it.
func (p Policy) PairingAnswer(code string) string {
	text := p.PairingText
	if text == "" {
		text = DefaultPairingText
	}
	return strings.ReplaceAll(text, "{code}", code)
}

// Predates reports whether a platform message written at unixMilli (the platform's clock) was
// written before the bot was put, less [BindGrace]: not the agent's, not passed on.
func (b Bot) Predates(unixMilli int64) bool {
	return unixMilli < b.OpenedAt-BindGrace.Milliseconds()
}

// Offer offers one message of a conversation no channel binds to each of bots in turn; offer
// answers [Ignored] for a bot the message is not for (another account, before its binding). The
// first outcome that is not Ignored is the message's; the first error ends the round.
func Offer(bots []Bot, offer func(Bot) (Received, error)) (Received, error) {
	outcome := Ignored
	for _, b := range bots {
		got, err := offer(b)
		if err != nil {
			return "", err
		}
		if outcome == Ignored {
			outcome = got
		}
	}
	return outcome, nil
}

// PolicyChecker is optional for a [BotTaker] whose conversations cannot take every policy (a
// web page's visitors are anonymous: nobody could approve one): it refuses a bot's policy at PUT
// with a *profile.Error invalid_descriptor naming the key.
type PolicyChecker interface {
	CheckPolicy(p Policy) error
}
