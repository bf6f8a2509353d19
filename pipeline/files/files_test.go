package files

import (
	"bytes"
	"context"
	"crypto/rand"
	"encoding/json"
	"errors"
	"io"
	"net/http"
	"net/url"
	"regexp"
	"strconv"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/ximd/ximd/profile"
)

var refPattern = regexp.MustCompile(`^file_[0-9a-f]{32}$`)

// §6: the bytes uploaded are the bytes served.
func TestUpload_DownloadIsByteIdentical(t *testing.T) {
	e := newEnv(t, testConfig(), nil)
	data := make([]byte, 1<<20)
	_, _ = rand.Read(data)
	m := e.mustUpload(t, "ch-a", "blob.bin", data)

	resp, got := e.get(t, RefPath(m.FileRef), true)
	if resp.StatusCode != http.StatusOK {
		t.Fatalf("GET: %d %s", resp.StatusCode, got)
	}
	if !bytes.Equal(got, data) {
		t.Fatalf("downloaded %d bytes differ from the %d uploaded", len(got), len(data))
	}
	if cl := resp.Header.Get("Content-Length"); cl != strconv.Itoa(len(data)) {
		t.Errorf("Content-Length %q, want %d", cl, len(data))
	}
}

// §6: 201 {"file_ref","connector_channel_id","filename","mime_type","byte_size","expires_at"}.
func TestUpload_201Fields(t *testing.T) {
	cfg := testConfig()
	cfg.TTL = 2 * time.Hour
	e := newEnv(t, cfg, nil)
	before := time.Now()
	status, body := e.upload(t, true,
		field(FieldChannel, "ch-a"),
		field(FieldMimeType, "text/plain; charset=utf-8"),
		field(FieldFilename, "notes.txt"),
		filePart("ignored.bin", []byte("hello")))
	if status != http.StatusCreated {
		t.Fatalf("status %d: %s", status, body)
	}
	var raw map[string]any
	if err := json.Unmarshal(body, &raw); err != nil {
		t.Fatal(err)
	}
	for _, k := range []string{"file_ref", "connector_channel_id", "filename", "mime_type", "byte_size", "expires_at", "type"} {
		if _, ok := raw[k]; !ok {
			t.Errorf("201 body lacks %q: %s", k, body)
		}
	}
	var m Meta
	if err := json.Unmarshal(body, &m); err != nil {
		t.Fatal(err)
	}
	if !refPattern.MatchString(m.FileRef) {
		t.Errorf("file_ref %q does not match %s", m.FileRef, refPattern)
	}
	want := Meta{FileRef: m.FileRef, ChannelID: "ch-a", Type: TypeFile, Filename: "notes.txt",
		MimeType: "text/plain; charset=utf-8", ByteSize: 5, ExpiresAt: m.ExpiresAt}
	if m != want {
		t.Errorf("got %+v, want %+v", m, want)
	}
	lo, hi := before.Add(cfg.TTL).UnixMilli(), time.Now().Add(cfg.TTL).UnixMilli()
	if m.ExpiresAt < lo || m.ExpiresAt > hi {
		t.Errorf("expires_at %d, want within [%d, %d] (now + XIM_FILE_TTL)", m.ExpiresAt, lo, hi)
	}
	// Stat agrees with the answer.
	got, err := e.store.Stat(context.Background(), "ch-a", m.FileRef)
	if err != nil || got != m {
		t.Errorf("Stat = %+v, %v; want %+v", got, err, m)
	}
}

// §6 optional fields: mime_type sniffed when absent, type derived from it, filename from the part.
func TestUpload_DefaultsOfOptionalFields(t *testing.T) {
	png := append([]byte("\x89PNG\x0d\x0a\x1a\x0a"), make([]byte, 100)...)
	tests := []struct {
		name                   string
		extra                  []part
		file                   part
		wantType, wantFilename string
		wantMime               string
	}{
		{name: "sniffed png is an image", file: filePart("page.png", png),
			wantType: TypeImage, wantFilename: "page.png", wantMime: "image/png"},
		{name: "part content type is used", file: part{name: FieldFile, filename: "a.mp4", contentType: "video/mp4", data: []byte("x")},
			wantType: TypeVideo, wantFilename: "a.mp4", wantMime: "video/mp4"},
		{name: "explicit fields win", extra: []part{field(FieldType, "file"), field(FieldMimeType, "audio/ogg"), field(FieldFilename, "v.ogg")},
			file: filePart("x.bin", []byte("x")), wantType: TypeFile, wantFilename: "v.ogg", wantMime: "audio/ogg"},
		{name: "audio derived", extra: []part{field(FieldMimeType, "audio/ogg")}, file: filePart("v.ogg", []byte("x")),
			wantType: TypeAudio, wantFilename: "v.ogg", wantMime: "audio/ogg"},
		{name: "no filename", file: part{name: FieldFile, data: []byte("plain text")},
			wantType: TypeFile, wantFilename: DefaultFilename, wantMime: "text/plain; charset=utf-8"},
		{name: "path and control characters stripped", extra: []part{field(FieldFilename, "../../etc/pa\r\nss\x00wd")},
			file: filePart("x", []byte("x")), wantType: TypeFile, wantFilename: "passwd", wantMime: "text/plain; charset=utf-8"},
	}
	e := newEnv(t, testConfig(), nil)
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			parts := append([]part{field(FieldChannel, "ch-a")}, tt.extra...)
			status, body := e.upload(t, true, append(parts, tt.file)...)
			if status != http.StatusCreated {
				t.Fatalf("status %d: %s", status, body)
			}
			var m Meta
			if err := json.Unmarshal(body, &m); err != nil {
				t.Fatal(err)
			}
			if m.Type != tt.wantType || m.Filename != tt.wantFilename || m.MimeType != tt.wantMime {
				t.Errorf("got type %q filename %q mime %q; want %q %q %q", m.Type, m.Filename, m.MimeType, tt.wantType, tt.wantFilename, tt.wantMime)
			}
		})
	}
}

// §6: fields may follow the file part; they still apply, and the file belongs to the channel.
func TestUpload_FieldsAfterFile(t *testing.T) {
	e := newEnv(t, testConfig(), nil)
	status, body := e.upload(t, true,
		filePart("first.bin", []byte("GIF89a-not-really")),
		field(FieldChannel, "ch-b"),
		field(FieldFilename, "late.gif"),
		field(FieldType, "file"))
	if status != http.StatusCreated {
		t.Fatalf("status %d: %s", status, body)
	}
	var m Meta
	if err := json.Unmarshal(body, &m); err != nil {
		t.Fatal(err)
	}
	got, err := e.store.Stat(context.Background(), "ch-b", m.FileRef)
	if err != nil {
		t.Fatalf("Stat: %v", err)
	}
	if got.Filename != "late.gif" || got.Type != TypeFile || got.MimeType != "image/gif" || got.ChannelID != "ch-b" {
		t.Errorf("stored %+v", got)
	}
}

// §6: over XIM_MAX_FILE_BYTES -> 413 file_too_large, and nothing is stored.
func TestUpload_OverMaxFileBytes_413AndNothingStored(t *testing.T) {
	cfg := testConfig()
	cfg.MaxFileBytes = 256 << 10
	e := newEnv(t, cfg, nil)
	data := make([]byte, cfg.MaxFileBytes+1)

	t.Run("declared length", func(t *testing.T) {
		status, body := e.upload(t, true, field(FieldChannel, "ch-a"), filePart("big.bin", data))
		wantError(t, status, body, http.StatusRequestEntityTooLarge, profile.CodeFileTooLarge)
	})
	t.Run("streamed without length", func(t *testing.T) {
		// A chunked body: the cap is enforced while streaming into the bucket.
		buf, ct := multipartBody(t, field(FieldChannel, "ch-a"), filePart("big.bin", data))
		req, err := http.NewRequest(http.MethodPost, e.srv.URL+"/files/uploads", io.MultiReader(buf))
		if err != nil {
			t.Fatal(err)
		}
		req.ContentLength = -1
		req.Header.Set("Content-Type", ct)
		req.Header.Set("Authorization", "Bearer "+testToken)
		status, body := do(t, req)
		wantError(t, status, body, http.StatusRequestEntityTooLarge, profile.CodeFileTooLarge)
	})
	t.Run("far over the cap", func(t *testing.T) {
		huge := make([]byte, 16*cfg.MaxFileBytes)
		for _, chunked := range []bool{false, true} {
			buf, ct := multipartBody(t, field(FieldChannel, "ch-a"), filePart("huge.bin", huge))
			req, err := http.NewRequest(http.MethodPost, e.srv.URL+"/files/uploads", buf)
			if err != nil {
				t.Fatal(err)
			}
			if chunked {
				req.Body, req.ContentLength = io.NopCloser(io.MultiReader(buf)), -1
			}
			req.Header.Set("Content-Type", ct)
			req.Header.Set("Authorization", "Bearer "+testToken)
			status, body := do(t, req)
			wantError(t, status, body, http.StatusRequestEntityTooLarge, profile.CodeFileTooLarge)
		}
	})
	t.Run("Put", func(t *testing.T) {
		_, err := e.store.Put(context.Background(), "ch-a", Meta{}, bytes.NewReader(data))
		if !errors.Is(err, &profile.Error{Code: profile.CodeFileTooLarge}) {
			t.Fatalf("Put over the cap: %v, want file_too_large", err)
		}
	})
	if n := e.storedMsgs(t); n != 0 {
		t.Errorf("bucket holds %d messages after refused uploads, want 0", n)
	}
	// Exactly the cap is accepted.
	e.mustUpload(t, "ch-a", "cap.bin", data[:cfg.MaxFileBytes])
}

// §6: upload to a channel that is not open -> 404 channel_not_open, nothing stored.
func TestUpload_ClosedChannel_404ChannelNotOpen(t *testing.T) {
	e := newEnv(t, testConfig(), nil)
	t.Run("channel first", func(t *testing.T) {
		status, body := e.upload(t, true, field(FieldChannel, "ch-closed"), filePart("a.txt", []byte("a")))
		wantError(t, status, body, http.StatusNotFound, profile.CodeChannelNotOpen)
	})
	t.Run("file first", func(t *testing.T) {
		status, body := e.upload(t, true, filePart("a.txt", []byte("a")), field(FieldChannel, "ch-closed"))
		wantError(t, status, body, http.StatusNotFound, profile.CodeChannelNotOpen)
	})
	if n := e.storedMsgs(t); n != 0 {
		t.Errorf("bucket holds %d messages, want 0", n)
	}
}

// §4/§6: malformed uploads -> 400 bad_request or invalid_channel_id, nothing stored.
func TestUpload_Malformed_400(t *testing.T) {
	e := newEnv(t, testConfig(), nil)
	tests := []struct {
		name     string
		parts    []part
		wantCode string
	}{
		{name: "missing channel", parts: []part{filePart("a", []byte("a"))}, wantCode: profile.CodeBadRequest},
		{name: "missing file", parts: []part{field(FieldChannel, "ch-a")}, wantCode: profile.CodeBadRequest},
		{name: "invalid channel id", parts: []part{field(FieldChannel, "a.b"), filePart("a", []byte("a"))}, wantCode: profile.CodeInvalidChannelID},
		{name: "invalid channel id after file", parts: []part{filePart("a", []byte("a")), field(FieldChannel, "a b")}, wantCode: profile.CodeInvalidChannelID},
		{name: "bad type", parts: []part{field(FieldChannel, "ch-a"), field(FieldType, "sticker"), filePart("a", []byte("a"))}, wantCode: profile.CodeBadRequest},
		{name: "bad mime type", parts: []part{field(FieldChannel, "ch-a"), field(FieldMimeType, "not a type"), filePart("a", []byte("a"))}, wantCode: profile.CodeBadRequest},
		{name: "bad type after file", parts: []part{field(FieldChannel, "ch-a"), filePart("a", []byte("a")), field(FieldType, "sticker")}, wantCode: profile.CodeBadRequest},
		{name: "two files", parts: []part{field(FieldChannel, "ch-a"), filePart("a", []byte("a")), filePart("b", []byte("b"))}, wantCode: profile.CodeBadRequest},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			status, body := e.upload(t, true, tt.parts...)
			wantError(t, status, body, http.StatusBadRequest, tt.wantCode)
		})
	}
	t.Run("not multipart", func(t *testing.T) {
		req, _ := http.NewRequest(http.MethodPost, e.srv.URL+"/files/uploads", strings.NewReader(`{}`))
		req.Header.Set("Content-Type", "application/json")
		req.Header.Set("Authorization", "Bearer "+testToken)
		status, body := do(t, req)
		wantError(t, status, body, http.StatusBadRequest, profile.CodeBadRequest)
	})
	if n := e.storedMsgs(t); n != 0 {
		t.Errorf("bucket holds %d messages, want 0", n)
	}
}

// §2: every /files/... request without the token (and without a signed link) -> 401.
func TestFiles_NoToken_401(t *testing.T) {
	e := newEnv(t, testConfig(), nil)
	m := e.mustUpload(t, "ch-a", "a.txt", []byte("secret bytes"))

	status, body := e.upload(t, false, field(FieldChannel, "ch-a"), filePart("b.txt", []byte("b")))
	wantError(t, status, body, http.StatusUnauthorized, profile.CodeUnauthorized)

	resp, body := e.get(t, RefPath(m.FileRef), false)
	wantError(t, resp.StatusCode, body, http.StatusUnauthorized, profile.CodeUnauthorized)

	resp, body = e.get(t, "/files/elsewhere", false)
	wantError(t, resp.StatusCode, body, http.StatusUnauthorized, profile.CodeUnauthorized)
}

// §6: a signed link fetches the bytes without the token.
func TestDownload_SignedLinkWithoutToken(t *testing.T) {
	e := newEnv(t, testConfig(), nil)
	data := []byte("for the target system")
	m := e.mustUpload(t, "ch-a", "t.txt", data)

	link := e.store.SignedURL(m.FileRef, time.Now())
	u, err := url.Parse(link)
	if err != nil {
		t.Fatal(err)
	}
	if !strings.HasPrefix(link, "http://ximd.invalid/files/refs/"+m.FileRef+"?") {
		t.Fatalf("link %q is not PublicURL + /files/refs/<ref>", link)
	}
	resp, got := e.get(t, u.RequestURI(), false)
	if resp.StatusCode != http.StatusOK || !bytes.Equal(got, data) {
		t.Fatalf("signed GET: %d %q", resp.StatusCode, got)
	}
}

// §6: a tampered, foreign or expired link without the token is refused with 401 unauthorized
// (chosen over 404: a bad link reveals nothing about the file).
func TestDownload_BadSignedLink_401(t *testing.T) {
	e := newEnv(t, testConfig(), nil)
	m := e.mustUpload(t, "ch-a", "t.txt", []byte("x"))
	other := e.mustUpload(t, "ch-a", "o.txt", []byte("y"))

	query := func(link string) url.Values {
		u, err := url.Parse(link)
		if err != nil {
			t.Fatal(err)
		}
		return u.Query()
	}
	good := query(e.store.SignedURL(m.FileRef, time.Now()))
	expired := query(e.store.SignedURL(m.FileRef, time.Now().Add(-2*e.store.cfg.LinkTTL)))
	foreign := query(e.store.SignedURL(other.FileRef, time.Now()))
	flip := func(s string) string {
		b := []byte(s)
		if b[0] == '0' {
			b[0] = '1'
		} else {
			b[0] = '0'
		}
		return string(b)
	}
	later, _ := strconv.ParseInt(good.Get("exp"), 10, 64)

	tests := []struct {
		name, exp, sig string
	}{
		{name: "tampered signature", exp: good.Get("exp"), sig: flip(good.Get("sig"))},
		{name: "extended expiry", exp: strconv.FormatInt(later+3600, 10), sig: good.Get("sig")},
		{name: "expired", exp: expired.Get("exp"), sig: expired.Get("sig")},
		{name: "signature of another file", exp: foreign.Get("exp"), sig: foreign.Get("sig")},
		{name: "missing expiry", exp: "", sig: good.Get("sig")},
		{name: "garbage", exp: "soon", sig: "zz"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			q := url.Values{"exp": {tt.exp}, "sig": {tt.sig}}
			resp, body := e.get(t, RefPath(m.FileRef)+"?"+q.Encode(), false)
			wantError(t, resp.StatusCode, body, http.StatusUnauthorized, profile.CodeUnauthorized)
		})
	}
	// Sanity: the untampered link works.
	resp, _ := e.get(t, RefPath(m.FileRef)+"?"+good.Encode(), false)
	if resp.StatusCode != http.StatusOK {
		t.Fatalf("good link: %d", resp.StatusCode)
	}
}

// VerifyLink is the check behind signed links.
func TestVerifyLink(t *testing.T) {
	st, err := New(runJS(t), testConfig(), testKey, nil)
	if err != nil {
		t.Fatal(err)
	}
	now := time.Unix(1_800_000_000, 0)
	ref := "file_0123456789abcdef0123456789abcdef"
	u, _ := url.Parse(st.SignedURL(ref, now))
	exp, sig := u.Query().Get("exp"), u.Query().Get("sig")
	if want := strconv.FormatInt(now.Add(DefaultLinkTTL).Unix(), 10); exp != want {
		t.Fatalf("exp %s, want now + LinkTTL = %s", exp, want)
	}
	otherKey, err := New(runJS(t), testConfig(), bytes.Repeat([]byte{7}, 32), nil)
	if err != nil {
		t.Fatal(err)
	}
	tests := []struct {
		name      string
		st        *Store
		ref       string
		exp, sig  string
		now       time.Time
		wantValid bool
	}{
		{name: "valid", st: st, ref: ref, exp: exp, sig: sig, now: now, wantValid: true},
		{name: "valid until exp", st: st, ref: ref, exp: exp, sig: sig, now: now.Add(DefaultLinkTTL), wantValid: true},
		{name: "uppercase hex", st: st, ref: ref, exp: exp, sig: strings.ToUpper(sig), now: now, wantValid: true},
		{name: "expired", st: st, ref: ref, exp: exp, sig: sig, now: now.Add(DefaultLinkTTL + time.Second)},
		{name: "other ref", st: st, ref: "file_ffffffffffffffffffffffffffffffff", exp: exp, sig: sig, now: now},
		{name: "other key", st: otherKey, ref: ref, exp: exp, sig: sig, now: now},
		{name: "leading zero exp", st: st, ref: ref, exp: "0" + exp, sig: sig, now: now},
		{name: "signed exp", st: st, ref: ref, exp: "+" + exp, sig: sig, now: now},
		{name: "short sig", st: st, ref: ref, exp: exp, sig: sig[:62], now: now},
		{name: "empty", st: st, now: now},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			if got := tt.st.VerifyLink(tt.ref, tt.exp, tt.sig, tt.now); got != tt.wantValid {
				t.Errorf("VerifyLink = %v, want %v", got, tt.wantValid)
			}
		})
	}
}

// §6: GET of an unknown ref -> 404 file_not_found.
func TestDownload_UnknownRef_404FileNotFound(t *testing.T) {
	e := newEnv(t, testConfig(), nil)
	for _, ref := range []string{"file_00000000000000000000000000000000", "file_abc123", "..%2f..%2fetc"} {
		resp, body := e.get(t, "/files/refs/"+ref, true)
		wantError(t, resp.StatusCode, body, http.StatusNotFound, profile.CodeFileNotFound)
	}
	_, err := e.store.Stat(context.Background(), "ch-a", "file_00000000000000000000000000000000")
	if !errors.Is(err, &profile.Error{Code: profile.CodeFileNotFound}) {
		t.Errorf("Stat of an unknown ref: %v", err)
	}
}

// §6: a file_ref belongs to one channel: another channel's Stat is file_not_found, the same
// answer as for an unknown ref.
func TestStat_RefOfAnotherChannel_FileNotFound(t *testing.T) {
	e := newEnv(t, testConfig(), nil)
	m := e.mustUpload(t, "ch-a", "a.txt", []byte("a"))
	_, errOther := e.store.Stat(context.Background(), "ch-b", m.FileRef)
	_, errUnknown := e.store.Stat(context.Background(), "ch-b", "file_00000000000000000000000000000000")
	var pOther, pUnknown *profile.Error
	if !errors.As(errOther, &pOther) || !errors.As(errUnknown, &pUnknown) {
		t.Fatalf("errors %v / %v, want *profile.Error", errOther, errUnknown)
	}
	if pOther.Code != profile.CodeFileNotFound || *pOther != *pUnknown {
		t.Errorf("foreign ref: %+v; unknown ref: %+v; want the same file_not_found", pOther, pUnknown)
	}
	if _, err := e.store.Stat(context.Background(), "ch-a", m.FileRef); err != nil {
		t.Errorf("owner's Stat: %v", err)
	}
}

// §6: file_refs are unguessable: 128 random bits, never repeated.
func TestFileRef_AtLeast128RandomBits(t *testing.T) {
	seen := map[string]bool{}
	for range 1000 {
		ref := newRef()
		if !refPattern.MatchString(ref) || !ValidRef(ref) {
			t.Fatalf("ref %q: want file_ + 32 hex digits (128 bits)", ref)
		}
		if seen[ref] {
			t.Fatalf("ref %q repeated", ref)
		}
		seen[ref] = true
	}
	// Each hex digit position takes many values (a constant or counter part would not).
	for pos := len(RefPrefix); pos < len(RefPrefix)+32; pos++ {
		digits := map[byte]bool{}
		for ref := range seen {
			digits[ref[pos]] = true
		}
		if len(digits) < 12 {
			t.Errorf("position %d takes only %d distinct digits over 1000 refs", pos, len(digits))
		}
	}
	// Uploaded files get such refs too.
	e := newEnv(t, testConfig(), nil)
	a, b := e.mustUpload(t, "ch-a", "a", []byte("same")), e.mustUpload(t, "ch-a", "a", []byte("same"))
	if !refPattern.MatchString(a.FileRef) || a.FileRef == b.FileRef {
		t.Errorf("refs %q and %q", a.FileRef, b.FileRef)
	}
}

// §6: an expired file is not served: 404 file_not_found once the TTL has passed.
func TestDownload_ExpiredFile_404(t *testing.T) {
	t.Run("bucket TTL", func(t *testing.T) {
		cfg := testConfig()
		cfg.TTL = time.Second
		e := newEnv(t, cfg, nil)
		m := e.mustUpload(t, "ch-a", "short.txt", []byte("short-lived"))
		deadline := time.Now().Add(15 * time.Second)
		for {
			resp, body := e.get(t, RefPath(m.FileRef), true)
			if resp.StatusCode == http.StatusNotFound {
				wantError(t, resp.StatusCode, body, http.StatusNotFound, profile.CodeFileNotFound)
				break
			}
			if time.Now().After(deadline) {
				t.Fatalf("file still served after %s: %d", cfg.TTL, resp.StatusCode)
			}
			time.Sleep(100 * time.Millisecond)
		}
		// The bucket's max age removes the bytes too.
		deadline = time.Now().Add(15 * time.Second)
		for e.storedMsgs(t) != 0 {
			if time.Now().After(deadline) {
				t.Fatalf("bucket still holds %d messages", e.storedMsgs(t))
			}
			time.Sleep(100 * time.Millisecond)
		}
	})
	t.Run("expires_at passed before the bucket removed the bytes", func(t *testing.T) {
		cfg := testConfig()
		cfg.TTL = time.Hour
		var skew atomic.Int64 // added to the real time
		e := newEnv(t, cfg, func(s *Store) { s.now = func() time.Time { return time.Now().Add(time.Duration(skew.Load())) } })
		m := e.mustUpload(t, "ch-a", "a.txt", []byte("a"))
		skew.Store(int64(cfg.TTL + time.Second))
		resp, body := e.get(t, RefPath(m.FileRef), true)
		wantError(t, resp.StatusCode, body, http.StatusNotFound, profile.CodeFileNotFound)
		if _, err := e.store.Stat(context.Background(), "ch-a", m.FileRef); !errors.Is(err, &profile.Error{Code: profile.CodeFileNotFound}) {
			t.Errorf("Stat of an expired file: %v", err)
		}
	})
}

// P-STATE-7: deleting a channel purges its files, and only its files.
func TestPurgeChannel_RemovesOnlyThatChannel(t *testing.T) {
	e := newEnv(t, testConfig(), nil)
	var mine []Meta
	for range 3 {
		mine = append(mine, e.mustUpload(t, "ch-a", "a", []byte("a-bytes")))
	}
	theirs := e.mustUpload(t, "ch-b", "b", []byte("b-bytes"))

	n, err := e.store.PurgeChannel(context.Background(), "ch-a")
	if err != nil || n != len(mine) {
		t.Fatalf("PurgeChannel = %d, %v; want %d", n, err, len(mine))
	}
	for _, m := range mine {
		resp, body := e.get(t, RefPath(m.FileRef), true)
		wantError(t, resp.StatusCode, body, http.StatusNotFound, profile.CodeFileNotFound)
	}
	resp, got := e.get(t, RefPath(theirs.FileRef), true)
	if resp.StatusCode != http.StatusOK || string(got) != "b-bytes" {
		t.Fatalf("other channel's file: %d %q", resp.StatusCode, got)
	}
	// Only the other channel's chunk and meta entry remain.
	if msgs := e.storedMsgs(t); msgs != 2 {
		t.Errorf("bucket holds %d messages, want 2", msgs)
	}
	if n, err := e.store.PurgeChannel(context.Background(), "ch-a"); n != 0 || err != nil {
		t.Errorf("second PurgeChannel = %d, %v", n, err)
	}
}

// §6: the download carries Content-Type, Content-Length and Content-Disposition, safely.
func TestDownload_Headers(t *testing.T) {
	e := newEnv(t, testConfig(), nil)
	name := "r\u00e9sum\u00e9 \"q\";x.html"
	m := e.mustUpload(t, "ch-a", "x", []byte("<script>alert(1)</script>"),
		field(FieldFilename, name), field(FieldMimeType, "text/html"))
	resp, _ := e.get(t, RefPath(m.FileRef), true)
	if resp.StatusCode != http.StatusOK {
		t.Fatalf("GET: %d", resp.StatusCode)
	}
	want := map[string]string{
		"Content-Type":           "text/html",
		"Content-Length":         "25",
		"Content-Disposition":    `attachment; filename="r_sum_ _q_;x.html"; filename*=UTF-8''r%C3%A9sum%C3%A9%20%22q%22%3Bx.html`,
		"Cache-Control":          "private",
		"X-Content-Type-Options": "nosniff",
	}
	for k, v := range want {
		if got := resp.Header.Get(k); got != v {
			t.Errorf("%s: %q, want %q", k, got, v)
		}
	}
	if _, params, err := mimeParse(resp.Header.Get("Content-Disposition")); err != nil || params["filename"] != name {
		t.Errorf("Content-Disposition parses to %v, %v; want filename %q", params, err, name)
	}
}

func TestContentDisposition_NoHeaderInjection(t *testing.T) {
	for _, name := range []string{"a\r\nSet-Cookie: x=1", "\"; filename=evil.exe", "\x00\x7f\u2028", "%0d%0a"} {
		cd := contentDisposition(name)
		for _, c := range []byte(cd) {
			if c < 0x20 || c >= 0x7f {
				t.Errorf("%q -> %q holds byte %#x", name, cd, c)
			}
		}
		if strings.Count(cd, `"`) != 2 {
			t.Errorf("%q -> %q: quoted filename broken", name, cd)
		}
	}
}

// §6/§2: wrong methods are 405 method_not_allowed (with the token).
func TestFiles_WrongMethod_405(t *testing.T) {
	e := newEnv(t, testConfig(), nil)
	for _, tc := range []struct{ method, path, allow string }{
		{http.MethodGet, "/files/uploads", "POST"},
		{http.MethodDelete, "/files/refs/file_00000000000000000000000000000000", "GET, HEAD"},
	} {
		req, _ := http.NewRequest(tc.method, e.srv.URL+tc.path, nil)
		req.Header.Set("Authorization", "Bearer "+testToken)
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		body, _ := io.ReadAll(resp.Body)
		resp.Body.Close()
		wantError(t, resp.StatusCode, body, http.StatusMethodNotAllowed, profile.CodeMethodNotAllowed)
		if got := resp.Header.Get("Allow"); got != tc.allow {
			t.Errorf("%s %s: Allow %q, want %q", tc.method, tc.path, got, tc.allow)
		}
	}
}

func TestConfig_Validate(t *testing.T) {
	valid := testConfig().WithDefaults()
	tests := []struct {
		name    string
		mod     func(*Config)
		wantErr bool
	}{
		{name: "defaults", mod: func(*Config) {}},
		{name: "no public URL", mod: func(c *Config) { c.PublicURL = "" }, wantErr: true},
		{name: "relative public URL", mod: func(c *Config) { c.PublicURL = "/x" }, wantErr: true},
		{name: "public URL with query", mod: func(c *Config) { c.PublicURL = "https://h/?a=b" }, wantErr: true},
		{name: "public URL with path", mod: func(c *Config) { c.PublicURL = "https://h/prefix/" }},
		{name: "bad bucket", mod: func(c *Config) { c.Bucket = "a.b" }, wantErr: true},
		{name: "short TTL", mod: func(c *Config) { c.TTL = time.Millisecond }, wantErr: true},
		{name: "file larger than bucket", mod: func(c *Config) { c.MaxBucketBytes = c.MaxFileBytes - 1 }, wantErr: true},
		{name: "replicas", mod: func(c *Config) { c.Replicas = 6 }, wantErr: true},
		{name: "short link TTL", mod: func(c *Config) { c.LinkTTL = time.Millisecond }, wantErr: true},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			c := valid
			tt.mod(&c)
			if err := c.Validate(); (err != nil) != tt.wantErr {
				t.Errorf("Validate() = %v, wantErr %v", err, tt.wantErr)
			}
		})
	}
	d := Config{}.WithDefaults()
	if d.Bucket != "xim_files" || d.TTL != 24*time.Hour || d.MaxFileBytes != 64<<20 || d.LinkTTL != time.Hour || d.Replicas != 1 || d.MaxBucketBytes != 10<<30 {
		t.Errorf("defaults %+v", d)
	}
}

func TestNew_RejectsShortKey(t *testing.T) {
	if _, err := New(runJS(t), testConfig(), make([]byte, 31), nil); err == nil {
		t.Fatal("New accepted a 31-byte signing key")
	}
}

// Provision is idempotent and applies changed settings.
func TestProvision_Idempotent(t *testing.T) {
	js := runJS(t)
	ctx := context.Background()
	cfg := testConfig()
	for range 2 {
		if err := Provision(ctx, js, cfg); err != nil {
			t.Fatalf("Provision: %v", err)
		}
	}
	cfg.TTL = 2 * time.Hour
	if err := Provision(ctx, js, cfg); err != nil {
		t.Fatalf("Provision with a new TTL: %v", err)
	}
	obs, err := js.ObjectStore(ctx, DefaultBucket)
	if err != nil {
		t.Fatal(err)
	}
	st, err := obs.Status(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if st.TTL() != 2*time.Hour {
		t.Errorf("bucket TTL %s, want 2h", st.TTL())
	}
}

// §6 edge cases of a download: an empty file, and HEAD (headers only).
func TestDownload_EmptyFileAndHead(t *testing.T) {
	e := newEnv(t, testConfig(), nil)
	empty := e.mustUpload(t, "ch-a", "empty.txt", nil)
	if empty.ByteSize != 0 {
		t.Fatalf("byte_size %d", empty.ByteSize)
	}
	resp, got := e.get(t, RefPath(empty.FileRef), true)
	if resp.StatusCode != http.StatusOK || len(got) != 0 || resp.Header.Get("Content-Length") != "0" {
		t.Fatalf("empty file: %d, %d bytes, Content-Length %q", resp.StatusCode, len(got), resp.Header.Get("Content-Length"))
	}

	m := e.mustUpload(t, "ch-a", "a.txt", []byte("0123456789"))
	req, _ := http.NewRequest(http.MethodHead, e.srv.URL+RefPath(m.FileRef), nil)
	req.Header.Set("Authorization", "Bearer "+testToken)
	hresp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	hresp.Body.Close()
	if hresp.StatusCode != http.StatusOK || hresp.Header.Get("Content-Length") != "10" {
		t.Errorf("HEAD: %d, Content-Length %q", hresp.StatusCode, hresp.Header.Get("Content-Length"))
	}
}
