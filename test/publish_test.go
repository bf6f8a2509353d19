package test

import (
	"bytes"
	"context"
	"io"
	"net"
	"sync"
	"testing"
	"time"

	"github.com/nats-io/nats.go/jetstream"
	"github.com/prometheus/client_golang/prometheus"

	"github.com/ximd/ximd/pipeline/natstest"
	"github.com/ximd/ximd/pipeline/node"
	"github.com/ximd/ximd/profile"
	"github.com/ximd/ximd/subjects"
)

// ackCutter is a loopback TCP proxy in front of a NATS server. Once a client sends a chunk
// holding trigger, it stops passing what the server sends back, for hold: what the server stored
// for that publish is not acknowledged in time.
type ackCutter struct {
	trigger []byte
	hold    time.Duration
	mu      sync.Mutex
	cut     bool
	resumed chan struct{}
	fired   bool
}

func newAckCutter(t *testing.T, upstream string, trigger string, hold time.Duration) string {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { ln.Close() })
	c := &ackCutter{trigger: []byte(trigger), hold: hold, resumed: make(chan struct{})}
	go func() {
		for {
			client, err := ln.Accept()
			if err != nil {
				return
			}
			server, err := net.Dial("tcp", upstream)
			if err != nil {
				client.Close()
				continue
			}
			t.Cleanup(func() { client.Close(); server.Close() })
			go c.forward(server, client, true)
			go c.forward(client, server, false)
		}
	}()
	return "nats://" + ln.Addr().String()
}

// forward copies from src to dst. Client to server: the chunk with the trigger cuts the way
// back before it is passed on. Server to client: waits while cut.
func (c *ackCutter) forward(dst, src net.Conn, fromClient bool) {
	buf := make([]byte, 64<<10)
	for {
		n, err := src.Read(buf)
		if n > 0 {
			if fromClient {
				c.mu.Lock()
				if !c.fired && bytes.Contains(buf[:n], c.trigger) {
					c.fired, c.cut = true, true
					time.AfterFunc(c.hold, func() {
						c.mu.Lock()
						c.cut = false
						c.mu.Unlock()
						close(c.resumed)
					})
				}
				c.mu.Unlock()
			} else {
				c.mu.Lock()
				cut := c.cut
				c.mu.Unlock()
				if cut {
					<-c.resumed
				}
			}
			if _, werr := dst.Write(buf[:n]); werr != nil {
				return
			}
		}
		if err != nil {
			if err != io.EOF {
				dst.Close()
			}
			return
		}
	}
}

// counterWithLabel is the value of the series of counter name whose label has value.
func counterWithLabel(g prometheus.Gatherer, name, label, value string) float64 {
	mfs, _ := g.Gather()
	for _, mf := range mfs {
		if mf.GetName() != name {
			continue
		}
		for _, m := range mf.GetMetric() {
			for _, l := range m.GetLabel() {
				if l.GetName() == label && l.GetValue() == value {
					return m.GetCounter().GetValue()
				}
			}
		}
	}
	return 0
}

// A final whose store in XIM_IN JetStream did not acknowledge in time (the acknowledgement was
// held back, as when a NATS server stops between storing and answering) is published again; its
// Nats-Msg-Id (channel + packet_id) makes JetStream drop the second copy: stored once, delivered
// once, answered once, and never answered `unavailable`.
func TestPublish_LostAcknowledgementIsRetriedAndStoredOnce(t *testing.T) {
	t.Parallel()
	srv := natstest.Server(t)
	const hold = 800 * time.Millisecond
	url := newAckCutter(t, srv.Addr().String(), "HPUB xim.in.", hold)
	e := newEnv(t, envOptions{streaming: "none", activity: "none", mutate: func(c *node.Config) {
		c.NATSURL = url
		c.PublishTimeout = 300 * time.Millisecond
	}})
	_, ack := e.final(msg("m_cut", "stored once"))
	wantAck(t, ack, profile.AckAccepted, "")
	if got := counterWithLabel(e.node.Metrics(), "ximd_gateway_frames_total", "outcome", "publish_retried"); got < 1 {
		t.Fatalf("the publish was not retried (publish_retried %v): the test did not hold the acknowledgement back", got)
	}
	if n := len(e.target.MessageCalls()); n != 1 {
		t.Fatalf("target calls %d, want 1: %s", n, dump(e.target.MessageCalls()))
	}
	e.quiet(time.Second) // no second ack, no unavailable error for the packet
	if got := counterWithLabel(e.node.Metrics(), "ximd_gateway_frames_total", "outcome", "publish_failed"); got != 0 {
		t.Fatalf("publish_failed %v, want 0", got)
	}
	st, err := jetstream.New(natstest.Connect(t, srv))
	if err != nil {
		t.Fatal(err)
	}
	info, err := st.Stream(context.Background(), subjects.StreamIn)
	if err != nil {
		t.Fatal(err)
	}
	if seq := info.CachedInfo().State.LastSeq; seq != 1 {
		t.Fatalf("XIM_IN stored %d packets, want 1 (the retry's copy dropped by its Nats-Msg-Id)", seq)
	}
}
