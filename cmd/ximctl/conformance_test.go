package main

import (
	"bytes"
	"encoding/json"
	"io"
	"strings"
	"testing"
	"time"

	"github.com/ximd/ximd/internal/conformance"
	"github.com/ximd/ximd/pipeline/node"
)

// The checks themselves, against a real ximd and against broken edges, are tested in
// internal/conformance; these tests are about the command: its outputs and exit status.

func TestConformanceJSONIsExactlyTheChecks(t *testing.T) {
	n := startTestNode(t, nil)
	code, stdout, stderr := runCommand(t, "conformance", "-http", n.Addr, "-token", n.Token, "-json", "-settle", "300ms",
		"-only", "^(card-declares|direct-final|state-bounded)$")
	if code != 0 {
		t.Fatalf("exit %d, stderr %s, stdout %s", code, stderr, stdout)
	}
	dec := json.NewDecoder(strings.NewReader(stdout))
	dec.DisallowUnknownFields()
	var got struct {
		Checks []struct {
			ID     string `json:"id"`
			Rule   string `json:"rule"`
			Status string `json:"status"`
			Detail string `json:"detail"`
		} `json:"checks"`
	}
	if err := dec.Decode(&got); err != nil {
		t.Fatalf("stdout is not {\"checks\":[{id, rule, status, detail}]}: %v\n%s", err, stdout)
	}
	if _, err := dec.Token(); err != io.EOF {
		t.Fatalf("more than the report on stdout: %s", stdout)
	}
	want := map[string]string{"card-declares": "pass", "direct-final": "pass", "state-bounded": "skip"}
	if len(got.Checks) != len(want) {
		t.Fatalf("%d checks, want %d: %s", len(got.Checks), len(want), stdout)
	}
	for _, c := range got.Checks {
		if want[c.ID] != c.Status || c.Rule == "" || c.Detail == "" {
			t.Errorf("%+v, want status %s with a rule and a detail", c, want[c.ID])
		}
	}
}

func TestConformanceTableFitsAndExitStatus(t *testing.T) {
	n := startTestNode(t, func(c *node.Config) { c.TargetRetryBudget = time.Second })
	code, stdout, stderr := runCommand(t, "conformance", "-http", n.Addr, "-token", n.Token, "-settle", "300ms", "-only", "^(card|descriptor)")
	if code != 0 {
		t.Fatalf("exit %d, stderr %s", code, stderr)
	}
	lines := strings.Split(strings.TrimRight(stdout, "\n"), "\n")
	if !strings.HasPrefix(lines[0], "ID ") || !strings.Contains(lines[0], "DETAIL") {
		t.Fatalf("no header: %q", lines[0])
	}
	for _, l := range lines {
		if len(l) > 100 {
			t.Errorf("line of %d columns (max 100): %q", len(l), l)
		}
	}
	if last := lines[len(lines)-1]; !strings.HasPrefix(last, "3 checks: 3 pass, 0 fail, 0 skip") {
		t.Fatalf("summary %q", last)
	}

	// A target ximd cannot reach: the final is rejected, the check fails, the exit status is 1.
	code, stdout, stderr = runCommand(t, "conformance", "-http", n.Addr, "-token", n.Token, "-only", "^direct-final$", "-target-url", "http://127.0.0.1:1")
	if code != 1 || len(linesWith(stdout, "direct-final", "fail")) != 1 || !strings.Contains(stdout, "target_unavailable") || !strings.Contains(stderr, "1 of 1 checks failed") {
		t.Fatalf("unreachable target: exit %d, stdout %s, stderr %s; want 1 and the failure named", code, stdout, stderr)
	}

	code, _, stderr = runCommand(t, "conformance", "-http", n.Addr, "-token", n.Token, "-only", "^nothing-matches$")
	if code != 1 || !strings.Contains(stderr, "no check id matches") {
		t.Fatalf("-only matching nothing: exit %d, %s", code, stderr)
	}
	code, _, stderr = runCommand(t, "conformance", "-http", n.Addr, "-token", "wrong")
	if code != 1 || !strings.Contains(stderr, "refuses the token") {
		t.Fatalf("a wrong token: exit %d, %s", code, stderr)
	}
}

func TestConformanceListNamesEveryCheck(t *testing.T) {
	code, stdout, _ := runCommand(t, "conformance", "-list")
	if code != 0 {
		t.Fatalf("exit %d", code)
	}
	for _, c := range conformance.Checks() {
		if len(linesWith(stdout, c.ID, c.Rule)) != 1 {
			t.Errorf("-list lacks %s (%s):\n%s", c.ID, c.Rule, stdout)
		}
	}
	if bytes.Count([]byte(stdout), []byte("\n")) < len(conformance.Checks()) {
		t.Fatalf("-list: %s", stdout)
	}
}

func TestConformanceInterruptedDeletesItsChannels(t *testing.T) {
	n := startTestNode(t, nil)
	c := startCommand(t, "conformance", "-http", n.Addr, "-token", n.Token, "-only", "user-msg|reconnect")
	conformanceChannels := func() int {
		list, err := n.Channels()
		if err != nil {
			t.Fatal(err)
		}
		k := 0
		for _, ch := range list {
			k += strings.Count(string(ch), `"conformance-`)
		}
		return k
	}
	pollUntil(t, "a conformance channel is open", func() bool { return conformanceChannels() > 0 })
	if code := c.stop(t); code != 1 || !strings.Contains(c.stderr.String(), "interrupted; its scratch channels were deleted") {
		t.Fatalf("interrupted: exit %d, stderr %s", code, c.stderr.String())
	}
	if k := conformanceChannels(); k != 0 {
		t.Fatalf("%d conformance channels left after the interrupt", k)
	}
}
