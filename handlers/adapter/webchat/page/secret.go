package page

import (
	"context"
	"crypto/hmac"
	"crypto/rand"
	"crypto/sha256"
	"crypto/subtle"
	"encoding/base64"
	"errors"
	"fmt"
	"strconv"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/ximd/ximd/handlers/adapter"
	"github.com/ximd/ximd/handlers/adapter/webchat"
	"github.com/ximd/ximd/subjects"
)

// KeyBytes is the size of the key page secrets are derived from.
const KeyBytes = 32

// LoadKey returns the cluster-wide key page secrets are derived from, creating it (once, in KV
// bucket xim_config under subjects.ConfigWebchatKey) on first use; every gateway gets the same.
func LoadKey(ctx context.Context, js jetstream.JetStream) ([]byte, error) {
	kv, err := js.KeyValue(ctx, subjects.BucketConfig)
	if err != nil {
		return nil, fmt.Errorf("webchat key: %w", err)
	}
	key := make([]byte, KeyBytes)
	_, _ = rand.Read(key)
	if _, err := kv.Create(ctx, subjects.ConfigWebchatKey, key); err != nil {
		if !errors.Is(err, jetstream.ErrKeyExists) {
			return nil, fmt.Errorf("webchat key: %w", err)
		}
		e, err := kv.Get(ctx, subjects.ConfigWebchatKey)
		if err != nil {
			return nil, fmt.Errorf("webchat key: %w", err)
		}
		key = e.Value()
	}
	if len(key) < KeyBytes {
		return nil, fmt.Errorf("webchat key: %d bytes, want %d", len(key), KeyBytes)
	}
	return key, nil
}

// Secrets computes and checks page secrets.
type Secrets struct{ key []byte }

// NewSecrets returns the secrets of key (LoadKey).
func NewSecrets(key []byte) *Secrets { return &Secrets{key: append([]byte(nil), key...)} }

// Of is the page secret of an open webchat channel: the config's "secret" when given, else
// base64url(HMAC-SHA256(key, "xim-webchat-page" | channel | opened_at))[:128 bits]. Because it
// depends on opened_at, deleting the channel revokes its links; re-opening with new settings
// (PUT again) keeps them.
func (s *Secrets) Of(ch adapter.Channel) (string, error) {
	c, err := webchat.ParseConfig(ch.Target.Config)
	if err != nil {
		return "", err
	}
	if c.Secret != "" {
		return c.Secret, nil
	}
	m := hmac.New(sha256.New, s.key)
	m.Write([]byte("xim-webchat-page\x00" + ch.ID + "\x00" + strconv.FormatInt(ch.OpenedAt, 10)))
	return base64.RawURLEncoding.EncodeToString(m.Sum(nil)[:16]), nil
}

// equal compares two secrets in constant time (of their hashes, so the length leaks nothing).
func equal(a, b string) bool {
	ha, hb := sha256.Sum256([]byte(a)), sha256.Sum256([]byte(b))
	return subtle.ConstantTimeCompare(ha[:], hb[:]) == 1 && a != ""
}
