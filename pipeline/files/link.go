package files

import (
	"crypto/hmac"
	"crypto/sha256"
	"encoding/hex"
	"strconv"
	"time"

	"github.com/ximd/ximd/handlers/adapter"
)

// RefPath is the Connector-relative download path of a file_ref ("/files/refs/<ref>"), usable as
// a download_url that xAgent fetches with its bearer token (P-MSG-6).
func RefPath(fileRef string) string { return adapter.RefPath(fileRef) }

// SignedURL returns an absolute link to the bytes of fileRef that works without the bearer
// token until now + LinkTTL: PublicURL + RefPath(fileRef) + "?exp=<unix s>&sig=<hex
// HMAC-SHA256(key, fileRef + "\n" + exp)>". It is handed to target systems; it is a secret for
// its lifetime and is never logged.
func (s *Store) SignedURL(fileRef string, now time.Time) string {
	exp := strconv.FormatInt(now.Add(s.cfg.LinkTTL).Unix(), 10)
	return s.base + RefPath(fileRef) + "?exp=" + exp + "&sig=" + hex.EncodeToString(s.mac(fileRef, exp))
}

// VerifyLink reports whether exp and sig (the query of a signed link) authorize fetching
// fileRef at now: sig must be the MAC of exactly this ref and exp string, compared in constant
// time, and exp (unix seconds) must not be before now.
func (s *Store) VerifyLink(fileRef, exp, sig string, now time.Time) bool {
	if fileRef == "" || len(exp) == 0 || len(exp) > 19 || len(sig) != 2*sha256.Size {
		return false
	}
	for _, c := range exp {
		if c < '0' || c > '9' {
			return false
		}
	}
	e, err := strconv.ParseInt(exp, 10, 64)
	if err != nil || e < now.Unix() {
		return false
	}
	got, err := hex.DecodeString(sig)
	if err != nil {
		return false
	}
	return hmac.Equal(got, s.mac(fileRef, exp))
}

func (s *Store) mac(fileRef, exp string) []byte {
	h := hmac.New(sha256.New, s.key)
	h.Write([]byte(fileRef))
	h.Write([]byte{'\n'})
	h.Write([]byte(exp))
	return h.Sum(nil)
}
