package test

import (
	"context"
	"encoding/json"
	"fmt"
	"net"
	"net/http"
	"net/url"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/ximd/ximd/internal/testkit"
	"github.com/ximd/ximd/pipeline/node"
	"github.com/ximd/ximd/profile"
)

// The shipped Prometheus files are valid and every alert has its unit test: promtool checks the
// rules and the compose cluster's scrape config, and runs deploy/prometheus/alerts_test.yml (each
// alert fires on a series that should make it fire, silent on one that should not).
func TestPrometheus_RulesCheckAndUnitTests(t *testing.T) {
	promtool := toolBin(t, "promtool")
	dir := filepath.Join("..", "deploy", "prometheus")
	for _, args := range [][]string{
		{"check", "rules", "alerts.yml"},
		{"check", "config", "prometheus.yml"},
		{"test", "rules", "alerts_test.yml"},
	} {
		cmd := exec.Command(promtool, args...)
		cmd.Dir = dir
		if out, err := cmd.CombinedOutput(); err != nil {
			t.Errorf("promtool %v: %v\n%s", args, err, out)
		}
	}
	// Every alert of the rules file has a test that makes it fire.
	rules, err := os.ReadFile(filepath.Join(dir, "alerts.yml"))
	if err != nil {
		t.Fatal(err)
	}
	tests, err := os.ReadFile(filepath.Join(dir, "alerts_test.yml"))
	if err != nil {
		t.Fatal(err)
	}
	alerts := regexp.MustCompile(`(?m)^\s*- alert: (\w+)`).FindAllSubmatch(rules, -1)
	if len(alerts) < 10 {
		t.Fatalf("%d alerts in alerts.yml", len(alerts))
	}
	for _, a := range alerts {
		for _, want := range []string{"name: " + string(a[1]) + " fires", "name: " + string(a[1]) + " stays silent"} {
			if !regexp.MustCompile(`(?m)^- ` + regexp.QuoteMeta(want) + `$`).Match(tests) {
				t.Errorf("alerts_test.yml has no test %q", want)
			}
		}
	}
}

// toolBin finds a Prometheus tool (Debian's `prometheus` package); CI sets
// XIMD_REQUIRE_PROMETHEUS and installs it, elsewhere the test is skipped without one.
func toolBin(t *testing.T, name string) string {
	t.Helper()
	bin, err := exec.LookPath(name)
	if err != nil {
		if os.Getenv("XIMD_REQUIRE_PROMETHEUS") != "" {
			t.Fatalf("XIMD_REQUIRE_PROMETHEUS is set (CI) but there is no %s on PATH", name)
		}
		t.Skipf("no %s on PATH (apt-get install prometheus)", name)
	}
	return bin
}

// fastRules is deploy/prometheus/alerts.yml with every `for` cut to 3s and every rate window to
// 10s, so a test sees an alert fire and resolve in seconds; the expressions are the shipped ones.
func fastRules(t *testing.T) []byte {
	t.Helper()
	b, err := os.ReadFile(filepath.Join("..", "deploy", "prometheus", "alerts.yml"))
	if err != nil {
		t.Fatal(err)
	}
	b = regexp.MustCompile(`for: \d+[smh]`).ReplaceAll(b, []byte("for: 3s"))
	return regexp.MustCompile(`\[\d+[smh]\]`).ReplaceAll(b, []byte("[10s]"))
}

// promServer is a Prometheus server scraping one ximd every second.
type promServer struct {
	t   *testing.T
	api string
}

func startPrometheus(t *testing.T, scrape string) *promServer {
	t.Helper()
	bin := toolBin(t, "prometheus")
	dir := t.TempDir()
	if err := os.WriteFile(filepath.Join(dir, "alerts.yml"), fastRules(t), 0o644); err != nil {
		t.Fatal(err)
	}
	cfg := fmt.Sprintf(`global: {scrape_interval: 1s, evaluation_interval: 1s}
rule_files: [alerts.yml]
scrape_configs:
  - job_name: ximd-node
    static_configs: [{targets: [%q]}]
`, scrape)
	if err := os.WriteFile(filepath.Join(dir, "prometheus.yml"), []byte(cfg), 0o644); err != nil {
		t.Fatal(err)
	}
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	addr := ln.Addr().String()
	ln.Close()
	ctx, cancel := context.WithCancel(context.Background())
	cmd := exec.CommandContext(ctx, bin, "--config.file="+filepath.Join(dir, "prometheus.yml"),
		"--storage.tsdb.path="+filepath.Join(dir, "data"), "--web.listen-address="+addr)
	cmd.Dir = dir
	logf, err := os.Create(filepath.Join(dir, "prometheus.log"))
	if err != nil {
		t.Fatal(err)
	}
	cmd.Stdout, cmd.Stderr = logf, logf
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		cancel()
		_ = cmd.Wait()
		logf.Close()
		if t.Failed() {
			if b, err := os.ReadFile(logf.Name()); err == nil {
				t.Logf("prometheus log:\n%s", b)
			}
		}
	})
	p := &promServer{t: t, api: "http://" + addr + "/api/v1/"}
	pollFor(t, 30*time.Second, "prometheus ready", func() bool {
		resp, err := http.Get("http://" + addr + "/-/ready")
		if err != nil {
			return false
		}
		resp.Body.Close()
		return resp.StatusCode == http.StatusOK
	})
	return p
}

func (p *promServer) get(path string, out any) {
	p.t.Helper()
	resp, err := http.Get(p.api + path)
	if err != nil {
		p.t.Fatal(err)
	}
	defer resp.Body.Close()
	var body struct {
		Status string          `json:"status"`
		Data   json.RawMessage `json:"data"`
		Error  string          `json:"error"`
	}
	if err := json.NewDecoder(resp.Body).Decode(&body); err != nil || body.Status != "success" {
		p.t.Fatalf("GET %s: %v %s", path, err, body.Error)
	}
	if err := json.Unmarshal(body.Data, out); err != nil {
		p.t.Fatal(err)
	}
}

// value is the query's single value (0 when it has none yet).
func (p *promServer) value(query string) float64 {
	p.t.Helper()
	var data struct {
		Result []struct {
			Value [2]any `json:"value"`
		} `json:"result"`
	}
	p.get("query?query="+url.QueryEscape(query), &data)
	if len(data.Result) == 0 {
		return 0
	}
	s, _ := data.Result[0].Value[1].(string)
	v, _ := strconv.ParseFloat(s, 64)
	return v
}

type promAlert struct {
	Labels map[string]string `json:"labels"`
	State  string            `json:"state"`
}

// alert returns the named alert's state for the labels (adapter, ...): "" when Prometheus has none.
func (p *promServer) alert(name string, labels map[string]string) string {
	p.t.Helper()
	var data struct {
		Alerts []promAlert `json:"alerts"`
	}
	p.get("alerts", &data)
next:
	for _, a := range data.Alerts {
		if a.Labels["alertname"] != name {
			continue
		}
		for k, v := range labels {
			if a.Labels[k] != v {
				continue next
			}
		}
		return a.State
	}
	return ""
}

// The shipped alert rules on a real Prometheus scraping a running ximd under steady traffic (a
// final at a time, as fast as they are answered): with a webhook target that answers,
// XimdTargetFailing is silent; once the target answers 503 to every call it fires (state `firing`
// in /api/v1/alerts, labelled with the adapter), and once the target heals it resolves.
func TestPrometheus_TargetFailureAlertFiresAndResolves(t *testing.T) {
	// A short retry budget: a failing final is answered within a second, so the traffic goes on.
	e := newEnv(t, envOptions{streaming: "none", activity: "none", mutate: func(c *node.Config) { c.TargetRetryBudget = time.Second }})
	p := startPrometheus(t, e.node.Addr)
	webhook := map[string]string{"adapter": "webhook"}
	n := 0
	traffic := func(want string) {
		n++
		_, ack := e.final(msg(fmt.Sprintf("m-%d", n), "hello"))
		if ack.Status != want {
			t.Fatalf("final %d answered %s %s, want %s", n, ack.Status, ack.Code, want)
		}
	}

	pollFor(t, 30*time.Second, "successful calls scraped", func() bool {
		traffic(profile.AckAccepted)
		return p.value(`sum(ximd_target_call_seconds_count{adapter="webhook",outcome="ok"})`) >= 1
	})
	if s := p.alert("XimdTargetFailing", webhook); s != "" {
		t.Fatalf("XimdTargetFailing %s while the target answers", s)
	}

	e.target.SetAnswer(func(testkit.Call) int { return http.StatusServiceUnavailable })
	pollFor(t, 60*time.Second, "XimdTargetFailing firing", func() bool {
		traffic(profile.AckRejected)
		return p.alert("XimdTargetFailing", webhook) == "firing"
	})

	e.target.SetAnswer(nil)
	pollFor(t, 60*time.Second, "XimdTargetFailing resolved", func() bool {
		traffic(profile.AckAccepted)
		return p.alert("XimdTargetFailing", webhook) == ""
	})
}

// Every query of the Grafana dashboard parses and returns data on a real Prometheus scraping a
// running ximd after a short load (finals, a streamed message, a status): Grafana's
// $__rate_interval is given as 15s, what Grafana would pick for a 1s scrape interval.
func TestPrometheus_DashboardQueriesReturnData(t *testing.T) {
	d := readDashboard(t)
	e := newEnv(t, envOptions{streaming: "edit", activity: "typing"})
	p := startPrometheus(t, e.node.Addr)
	load := func() {
		e.send(profile.TypeActivity, map[string]any{"state": "thinking"})
		id := testkit.NewID("m")
		e.send(profile.TypeDelta, delta(id, 1, "Hel"))
		e.send(profile.TypeDelta, delta(id, 2, "lo"))
		_, ack := e.final(msg(id, "Hello"))
		wantAck(t, ack, profile.AckAccepted, "")
	}
	var missing []string
	deadline := time.Now().Add(60 * time.Second)
	for {
		load()
		missing = missing[:0]
		for _, panel := range d.Panels {
			for _, q := range panel.Targets {
				expr := strings.ReplaceAll(q.Expr, "$__rate_interval", "15s")
				var data struct {
					Result []json.RawMessage `json:"result"`
				}
				p.get("query?query="+url.QueryEscape(expr), &data) // fails the test on a parse error
				if len(data.Result) == 0 {
					missing = append(missing, fmt.Sprintf("%s: %s", panel.Title, expr))
				}
			}
		}
		if len(missing) == 0 {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("dashboard queries without data after 60s:\n%s", strings.Join(missing, "\n"))
		}
		time.Sleep(500 * time.Millisecond)
	}
}
