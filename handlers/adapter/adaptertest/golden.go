package adaptertest

import (
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
