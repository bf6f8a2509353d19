package test

import (
	"context"
	"testing"
	"time"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/ximd/ximd/internal/testkit"
	"github.com/ximd/ximd/profile"
	"github.com/ximd/ximd/subjects"
)

// A final whose stage keeps failing on infrastructure (its state bucket is gone) is retried with
// back-off, then poisoned with a visible reason — and still gets its one ack: rejected
// internal_error, retryable (edge-api §5.1 "exactly one ack"; no hot loop).
func TestFinal_InfrastructureFailureIsPoisonedAndAnsweredRetryable(t *testing.T) {
	t.Parallel()
	e := newEnv(t, envOptions{})
	nc := e.natsConn()
	js, _ := jetstream.New(nc)
	ctx := context.Background()
	if err := js.DeleteKeyValue(ctx, subjects.BucketMessages); err != nil {
		t.Fatal(err)
	}
	pid := e.send(profile.TypeMessage, msg("m_poison", "x"))
	env, err := e.agent.Reply(pid, 30*time.Second)
	if err != nil {
		t.Fatal(err)
	}
	ack, err := testkit.AckOf(env)
	if err != nil {
		t.Fatal(err)
	}
	wantAck(t, ack, profile.AckRejected, profile.CodeInternal)
	if !retryable(ack) {
		t.Fatal("internal_error must be retryable")
	}
	s, err := js.Stream(ctx, subjects.StreamPoison)
	if err != nil {
		t.Fatal(err)
	}
	m, err := s.GetLastMsgForSubject(ctx, subjects.PoisonAll)
	if err != nil {
		t.Fatal(err)
	}
	if m.Header.Get("reason_poisoned") == "" {
		t.Fatalf("poisoned message has no reason: %v", m.Header)
	}
	if n := len(e.target.MessageCalls()); n != 0 {
		t.Fatalf("target called: %s", dump(e.target.MessageCalls()))
	}
}
