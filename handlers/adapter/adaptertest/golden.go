package adaptertest

import (
	"bytes"
	"encoding/json"
	"os"
	"testing"
)

// Golden compares got with the golden file at path, rewriting the file first when update is set
// (an adapter's -update flag): what the adapter sends for a shared sample, kept as the
// regression net and read by eye when it changes.
func Golden(t *testing.T, path string, got []byte, update bool) {
	t.Helper()
	if update {
		if err := os.WriteFile(path, got, 0o644); err != nil {
			t.Fatal(err)
		}
	}
	want, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	if string(got) != string(want) {
		t.Errorf("%s differs from what the adapter makes now (go test -run %s -update, then read the diff):\n got %s\nwant %s", path, t.Name(), got, want)
	}
}

// Sample is the text of the Markdown sample at path (an adapter's testdata/sample.md, or the
// shared markdown/testdata/agent.md); a file that cannot be read fails the test.
func Sample(t testing.TB, path string) string {
	t.Helper()
	b, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	return string(b)
}

// IndentJSON is v as JSON indented by two spaces, its <, > and & as written, for a golden file
// a person reads.
func IndentJSON(t testing.TB, v any) []byte {
	t.Helper()
	var b bytes.Buffer
	enc := json.NewEncoder(&b)
	enc.SetEscapeHTML(false)
	enc.SetIndent("", "  ")
	if err := enc.Encode(v); err != nil {
		t.Fatal(err)
	}
	return b.Bytes()
}

// IndentJSONText is the JSON text raw as IndentJSON writes it (its objects' keys sorted); text
// that is not JSON fails the test.
func IndentJSONText(t testing.TB, raw string) []byte {
	t.Helper()
	var v any
	if err := json.Unmarshal([]byte(raw), &v); err != nil {
		t.Fatalf("%s: %v", raw, err)
	}
	return IndentJSON(t, v)
}
