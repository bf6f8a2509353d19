package main

import (
	"context"
	"encoding/json"
	"fmt"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/ximd/ximd/internal/testkit"
	"github.com/ximd/ximd/pipeline"
	"github.com/ximd/ximd/pipeline/node"
	"github.com/ximd/ximd/profile"
	"github.com/ximd/ximd/subjects"
)

// ximctl status on a gateway and a worker sharing one NATS server: a user message that expired
// while the worker ran is a failure; once the worker is gone, a new user message stays pending
// and a final from xAgent waits in XIM_IN, visible as lag of its partition consumer. Both sources
// of channels (KV and the HTTP API) agree.
func TestStatus_ShowsChannelPendingFailureAndLag(t *testing.T) {
	t.Parallel()
	srv, err := pipeline.StartServer(pipeline.ServerConfig{DataDir: t.TempDir(), Port: -1}, discardLogger())
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(srv.Shutdown) // after the nodes' own cleanups (LIFO)
	role := func(r node.Role) func(*node.Config) {
		return func(c *node.Config) {
			c.Role, c.NATSURL = r, srv.ClientURL()
			c.Store.OutboundMaxAge = time.Second // the first user message expires quickly
		}
	}
	worker := startTestNode(t, role(node.RoleWorker))
	gw := startTestNode(t, role(node.RoleGateway))
	tg := startTarget(t)
	const ch = "cch_status"
	if err := gw.OpenChannel(ch, tg.Config("none", "none")); err != nil {
		t.Fatal(err)
	}
	status := func(args ...string) statusReport {
		t.Helper()
		code, out, errOut := runCommand(t, append([]string{"status", "-json", "-nats", srv.ClientURL()}, args...)...)
		var rep statusReport
		if code != 0 || json.Unmarshal([]byte(out), &rep) != nil {
			t.Fatalf("status exited %d: %s %s", code, out, errOut)
		}
		return rep
	}
	channelOf := func(rep statusReport) channelStatus {
		for _, c := range rep.Channels {
			if c.ID == ch {
				return c
			}
		}
		t.Fatalf("channel %s not listed: %+v", ch, rep.Channels)
		return channelStatus{}
	}

	agent, err := testkit.Dial(context.Background(), gw.Addr, gw.Token)
	if err != nil {
		t.Fatal(err)
	}
	defer agent.Close()
	final := func(id string) string {
		t.Helper()
		pid, err := agent.Send(context.Background(), ch, profile.TypeMessage, map[string]any{"message_id": id, "text": "final " + id})
		if err != nil {
			t.Fatal(err)
		}
		return pid
	}

	// While the worker runs: a final is processed (its partition is then pinned to the worker),
	// and a user message xAgent never acks expires.
	if env, err := agent.Reply(final("m_first"), pollDeadline); err != nil || env.Type != profile.TypeAck {
		t.Fatalf("first final: %v %s", err, env.Payload)
	}
	expired := postUserMessage(t, gw, ch, tg.Secret, "T-old", "too late")
	pollUntil(t, "the expired failure", func() bool { return len(channelOf(status()).Failures) == 1 })
	pollUntil(t, "a partition pinned to the running worker", func() bool {
		for _, s := range status().Streams {
			for _, c := range s.Consumers {
				if s.Name == subjects.StreamIn && c.PinnedClientID != "" {
					return true
				}
			}
		}
		return false
	})

	// Without a worker: a new user message stays pending, a final waits in XIM_IN.
	if err := worker.Stop(); err != nil {
		t.Fatal(err)
	}
	pending := postUserMessage(t, gw, ch, tg.Secret, "T-new", "waiting")
	final("m_lag")
	lag := func(rep statusReport) (in uint64, partition string) {
		for _, s := range rep.Streams {
			if s.Name != subjects.StreamIn {
				continue
			}
			for _, c := range s.Consumers {
				if c.NumPending > 0 {
					in += c.NumPending
					partition = c.Name
				}
			}
		}
		return in, partition
	}
	var rep statusReport
	pollUntil(t, "lag of a partition consumer", func() bool { rep = status(); n, _ := lag(rep); return n == 1 })

	c := channelOf(rep)
	if c.Adapter != "webhook" || c.OpenedAt == 0 || c.PendingOutbound != 1 {
		t.Fatalf("channel %+v, want webhook, opened, 1 pending (%s)", c, pending)
	}
	if f := c.Failures[0]; f.MessageID != expired || f.Code != "expired" {
		t.Fatalf("failure %+v, want %s expired", f, expired)
	}
	figures := map[string]streamStatus{}
	for _, s := range rep.Streams {
		figures[s.Name] = s
	}
	if figures[subjects.StreamIn].Messages != 1 || figures[subjects.StreamOut].Messages != 1 || figures[subjects.StreamPoison].Messages != 0 {
		t.Fatalf("streams %+v", rep.Streams)
	}
	// One consumer per stage and partition: 4 stages (acks, activity, assemble, deliver) x 8.
	if cs := figures[subjects.StreamIn].Consumers; len(cs) != 32 || cs[0].Name != "acks-p00" || cs[31].Name != "deliver-p07" {
		t.Fatalf("XIM_IN consumers %+v", cs)
	}
	if cs := figures[subjects.StreamOut].Consumers; len(cs) != 1 || cs[0].Name != subjects.OutboundConsumer || cs[0].NumPending != 1 {
		t.Fatalf("XIM_OUT consumers %+v, want outbound with the new item undelivered", cs)
	}
	_, partition := lag(rep)

	// The same from the HTTP API (channels) and as a table.
	viaHTTP := channelOf(status("-http", "http://"+gw.Addr, "-token", gw.Token))
	if viaHTTP.PendingOutbound != 1 || len(viaHTTP.Failures) != 1 || viaHTTP.Failures[0].Code != "expired" || viaHTTP.Adapter != "webhook" {
		t.Fatalf("from the HTTP API: %+v", viaHTTP)
	}
	code, out, errOut := runCommand(t, "status", "-nats", srv.ClientURL())
	if code != 0 {
		t.Fatalf("status exited %d: %s", code, errOut)
	}
	t.Logf("ximctl status printed:\n%s", out)
	for _, re := range []string{
		`(?m)^CHANNEL +ADAPTER +OPENED +PENDING OUT +FAILURES +LAST FAILURE$`,
		`(?m)^` + ch + ` +webhook +\d{4}-\d\d-\d\d \d\d:\d\d:\d\d +1 +1 +expired ` + expired + ` \(`,
		`(?m)^XIM_IN +1 +\d`,
		`(?m)^XIM_IN +` + partition + ` +1 +0 +0 +`,
		`(?m)^XIM_OUT +outbound +1 +`,
		`(?m)^XIM_POISON +0 +0 B$`,
		`(?m)^` + ch + ` +\d{4}-\d\d-\d\d \d\d:\d\d:\d\d +` + expired + ` +expired +`,
	} {
		if !regexp.MustCompile(re).MatchString(out) {
			t.Fatalf("no line matching %s in:\n%s", re, out)
		}
	}
	if strings.Contains(out, "s3cr3t") {
		t.Fatal("status printed the target's secret")
	}
}

// Against an all-in-one node, ximctl finds the embedded NATS server and its credentials in
// XIM_DATA_DIR without flags; without the credentials the server refuses it, and the error says so.
func TestStatus_EmbeddedServerCredentialsFromTheDataDir(t *testing.T) {
	n := startTestNode(t, nil)
	t.Setenv("XIM_NATS_URL", "")
	t.Setenv("XIM_NATS_CREDS", "")
	t.Setenv("XIM_DATA_DIR", n.DataDir)
	code, out, errOut := runCommand(t, "status", "-json")
	if code != 0 {
		t.Fatalf("status with the data dir's credentials exited %d: %s%s", code, out, errOut)
	}
	var rep statusReport
	if err := json.Unmarshal([]byte(out), &rep); err != nil || len(rep.Streams) == 0 {
		t.Fatalf("status: %v %s", err, out)
	}
	code, out, errOut = runCommand(t, "status", "-json", "-creds", "")
	if code == 0 || !strings.Contains(out+errOut, "Authorization Violation") {
		t.Fatalf("status without credentials exited %d, want an authorization violation:\n%s%s", code, out, errOut)
	}
}

// ximctl status through the HTTP API shows every channel when there are more than one page of
// GET /v1/channels (default 100), as it does from KV; -channel still shows just that one.
func TestStatus_HTTPShowsEveryChannelPastOnePage(t *testing.T) {
	t.Parallel()
	n := startTestNode(t, nil)
	tg := startTarget(t)
	const channels = 130
	want := make([]string, channels)
	for i := range want {
		want[i] = fmt.Sprintf("cch_page_%03d", i)
		if err := n.OpenChannel(want[i], tg.Config("none", "none")); err != nil {
			t.Fatal(err)
		}
	}
	listed := func(args ...string) []string {
		t.Helper()
		code, out, errOut := runCommand(t, append([]string{"status", "-json", "-http", "http://" + n.Addr, "-token", n.Token,
			"-nats", n.NATSURL(), "-creds", filepath.Join(n.DataDir, node.NATSSeedFile)}, args...)...)
		var rep statusReport
		if code != 0 || json.Unmarshal([]byte(out), &rep) != nil {
			t.Fatalf("status exited %d: %s %s", code, out, errOut)
		}
		var ids []string
		for _, c := range rep.Channels {
			ids = append(ids, c.ID)
		}
		return ids
	}
	if got := listed(); !slices.Equal(got, want) {
		t.Fatalf("status lists %d channels %v, want the %d opened", len(got), got, channels)
	}
	if got := listed("-channel", want[120]); !slices.Equal(got, want[120:121]) {
		t.Fatalf("status -channel %s lists %v", want[120], got)
	}
	if got := listed("-channel", "cch_not_open"); len(got) != 0 {
		t.Fatalf("status -channel cch_not_open lists %v", got)
	}
}
