package edge

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/ximd/ximd/handlers/adapter"
	"github.com/ximd/ximd/handlers/adapter/webhook"
	"github.com/ximd/ximd/pipeline/channels"
	"github.com/ximd/ximd/pipeline/natstest"
	"github.com/ximd/ximd/profile"
	"github.com/ximd/ximd/subjects"
)

// channelsServer serves the channels API (no token) over a registry on an in-process server,
// with n webhook channels cch_0000… already in the bucket.
func channelsServer(tb testing.TB, n int) *httptest.Server {
	srv, _ := channelsAPI(tb, n)
	return srv
}

func channelsAPI(tb testing.TB, n int) (*httptest.Server, *ChannelsAPI) {
	tb.Helper()
	js := natstest.JetStream(tb)
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
	defer cancel()
	if _, err := js.CreateKeyValue(ctx, jetstream.KeyValueConfig{Bucket: subjects.BucketBotChannels, History: 1}); err != nil {
		tb.Fatal(err)
	}
	if _, err := js.CreateKeyValue(ctx, jetstream.KeyValueConfig{Bucket: subjects.BucketChannels, History: 1}); err != nil {
		tb.Fatal(err)
	}
	for i := range n {
		id := fmt.Sprintf("cch_%06d", (i*7919)%n) // stored out of id order
		b, _ := json.Marshal(adapter.Channel{ID: id, Connection: adapter.Connection{TargetType: "im", Profiles: []string{profile.IM}},
			Target: adapter.Binding{Adapter: "webhook", Config: json.RawMessage(`{"url":"http://127.0.0.1:9/hook","chat_id":"room","secret":"s3cr3t"}`)}})
		if _, err := js.PublishAsync(subjects.KVKeys(subjects.BucketChannels, id), b); err != nil {
			tb.Fatal(err)
		}
	}
	select {
	case <-js.PublishAsyncComplete():
	case <-ctx.Done():
		tb.Fatal("storing the channels took too long")
	}
	logger := slog.New(slog.DiscardHandler)
	reg, err := channels.Open(ctx, js, logger)
	if err != nil {
		tb.Fatal(err)
	}
	mux := http.NewServeMux()
	api := NewChannelsAPI(reg, adapter.NewRegistry(webhook.New(webhook.Options{})), nil, logger)
	api.register(mux, func(h http.Handler) http.Handler { return h })
	srv := httptest.NewServer(mux)
	tb.Cleanup(srv.Close)
	return srv, api
}

type listBody struct {
	Channels []struct {
		ID string `json:"connector_channel_id"`
	} `json:"channels"`
	Next  *string `json:"next"`
	Code  string  `json:"code"`
	Bytes int     `json:"-"`
}

func getList(tb testing.TB, srv *httptest.Server, query string) (int, listBody) {
	tb.Helper()
	resp, err := http.Get(srv.URL + "/v1/channels" + query)
	if err != nil {
		tb.Fatal(err)
	}
	defer resp.Body.Close()
	raw, err := io.ReadAll(resp.Body)
	if err != nil {
		tb.Fatal(err)
	}
	var b listBody
	if err := json.Unmarshal(raw, &b); err != nil {
		tb.Fatalf("GET /v1/channels%s: %s: %v", query, raw, err)
	}
	b.Bytes = len(raw)
	return resp.StatusCode, b
}

// GET /v1/channels pages (edge-api §4.1): ?limit= (default 100, at most 1000) and ?after=; a
// limit that is not a whole number from 1 to 1000 is 400 bad_request, an after that cannot be a
// channel id 400 invalid_channel_id.
func TestListChannels_Parameters(t *testing.T) {
	srv := channelsServer(t, 1500)
	s := func(v string) *string { return &v }
	tests := []struct {
		name      string
		query     string
		wantCode  string // "" = 200
		wantCount int
		wantFirst string
		wantNext  *string
	}{
		{name: "default limit", query: "", wantCount: 100, wantFirst: "cch_000000", wantNext: s("cch_000099")},
		{name: "limit 1", query: "?limit=1", wantCount: 1, wantFirst: "cch_000000", wantNext: s("cch_000000")},
		{name: "maximum limit", query: "?limit=1000", wantCount: 1000, wantFirst: "cch_000000", wantNext: s("cch_000999")},
		{name: "after", query: "?after=cch_000099&limit=5", wantCount: 5, wantFirst: "cch_000100", wantNext: s("cch_000104")},
		{name: "after an id that is not open", query: "?after=cch_000099x&limit=5", wantCount: 5, wantFirst: "cch_000100", wantNext: s("cch_000104")},
		{name: "last page: next null", query: "?after=cch_001400&limit=1000", wantCount: 99, wantFirst: "cch_001401"},
		{name: "page ending on the last channel: next null", query: "?after=cch_001399&limit=100", wantCount: 100, wantFirst: "cch_001400"},
		{name: "after the last channel", query: "?after=cch_001499", wantCount: 0},
		{name: "after past the end", query: "?after=zzz", wantCount: 0},
		{name: "over the maximum", query: "?limit=1001", wantCode: profile.CodeBadRequest},
		{name: "zero", query: "?limit=0", wantCode: profile.CodeBadRequest},
		{name: "negative", query: "?limit=-5", wantCode: profile.CodeBadRequest},
		{name: "not a number", query: "?limit=ten", wantCode: profile.CodeBadRequest},
		{name: "not a whole number", query: "?limit=1.5", wantCode: profile.CodeBadRequest},
		{name: "empty limit", query: "?limit=", wantCode: profile.CodeBadRequest},
		{name: "after not a channel id", query: "?after=a%20b", wantCode: profile.CodeInvalidChannelID},
		{name: "after too long", query: "?after=" + strings.Repeat("x", 129), wantCode: profile.CodeInvalidChannelID},
		{name: "empty after", query: "?after=", wantCode: profile.CodeInvalidChannelID},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			status, b := getList(t, srv, tt.query)
			if tt.wantCode != "" {
				if status != http.StatusBadRequest || b.Code != tt.wantCode {
					t.Fatalf("%d %q, want 400 %s", status, b.Code, tt.wantCode)
				}
				return
			}
			if status != http.StatusOK || b.Channels == nil || len(b.Channels) != tt.wantCount {
				t.Fatalf("%d, %d channels, want 200 and %d", status, len(b.Channels), tt.wantCount)
			}
			if tt.wantCount > 0 && b.Channels[0].ID != tt.wantFirst {
				t.Fatalf("first %s, want %s", b.Channels[0].ID, tt.wantFirst)
			}
			if (b.Next == nil) != (tt.wantNext == nil) || (b.Next != nil && *b.Next != *tt.wantNext) {
				t.Fatalf("next %v, want %v", deref(b.Next), deref(tt.wantNext))
			}
		})
	}
}

func deref(s *string) string {
	if s == nil {
		return "null"
	}
	return *s
}

// 250 channels at limit 100 are three pages; following next lists each channel exactly once, in
// id order, and the last page's next is null.
func TestListChannels_FollowingNextListsEveryChannelOnce(t *testing.T) {
	srv := channelsServer(t, 250)
	var got []string
	query, pages := "?limit=100", 0
	for {
		status, b := getList(t, srv, query)
		if status != http.StatusOK {
			t.Fatalf("page %d: %d %s", pages+1, status, b.Code)
		}
		pages++
		for _, c := range b.Channels {
			got = append(got, c.ID)
		}
		if b.Next == nil {
			break
		}
		if pages > 3 {
			t.Fatal("more than 3 pages")
		}
		query = "?limit=100&after=" + *b.Next
	}
	want := make([]string, 250)
	for i := range want {
		want[i] = fmt.Sprintf("cch_%06d", i)
	}
	if pages != 3 || !slices.Equal(got, want) {
		t.Fatalf("%d pages listing %d channels %v, want 3 pages listing the 250 in order", pages, len(got), got)
	}
}

// One page out of 100,000 channels against the whole listing in one body (what GET /v1/channels
// answered before it paged), and against following every page at the maximum limit.
func BenchmarkListChannels(b *testing.B) {
	const n = 100_000
	srv, api := channelsAPI(b, n)
	b.Run("whole_listing_one_body_before", func(b *testing.B) {
		b.ReportAllocs()
		var bytes int
		for b.Loop() {
			rec := httptest.NewRecorder()
			out := []channelView{}
			for _, ch := range api.reg.List() {
				if v, err := api.view(ch); err == nil {
					out = append(out, v)
				}
			}
			writeJSON(rec, http.StatusOK, map[string]any{"channels": out})
			bytes = rec.Body.Len()
		}
		b.ReportMetric(float64(bytes), "body_bytes")
	})
	b.Run("one_page_default_limit", func(b *testing.B) {
		b.ReportAllocs()
		var bytes int
		for b.Loop() {
			_, body := getList(b, srv, "?after=cch_050000")
			bytes = body.Bytes
		}
		b.ReportMetric(float64(bytes), "body_bytes")
	})
	b.Run("one_page_max_limit", func(b *testing.B) {
		b.ReportAllocs()
		var bytes int
		for b.Loop() {
			_, body := getList(b, srv, "?after=cch_050000&limit=1000")
			bytes = body.Bytes
		}
		b.ReportMetric(float64(bytes), "body_bytes")
	})
	b.Run("every_page_max_limit", func(b *testing.B) {
		b.ReportAllocs()
		var bytes int
		for b.Loop() {
			bytes = 0
			query := "?limit=1000"
			for {
				_, body := getList(b, srv, query)
				bytes += body.Bytes
				if body.Next == nil {
					break
				}
				query = "?limit=1000&after=" + *body.Next
			}
		}
		b.ReportMetric(float64(bytes), "body_bytes")
	})
}
