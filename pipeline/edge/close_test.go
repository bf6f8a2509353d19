package edge

import (
	"context"
	"encoding/json"
	"io"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"testing"
	"time"

	"github.com/coder/websocket"

	"github.com/ximd/ximd/pipeline/natstest"
	"github.com/ximd/ximd/profile"
)

// After Close the gateway admits no connection (503 unavailable with Retry-After, so xAgent
// reconnects to another gateway or later), and Flush returns once nothing is left to publish.
func TestGatewayRefusesConnectionsAfterClose(t *testing.T) {
	nc := natstest.Connect(t, natstest.Server(t))
	open := func(context.Context, string) (bool, error) { return true, nil }
	g, err := NewGateway(GatewayConfig{ID: "gw-close"}, nc, profile.Default(), open, nil, slog.New(slog.DiscardHandler))
	if err != nil {
		t.Fatal(err)
	}
	srv := httptest.NewServer(g)
	defer srv.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()

	ws, _, err := websocket.Dial(ctx, srv.URL, &websocket.DialOptions{Subprotocols: []string{Subprotocol}})
	if err != nil {
		t.Fatalf("before Close: %v", err)
	}
	g.Close()
	ws.CloseNow() // xAgent drops the connection it was told is going away
	if err := g.Flush(ctx); err != nil {
		t.Fatalf("Flush after Close: %v", err)
	}

	_, resp, err := websocket.Dial(ctx, srv.URL, &websocket.DialOptions{Subprotocols: []string{Subprotocol}})
	if err == nil || resp == nil || resp.StatusCode != http.StatusServiceUnavailable || resp.Header.Get("Retry-After") == "" {
		t.Fatalf("dial after Close: %v, %+v", err, resp)
	}
	body, _ := io.ReadAll(resp.Body)
	var e struct{ Code string }
	if json.Unmarshal(body, &e) != nil || e.Code != profile.CodeUnavailable {
		t.Fatalf("refusal body %s", body)
	}
}
