package handlers

import (
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
)

// The package doc lists every file of the package with its job, and only files that exist: a
// reader finds a rule's code by the file the doc names.
func TestDoc_NamesEveryFile(t *testing.T) {
	doc, err := os.ReadFile("doc.go")
	if err != nil {
		t.Fatal(err)
	}
	listed := map[string]bool{}
	for _, m := range regexp.MustCompile(`(?m)^//\t(\w+\.go)\s`).FindAllStringSubmatch(string(doc), -1) {
		listed[m[1]] = true
	}
	files, err := filepath.Glob("*.go")
	if err != nil {
		t.Fatal(err)
	}
	exist := map[string]bool{}
	for _, f := range files {
		if strings.HasSuffix(f, "_test.go") || f == "doc.go" {
			continue
		}
		exist[f] = true
		if !listed[f] {
			t.Errorf("doc.go does not name %s", f)
		}
	}
	for f := range listed {
		if !exist[f] {
			t.Errorf("doc.go names %s, which is not a file of the package", f)
		}
	}
}
