package webhook

import (
	"crypto/hmac"
	"crypto/sha256"
	"encoding/hex"
	"strconv"
	"strings"
	"time"
)

// signaturePrefix precedes the hex digest in X-Xim-Signature.
const signaturePrefix = "sha256="

// Sign returns the X-Xim-Signature value of body under secret:
// "sha256=" + lower-case hex of HMAC-SHA256(secret, body). body is the raw
// bytes sent, exactly.
func Sign(secret, body []byte) string {
	m := hmac.New(sha256.New, secret)
	m.Write(body)
	return signaturePrefix + hex.EncodeToString(m.Sum(nil))
}

// Verify reports whether header is a valid X-Xim-Signature of body under
// secret. The digest is compared in constant time; hex of either case is
// accepted. An empty secret never verifies.
func Verify(secret, body []byte, header string) bool {
	if len(secret) == 0 {
		return false
	}
	return signs(secret, header, body)
}

// signs reports whether header ("sha256=<hex>") is the HMAC-SHA256 under secret of the parts,
// concatenated (constant-time comparison; hex of either case).
func signs(secret []byte, header string, parts ...[]byte) bool {
	digest, ok := strings.CutPrefix(header, signaturePrefix)
	if !ok || len(digest) != 2*sha256.Size {
		return false
	}
	got, err := hex.DecodeString(digest)
	if err != nil {
		return false
	}
	m := hmac.New(sha256.New, secret)
	for _, p := range parts {
		m.Write(p)
	}
	return hmac.Equal(got, m.Sum(nil))
}

// SignV2 returns the X-Xim-Timestamp and X-Xim-Signature-V2 values of body sent at ts (edge-api
// §7.1): "sha256=" + hex of HMAC-SHA256(secret, "<unix seconds>.<body>"). A target that checks
// the timestamp refuses a replay of an old body.
func SignV2(secret, body []byte, ts time.Time) (timestamp, signature string) {
	timestamp = strconv.FormatInt(ts.Unix(), 10)
	m := hmac.New(sha256.New, secret)
	m.Write([]byte(timestamp + "."))
	m.Write(body)
	return timestamp, signaturePrefix + hex.EncodeToString(m.Sum(nil))
}

// MaxSkew is how far an X-Xim-Timestamp may be from ximd's clock, either way.
const MaxSkew = 5 * time.Minute

// VerifyV2 reports whether signature is the X-Xim-Signature-V2 of body with timestamp under
// secret and the timestamp is within MaxSkew of now (constant-time comparison).
func VerifyV2(secret, body []byte, timestamp, signature string, now time.Time) bool {
	if len(secret) == 0 {
		return false
	}
	sec, err := strconv.ParseInt(timestamp, 10, 64)
	if err != nil {
		return false
	}
	if d := now.Sub(time.Unix(sec, 0)); d > MaxSkew || d < -MaxSkew {
		return false
	}
	return signs(secret, signature, []byte(timestamp+"."), body)
}
