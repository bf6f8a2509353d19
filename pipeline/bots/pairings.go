package bots

import (
	"context"
	"crypto/rand"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"slices"
	"strings"
	"time"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/ximd/ximd/subjects"
)

// Pairing is one pending pairing code (GET /v1/bots/{id}/pairings).
type Pairing struct {
	Code        string `json:"code"`
	User        string `json:"user"`
	DisplayName string `json:"display_name,omitempty"`
	ExpiresAt   int64  `json:"expires_at"`
}

// Pairing bounds (edge-api §4.1).
const (
	// MaxPendingPairings is the most pending codes a bot holds; a stranger past it gets no code
	// (refused pairing_pending, and logged).
	MaxPendingPairings = 100
	codeAlphabet       = "ABCDEFGHIJKLMNOPQRSTUVWXYZ23456789"
	codeLength         = 8
)

// ErrNoPairing: no pending pairing of the bot has that code.
var ErrNoPairing = errors.New("bots: no such pairing code")

// ErrTooManyPairings: the bot holds MaxPendingPairings codes already.
var ErrTooManyPairings = errors.New("bots: too many pending pairing codes")

// Pairings are the bots' pending pairing codes in KV xim_pairings, whose TTL (an hour) is their
// validity: a person's record (by a digest of their id) names their code, a code's record names
// the person, so a code is issued (and answered) at most once an hour per person, whichever worker
// sees their messages.
type Pairings struct {
	kv  jetstream.KeyValue
	ttl time.Duration
}

// OpenPairings opens the pairing store; ttl is the bucket's (pipeline.PairingTTL).
func OpenPairings(ctx context.Context, js jetstream.JetStream, ttl time.Duration) (*Pairings, error) {
	kv, err := js.KeyValue(ctx, subjects.BucketPairings)
	if err != nil {
		return nil, fmt.Errorf("pairings: %w", err)
	}
	return &Pairings{kv: kv, ttl: ttl}, nil
}

func userKey(user string) string {
	sum := sha256.Sum256([]byte(user))
	return hex.EncodeToString(sum[:12])
}

// Request issues a code for a person writing to bot: created is true for the one call that
// issued it (which answers the person); a person with a pending code gets it back with created
// false. A bot with MaxPendingPairings codes pending issues no more (ErrTooManyPairings).
func (p *Pairings) Request(ctx context.Context, bot, user, displayName string) (Pairing, bool, error) {
	ukey, err := subjects.PairingUserKey(bot, userKey(user))
	if err != nil {
		return Pairing{}, false, err
	}
	if e, err := p.kv.Get(ctx, ukey); err == nil {
		var pr Pairing
		return pr, false, json.Unmarshal(e.Value(), &pr)
	} else if !errors.Is(err, jetstream.ErrKeyNotFound) {
		return Pairing{}, false, err
	}
	if n, err := p.pending(ctx, bot); err != nil {
		return Pairing{}, false, err
	} else if n >= MaxPendingPairings {
		return Pairing{}, false, ErrTooManyPairings
	}
	pr := Pairing{Code: newCode(), User: user, DisplayName: displayName, ExpiresAt: time.Now().Add(p.ttl).UnixMilli()}
	raw, _ := json.Marshal(pr)
	if _, err := p.kv.Create(ctx, ukey, raw); errors.Is(err, jetstream.ErrKeyExists) {
		return p.Request(ctx, bot, user, displayName) // issued meanwhile by another process
	} else if err != nil {
		return Pairing{}, false, err
	}
	ckey, _ := subjects.PairingCodeKey(bot, pr.Code)
	if _, err := p.kv.Put(ctx, ckey, raw); err != nil {
		_ = p.kv.Purge(context.WithoutCancel(ctx), ukey)
		return Pairing{}, false, err
	}
	return pr, true, nil
}

// pending counts a bot's pending codes (the stream's count of their subjects).
func (p *Pairings) pending(ctx context.Context, bot string) (int, error) {
	users, err := subjects.PairingUsers(bot)
	if err != nil {
		return 0, err
	}
	lister, err := p.kv.ListKeysFiltered(ctx, users)
	if err != nil {
		if errors.Is(err, jetstream.ErrNoKeysFound) {
			return 0, nil
		}
		return 0, err
	}
	n := 0
	for range lister.Keys() {
		n++
	}
	return n, nil
}

// Withdraw removes a person's pending code (its answer could not be sent: their next message
// asks again).
func (p *Pairings) Withdraw(ctx context.Context, bot string, pr Pairing) {
	ukey, _ := subjects.PairingUserKey(bot, userKey(pr.User))
	ckey, _ := subjects.PairingCodeKey(bot, pr.Code)
	_ = p.kv.Purge(ctx, ckey)
	_ = p.kv.Purge(ctx, ukey)
}

// List returns a bot's pending codes, by expiry.
func (p *Pairings) List(ctx context.Context, bot string) ([]Pairing, error) {
	users, err := subjects.PairingUsers(bot)
	if err != nil {
		return nil, err
	}
	out := []Pairing{}
	lister, err := p.kv.ListKeysFiltered(ctx, users)
	if errors.Is(err, jetstream.ErrNoKeysFound) {
		return out, nil
	}
	if err != nil {
		return nil, err
	}
	for key := range lister.Keys() {
		e, err := p.kv.Get(ctx, key)
		if err != nil {
			continue // expired meanwhile
		}
		var pr Pairing
		if json.Unmarshal(e.Value(), &pr) == nil && pr.ExpiresAt > time.Now().UnixMilli() {
			out = append(out, pr)
		}
	}
	slices.SortFunc(out, func(a, b Pairing) int { return int(a.ExpiresAt - b.ExpiresAt) })
	return out, nil
}

// Take removes the pending pairing with code and returns it (ErrNoPairing when there is none).
func (p *Pairings) Take(ctx context.Context, bot, code string) (Pairing, error) {
	code = strings.ToUpper(code)
	ckey, err := subjects.PairingCodeKey(bot, code)
	if err != nil || !validCode(code) {
		return Pairing{}, ErrNoPairing
	}
	e, err := p.kv.Get(ctx, ckey)
	if errors.Is(err, jetstream.ErrKeyNotFound) {
		return Pairing{}, ErrNoPairing
	}
	if err != nil {
		return Pairing{}, err
	}
	var pr Pairing
	if err := json.Unmarshal(e.Value(), &pr); err != nil || pr.ExpiresAt <= time.Now().UnixMilli() {
		return Pairing{}, ErrNoPairing
	}
	return pr, nil
}

// Done removes an approved pairing's records.
func (p *Pairings) Done(ctx context.Context, bot string, pr Pairing) error {
	ukey, _ := subjects.PairingUserKey(bot, userKey(pr.User))
	ckey, _ := subjects.PairingCodeKey(bot, pr.Code)
	return errors.Join(p.kv.Purge(ctx, ckey), p.kv.Purge(ctx, ukey))
}

// PurgeBot removes every pending code of a deleted bot.
func (p *Pairings) PurgeBot(ctx context.Context, js jetstream.JetStream, bot string) error {
	keys, err := subjects.PairingKeys(bot)
	if err != nil {
		return err
	}
	s, err := js.Stream(ctx, subjects.KVStream(subjects.BucketPairings))
	if err != nil {
		return err
	}
	return s.Purge(ctx, jetstream.WithPurgeSubject(subjects.KVKeys(subjects.BucketPairings, keys)))
}

// newCode is codeLength characters of codeAlphabet, each uniformly random (a byte past the
// largest multiple of the alphabet's size is drawn again).
func newCode() string {
	out := make([]byte, 0, codeLength)
	limit := byte(256 - 256%len(codeAlphabet))
	var b [1]byte
	for len(out) < codeLength {
		_, _ = rand.Read(b[:])
		if b[0] < limit {
			out = append(out, codeAlphabet[int(b[0])%len(codeAlphabet)])
		}
	}
	return string(out)
}

func validCode(code string) bool {
	if len(code) != codeLength {
		return false
	}
	for i := range len(code) {
		if !strings.ContainsRune(codeAlphabet, rune(code[i])) {
			return false
		}
	}
	return true
}
