// Package tracing_test checks the traces ximd makes, with the OpenTelemetry SDK's span recorder
// installed as the global provider (its own package: the provider is process-wide).
package tracing_test

import (
	"bytes"
	"context"
	"encoding/json"
	"net/http"
	"slices"
	"strings"
	"testing"
	"time"

	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	"go.opentelemetry.io/otel/sdk/trace/tracetest"
	"go.opentelemetry.io/otel/trace"

	"github.com/ximd/ximd/handlers/adapter/webhook"
	"github.com/ximd/ximd/internal/testkit"
	"github.com/ximd/ximd/pipeline/tracing"
	"github.com/ximd/ximd/profile"
	"github.com/ximd/ximd/subjects"
)

// recorded is the spans of one trace: name -> span, and the names in the order they ended.
type recorded struct {
	byID  map[trace.SpanID]sdktrace.ReadOnlySpan
	names []string
}

// traceOf returns the ended spans of the trace whose root has attribute key = value.
func traceOf(sr *tracetest.SpanRecorder, key, value string) recorded {
	var id trace.TraceID
	for _, s := range sr.Ended() {
		for _, a := range s.Attributes() {
			if string(a.Key) == key && a.Value.AsString() == value && !s.Parent().IsValid() {
				id = s.SpanContext().TraceID()
			}
		}
	}
	r := recorded{byID: map[trace.SpanID]sdktrace.ReadOnlySpan{}}
	if !id.IsValid() {
		return r
	}
	for _, s := range sr.Ended() {
		if s.SpanContext().TraceID() == id {
			r.byID[s.SpanContext().SpanID()] = s
			r.names = append(r.names, s.Name())
		}
	}
	return r
}

// tree renders the trace as "parent > child" edges, sorted, and fails on an orphan (a span whose
// parent is not in the trace) or on more than one root.
func (r recorded) tree(t *testing.T) []string {
	t.Helper()
	var edges []string
	roots := 0
	for _, s := range r.byID {
		if !s.Parent().IsValid() {
			roots++
			continue
		}
		p, ok := r.byID[s.Parent().SpanID()]
		if !ok {
			t.Fatalf("orphan span %q: its parent is not in the trace (spans %v)", s.Name(), r.names)
		}
		edges = append(edges, p.Name()+" > "+s.Name())
	}
	if roots != 1 {
		t.Fatalf("%d roots in the trace (spans %v)", roots, r.names)
	}
	slices.Sort(edges)
	return edges
}

func waitTree(t *testing.T, sr *tracetest.SpanRecorder, key, value string, want []string) {
	t.Helper()
	deadline := time.Now().Add(10 * time.Second)
	for {
		r := traceOf(sr, key, value)
		if len(r.byID) == len(want)+1 {
			if got := r.tree(t); !slices.Equal(got, want) {
				t.Fatalf("trace:\n%s\nwant:\n%s", strings.Join(got, "\n"), strings.Join(want, "\n"))
			}
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("trace has spans %v, want %d", r.names, len(want)+1)
		}
		time.Sleep(20 * time.Millisecond)
	}
}

// With tracing on, a final is one trace (the gateway's receive, its publish to XIM_IN, the
// deliver stage, the target call and the ack) and a user message is one trace (the outbox
// submit and the outbound send to xAgent), every span's parent in its trace.
func TestTracing_FinalAndUserMessageAreOneTraceEach(t *testing.T) {
	sr := tracetest.NewSpanRecorder()
	tracing.Install(sdktrace.NewTracerProvider(sdktrace.WithSpanProcessor(sr)))

	n, err := testkit.StartNode(testkit.NodeOptions{DataDir: t.TempDir()})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = n.Stop() })
	tg, err := testkit.NewTarget("s3cr3t-tracing-0123", testkit.TargetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(tg.Close)
	channel := "cch_tracing"
	if err := n.OpenChannel(channel, tg.Config("none", "none")); err != nil {
		t.Fatal(err)
	}
	ctx := context.Background()
	agent, err := testkit.Dial(ctx, n.Addr, n.Token)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(agent.Close)

	pid, err := agent.Send(ctx, channel, profile.TypeMessage, map[string]any{"message_id": "m1", "text": "hello"})
	if err != nil {
		t.Fatal(err)
	}
	env, err := agent.Reply(pid, 10*time.Second)
	if err != nil {
		t.Fatal(err)
	}
	if ack, err := testkit.AckOf(env); err != nil || ack.Status != profile.AckAccepted {
		t.Fatalf("ack %+v %v", ack, err)
	}
	publish := "publish " + subjects.StreamIn
	waitTree(t, sr, "xim.packet_id", pid, []string{
		"edge receive > " + publish,
		publish + " > stage deliver",
		"stage deliver > reply " + profile.TypeAck,
		"stage deliver > target send",
	})

	raw, _ := json.Marshal(map[string]any{"target_message_id": "T1", "text": "hi agent"})
	req, _ := http.NewRequest(http.MethodPost, "http://"+n.Addr+"/v1/targets/webhook/"+channel+"/messages", bytes.NewReader(raw))
	req.Header.Set("Content-Type", "application/json")
	req.Header.Set(webhook.SignatureHeader, webhook.Sign([]byte(tg.Secret), raw))
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if resp.StatusCode/100 != 2 {
		t.Fatalf("user message posted: %s", resp.Status)
	}
	for {
		env, err := agent.Next(10 * time.Second)
		if err != nil {
			t.Fatal(err)
		}
		if env.Type == profile.TypeMessage {
			break
		}
	}
	waitTree(t, sr, "xim.channel", channel, []string{"outbox submit > outbound send"})
}
