package files

import (
	"context"
	"errors"
	"fmt"
	"net/url"
	"strings"
	"time"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/ximd/ximd/subjects"
)

// Defaults of Config (see the package documentation for the reasons).
const (
	// DefaultBucket is the Object Store bucket of the Transfer Plane.
	DefaultBucket = subjects.BucketFiles
	// DefaultTTL (XIM_FILE_TTL) is how long an uploaded file lives.
	DefaultTTL = 24 * time.Hour
	// DefaultMaxFileBytes (XIM_MAX_FILE_BYTES) is the largest accepted file: 64 MiB.
	DefaultMaxFileBytes int64 = 64 << 20
	// DefaultMaxBucketBytes bounds all stored files together: 10 GiB. When the bucket is full,
	// uploads fail with a retryable internal_error until files expire; nothing is evicted early.
	DefaultMaxBucketBytes int64 = 10 << 30
	// DefaultReplicas is the bucket's replica count (1 for a single node).
	DefaultReplicas = 1
	// DefaultLinkTTL is the lifetime of a signed link. Links are handed to target systems that
	// fetch the bytes right after delivery; an hour covers slow fetches and retries without
	// leaving long-lived capabilities around.
	DefaultLinkTTL = time.Hour
)

// Bounds checked by Validate.
const (
	// MinTTL is the shortest accepted file TTL.
	MinTTL = time.Second
	// MinKeyBytes is the shortest accepted link signing key.
	MinKeyBytes = 32
)

// Config configures the Transfer Plane. The zero value of every field except PublicURL means
// its default.
type Config struct {
	// Bucket is the JetStream Object Store bucket holding the files (default DefaultBucket).
	Bucket string
	// TTL (XIM_FILE_TTL) is both the bucket's max age, which removes the bytes, and the
	// lifetime stamped on every file as expires_at (default DefaultTTL).
	TTL time.Duration
	// MaxFileBytes (XIM_MAX_FILE_BYTES) is the largest file accepted; larger uploads are refused
	// with file_too_large while streaming, and nothing is stored (default DefaultMaxFileBytes).
	MaxFileBytes int64
	// MaxBucketBytes bounds the whole bucket (default DefaultMaxBucketBytes). It must be at
	// least MaxFileBytes.
	MaxBucketBytes int64
	// Replicas of the bucket, 1..5 (default DefaultReplicas).
	Replicas int
	// PublicURL (XIM_PUBLIC_URL) is the absolute http(s) base of signed links, e.g.
	// "https://ximd.example.com" or "http://127.0.0.1:8080/prefix". Required.
	PublicURL string
	// LinkTTL is how long a signed link stays valid (default DefaultLinkTTL).
	LinkTTL time.Duration
}

// WithDefaults returns c with every zero field set to its default.
func (c Config) WithDefaults() Config {
	if c.Bucket == "" {
		c.Bucket = DefaultBucket
	}
	if c.TTL == 0 {
		c.TTL = DefaultTTL
	}
	if c.MaxFileBytes == 0 {
		c.MaxFileBytes = DefaultMaxFileBytes
	}
	if c.MaxBucketBytes == 0 {
		c.MaxBucketBytes = DefaultMaxBucketBytes
	}
	if c.Replicas == 0 {
		c.Replicas = DefaultReplicas
	}
	if c.LinkTTL == 0 {
		c.LinkTTL = DefaultLinkTTL
	}
	return c
}

// Validate reports every configuration error at once. It checks c as given: call WithDefaults
// first to accept zero fields.
func (c Config) Validate() error {
	errs := c.validateBucket()
	if c.LinkTTL < time.Second {
		errs = append(errs, fmt.Errorf("link TTL %s: must be at least 1s", c.LinkTTL))
	}
	if err := validPublicURL(c.PublicURL); err != nil {
		errs = append(errs, err)
	}
	return errors.Join(errs...)
}

// validateBucket checks the fields Provision needs.
func (c Config) validateBucket() []error {
	var errs []error
	if !validBucket(c.Bucket) {
		errs = append(errs, fmt.Errorf("bucket %q: must match [A-Za-z0-9_-]+", c.Bucket))
	}
	if c.TTL < MinTTL {
		errs = append(errs, fmt.Errorf("file TTL %s: must be at least %s", c.TTL, MinTTL))
	}
	if c.MaxFileBytes < 1 {
		errs = append(errs, fmt.Errorf("max file bytes %d: must be positive", c.MaxFileBytes))
	}
	if c.MaxBucketBytes < c.MaxFileBytes {
		errs = append(errs, fmt.Errorf("max bucket bytes %d: must be at least max file bytes %d", c.MaxBucketBytes, c.MaxFileBytes))
	}
	if c.Replicas < 1 || c.Replicas > 5 {
		errs = append(errs, fmt.Errorf("replicas %d: must be 1..5", c.Replicas))
	}
	return errs
}

func validPublicURL(raw string) error {
	if raw == "" {
		return errors.New("public URL: required")
	}
	u, err := url.Parse(raw)
	if err != nil {
		return fmt.Errorf("public URL: %w", err)
	}
	if (u.Scheme != "http" && u.Scheme != "https") || u.Host == "" || u.RawQuery != "" || u.Fragment != "" || u.User != nil {
		return fmt.Errorf("public URL %q: must be an absolute http(s) URL without user, query or fragment", raw)
	}
	return nil
}

// Provision creates the file bucket, or updates it to cfg, idempotently; it is safe to run from
// several processes at once. Zero fields of cfg take their defaults; PublicURL and LinkTTL are
// not needed here.
//
// With replicas, the bucket's reads go to its stream leader: a direct get (the Object Store's
// default) is answered by any replica, which may not have applied an upload yet, and a final
// naming a file the gateway had just stored would be refused file_not_found. An existing bucket
// is updated through its stream, so that no process ever binds to it while direct gets are on.
func Provision(ctx context.Context, js jetstream.JetStream, cfg Config) error {
	cfg = cfg.WithDefaults()
	if err := errors.Join(cfg.validateBucket()...); err != nil {
		return fmt.Errorf("provision files: %w", err)
	}
	name := subjects.ObjectStream(cfg.Bucket)
	stream, err := js.Stream(ctx, name)
	if errors.Is(err, jetstream.ErrStreamNotFound) {
		_, err = js.CreateObjectStore(ctx, jetstream.ObjectStoreConfig{
			Bucket:      cfg.Bucket,
			Description: bucketDescription,
			TTL:         cfg.TTL,
			MaxBytes:    cfg.MaxBucketBytes,
			Storage:     jetstream.FileStorage,
			Replicas:    cfg.Replicas,
		})
		if err != nil && !errors.Is(err, jetstream.ErrBucketExists) {
			return fmt.Errorf("provision object store %s: %w", cfg.Bucket, err)
		}
		stream, err = js.Stream(ctx, name)
	}
	if err != nil {
		return fmt.Errorf("provision object store %s: %w", cfg.Bucket, err)
	}
	sc := stream.CachedInfo().Config
	want := sc
	want.Description, want.MaxAge, want.MaxBytes, want.Replicas = bucketDescription, cfg.TTL, cfg.MaxBucketBytes, cfg.Replicas
	want.AllowDirect = cfg.Replicas <= 1
	if want.Description == sc.Description && want.MaxAge == sc.MaxAge && want.MaxBytes == sc.MaxBytes &&
		want.Replicas == sc.Replicas && want.AllowDirect == sc.AllowDirect {
		return nil
	}
	if _, err := js.UpdateStream(ctx, want); err != nil {
		return fmt.Errorf("provision object store %s: %w", cfg.Bucket, err)
	}
	return nil
}

const bucketDescription = "ximd Transfer Plane: uploaded files, named by file_ref"

func validBucket(name string) bool {
	if name == "" {
		return false
	}
	for _, r := range name {
		if !(r >= 'a' && r <= 'z' || r >= 'A' && r <= 'Z' || r >= '0' && r <= '9' || r == '_' || r == '-') {
			return false
		}
	}
	return true
}

// trimBase returns the public URL without a trailing slash.
func trimBase(raw string) string { return strings.TrimRight(raw, "/") }
