package wecom

import (
	"bytes"
	"context"
	"crypto/aes"
	"crypto/cipher"
	"crypto/md5"
	"encoding/base64"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"strings"

	"github.com/ximd/ximd/handlers/adapter"
	"github.com/ximd/ximd/profile"
)

// Media upload limits (W-LC, aibot_upload_media_*).
const (
	// ChunkBytes is the most bytes one aibot_upload_media_chunk carries (before base64).
	ChunkBytes = 512 << 10
	// MaxChunks is the most chunks of one upload.
	MaxChunks = 100
)

// sendFile uploads f in chunks and sends it as a file (or image) message.
func (l *line) sendFile(ctx context.Context, reqID string, f adapter.File) error {
	if l.a.Files == nil {
		return profile.Errorf(profile.CodeTargetDeliveryFailed, "%v", errNoFiles)
	}
	_, rc, err := l.a.Files.Open(ctx, f.FileRef)
	if err != nil {
		return err
	}
	data, err := io.ReadAll(io.LimitReader(rc, ChunkBytes*MaxChunks+1))
	rc.Close()
	if err != nil {
		return profile.Errorf(profile.CodeTargetUnavailable, "wecom: read %s: %v", f.Filename, err)
	}
	if len(data) > ChunkBytes*MaxChunks {
		return profile.Errorf(profile.CodeTargetDeliveryFailed, "wecom: %s is larger than %d chunks of %d bytes", f.Filename, MaxChunks, ChunkBytes)
	}
	kind := "file"
	if f.Type == "image" || strings.HasPrefix(f.MimeType, "image/") {
		kind = "image"
	}
	chunks := max(1, (len(data)+ChunkBytes-1)/ChunkBytes)
	sum := md5.Sum(data)
	raw, err := l.cli.request(ctx, cmdUpInit, reqID+"_init", map[string]any{"type": kind, "filename": f.Filename,
		"total_size": len(data), "total_chunks": chunks, "md5": hex.EncodeToString(sum[:])})
	if err != nil {
		return err
	}
	var init struct {
		UploadID string `json:"upload_id"`
	}
	if err := json.Unmarshal(raw, &init); err != nil || init.UploadID == "" {
		return profile.Errorf(profile.CodeTargetDeliveryFailed, "wecom %s: no upload_id", cmdUpInit)
	}
	for i := 0; i < chunks; i++ {
		part := data[i*ChunkBytes : min(len(data), (i+1)*ChunkBytes)]
		if _, err := l.cli.request(ctx, cmdUpChunk, fmt.Sprintf("%s_c%d", reqID, i), map[string]any{"upload_id": init.UploadID,
			"chunk_index": i, "base64_data": base64.StdEncoding.EncodeToString(part)}); err != nil {
			return err
		}
	}
	raw, err = l.cli.request(ctx, cmdUpFinish, reqID+"_fin", map[string]any{"upload_id": init.UploadID})
	if err != nil {
		return err
	}
	var fin struct {
		MediaID string `json:"media_id"`
	}
	if err := json.Unmarshal(raw, &fin); err != nil || fin.MediaID == "" {
		return profile.Errorf(profile.CodeTargetDeliveryFailed, "wecom %s: no media_id", cmdUpFinish)
	}
	return l.send(ctx, reqID, map[string]any{"chatid": l.cfg.conversation(), "msgtype": kind, kind: map[string]any{"media_id": fin.MediaID}})
}

// download fetches a person's file from its URL (valid 5 minutes) and decrypts it with its
// aeskey.
func download(ctx context.Context, hc *http.Client, url, aesKey string, limit int64) ([]byte, error) {
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, url, nil)
	if err != nil {
		return nil, profile.Errorf(profile.CodeFileDownloadFailed, "wecom: file URL: %v", err)
	}
	resp, err := hc.Do(req)
	if err != nil {
		return nil, profile.Errorf(profile.CodeTargetUnavailable, "wecom: download: %v", err)
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		return nil, profile.Errorf(profile.CodeFileDownloadFailed, "wecom: download: status %d", resp.StatusCode)
	}
	enc, err := io.ReadAll(io.LimitReader(resp.Body, limit+64))
	if err != nil {
		return nil, profile.Errorf(profile.CodeTargetUnavailable, "wecom: download: %v", err)
	}
	if int64(len(enc)) > limit+32 {
		return nil, profile.Errorf(profile.CodeFileTooLarge, "wecom: the file is larger than %d bytes", limit)
	}
	data, err := decrypt(enc, aesKey)
	if err != nil {
		return nil, profile.Errorf(profile.CodeFileDownloadFailed, "wecom: %v", err)
	}
	return data, nil
}

// decrypt is AES-256-CBC with the base64 key, IV the key's first 16 bytes, PKCS#7 padding to a
// multiple of 32 bytes (W-CRY, W-SDK).
func decrypt(enc []byte, aesKey string) ([]byte, error) {
	key, err := decodeKey(aesKey)
	if err != nil {
		return nil, err
	}
	if len(enc) == 0 || len(enc)%aes.BlockSize != 0 {
		return nil, errors.New("decrypt: not whole AES blocks")
	}
	block, err := aes.NewCipher(key)
	if err != nil {
		return nil, fmt.Errorf("decrypt: %w", err)
	}
	out := make([]byte, len(enc))
	cipher.NewCBCDecrypter(block, key[:16]).CryptBlocks(out, enc)
	n := int(out[len(out)-1])
	if n < 1 || n > 32 || n > len(out) || !bytes.Equal(out[len(out)-n:], bytes.Repeat([]byte{byte(n)}, n)) {
		return nil, errors.New("decrypt: bad padding (a wrong aeskey?)")
	}
	return out[:len(out)-n], nil
}

// decodeKey reads an aeskey: base64 of 32 bytes, with or without its "=" padding (a callback's
// EncodingAESKey is 43 characters).
func decodeKey(s string) ([]byte, error) {
	key, err := base64.StdEncoding.DecodeString(s)
	if err != nil {
		key, err = base64.RawStdEncoding.DecodeString(strings.TrimRight(s, "="))
	}
	if err != nil || len(key) != 32 {
		return nil, errors.New("aeskey: not base64 of 32 bytes")
	}
	return key, nil
}
