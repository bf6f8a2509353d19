package bus_test

import (
	"bytes"
	"context"
	"log/slog"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/nats-io/nats-server/v2/server"
	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
)

// startServer runs an in-process nats-server with JetStream, shut down when the test ends.
func startServer(tb testing.TB) *server.Server {
	tb.Helper()
	return startServerAt(tb, -1, tb.TempDir())
}

func startServerAt(tb testing.TB, port int, storeDir string) *server.Server {
	tb.Helper()
	s, err := server.NewServer(&server.Options{
		Host:      "127.0.0.1",
		Port:      port,
		JetStream: true,
		StoreDir:  storeDir,
		NoLog:     true,
		NoSigs:    true,
	})
	if err != nil {
		tb.Fatalf("new server: %v", err)
	}
	go s.Start()
	if !s.ReadyForConnections(10 * time.Second) {
		tb.Fatal("nats-server not ready")
	}
	tb.Cleanup(func() {
		s.Shutdown()
		s.WaitForShutdown()
	})
	return s
}

// connect opens a connection to s, closed when the test ends.
func connect(tb testing.TB, s *server.Server, opts ...nats.Option) jetstream.JetStream {
	tb.Helper()
	nc, err := nats.Connect(s.ClientURL(), opts...)
	if err != nil {
		tb.Fatalf("connect: %v", err)
	}
	tb.Cleanup(nc.Close)
	js, err := jetstream.New(nc)
	if err != nil {
		tb.Fatalf("jetstream: %v", err)
	}
	return js
}

// sanitize makes a topic usable as a stream or consumer name.
func sanitize(s string) string {
	return strings.Map(func(r rune) rune {
		if r == '-' || r == '_' || ('a' <= r && r <= 'z') || ('A' <= r && r <= 'Z') || ('0' <= r && r <= '9') {
			return r
		}
		return '_'
	}, s)
}

// streams provisions one stream per topic (subject = the topic) on first use.
type streams struct {
	js   jetstream.JetStream
	mu   sync.Mutex
	made map[string]bool
}

func newStreams(js jetstream.JetStream) *streams {
	return &streams{js: js, made: make(map[string]bool)}
}

// ensure returns the stream of topic, creating it if needed. It may run outside the test's
// goroutine, so it reports with Errorf.
func (p *streams) ensure(tb testing.TB, topic string) string {
	name := "S_" + sanitize(topic)
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.made[name] {
		return name
	}
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	if _, err := p.js.CreateOrUpdateStream(ctx, jetstream.StreamConfig{
		Name:     name,
		Subjects: []string{topic},
		Storage:  jetstream.FileStorage,
	}); err != nil {
		tb.Errorf("create stream %s: %v", name, err)
		return ""
	}
	p.made[name] = true
	return name
}

// logBuffer is a concurrency-safe slog destination for asserting on logs.
type logBuffer struct {
	mu  sync.Mutex
	buf bytes.Buffer
}

func (b *logBuffer) Write(p []byte) (int, error) {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.buf.Write(p)
}

func (b *logBuffer) String() string {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.buf.String()
}

func (b *logBuffer) logger() *slog.Logger {
	return slog.New(slog.NewTextHandler(b, &slog.HandlerOptions{Level: slog.LevelDebug}))
}

// eventually polls cond until it holds or d passes.
func eventually(tb testing.TB, d time.Duration, what string, cond func() bool) {
	tb.Helper()
	end := time.Now().Add(d)
	for !cond() {
		if time.Now().After(end) {
			tb.Fatalf("timed out after %s waiting for %s", d, what)
		}
		time.Sleep(10 * time.Millisecond)
	}
}
