package telegramtest

import (
	"bytes"
	"encoding/json"
	"image"
	"image/png"
	"net/http"
	"strings"
	"testing"
	"time"
)

func TestCheckUploadLimits(t *testing.T) {
	img := func(w, h int) []byte {
		var buf bytes.Buffer
		if err := png.Encode(&buf, image.NewGray(image.Rect(0, 0, w, h))); err != nil {
			t.Fatal(err)
		}
		return buf.Bytes()
	}
	tests := []struct {
		name     string
		kind     string
		up       upload
		wantCode int
		wantDesc string
	}{
		{name: "document of 50 MB", kind: "document", up: upload{size: 50 << 20, data: []byte{1}}},
		{name: "document over 50 MB", kind: "document", up: upload{size: 50<<20 + 1}, wantCode: http.StatusRequestEntityTooLarge, wantDesc: "Request Entity Too Large"},
		{name: "empty file", kind: "audio", up: upload{size: 0, data: []byte{}}, wantCode: 400, wantDesc: "Bad Request: file must be non-empty"},
		{name: "photo over 10 MB", kind: "photo", up: upload{size: 10<<20 + 1, data: []byte{1}}, wantCode: 400, wantDesc: "Bad Request: file is too big"},
		{name: "photo ratio over 20", kind: "photo", up: upload{size: 1, data: img(1, 21)}, wantCode: 400, wantDesc: "Bad Request: PHOTO_INVALID_DIMENSIONS"},
		{name: "photo 20:1", kind: "photo", up: upload{size: 1, data: img(40, 2)}},
		{name: "bytes the fake cannot decode as a photo", kind: "photo", up: upload{size: 3, data: []byte("abc")}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			e := checkUpload(tt.kind, &tt.up)
			if tt.wantCode == 0 {
				if e != nil {
					t.Fatalf("err = %v", e)
				}
				return
			}
			if e == nil || e.code != tt.wantCode || e.desc != tt.wantDesc {
				t.Fatalf("err = %+v, want %d %q", e, tt.wantCode, tt.wantDesc)
			}
		})
	}
}

func TestCaptionLimitCountsUTF16(t *testing.T) {
	if _, e := checkCaption(strings.Repeat("\U0001F600", 512)); e != nil {
		t.Fatalf("1024 units: %v", e)
	}
	if _, e := checkCaption(strings.Repeat("\U0001F600", 512) + "."); e == nil || e.desc != "Bad Request: message caption is too long" {
		t.Fatalf("1025 units: %v", e)
	}
}

func TestBucketAndWindow(t *testing.T) {
	t0 := time.Unix(1_700_000_000, 0)
	var b bucket
	for i := range 3 {
		if d := b.need(t0, 1, 3); d != 0 {
			t.Fatalf("burst call %d waits %v", i, d)
		}
		b.tokens--
	}
	if d := b.need(t0, 1, 3); d != time.Second {
		t.Fatalf("empty bucket waits %v, want 1s", d)
	}
	if d := b.need(t0.Add(500*time.Millisecond), 1, 3); d != 500*time.Millisecond {
		t.Fatalf("half refilled waits %v", d)
	}
	w := []time.Time{t0, t0.Add(10 * time.Second)}
	if d := windowNeed(&w, t0.Add(30*time.Second), 2); d != 30*time.Second {
		t.Fatalf("full window waits %v, want 30s", d)
	}
	if d := windowNeed(&w, t0.Add(time.Minute), 2); d != 0 || len(w) != 1 {
		t.Fatalf("after a minute: wait %v, %d entries", d, len(w))
	}
}

func FuzzDecodeJSONParams(f *testing.F) {
	f.Add([]byte(`{"chat_id":-1001234,"text":"hi","reply_parameters":{"message_id":3},"x":null}`))
	f.Add([]byte(`{"draft_id":"12","allowed_updates":["message"]}`))
	f.Add([]byte(` `))
	f.Fuzz(func(t *testing.T, body []byte) {
		vals := map[string]string{}
		if err := decodeJSONParams(body, vals); err != nil {
			return
		}
		var obj map[string]any
		if len(bytes.TrimSpace(body)) > 0 {
			if err := json.Unmarshal(body, &obj); err != nil {
				t.Fatalf("decoded a body encoding/json refuses: %v", err)
			}
		}
		for k, v := range obj {
			got, ok := vals[k]
			switch v := v.(type) {
			case nil:
				if ok {
					t.Errorf("null parameter %q is present", k)
				}
			case string:
				if got != v {
					t.Errorf("string parameter %q = %q, want %q", k, got, v)
				}
			default:
				if !json.Valid([]byte(got)) {
					t.Errorf("parameter %q = %q is not its JSON text", k, got)
				}
			}
		}
	})
}
