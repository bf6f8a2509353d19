// Package natstest runs in-process NATS servers with JetStream for the tests of the packages that
// use NATS: a real server on a free loopback port and a temporary store, never a mock.
package natstest

import (
	"testing"
	"time"

	"github.com/nats-io/nats-server/v2/server"
	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
)

// Server starts a server with JetStream on 127.0.0.1 (a free port, a store in tb.TempDir()); it
// is shut down when tb ends.
func Server(tb testing.TB) *server.Server {
	tb.Helper()
	s, err := server.NewServer(&server.Options{Host: "127.0.0.1", Port: -1, JetStream: true, StoreDir: tb.TempDir(), NoLog: true, NoSigs: true})
	if err != nil {
		tb.Fatalf("nats server: %v", err)
	}
	go s.Start()
	if !s.ReadyForConnections(10 * time.Second) {
		tb.Fatal("nats server not ready")
	}
	tb.Cleanup(s.Shutdown)
	return s
}

// Connect opens a connection to s, closed when tb ends.
func Connect(tb testing.TB, s *server.Server) *nats.Conn {
	tb.Helper()
	nc, err := nats.Connect(s.ClientURL())
	if err != nil {
		tb.Fatalf("connect: %v", err)
	}
	tb.Cleanup(nc.Close)
	return nc
}

// JetStream starts a Server and returns a JetStream on a connection to it.
func JetStream(tb testing.TB) jetstream.JetStream {
	tb.Helper()
	js, err := jetstream.New(Connect(tb, Server(tb)))
	if err != nil {
		tb.Fatalf("jetstream: %v", err)
	}
	return js
}
