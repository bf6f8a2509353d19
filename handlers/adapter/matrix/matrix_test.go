package matrix_test

import (
	"context"
	"encoding/json"
	"errors"
	"strings"
	"testing"
	"time"

	"maunium.net/go/mautrix"
	"maunium.net/go/mautrix/event"
	"maunium.net/go/mautrix/id"

	"github.com/ximd/ximd/handlers/adapter"
	"github.com/ximd/ximd/handlers/adapter/matrix"
	"github.com/ximd/ximd/profile"
	"github.com/ximd/ximd/test/dendrite"
)

func config(t *testing.T, s *dendrite.Server, bot *dendrite.User, room id.RoomID, extra map[string]any) json.RawMessage {
	t.Helper()
	c := map[string]any{"homeserver": s.URL, "access_token": bot.Token, "room_id": string(room)}
	for k, v := range extra {
		c[k] = v
	}
	raw, _ := json.Marshal(c)
	return raw
}

func codeOf(err error) string {
	var pe *profile.Error
	if errors.As(err, &pe) {
		return pe.Code
	}
	return ""
}

// edge-api §7.2: PUT probes the config: a bad token, a room the bot cannot join, an encrypted
// room are target_config_invalid; a good one passes (an invitation is accepted on the way).
func TestMatrix_ProbeRefusesWhatCannotWork(t *testing.T) {
	s := dendrite.Start(t, dendrite.Options{})
	bot, alice := s.Register(t, "bot"), s.Register(t, "alice")
	room := s.Room(t, alice, false) // the bot is only invited below
	ctx := context.Background()
	if _, err := alice.Client.InviteUser(ctx, room, &mautrix.ReqInviteUser{UserID: bot.ID}); err != nil {
		t.Fatal(err)
	}
	encrypted := s.Room(t, bot, true)
	private := s.Room(t, alice, false)
	a := matrix.New(matrix.Options{})
	tests := []struct {
		name string
		cfg  json.RawMessage
		want string // "" passes
	}{
		{"invited room", config(t, s, bot, room, nil), ""},
		{"bad token", config(t, s, &dendrite.User{Token: "nope"}, room, nil), profile.CodeTargetConfigInvalid},
		{"room not joinable", config(t, s, bot, private, nil), profile.CodeTargetConfigInvalid},
		{"encrypted room", config(t, s, bot, encrypted, nil), profile.CodeTargetConfigInvalid},
	}
	for _, tt := range tests {
		err := a.Probe(ctx, adapter.Channel{ID: "probe", Target: adapter.Binding{Adapter: "matrix", Config: tt.cfg}})
		if codeOf(err) != tt.want {
			t.Errorf("%s: %v, want %q", tt.name, err, tt.want)
		}
		if err != nil && strings.Contains(err.Error(), bot.Token) {
			t.Errorf("%s: the error shows the token", tt.name)
		}
	}
}

// A message sent twice with the same idempotency key (a retry after a timeout, a resend after a
// crash) is one event; Lookup finds it, then its final state after the final edit.
func TestMatrix_SendIsIdempotentAndLookupFindsIt(t *testing.T) {
	s := dendrite.Start(t, dendrite.Options{})
	bot, alice := s.Register(t, "bot"), s.Register(t, "alice")
	room := s.Room(t, bot, false, alice)
	tg, err := matrix.New(matrix.Options{}).Open(config(t, s, bot, room, nil))
	if err != nil {
		t.Fatal(err)
	}
	ctx := context.Background()
	r := tg.(adapter.Reconciler)
	if _, found, err := r.Lookup(ctx, "c:m1"); err != nil || found {
		t.Fatalf("before sending: found %v %v", found, err)
	}
	first, err := tg.Send(ctx, adapter.Message{Text: "hel", IdempotencyKey: "c:m1"})
	if err != nil {
		t.Fatal(err)
	}
	again, err := tg.Send(ctx, adapter.Message{Text: "hel", IdempotencyKey: "c:m1"})
	if err != nil || again != first {
		t.Fatalf("second send: %s %v, want the same event %s", again, err, first)
	}
	shown, found, err := r.Lookup(ctx, "c:m1")
	if err != nil || !found || shown.ID != first || shown.Final {
		t.Fatalf("after the streamed part: %+v %v %v", shown, found, err)
	}
	if err := tg.(adapter.Editor).Edit(ctx, first, adapter.Message{Text: "hello world", Final: true, IdempotencyKey: "c:m1"}); err != nil {
		t.Fatal(err)
	}
	// The homeserver indexes the edit a moment after accepting it.
	for deadline := time.Now().Add(10 * time.Second); ; time.Sleep(50 * time.Millisecond) {
		shown, found, err = r.Lookup(ctx, "c:m1")
		if err == nil && found && shown.ID == first && shown.Final && shown.ShowsText("hello world") {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("after the final: %+v %v %v", shown, found, err)
		}
	}
	// What alice sees: one message, edited to the final text.
	msgs, err := alice.Client.Messages(ctx, room, "", "", mautrix.DirectionBackward, &mautrix.FilterPart{Types: []event.Type{event.EventMessage}}, 50)
	if err != nil {
		t.Fatal(err)
	}
	var originals int
	for _, ev := range msgs.Chunk {
		var c struct {
			RelatesTo *struct {
				RelType string `json:"rel_type"`
			} `json:"m.relates_to"`
		}
		_ = json.Unmarshal(ev.Content.VeryRaw, &c)
		if c.RelatesTo == nil || c.RelatesTo.RelType != "m.replace" {
			originals++
		}
	}
	if originals != 1 {
		t.Fatalf("alice sees %d messages, want 1", originals)
	}
}

// M_LIMIT_EXCEEDED is target_rate_limited with the server's retry time, and the account makes
// no call before it (Dendrite rate-limits typing notifications, not sends).
func TestMatrix_RateLimitCarriesTheRetryTime(t *testing.T) {
	s := dendrite.Start(t, dendrite.Options{RateLimit: true})
	bot := s.Register(t, "bot")
	room := s.Room(t, bot, false)
	tg, err := matrix.New(matrix.Options{}).Open(config(t, s, bot, room, nil))
	if err != nil {
		t.Fatal(err)
	}
	ctx := context.Background()
	var limited error
	var limitedAt time.Time
	shower := tg.(adapter.ActivityShower)
	for i := 0; i < 50 && limited == nil; i++ {
		err := shower.ShowActivity(ctx, adapter.Activity{Status: adapter.StatusTyping})
		if codeOf(err) == profile.CodeTargetRateLimited {
			limited, limitedAt = err, time.Now()
		} else if err != nil {
			t.Fatal(err)
		}
	}
	after, ok := adapter.RetryAfterOf(limited)
	if limited == nil || !ok || after <= 0 || after > time.Minute {
		t.Fatalf("rate limit: %v (after %s %v)", limited, after, ok)
	}
	// Sends are not rate-limited by Dendrite: a target_rate_limited now is the account's own pause.
	_, err = tg.Send(ctx, adapter.Message{Text: "y", Final: true})
	if paused := time.Since(limitedAt) < after; paused && (codeOf(err) != profile.CodeTargetRateLimited || !strings.Contains(err.Error(), "rate-limits this account")) {
		t.Fatalf("while paused: %v, want the account's target_rate_limited without a call", err)
	} else if !paused {
		t.Logf("the pause of %s had passed before the send (a loaded machine): not checked", after)
	}
}
