package main

import (
	"bytes"
	"context"
	"encoding/json"
	"io"
	"log/slog"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/ximd/ximd/handlers/adapter/webhook"
	"github.com/ximd/ximd/internal/testkit"
	"github.com/ximd/ximd/pipeline/node"
)

// pollDeadline bounds every wait of these tests.
const pollDeadline = 20 * time.Second

// pollUntil calls f until it is true, failing the test after pollDeadline.
func pollUntil(t *testing.T, desc string, f func() bool) {
	t.Helper()
	deadline := time.Now().Add(pollDeadline)
	for !f() {
		if time.Now().After(deadline) {
			t.Fatalf("not within %s: %s", pollDeadline, desc)
		}
		time.Sleep(20 * time.Millisecond)
	}
}

// startTestNode starts an in-process node (all-in-one unless mutate says otherwise).
func startTestNode(t *testing.T, mutate func(*node.Config)) *testkit.Node {
	t.Helper()
	n, err := testkit.StartNode(testkit.NodeOptions{DataDir: t.TempDir(), Mutate: mutate})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = n.Stop() })
	return n
}

// startTarget starts a loopback webhook target (secret "s3cr3t"), closed when the test ends.
func startTarget(t *testing.T) *testkit.Target {
	t.Helper()
	tg, err := testkit.NewTarget("s3cr3t", testkit.TargetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(tg.Close)
	return tg
}

// command runs one ximctl command in the background, as main would, until the test ends.
type command struct {
	stdout, stderr testkit.SyncBuffer
	cancel         context.CancelFunc
	code           chan int
}

func startCommand(t *testing.T, args ...string) *command {
	t.Helper()
	ctx, cancel := context.WithCancel(context.Background())
	c := &command{cancel: cancel, code: make(chan int, 1)}
	go func() { c.code <- run(ctx, args, &c.stdout, &c.stderr) }()
	t.Cleanup(func() { c.stop(t) })
	return c
}

// stop cancels the command and returns its exit status.
func (c *command) stop(t *testing.T) int {
	t.Helper()
	c.cancel()
	select {
	case code := <-c.code:
		c.code <- code // a later stop returns it too
		return code
	case <-time.After(pollDeadline):
		t.Fatalf("command did not stop; stderr: %s", c.stderr.String())
		return -1
	}
}

// runCommand runs one ximctl command to its end.
func runCommand(t *testing.T, args ...string) (code int, stdout, stderr string) {
	t.Helper()
	var out, errOut bytes.Buffer
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	code = run(ctx, args, &out, &errOut)
	return code, out.String(), errOut.String()
}

// postUserMessage posts a user message as a webhook target would (signed with secret) and
// returns the message_id ximd gave it.
func postUserMessage(t *testing.T, n *testkit.Node, channel, secret, targetMessageID, text string) string {
	t.Helper()
	raw, _ := json.Marshal(map[string]any{"target_message_id": targetMessageID, "text": text})
	req, _ := http.NewRequest(http.MethodPost, "http://"+n.Addr+"/v1/targets/webhook/"+channel+"/messages", bytes.NewReader(raw))
	req.Header.Set("Content-Type", "application/json")
	req.Header.Set("X-Xim-Signature", webhook.Sign([]byte(secret), raw))
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	var body struct {
		MessageID string `json:"message_id"`
	}
	if resp.StatusCode != http.StatusAccepted || json.Unmarshal(b, &body) != nil || body.MessageID == "" {
		t.Fatalf("post user message: %d %s", resp.StatusCode, b)
	}
	return body.MessageID
}

// linesWith returns the lines of s containing every one of parts.
func linesWith(s string, parts ...string) []string {
	var out []string
next:
	for _, l := range strings.Split(s, "\n") {
		for _, p := range parts {
			if !strings.Contains(l, p) {
				continue next
			}
		}
		out = append(out, l)
	}
	return out
}

func discardLogger() *slog.Logger { return slog.New(slog.NewTextHandler(io.Discard, nil)) }
