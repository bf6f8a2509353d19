package webhook_test

import (
	"strings"
	"testing"

	"github.com/ximd/ximd/handlers/adapter/webhook"
)

func TestSign_KnownVector(t *testing.T) {
	// RFC 4231 test case 2: key "Jefe", data "what do ya want for nothing?".
	got := webhook.Sign([]byte("Jefe"), []byte("what do ya want for nothing?"))
	want := "sha256=5bdcc146bf60754e6a042426089575c75a003f089d2739839dec58b964ec3843"
	if got != want {
		t.Errorf("Sign = %q, want %q", got, want)
	}
}

func TestVerify(t *testing.T) {
	secret := []byte("s3cr3t")
	body := []byte(`{"target_message_id":"t1","text":"hi","files":[]}`)
	good := webhook.Sign(secret, body)
	tests := []struct {
		name   string
		secret []byte
		body   []byte
		header string
		want   bool
	}{
		{name: "valid", secret: secret, body: body, header: good, want: true},
		{name: "upper-case hex", secret: secret, body: body, header: "sha256=" + strings.ToUpper(strings.TrimPrefix(good, "sha256=")), want: true},
		{name: "other body", secret: secret, body: append([]byte(" "), body...), header: good},
		{name: "other secret", secret: []byte("s3cr3T"), body: body, header: good},
		{name: "empty secret", secret: nil, body: body, header: webhook.Sign(nil, body)},
		{name: "missing prefix", secret: secret, body: body, header: strings.TrimPrefix(good, "sha256=")},
		{name: "other algorithm", secret: secret, body: body, header: "sha1=" + strings.TrimPrefix(good, "sha256=")},
		{name: "truncated", secret: secret, body: body, header: good[:len(good)-2]},
		{name: "not hex", secret: secret, body: body, header: "sha256=" + strings.Repeat("zz", 32)},
		{name: "empty header", secret: secret, body: body, header: ""},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			if got := webhook.Verify(tt.secret, tt.body, tt.header); got != tt.want {
				t.Errorf("Verify = %v, want %v", got, tt.want)
			}
		})
	}
}

func FuzzVerify(f *testing.F) {
	f.Add([]byte("s3cr3t"), []byte(`{"text":"hi"}`), "sha256=00")
	f.Add([]byte("k"), []byte(""), "")
	f.Fuzz(func(t *testing.T, secret, body []byte, header string) {
		_ = webhook.Verify(secret, body, header) // must not panic
		if len(secret) > 0 && !webhook.Verify(secret, body, webhook.Sign(secret, body)) {
			t.Fatalf("Verify rejects Sign's own signature")
		}
	})
}
