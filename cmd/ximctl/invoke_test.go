package main

import (
	"strings"
	"testing"

	"github.com/ximd/ximd/internal/testkit"
)

// ximctl invoke runs an IM tool on a channel as xAgent would and prints its tool.result; the same
// invocation_id again prints the first result and touches nothing; a failing tool exits 1
// naming the code.
func TestInvokeRunsATool(t *testing.T) {
	t.Parallel()
	n := startTestNode(t, nil)
	tg := startTarget(t)
	if err := n.OpenChannel("cch_invoke", tg.Config("none", "none")); err != nil {
		t.Fatal(err)
	}
	args := []string{"invoke", "-http", "http://" + n.Addr, "-token", n.Token, "-channel", "cch_invoke", "-tool", "im.send_message", "-args", `{"text":"hi from a tool"}`, "-invocation-id", "inv_cli"}
	for i := 0; i < 2; i++ {
		code, out, errOut := runCommand(t, args...)
		if code != 0 || !strings.Contains(out, `"ok":true`) || !strings.Contains(out, `"target_message_id":"tm-1"`) {
			t.Fatalf("run %d: exit %d\n%s%s", i, code, out, errOut)
		}
	}
	if calls := tg.MessageCalls(); len(calls) != 1 || calls[0].Text() != "hi from a tool" {
		t.Fatalf("target calls %d", len(calls))
	}
	code, out, errOut := runCommand(t, "invoke", "-http", "http://"+n.Addr, "-token", n.Token, "-channel", "cch_invoke", "-args", `{"text":""}`)
	if code != 1 || !strings.Contains(errOut, "invalid_arguments") || !strings.Contains(errOut, "arguments.text") {
		t.Fatalf("a failing tool: exit %d\n%s%s", code, out, errOut)
	}
}

// ximctl agent -file-tool answers a user message that asks for a file with one sent by the
// im.send_file tool: the target gets the file (a signed link to the Transfer Plane) and the
// caption, then the streamed answer.
func TestAgentSendsAFileWithTheFileTool(t *testing.T) {
	t.Parallel()
	n := startTestNode(t, nil)
	tg := startTarget(t)
	if err := n.OpenChannel("cch_filetool", tg.Config("none", "none")); err != nil {
		t.Fatal(err)
	}
	agent := startCommand(t, "agent", "-http", "http://"+n.Addr, "-token", n.Token, "-file-tool", "-think", "0s", "-delay", "0s")
	pollUntil(t, "the agent connected", func() bool { return strings.Contains(agent.stdout.String(), "connected") })
	postUserMessage(t, n, "cch_filetool", tg.Secret, "u-file", "please send me a file")
	calls, ok := tg.WaitFor(pollDeadline, func(calls []testkit.Call) bool { return len(calls) >= 2 })
	if !ok {
		t.Fatalf("target calls: %d\nagent:\n%s", len(calls), agent.stdout.String())
	}
	files, _ := calls[0].Body["files"].([]any)
	if len(files) != 1 || !strings.Contains(calls[0].Text(), "Here is a file") || !strings.Contains(string(calls[0].Raw), "ximd-demo.txt") ||
		calls[0].Body["idempotency_key"] == nil || !strings.Contains(calls[0].Body["idempotency_key"].(string), ":tool:") {
		t.Fatalf("first call is not the im.send_file message: %s", calls[0].Raw)
	}
	pollUntil(t, "the tool.result printed", func() bool { return strings.Contains(agent.stdout.String(), "tool.result") })
}
