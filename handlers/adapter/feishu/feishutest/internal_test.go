package feishutest

import (
	"encoding/json"
	"strings"
	"testing"
	"time"
)

func TestUseLogNeed(t *testing.T) {
	t0 := time.Unix(1_700_000_000, 0)
	var u useLog
	for range 3 {
		if d := u.need(t0, time.Second, 3); d != 0 {
			t.Fatalf("call within the limit waits %v", d)
		}
		u.add(t0, time.Minute)
	}
	if d := u.need(t0, time.Second, 3); d != time.Second {
		t.Fatalf("fourth call in the same instant waits %v, want 1s", d)
	}
	if d := u.need(t0.Add(400*time.Millisecond), time.Second, 3); d != 600*time.Millisecond {
		t.Fatalf("400ms later waits %v, want 600ms", d)
	}
	if d := u.need(t0.Add(time.Second), time.Second, 3); d != 0 {
		t.Fatalf("a second later waits %v, want 0", d)
	}
	if d := u.need(t0.Add(time.Second), time.Minute, 3); d != 59*time.Second {
		t.Fatalf("the minute window waits %v, want 59s", d)
	}
	u.add(t0.Add(2*time.Minute), time.Minute)
	if len(u.at) != 1 {
		t.Fatalf("kept %d entries older than a minute", len(u.at)-1)
	}
}

func TestParseCard(t *testing.T) {
	tests := []struct {
		name     string
		data     string
		v2Only   bool
		wantCode int
		wantText string
	}{
		{name: "2.0 with nested elements", v2Only: true, wantText: "top\nlabelled",
			data: `{"schema":"2.0","body":{"elements":[{"tag":"markdown","content":"top"},` +
				`{"tag":"column_set","columns":[{"tag":"column","elements":[{"tag":"plain_text","element_id":"p","content":"labelled"}]}]},` +
				`{"tag":"button","text":{"tag":"plain_text","content":"not read"}}]}}`},
		{name: "1.0 inline card", data: `{"elements":[{"tag":"markdown","content":"old"}]}`, wantText: "old"},
		{name: "1.0 refused by CardKit", v2Only: true, data: `{"elements":[]}`, wantCode: 300303},
		{name: "201 elements", v2Only: true, wantCode: 300305,
			data: `{"schema":"2.0","body":{"elements":[` + strings.TrimSuffix(strings.Repeat(`{"tag":"hr"},`, 201), ",") + `]}}`},
		{name: "trailing garbage", data: `{"schema":"2.0"} {}`, wantCode: 200220},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			p, ce := parseCard(tt.data, tt.v2Only)
			if tt.wantCode != 0 {
				if ce == nil || ce.code != tt.wantCode {
					t.Fatalf("err = %+v, want code %d", ce, tt.wantCode)
				}
				return
			}
			if ce != nil {
				t.Fatalf("err = %+v", ce)
			}
			c := &cardState{elements: p.elements}
			if got := c.text(); got != tt.wantText {
				t.Fatalf("text = %q, want %q", got, tt.wantText)
			}
		})
	}
}

func TestSniffImage(t *testing.T) {
	for _, tt := range []struct {
		data []byte
		want string
	}{
		{[]byte("\xff\xd8\xff\xe0"), "jpeg"},
		{[]byte("GIF89a.."), "gif"},
		{[]byte("RIFF\x00\x00\x00\x00WEBPVP8 "), "webp"},
		{[]byte("\x00\x00\x00\x18ftypheic"), "heic"},
		{[]byte("II*\x00"), "tiff"},
	} {
		if got, ok := sniffImage(tt.data); !ok || got != tt.want {
			t.Errorf("sniffImage(%q) = %q, %v; want %q", tt.data, got, ok, tt.want)
		}
	}
	if _, ok := sniffImage([]byte("%PDF")); ok {
		t.Error("a PDF was taken for an image")
	}
}

func FuzzParseCard(f *testing.F) {
	f.Add(`{"schema":"2.0","config":{"streaming_mode":true},"body":{"elements":[{"tag":"markdown","element_id":"a","content":"x"}]}}`)
	f.Add(`{"elements":[{"tag":"div","text":{"tag":"plain_text","content":"y"}}]}`)
	f.Add(`[]`)
	f.Fuzz(func(t *testing.T, data string) {
		p, ce := parseCard(data, false)
		if ce != nil {
			return
		}
		if !json.Valid([]byte(data)) {
			t.Fatalf("accepted invalid JSON %q", data)
		}
		ids := map[string]bool{}
		for _, e := range p.elements {
			if e.id != "" && ids[e.id] {
				t.Fatalf("accepted a duplicate element_id %q", e.id)
			}
			ids[e.id] = true
		}
		if len(p.elements) > maxCardElements {
			t.Fatalf("accepted %d elements", len(p.elements))
		}
	})
}
