package layers

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"go/parser"
	"go/token"
	"io"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"testing"
)

// module is the module path the layers are relative to.
const module = "github.com/ximd/ximd"

// layer is one band of the import graph: the packages whose path (relative to the module) is
// one of roots or below it, and the layers their non-test files may import besides their own.
type layer struct {
	name  string
	roots []string
	may   []string
}

// layers is the import graph as docs/design.md states it, highest first. A package belongs to
// the layer with the longest root that contains it (handlers/adapter/webhook is in adapter, not
// in handlers).
var layers = []layer{
	{"cmd", []string{"cmd"}, []string{"internal", "pipeline", "handlers", "adapter", "spans", "profile", "subjects"}},
	{"internal", []string{"internal"}, []string{"pipeline", "handlers", "adapter", "spans", "profile", "subjects"}},
	{"pipeline", []string{"pipeline"}, []string{"handlers", "adapter", "spans", "profile", "subjects"}},
	{"handlers", []string{"handlers"}, []string{"adapter", "spans", "profile", "subjects"}},
	{"adapter", []string{"handlers/adapter"}, []string{"spans", "profile", "subjects"}},
	{"spans", []string{"handlers/spans"}, nil},
	{"profile", []string{"profile"}, nil},
	{"subjects", []string{"subjects"}, nil},
	{"test", []string{"test"}, nil}, // a consumer: exempt as an importer
}

// layerOf returns the layer of rel, a package path relative to the module, or nil.
func layerOf(rel string) *layer {
	var best *layer
	bestLen := -1
	for i := range layers {
		for _, r := range layers[i].roots {
			if (rel == r || strings.HasPrefix(rel, r+"/")) && len(r) > bestLen {
				best, bestLen = &layers[i], len(r)
			}
		}
	}
	return best
}

// allowed reports whether a package of layer from may import one of layer to.
func allowed(from, to *layer) bool {
	switch {
	case from.name == "test":
		return true // the end-to-end suites drive every layer
	case to.name == "test":
		return false // product code never imports the test tree
	case from == to:
		return true
	}
	return slices.Contains(from.may, to.name)
}

// pkg is what go list tells of a package.
type pkg struct {
	ImportPath string
	Dir        string
	GoFiles    []string
	CgoFiles   []string
	Imports    []string // of the non-test files
	Error      *struct{ Err string }
}

// list returns the module's packages as go list sees them from the module root.
func list(t *testing.T) []pkg {
	t.Helper()
	cmd := exec.Command("go", "list", "-e", "-json=ImportPath,Dir,GoFiles,CgoFiles,Imports,Error", module+"/...")
	cmd.Dir = filepath.Join("..", "..")
	var stderr bytes.Buffer
	cmd.Stderr = &stderr
	out, err := cmd.Output()
	if err != nil {
		t.Fatalf("go list: %v\n%s", err, stderr.String())
	}
	var pkgs []pkg
	for dec := json.NewDecoder(bytes.NewReader(out)); ; {
		var p pkg
		if err := dec.Decode(&p); errors.Is(err, io.EOF) {
			break
		} else if err != nil {
			t.Fatalf("go list output: %v", err)
		}
		if p.Error != nil {
			t.Fatalf("go list %s: %s", p.ImportPath, p.Error.Err)
		}
		pkgs = append(pkgs, p)
	}
	if len(pkgs) == 0 {
		t.Fatal("go list found no package")
	}
	return pkgs
}

// importers returns the files of p (relative to the module root) whose imports name path.
func importers(t *testing.T, p pkg, rel, path string) []string {
	t.Helper()
	var files []string
	for _, name := range slices.Concat(p.GoFiles, p.CgoFiles) {
		f, err := parser.ParseFile(token.NewFileSet(), filepath.Join(p.Dir, name), nil, parser.ImportsOnly)
		if err != nil {
			t.Fatal(err)
		}
		for _, imp := range f.Imports {
			if v, err := strconv.Unquote(imp.Path.Value); err == nil && v == path {
				files = append(files, filepath.ToSlash(filepath.Join(rel, name)))
			}
		}
	}
	return files
}

// relative returns path relative to the module, and whether it is the module's.
func relative(path string) (string, bool) {
	if path == module {
		return "", true
	}
	rel, ok := strings.CutPrefix(path, module+"/")
	return rel, ok
}

// Every import between the module's packages, in non-test files, runs down the layers of
// docs/design.md (cmd -> internal -> pipeline -> handlers -> adapter -> profile/subjects), and
// every package is in a layer.
func TestLayers_ImportsRunOneWay(t *testing.T) {
	for _, p := range list(t) {
		rel, _ := relative(p.ImportPath)
		from := layerOf(rel)
		if from == nil {
			t.Errorf("package %s is in no layer: give it one in internal/layers (and docs/design.md)", rel)
			continue
		}
		for _, imp := range p.Imports {
			irel, ours := relative(imp)
			if !ours {
				continue
			}
			to := layerOf(irel)
			if to == nil {
				continue // reported as an importer
			}
			if !allowed(from, to) {
				t.Errorf("%s -> %s (%s), imported by %s: layer %s may import only %s",
					rel, irel, to.name, strings.Join(importers(t, p, rel, imp), ", "), from.name, mayList(from))
			}
		}
	}
}

// mayList says which layers l may import.
func mayList(l *layer) string {
	if len(l.may) == 0 {
		return "its own (nothing else of the module)"
	}
	return fmt.Sprintf("its own and %s", strings.Join(l.may, ", "))
}

// The table says what docs/design.md says: a few arrows each way, and every layer a layer may
// import is one of the table's.
func TestLayers_Table(t *testing.T) {
	names := map[string]bool{}
	for _, l := range layers {
		names[l.name] = true
	}
	for _, l := range layers {
		for _, m := range l.may {
			if !names[m] {
				t.Errorf("layer %s may import %q, which is no layer", l.name, m)
			}
		}
	}
	for _, c := range []struct {
		name     string
		from, to string
		want     bool
	}{
		{"cmd uses the operator tool's libraries", "cmd/ximctl", "internal/conformance", true},
		{"cmd assembles a node", "cmd/ximd", "pipeline/node", true},
		{"the tool's libraries drive the product", "internal/testkit", "pipeline/node", true},
		{"pipeline runs the stages", "pipeline/node", "handlers", true},
		{"the edge starts spans", "pipeline/edge", "handlers/spans", true},
		{"the stages use the adapter contract", "handlers", "handlers/adapter", true},
		{"the stages start spans", "handlers", "handlers/spans", true},
		{"an adapter uses the contract", "handlers/adapter/webhook", "handlers/adapter", true},
		{"the page uses its adapter", "handlers/adapter/webchat/page", "handlers/adapter/webchat", true},
		{"the suites drive anything", "test/faultkit", "internal/testkit", true},
		{"product code never imports the test tree", "cmd/ximctl", "test/faultkit", false},
		{"the product never imports the tool's libraries", "pipeline/node", "internal/testkit", false},
		{"the tool's libraries are no main", "internal/load", "cmd/internal/agent", false},
		{"the stages import nothing from pipeline", "handlers", "pipeline/tracing", false},
		{"spans is a leaf", "handlers/spans", "handlers", false},
		{"an adapter never imports the stages", "handlers/adapter/slack", "handlers", false},
		{"an adapter never imports pipeline", "handlers/adapter/matrix", "pipeline/channels", false},
		{"profile imports nothing of the module", "profile", "subjects", false},
		{"subjects imports nothing of the module", "subjects", "profile", false},
	} {
		t.Run(c.name, func(t *testing.T) {
			from, to := layerOf(c.from), layerOf(c.to)
			if from == nil || to == nil {
				t.Fatalf("layerOf(%s) = %v, layerOf(%s) = %v", c.from, from, c.to, to)
			}
			if got := allowed(from, to); got != c.want {
				t.Errorf("%s -> %s allowed = %v, want %v", c.from, c.to, got, c.want)
			}
		})
	}
	if l := layerOf("tools/gen"); l != nil {
		t.Errorf("layerOf(tools/gen) = %s, want none", l.name)
	}
}
