package test

import (
	"encoding/json"
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
)

// dashboard is the part of the Grafana dashboard model the tests read.
type dashboard struct {
	Templating struct {
		List []struct {
			Name, Type, Query string
		} `json:"list"`
	} `json:"templating"`
	Panels []struct {
		Title      string `json:"title"`
		Datasource struct {
			UID string `json:"uid"`
		} `json:"datasource"`
		Targets []struct {
			Expr       string `json:"expr"`
			Datasource struct {
				UID string `json:"uid"`
			} `json:"datasource"`
		} `json:"targets"`
	} `json:"panels"`
}

func readDashboard(t *testing.T) dashboard {
	t.Helper()
	b, err := os.ReadFile(filepath.Join("..", "deploy", "grafana", "ximd-dashboard.json"))
	if err != nil {
		t.Fatal(err)
	}
	var d dashboard
	if err := json.Unmarshal(b, &d); err != nil {
		t.Fatalf("dashboard JSON: %v", err)
	}
	return d
}

// exportedMetrics is every metric family ximd registers (the Name of its Opts or NewDesc in the
// code), read from the source so that a family no test load happens to produce still counts.
func exportedMetrics(t *testing.T) map[string]bool {
	t.Helper()
	re := regexp.MustCompile(`(?:Name:\s*|NewDesc\(\s*)"(ximd_[a-z0-9_]+)"`)
	names := map[string]bool{}
	for _, dir := range []string{"../handlers", "../pipeline"} {
		err := filepath.WalkDir(dir, func(path string, e os.DirEntry, err error) error {
			if err != nil || e.IsDir() || !strings.HasSuffix(path, ".go") || strings.HasSuffix(path, "_test.go") {
				return err
			}
			b, err := os.ReadFile(path)
			for _, m := range re.FindAllSubmatch(b, -1) {
				names[string(m[1])] = true
			}
			return err
		})
		if err != nil {
			t.Fatal(err)
		}
	}
	if len(names) < 30 {
		t.Fatalf("found only %d metric families in the code", len(names))
	}
	return names
}

// The dashboard takes its Prometheus as a variable (every panel and query uses it) and its
// queries name only metrics ximd exports (histograms by their _bucket, _count or _sum series).
func TestDashboard_QueriesNameExportedMetrics(t *testing.T) {
	d := readDashboard(t)
	vars := map[string]string{}
	for _, v := range d.Templating.List {
		vars[v.Name] = v.Type + "/" + v.Query
	}
	if vars["datasource"] != "datasource/prometheus" {
		t.Fatalf("no Prometheus datasource variable: %v", vars)
	}
	exported := exportedMetrics(t)
	metric := regexp.MustCompile(`\bximd_[a-z0-9_]+`)
	if len(d.Panels) < 12 {
		t.Fatalf("%d panels", len(d.Panels))
	}
	for _, p := range d.Panels {
		if p.Datasource.UID != "${datasource}" || len(p.Targets) == 0 {
			t.Errorf("panel %q: datasource %q, %d queries", p.Title, p.Datasource.UID, len(p.Targets))
		}
		for _, q := range p.Targets {
			if q.Datasource.UID != "${datasource}" {
				t.Errorf("panel %q: a query's datasource is %q", p.Title, q.Datasource.UID)
			}
			names := metric.FindAllString(q.Expr, -1)
			if len(names) == 0 {
				t.Errorf("panel %q: query %q names no ximd metric", p.Title, q.Expr)
			}
			for _, n := range names {
				base := n
				for _, suffix := range []string{"_bucket", "_count", "_sum"} {
					if b, ok := strings.CutSuffix(n, suffix); ok && exported[b] {
						base = b
					}
				}
				if !exported[base] {
					t.Errorf("panel %q: %s is not a metric ximd exports", p.Title, n)
				}
			}
		}
	}
}
