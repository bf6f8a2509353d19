package subjects_test

import (
	"errors"
	"slices"
	"strings"
	"testing"
	"unicode/utf8"

	"github.com/ximd/ximd/subjects"
)

func TestIn(t *testing.T) {
	tests := []struct {
		name, channel, kind, want string
		wantErr                   bool
	}{
		{name: "plain", channel: "cch_1", kind: "message", want: "xim.in.cch_1.message"},
		{name: "dot in channel", channel: "a.b", kind: "message", wantErr: true},
		{name: "star", channel: "*", kind: "delta", wantErr: true},
		{name: "gt", channel: ">", kind: "delta", wantErr: true},
		{name: "space", channel: "a b", kind: "delta", wantErr: true},
		{name: "tab", channel: "a\tb", kind: "delta", wantErr: true},
		{name: "empty", channel: "", kind: "delta", wantErr: true},
		{name: "bad kind", channel: "c", kind: "x.y", wantErr: true},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got, err := subjects.In(tt.channel, tt.kind)
			if (err != nil) != tt.wantErr {
				t.Fatalf("In(%q,%q) err = %v, wantErr %v", tt.channel, tt.kind, err, tt.wantErr)
			}
			if err != nil && !errors.Is(err, subjects.ErrUnsafeToken) {
				t.Fatalf("err %v is not ErrUnsafeToken", err)
			}
			if got != tt.want {
				t.Fatalf("In = %q, want %q", got, tt.want)
			}
		})
	}
}

func TestMessageKey(t *testing.T) {
	tests := []struct {
		name, channel, id, want string
		wantErr                 bool
	}{
		{name: "plain id kept readable", channel: "c1", id: "msg_1", want: "c1.msg_1"},
		{name: "dotted id hashed", channel: "c1", id: "a.b", want: "c1.=" + "5e0d2d7e4a1b0ba0f1a4e4f9f5e5a1f3"},
		{name: "empty id", channel: "c1", id: "", wantErr: true},
		{name: "bad channel", channel: "c.1", id: "m", wantErr: true},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got, err := subjects.MessageKey(tt.channel, tt.id)
			if (err != nil) != tt.wantErr {
				t.Fatalf("err = %v, wantErr %v", err, tt.wantErr)
			}
			if tt.wantErr {
				return
			}
			if strings.HasPrefix(tt.want, "c1.=") {
				if !strings.HasPrefix(got, "c1.=") || len(got) != len("c1.=")+32 {
					t.Fatalf("hashed key = %q", got)
				}
				return
			}
			if got != tt.want {
				t.Fatalf("MessageKey = %q, want %q", got, tt.want)
			}
		})
	}
}

func TestMessageKeyDistinct(t *testing.T) {
	a, _ := subjects.MessageKey("c", "x.y")
	b, _ := subjects.MessageKey("c", "x,y")
	if a == b {
		t.Fatalf("different ids share key %q", a)
	}
}

func TestPartitionNames(t *testing.T) {
	if got := subjects.StageConsumer("deliver", 3); got != "deliver-p03" {
		t.Fatalf("StageConsumer(deliver, 3) = %q", got)
	}
	for _, tc := range []struct {
		name, stage string
		p           int
		ok          bool
	}{{"deliver-p03", "deliver", 3, true}, {"assemble-p117", "assemble", 117, true}, {"in-p", "", 0, false}, {"deliver-px1", "", 0, false}, {"outbound", "", 0, false}} {
		stage, p, ok := subjects.ParseStageConsumer(tc.name)
		if stage != tc.stage || p != tc.p || ok != tc.ok {
			t.Errorf("ParseStageConsumer(%q) = %q, %d, %v", tc.name, stage, p, ok)
		}
	}
	if f, _ := subjects.StageFilter(2, "delta"); f != "xim.part.2.*.delta" {
		t.Fatalf("StageFilter = %q", f)
	}
	if _, err := subjects.StageFilter(2, "a.b"); err == nil {
		t.Fatal("StageFilter took an unsafe kind")
	}
	if s, _ := subjects.ClearRequest("w1", "cch_1"); s != "xim.ctl.clear.w1.cch_1" {
		t.Fatalf("ClearRequest = %q", s)
	}
	if s, _ := subjects.ClearRequests("w1"); s != "xim.ctl.clear.w1.*" {
		t.Fatalf("ClearRequests = %q", s)
	}
	if ch := subjects.ChannelOfClearRequest("xim.ctl.clear.w1.cch_1"); ch != "cch_1" {
		t.Fatalf("ChannelOfClearRequest = %q", ch)
	}
	for _, bad := range []string{"xim.ctl.clear.w1", "xim.other.w1.c"} {
		if ch := subjects.ChannelOfClearRequest(bad); ch != "" {
			t.Errorf("ChannelOfClearRequest(%q) = %q", bad, ch)
		}
	}
	if s, _ := subjects.FinishNotice("w1", "cch_1"); s != "xim.ctl.finished.w1.cch_1" {
		t.Fatalf("FinishNotice = %q", s)
	}
	if s, _ := subjects.FinishNotices("w1"); s != "xim.ctl.finished.w1.*" {
		t.Fatalf("FinishNotices = %q", s)
	}
	if _, err := subjects.FinishNotice("w1", "a.b"); err == nil {
		t.Fatal("FinishNotice took an unsafe channel")
	}
	for subject, want := range map[string]string{"xim.ctl.finished.w1.cch_1": "cch_1", "xim.ctl.finished.w1": "", "xim.ctl.clear.w1.cch_1": ""} {
		if got := subjects.ChannelOfFinishNotice(subject); got != want {
			t.Errorf("ChannelOfFinishNotice(%q) = %q, want %q", subject, got, want)
		}
	}
	if p := subjects.PartitionOfStored("xim.part.7.c.delta"); p != 7 {
		t.Fatalf("PartitionOfStored = %d", p)
	}
	if p := subjects.PartitionOfStored("xim.in.c.delta"); p != -1 {
		t.Fatalf("PartitionOfStored of another subject = %d", p)
	}
	for subject, want := range map[string]string{"xim.part.2.cch_1.delta": "cch_1", "xim.part.2.cch_1": "", "xim.in.c.delta": "", "xim.part.2.a.b.c": ""} {
		if got := subjects.ChannelOfStored(subject); got != want {
			t.Errorf("ChannelOfStored(%q) = %q, want %q", subject, got, want)
		}
	}
	if got := subjects.LaneSubjects("xim.part.3.c1.message", []string{"message", "tool"}); !slices.Equal(got, []string{"xim.part.3.c1.message", "xim.part.3.c1.tool"}) {
		t.Errorf("LaneSubjects = %q", got)
	}
	if got := subjects.LaneSubjects("xim.in.c1.message", []string{"message"}); got != nil {
		t.Errorf("LaneSubjects of an unstored subject = %q, want nil", got)
	}
	src, dst := subjects.PartitionTransform(8)
	if src != "xim.in.*.*" || dst != "xim.part.{{partition(8,1)}}.{{wildcard(1)}}.{{wildcard(2)}}" {
		t.Fatalf("transform %q -> %q", src, dst)
	}
}

// FuzzSubjects: whatever the input, a built subject or key has no empty token and no wildcard, and
// a value is accepted exactly when it is a safe token.
func FuzzSubjects(f *testing.F) {
	for _, s := range []string{"cch_1", "a.b", "*", ">", "a b", "", "\x00", "é", "msg-1", strings.Repeat("x", 200)} {
		f.Add(s, s)
	}
	f.Fuzz(func(t *testing.T, channel, id string) {
		check := func(subject string) {
			for _, tok := range strings.Split(subject, ".") {
				if tok == "" || tok == "*" || tok == ">" || strings.ContainsAny(tok, " \t\r\n") {
					t.Fatalf("unsafe subject %q from %q", subject, channel)
				}
			}
		}
		if s, err := subjects.In(channel, "message"); err == nil {
			check(s)
			if strings.Count(s, ".") != 3 {
				t.Fatalf("channel %q changed the subject depth: %q", channel, s)
			}
		} else if subjects.Token(channel) == nil {
			t.Fatalf("In rejected safe token %q: %v", channel, err)
		}
		if k, err := subjects.MessageKey(channel, id); err == nil {
			check(k)
			if strings.Count(k, ".") != 1 || !utf8.ValidString(k) {
				t.Fatalf("key %q from %q/%q", k, channel, id)
			}
		}
	})
}

// A tool invocation's key never equals a message's, whatever the ids, and is one of its
// channel's keys.
func TestInvocationKey(t *testing.T) {
	for _, id := range []string{"inv_1", "tool", "a.b", strings.Repeat("x", 200)} {
		k, err := subjects.InvocationKey("cch_1", id)
		if err != nil {
			t.Fatal(err)
		}
		if m, _ := subjects.MessageKey("cch_1", id); m == k || strings.Count(k, ".") != 2 || !strings.HasPrefix(k, "cch_1.tool.") {
			t.Fatalf("InvocationKey(%q) = %q (message key %q)", id, k, m)
		}
	}
}

func TestFrames(t *testing.T) {
	a, b, c := []byte(`{"a":1}`), []byte(`{"b":"x,y"}`), []byte(`{}`)
	payload, lengths := subjects.JoinFrames([][]byte{a, b, c})
	if lengths != "7,11,2" || string(payload) != `{"a":1}{"b":"x,y"}{}` {
		t.Fatalf("JoinFrames = %q, %q", payload, lengths)
	}
	got, err := subjects.SplitFrames(lengths, payload)
	if err != nil || len(got) != 3 || string(got[0]) != string(a) || string(got[1]) != string(b) || string(got[2]) != string(c) {
		t.Fatalf("SplitFrames = %q, %v", got, err)
	}
	got[0] = append(got[0], 'x') // a frame's capacity ends with it: appending never overwrites the next
	if string(got[1]) != string(b) {
		t.Fatalf("appending to frame 0 changed frame 1: %q", got[1])
	}
	if one, err := subjects.SplitFrames("", payload); err != nil || len(one) != 1 || string(one[0]) != string(payload) {
		t.Fatalf("SplitFrames without lengths = %q, %v", one, err)
	}
	for _, tt := range []struct{ name, lengths string }{
		{"too long", "7,11,3"},
		{"too short", "7,11"},
		{"zero", "7,0,11,2"},
		{"negative", "-7,27"},
		{"not a number", "7,x,11"},
		{"empty item", "7,,13"},
	} {
		t.Run(tt.name, func(t *testing.T) {
			if _, err := subjects.SplitFrames(tt.lengths, payload); !errors.Is(err, subjects.ErrFrames) {
				t.Fatalf("subjects.SplitFrames(%q) error = %v, want ErrFrames", tt.lengths, err)
			}
		})
	}
}

func FuzzSplitFrames(f *testing.F) {
	f.Add("3,2", []byte("abcde"))
	f.Add("", []byte("x"))
	f.Fuzz(func(t *testing.T, lengths string, payload []byte) {
		frames, err := subjects.SplitFrames(lengths, payload)
		if err != nil {
			return
		}
		var joined []byte
		for _, fr := range frames {
			joined = append(joined, fr...)
		}
		if string(joined) != string(payload) {
			t.Fatalf("frames %q do not make up the payload %q", frames, payload)
		}
	})
}

func TestRelay(t *testing.T) {
	for key, want := range map[string]string{"wecom.0af3": "xim.ctl.relay.wecom.0af3", "k": "xim.ctl.relay.k"} {
		if got, err := subjects.Relay(key); err != nil || got != want {
			t.Errorf("Relay(%q) = %q, %v; want %q", key, got, err, want)
		}
	}
	for _, key := range []string{"", "wecom.", "wecom.*", "a.>", "a b", ".a"} {
		if got, err := subjects.Relay(key); !errors.Is(err, subjects.ErrUnsafeToken) {
			t.Errorf("Relay(%q) = %q, %v; want ErrUnsafeToken", key, got, err)
		}
	}
}
