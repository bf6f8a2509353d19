package webhook

import (
	"crypto/hmac"
	"crypto/sha256"
	"encoding/hex"
	"strings"
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
	digest, ok := strings.CutPrefix(header, signaturePrefix)
	if !ok || len(digest) != 2*sha256.Size {
		return false
	}
	got, err := hex.DecodeString(digest)
	if err != nil {
		return false
	}
	m := hmac.New(sha256.New, secret)
	m.Write(body)
	return hmac.Equal(got, m.Sum(nil))
}
