package files

import (
	"bytes"
	"context"
	"crypto/rand"
	"encoding/base64"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"mime"
	"net/http"
	"strconv"
	"strings"
	"sync"
	"time"
	"unicode"
	"unicode/utf8"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/ximd/ximd/handlers/adapter"
	"github.com/ximd/ximd/profile"
	"github.com/ximd/ximd/subjects"
)

// File types of P-MSG-4.
const (
	TypeImage = "image"
	TypeVideo = "video"
	TypeAudio = "audio"
	TypeFile  = "file"
)

// Bounds of the descriptive fields of a file.
const (
	// MaxFilenameBytes bounds a stored filename; longer names are cut at a rune boundary.
	MaxFilenameBytes = 255
	// MaxMimeTypeBytes bounds a mime_type; longer ones are refused.
	MaxMimeTypeBytes = 255
	// DefaultFilename is the name of a file uploaded without one.
	DefaultFilename = "file"
)

// MaxReadTime bounds reading a file opened with a context without deadline (64 MiB in an hour
// is 18 KiB/s, slower clients are cut off).
const MaxReadTime = time.Hour

// RefPrefix starts every file_ref; 32 lowercase hex digits (128 random bits) follow it.
const RefPrefix = "file_"

// Object metadata keys. The object's name is the file_ref; its size is the object size.
const (
	metaChannel   = "xim-channel"
	metaType      = "xim-type"
	metaFilename  = "xim-filename"
	metaMimeType  = "xim-mime-type"
	metaExpiresAt = "xim-expires-at"
)

// sniffLen is how many leading bytes http.DetectContentType looks at.
const sniffLen = 512

// Meta describes one stored file (the model lives in handlers/adapter, where the stages and the
// webchat page read it).
type Meta = adapter.StoredFile

// ChannelOpen tells whether a channel is open (the channel registry implements it).
type ChannelOpen interface {
	IsOpen(channelID string) bool
}

// Store is the Transfer Plane: files in a JetStream Object Store bucket, named by file_ref and
// owned by one channel. It is safe for concurrent use; every gateway of a cluster may hold one
// on the same bucket.
type Store struct {
	js     jetstream.JetStream
	cfg    Config
	key    []byte
	base   string
	logger *slog.Logger
	now    func() time.Time

	mu     sync.Mutex
	obs    jetstream.ObjectStore
	stream jetstream.Stream
}

// errTooLarge ends the stream of an upload at MaxFileBytes + 1 bytes.
var errTooLarge = errors.New("file exceeds the maximum size")

// New returns a Store on the bucket of cfg, which Provision creates; New itself does no I/O and
// binds to the bucket on first use. Zero fields of cfg take their defaults; PublicURL is
// required. signingKey (at least MinKeyBytes bytes, the same on every gateway) signs file links;
// New keeps a copy. A nil logger discards.
func New(js jetstream.JetStream, cfg Config, signingKey []byte, logger *slog.Logger) (*Store, error) {
	cfg = cfg.WithDefaults()
	err := cfg.Validate()
	if js == nil {
		err = errors.Join(err, errors.New("jetstream: required"))
	}
	if len(signingKey) < MinKeyBytes {
		err = errors.Join(err, fmt.Errorf("signing key: must be at least %d bytes", MinKeyBytes))
	}
	if err != nil {
		return nil, fmt.Errorf("files: %w", err)
	}
	if logger == nil {
		logger = slog.New(slog.DiscardHandler)
	}
	return &Store{
		js:     js,
		cfg:    cfg,
		key:    bytes.Clone(signingKey),
		base:   trimBase(cfg.PublicURL),
		logger: logger,
		now:    time.Now,
	}, nil
}

// Config returns the effective configuration (defaults filled in).
func (s *Store) Config() Config { return s.cfg }

// bucket binds to the object store and its stream once.
func (s *Store) bucket(ctx context.Context) (jetstream.ObjectStore, jetstream.Stream, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.obs != nil {
		return s.obs, s.stream, nil
	}
	obs, err := s.js.ObjectStore(ctx, s.cfg.Bucket)
	if err != nil {
		return nil, nil, fmt.Errorf("files: object store %s: %w", s.cfg.Bucket, err)
	}
	// The stream behind the bucket (ADR-20 layout), for purges that need no free space.
	stream, err := s.js.Stream(ctx, subjects.ObjectStream(s.cfg.Bucket))
	if err != nil {
		return nil, nil, fmt.Errorf("files: object store %s: %w", s.cfg.Bucket, err)
	}
	s.obs, s.stream = obs, stream
	return obs, stream, nil
}

// Put stores the bytes of r as a new file of channelID and returns its Meta with a fresh
// file_ref, the byte size and expires_at (now + TTL). m gives the optional Type, Filename and
// MimeType; its other fields are ignored. An empty MimeType is sniffed from the first 512 bytes
// (http.DetectContentType); an empty Type is derived from the mime type (image/*, video/*,
// audio/*, else file). r is streamed, never buffered whole: past MaxFileBytes Put stops and
// returns a *profile.Error file_too_large, and nothing is stored.
//
// Errors: *profile.Error invalid_channel_id, bad_request (a bad Type or MimeType) or
// file_too_large; otherwise the read error of r or the store's error, wrapped. Put does not
// check that the channel is open (Handler does).
func (s *Store) Put(ctx context.Context, channelID string, m Meta, r io.Reader) (Meta, error) {
	if !profile.ValidChannelID(channelID) {
		return Meta{}, errInvalidChannel()
	}
	m.ChannelID = channelID
	return s.put(ctx, m, r)
}

// put stores a file; an empty m.ChannelID stores it unowned (invisible) until updateMeta.
func (s *Store) put(ctx context.Context, m Meta, r io.Reader) (Meta, error) {
	m, err := describe(Meta{ChannelID: m.ChannelID, Type: m.Type, Filename: m.Filename, MimeType: m.MimeType})
	if err != nil {
		return Meta{}, err
	}
	capped := &capReader{r: r, max: s.cfg.MaxFileBytes}
	var body io.Reader = capped
	if m.MimeType == "" {
		head := make([]byte, sniffLen)
		n, err := io.ReadFull(capped, head)
		if err != nil && !errors.Is(err, io.EOF) && !errors.Is(err, io.ErrUnexpectedEOF) {
			return Meta{}, s.putErr("", err)
		}
		head = head[:n]
		m.MimeType = http.DetectContentType(head)
		body = io.MultiReader(bytes.NewReader(head), capped)
	}
	if m.Type == "" {
		m.Type = typeOf(m.MimeType)
	}
	obs, _, err := s.bucket(ctx)
	if err != nil {
		return Meta{}, err
	}
	m.FileRef = newRef()
	// Stamped before the first chunk is written, so expires_at is never later than the moment the
	// bucket's max age removes the first chunk.
	m.ExpiresAt = s.now().Add(s.cfg.TTL).UnixMilli()
	info, err := obs.Put(ctx, jetstream.ObjectMeta{Name: m.FileRef, Metadata: encodeMeta(m)}, body)
	if err != nil {
		return Meta{}, s.putErr(m.FileRef, err)
	}
	m.ByteSize = int64(info.Size)
	return m, nil
}

func (s *Store) putErr(ref string, err error) error {
	if errors.Is(err, errTooLarge) {
		return profile.Errorf(profile.CodeFileTooLarge, "file exceeds the maximum of %d bytes", s.cfg.MaxFileBytes)
	}
	if ref == "" {
		return fmt.Errorf("files: put: %w", err)
	}
	return fmt.Errorf("files: put %s: %w", ref, err)
}

// updateMeta rewrites the descriptive metadata of a stored file (size and expiry unchanged).
func (s *Store) updateMeta(ctx context.Context, m Meta) error {
	obs, _, err := s.bucket(ctx)
	if err != nil {
		return err
	}
	if err := obs.UpdateMeta(ctx, m.FileRef, jetstream.ObjectMeta{Name: m.FileRef, Metadata: encodeMeta(m)}); err != nil {
		return fmt.Errorf("files: update %s: %w", m.FileRef, err)
	}
	return nil
}

// Stat returns the Meta of a file of channelID. An unknown or malformed ref, an expired file
// and a file of another channel all give the same *profile.Error file_not_found, so a caller
// learns nothing about other channels' files.
func (s *Store) Stat(ctx context.Context, channelID, fileRef string) (Meta, error) {
	if !ValidRef(fileRef) {
		return Meta{}, errNotFound(fileRef)
	}
	obs, _, err := s.bucket(ctx)
	if err != nil {
		return Meta{}, err
	}
	info, err := obs.GetInfo(ctx, fileRef)
	if errors.Is(err, jetstream.ErrObjectNotFound) {
		return Meta{}, errNotFound(fileRef)
	}
	if err != nil {
		return Meta{}, fmt.Errorf("files: stat %s: %w", fileRef, err)
	}
	m, ok := s.live(info)
	if !ok || m.ChannelID != channelID {
		return Meta{}, errNotFound(fileRef)
	}
	return m, nil
}

// Open returns the Meta and the bytes of a file of any channel (callers check ownership with
// Stat or authorize the reader otherwise). Unknown, malformed or expired refs give a
// *profile.Error file_not_found. The reader stays bound to ctx: reading after ctx ends fails.
// When ctx has no deadline, reading is bounded by MaxReadTime.
// The caller must close the reader.
func (s *Store) Open(ctx context.Context, fileRef string) (Meta, io.ReadCloser, error) {
	if !ValidRef(fileRef) {
		return Meta{}, nil, errNotFound(fileRef)
	}
	obs, _, err := s.bucket(ctx)
	if err != nil {
		return Meta{}, nil, err
	}
	// The object store bounds a read by its short default API timeout when ctx has no deadline,
	// too short for a large file to a slow client.
	cancel := context.CancelFunc(func() {})
	if _, ok := ctx.Deadline(); !ok {
		ctx, cancel = context.WithTimeout(ctx, MaxReadTime)
	}
	res, err := obs.Get(ctx, fileRef)
	if err != nil {
		cancel()
		if errors.Is(err, jetstream.ErrObjectNotFound) {
			return Meta{}, nil, errNotFound(fileRef)
		}
		return Meta{}, nil, fmt.Errorf("files: open %s: %w", fileRef, err)
	}
	info, err := res.Info()
	var m Meta
	ok := err == nil
	if ok {
		m, ok = s.live(info)
	}
	if !ok {
		_ = res.Close()
		cancel()
		return Meta{}, nil, errNotFound(fileRef)
	}
	return m, &objectReader{ObjectResult: res, cancel: cancel}, nil
}

type objectReader struct {
	jetstream.ObjectResult
	cancel context.CancelFunc
}

func (r *objectReader) Close() error {
	err := r.ObjectResult.Close()
	r.cancel()
	return err
}

// PurgeChannel removes every file of channelID, expired or not, and returns how many it removed
// (P-STATE-7: a deleted channel's temporary state is purged). Removal purges the object's
// messages from the bucket's stream, which needs no free space even when the bucket is full.
func (s *Store) PurgeChannel(ctx context.Context, channelID string) (int, error) {
	if !profile.ValidChannelID(channelID) {
		return 0, errInvalidChannel()
	}
	obs, stream, err := s.bucket(ctx)
	if err != nil {
		return 0, err
	}
	infos, err := obs.List(ctx)
	if errors.Is(err, jetstream.ErrNoObjectsFound) {
		return 0, nil
	}
	if err != nil {
		return 0, fmt.Errorf("files: purge channel %s: list: %w", channelID, err)
	}
	n := 0
	for _, info := range infos {
		if info.Metadata[metaChannel] != channelID {
			continue
		}
		if err := s.remove(ctx, stream, info); err != nil {
			return n, fmt.Errorf("files: purge channel %s: %w", channelID, err)
		}
		n++
	}
	return n, nil
}

// Discard removes a file stored for a message that was then refused (a later file failed): no
// orphan stays until XIM_FILE_TTL. A file already gone is no error.
func (s *Store) Discard(ctx context.Context, fileRef string) error { return s.discard(ctx, fileRef) }

// discard removes a file the caller just stored and must not keep.
func (s *Store) discard(ctx context.Context, ref string) error {
	obs, stream, err := s.bucket(ctx)
	if err != nil {
		return err
	}
	info, err := obs.GetInfo(ctx, ref)
	if errors.Is(err, jetstream.ErrObjectNotFound) {
		return nil
	}
	if err != nil {
		return fmt.Errorf("files: discard %s: %w", ref, err)
	}
	return s.remove(ctx, stream, info)
}

// remove purges the object's meta message, then its chunks (subjects of ADR-20: meta
// $O.<bucket>.M.<base64url(name)>, chunks $O.<bucket>.C.<nuid>). Meta first: a failure in
// between leaves unreachable chunks that the bucket's max age removes, never a meta entry
// without its bytes.
func (s *Store) remove(ctx context.Context, stream jetstream.Stream, info *jetstream.ObjectInfo) error {
	metaSubj := fmt.Sprintf("$O.%s.M.%s", s.cfg.Bucket, base64.URLEncoding.EncodeToString([]byte(info.Name)))
	if err := stream.Purge(ctx, jetstream.WithPurgeSubject(metaSubj)); err != nil {
		return fmt.Errorf("remove %s: %w", info.Name, err)
	}
	if info.NUID != "" {
		chunkSubj := fmt.Sprintf("$O.%s.C.%s", s.cfg.Bucket, info.NUID)
		if err := stream.Purge(ctx, jetstream.WithPurgeSubject(chunkSubj)); err != nil {
			return fmt.Errorf("remove %s chunks: %w", info.Name, err)
		}
	}
	return nil
}

// live decodes a stored file and reports whether it is owned and not expired.
func (s *Store) live(info *jetstream.ObjectInfo) (Meta, bool) {
	if info == nil || info.Deleted {
		return Meta{}, false
	}
	md := info.Metadata
	exp, err := strconv.ParseInt(md[metaExpiresAt], 10, 64)
	if err != nil || !profile.ValidChannelID(md[metaChannel]) {
		return Meta{}, false
	}
	if s.now().UnixMilli() >= exp {
		return Meta{}, false
	}
	return Meta{
		FileRef:   info.Name,
		ChannelID: md[metaChannel],
		Type:      md[metaType],
		Filename:  md[metaFilename],
		MimeType:  md[metaMimeType],
		ByteSize:  int64(info.Size),
		ExpiresAt: exp,
	}, true
}

func encodeMeta(m Meta) map[string]string {
	return map[string]string{
		metaChannel:   m.ChannelID,
		metaType:      m.Type,
		metaFilename:  m.Filename,
		metaMimeType:  m.MimeType,
		metaExpiresAt: strconv.FormatInt(m.ExpiresAt, 10),
	}
}

// newRef returns RefPrefix + 128 random bits in hex.
func newRef() string {
	var b [16]byte
	_, _ = rand.Read(b[:]) // never fails (crypto/rand, Go 1.24+)
	return RefPrefix + hex.EncodeToString(b[:])
}

// ValidRef reports whether ref has the form of a file_ref this package issues.
func ValidRef(ref string) bool {
	if len(ref) != len(RefPrefix)+32 || !strings.HasPrefix(ref, RefPrefix) {
		return false
	}
	for _, c := range ref[len(RefPrefix):] {
		if !(c >= '0' && c <= '9' || c >= 'a' && c <= 'f') {
			return false
		}
	}
	return true
}

// describe validates Type and MimeType when set and sanitizes Filename.
func describe(m Meta) (Meta, error) {
	switch m.Type {
	case "", TypeImage, TypeVideo, TypeAudio, TypeFile:
	default:
		return Meta{}, profile.Errorf(profile.CodeBadRequest, "type must be one of image, video, audio, file")
	}
	if m.MimeType != "" {
		mt, err := normalizeMime(m.MimeType)
		if err != nil {
			return Meta{}, profile.Errorf(profile.CodeBadRequest, "mime_type: %v", err)
		}
		m.MimeType = mt
	}
	m.Filename = sanitizeFilename(m.Filename)
	return m, nil
}

func normalizeMime(v string) (string, error) {
	if len(v) > MaxMimeTypeBytes {
		return "", fmt.Errorf("longer than %d bytes", MaxMimeTypeBytes)
	}
	mt, params, err := mime.ParseMediaType(v)
	if err != nil {
		return "", errors.New("not a media type")
	}
	if !strings.Contains(mt, "/") {
		return "", errors.New("not a type/subtype")
	}
	out := mime.FormatMediaType(mt, params)
	if out == "" {
		return "", errors.New("not a media type")
	}
	return out, nil
}

// typeOf derives the P-MSG-4 type from a mime type.
func typeOf(mimeType string) string {
	mt, _, _ := strings.Cut(strings.ToLower(mimeType), "/")
	switch mt {
	case "image":
		return TypeImage
	case "video":
		return TypeVideo
	case "audio":
		return TypeAudio
	}
	return TypeFile
}

// sanitizeFilename keeps the last path element, drops control characters and invalid UTF-8,
// and cuts the name to MaxFilenameBytes; an empty result is DefaultFilename.
func sanitizeFilename(name string) string {
	name = strings.ToValidUTF8(name, "")
	if i := strings.LastIndexAny(name, `/\`); i >= 0 {
		name = name[i+1:]
	}
	name = strings.Map(func(r rune) rune {
		if unicode.IsControl(r) || r == utf8.RuneError || unicode.Is(unicode.Cf, r) {
			return -1
		}
		return r
	}, name)
	name = strings.TrimSpace(name)
	for len(name) > MaxFilenameBytes {
		_, size := utf8.DecodeLastRuneInString(name)
		name = name[:len(name)-size]
	}
	if name == "" || name == "." || name == ".." {
		return DefaultFilename
	}
	return name
}

// capReader fails with errTooLarge once more than max bytes were read.
type capReader struct {
	r      io.Reader
	n, max int64
}

func (c *capReader) Read(p []byte) (int, error) {
	n, err := c.r.Read(p)
	c.n += int64(n)
	if c.n > c.max {
		return 0, errTooLarge
	}
	return n, err
}

// errNotFound is the one answer for unknown, malformed, expired and foreign refs; it does not
// echo the ref.
func errNotFound(string) *profile.Error {
	return profile.Errorf(profile.CodeFileNotFound, "file not found or expired")
}

func errInvalidChannel() *profile.Error {
	return profile.Errorf(profile.CodeInvalidChannelID, "connector_channel_id must match ^[A-Za-z0-9_-]{1,128}$")
}
