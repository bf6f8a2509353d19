package main

import (
	"context"
	"encoding/json"
	"net"
	"strings"
	"testing"

	"github.com/ximd/ximd/handlers/adapter"
	"github.com/ximd/ximd/handlers/adapter/webhook"
)

// ximctl target answers the webhook adapter's calls, lookups included (config "lookup": true):
// a message it was sent is found with what it shows, an unknown key is not.
func TestTargetAnswersLookups(t *testing.T) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	addr := ln.Addr().String()
	ln.Close()
	cmd := startCommand(t, "target", "-listen", addr, "-secret", "k")
	pollUntil(t, "ximctl target listening", func() bool { return strings.Contains(cmd.stdout.String(), "webhook target on") })

	cfg, _ := json.Marshal(map[string]any{"url": "http://" + addr + "/hook", "chat_id": "room", "secret": "k", "lookup": true})
	tg, err := webhook.New(webhook.Options{}).Open(cfg)
	if err != nil {
		t.Fatal(err)
	}
	ctx := context.Background()
	lookup := func(key string) (adapter.Shown, bool) {
		t.Helper()
		shown, found, err := tg.(adapter.Reconciler).Lookup(ctx, key)
		if err != nil {
			t.Fatalf("lookup %s: %v", key, err)
		}
		return shown, found
	}
	if _, found := lookup("ch:m1"); found {
		t.Fatal("an unsent key was found")
	}
	id, err := tg.Send(ctx, adapter.Message{Text: "hel", IdempotencyKey: "ch:m1"})
	if err != nil {
		t.Fatal(err)
	}
	if shown, found := lookup("ch:m1"); !found || shown != (adapter.Shown{ID: id, Text: "hel"}) {
		t.Fatalf("after the create: %+v found=%v", shown, found)
	}
	if err := tg.(adapter.Editor).Edit(ctx, id, adapter.Message{Text: "hello", Final: true}); err != nil {
		t.Fatal(err)
	}
	if shown, found := lookup("ch:m1"); !found || shown != (adapter.Shown{ID: id, Text: "hello", Final: true}) {
		t.Fatalf("after the final edit: %+v found=%v", shown, found)
	}
}
