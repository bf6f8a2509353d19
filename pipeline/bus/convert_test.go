package bus

import (
	"errors"
	"strings"
	"testing"

	"github.com/ThreeDotsLabs/watermill/message"
	"github.com/nats-io/nats.go"
)

func TestHeaderValue(t *testing.T) {
	tests := []struct {
		name, in, want string
	}{
		{name: "plain", in: "abc", want: "abc"},
		{name: "surrounding whitespace", in: " \t abc \r\n", want: "abc"},
		{name: "inner newlines", in: "a\r\nb\nc", want: "a  b c"},
		{name: "unicode", in: "héllo ✓", want: "héllo ✓"},
		{name: "empty", in: "", want: ""},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			if got := headerValue(tt.in); got != tt.want {
				t.Errorf("headerValue(%q) = %q, want %q", tt.in, got, tt.want)
			}
		})
	}
}

func TestHeaderToMetadataRejectsMultipleValues(t *testing.T) {
	_, err := headerToMetadata(nats.Header{"A": {"1"}, "B": {"1", "2"}})
	if !errors.Is(err, errUnconvertible) {
		t.Fatalf("err = %v, want errUnconvertible", err)
	}
	md, err := headerToMetadata(nats.Header{"A": {"1"}, "Empty": {}})
	if err != nil || md["A"] != "1" || md["Empty"] != "" {
		t.Fatalf("md = %v, err = %v", md, err)
	}
}

// FuzzMetadataHeaderRoundTrip checks that metadata either is rejected (a key that is no NATS
// header name) or comes back from the headers with every value as headerValue documents, and
// that a value after headerValue is stable (what NATS delivers is what was sent).
func FuzzMetadataHeaderRoundTrip(f *testing.F) {
	f.Add("uuid", "key", "value")
	f.Add("", "Xim-Gateway", " gw\r\n1 ")
	f.Add("u u", "bad key", "v")
	f.Add("é", "a:b", "\x00")
	f.Fuzz(func(t *testing.T, uuid, key, value string) {
		h, err := metadataToHeader(uuid, message.Metadata{key: value})
		if err != nil {
			if !errors.Is(err, ErrInvalidMetadata) || validHeaderKey(key) {
				t.Fatalf("metadataToHeader(%q) = %v", key, err)
			}
			return
		}
		if !validHeaderKey(key) {
			t.Fatalf("invalid key %q accepted", key)
		}
		md, err := headerToMetadata(h)
		if err != nil {
			t.Fatal(err)
		}
		if key != HeaderUUID && md[key] != headerValue(value) {
			t.Errorf("value %q came back as %q", value, md[key])
		}
		if md[HeaderUUID] != headerValue(uuid) {
			t.Errorf("uuid %q came back as %q", uuid, md[HeaderUUID])
		}
		if v := headerValue(value); headerValue(v) != v || strings.ContainsAny(v, "\r\n") {
			t.Errorf("headerValue(%q) = %q is not stable", value, v)
		}
	})
}
