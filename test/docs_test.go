package test

import (
	"fmt"
	"os"
	"regexp"
	"slices"
	"strings"
	"testing"

	"github.com/ximd/ximd/profile"
	"github.com/ximd/ximd/subjects"
)

// docs/errors.md is generated from the code table; UPDATE_DOCS=1 go test ./test -run TestDocs rewrites it.
func TestDocs_ErrorCodesTableIsTheCodeTable(t *testing.T) {
	var b strings.Builder
	b.WriteString("# Error codes\n\nGenerated from `profile/errors.json` by `UPDATE_DOCS=1 go test ./test -run TestDocs`; do not edit.\n")
	b.WriteString("`retryable` is the value ximd sends with the code; the HTTP status is used where the code answers an HTTP request.\n\n")
	b.WriteString("| code | retryable | HTTP | meaning |\n|---|---|---|---|\n")
	for _, c := range profile.Codes() {
		fmt.Fprintf(&b, "| `%s` | %v | %d | %s |\n", c.Code, c.Retryable, c.HTTPStatus, strings.ReplaceAll(c.Description, "|", "\\|"))
	}
	want := b.String()
	if os.Getenv("UPDATE_DOCS") != "" {
		if err := os.WriteFile("../docs/errors.md", []byte(want), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	got, err := os.ReadFile("../docs/errors.md")
	if err != nil || string(got) != want {
		t.Fatalf("docs/errors.md is stale (err %v): run UPDATE_DOCS=1 go test ./test -run TestDocs", err)
	}
}

// Every XIM_* variable the code reads is in the README's table, and the README names no other
// (but those docker-compose.yml reads: the compose cluster's secrets).
func TestDocs_EveryVariableInREADME(t *testing.T) {
	re := regexp.MustCompile(`XIM_[A-Z_]+[A-Z]`)
	code, err := os.ReadFile("../pipeline/node/config.go")
	if err != nil {
		t.Fatal(err)
	}
	readme, err := os.ReadFile("../README.md")
	if err != nil {
		t.Fatal(err)
	}
	compose, err := os.ReadFile("../docker-compose.yml")
	if err != nil {
		t.Fatal(err)
	}
	inCode := uniq(re.FindAllString(string(code), -1))
	inCompose := uniq(re.FindAllString(string(compose), -1))
	inReadme := uniq(re.FindAllString(string(readme), -1))
	for _, v := range inCode {
		if !strings.Contains(string(readme), "| `"+v+"` |") {
			t.Errorf("%s is read by the code but has no row in the README's configuration table", v)
		}
	}
	streams := []string{subjects.StreamIn, subjects.StreamOut, subjects.StreamReplies, subjects.StreamPoison, subjects.StreamWebchat} // not variables
	for _, v := range inReadme {
		if !slices.Contains(inCode, v) && !slices.Contains(streams, v) && !slices.Contains(inCompose, v) {
			t.Errorf("README names %s, which the code does not read", v)
		}
	}
}

func uniq(s []string) []string {
	slices.Sort(s)
	return slices.Compact(s)
}
