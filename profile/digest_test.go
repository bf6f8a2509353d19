package profile_test

import (
	"testing"

	"github.com/ximd/ximd/profile"
)

func TestDigest(t *testing.T) {
	base := profile.Message{
		MessageID: "msg_1", Text: "Summarise the current page", CreatedAt: 1790000000000,
		Files: []profile.File{{Type: "image", FileRef: "file_abc123", Filename: "page.png", MimeType: "image/png",
			ByteSize: 155000, ExpiresAt: 1790000300000, DownloadURL: "/files/refs/file_abc123"}},
	}
	// Golden: the digest is persisted in the xim_messages records, so it must never change (P-STATE-6).
	const golden = "3b5b62456c13de9abc424f58067f3f9852a4b6ab3a4f7159d20b3c9f7880f3a7"
	if got := base.Digest(); got != golden {
		t.Fatalf("Digest = %s, want %s", got, golden)
	}
	clone := func(m profile.Message) profile.Message {
		m.Files = append([]profile.File(nil), m.Files...)
		return m
	}
	same := []struct {
		name   string
		mutate func(*profile.Message)
	}{
		{"P-STATE-6 message_id not part", func(m *profile.Message) { m.MessageID = "other" }},
		{"P-STATE-6 created_at not part", func(m *profile.Message) { m.CreatedAt = 1 }},
		{"P-STATE-6 expires_at not part", func(m *profile.Message) { m.Files[0].ExpiresAt = 2 }},
	}
	for _, tc := range same {
		t.Run(tc.name, func(t *testing.T) {
			m := clone(base)
			tc.mutate(&m)
			if m.Digest() != golden {
				t.Fatal("digest changed")
			}
		})
	}
	differ := []struct {
		name   string
		mutate func(*profile.Message)
	}{
		{"P-STATE-6 text", func(m *profile.Message) { m.Text += "." }},
		{"P-STATE-6 file type", func(m *profile.Message) { m.Files[0].Type = "file" }},
		{"P-STATE-6 file_ref", func(m *profile.Message) { m.Files[0].FileRef = "file_x" }},
		{"P-STATE-6 filename", func(m *profile.Message) { m.Files[0].Filename = "" }},
		{"P-STATE-6 mime_type", func(m *profile.Message) { m.Files[0].MimeType = "image/jpeg" }},
		{"P-STATE-6 byte_size", func(m *profile.Message) { m.Files[0].ByteSize++ }},
		{"P-STATE-6 download_url", func(m *profile.Message) { m.Files[0].DownloadURL = "" }},
		{"P-STATE-6 file dropped", func(m *profile.Message) { m.Files = nil }},
		{"P-STATE-6 file added", func(m *profile.Message) { m.Files = append(m.Files, profile.File{Type: "file", FileRef: "f2"}) }},
		{"P-STATE-6 file order", func(m *profile.Message) {
			m.Files = append(m.Files, profile.File{Type: "file", FileRef: "f2"})
			m.Files[0], m.Files[1] = m.Files[1], m.Files[0]
		}},
		{"P-STATE-6 field boundary", func(m *profile.Message) { m.Files[0].Filename, m.Files[0].MimeType = "page.pngimage", "/png" }},
		{"P-STATE-6 text into file", func(m *profile.Message) { m.Text = "" }},
	}
	for _, tc := range differ {
		t.Run(tc.name, func(t *testing.T) {
			m := clone(base)
			tc.mutate(&m)
			if m.Digest() == golden {
				t.Fatal("digest did not change")
			}
		})
	}
	// Length prefixes: text "" + file vs text that spells the file's fields.
	a := profile.Message{Text: "ab"}
	b := profile.Message{Text: "a", Files: []profile.File{{Type: "b"}}}
	if a.Digest() == b.Digest() || (profile.Message{}).Digest() == (profile.Message{Files: []profile.File{{}}}).Digest() {
		t.Fatal("ambiguous encoding")
	}
}
