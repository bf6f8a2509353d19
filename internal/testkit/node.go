package testkit

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"net/url"
	"os"
	"sync"
	"time"

	"github.com/ximd/ximd/pipeline/node"
)

// Node is an in-process all-in-one ximd on loopback with an embedded JetStream server.
type Node struct {
	*node.Node
	Token   string
	Addr    string
	DataDir string
	cancel  context.CancelFunc
	done    chan error

	stopOnce sync.Once
	stopErr  error
}

// NodeOptions tweak the node's config.
type NodeOptions struct {
	DataDir string
	Logger  *slog.Logger
	Mutate  func(c *node.Config)
}

// StartNode starts a node and waits until it serves.
func StartNode(opts NodeOptions) (*Node, error) {
	cfg := node.Defaults()
	cfg.DataDir = opts.DataDir
	cfg.HTTPAddr = "127.0.0.1:0"
	cfg.NATSPort = -1
	cfg.NATSMonitorPort = 0
	cfg.AgentToken = "test-token-" + NewID("t")
	cfg.PublicURL = "http://127.0.0.1"
	cfg.TargetRetryBudget = 5 * time.Second // failing targets answer within a test's patience
	if opts.Mutate != nil {
		opts.Mutate(&cfg)
	}
	logger := opts.Logger
	if logger == nil {
		var w io.Writer = io.Discard
		if os.Getenv("XIMTEST_LOG") != "" { // debugging aid: the node's logs on stderr
			w = os.Stderr
		}
		logger = slog.New(slog.NewTextHandler(w, &slog.HandlerOptions{Level: slog.LevelDebug}))
	}
	n, err := node.New(cfg, logger)
	if err != nil {
		return nil, err
	}
	ctx, cancel := context.WithCancel(context.Background())
	tn := &Node{Node: n, cancel: cancel, done: make(chan error, 1)}
	go func() { tn.done <- n.Run(ctx) }()
	select {
	case <-n.Ready():
	case err := <-tn.done:
		cancel()
		return nil, fmt.Errorf("node did not start: %v", err)
	case <-time.After(30 * time.Second):
		cancel()
		return nil, fmt.Errorf("node not ready within 30s")
	}
	tn.Token, tn.Addr, tn.DataDir = n.Token(), n.HTTPAddr(), cfg.DataDir
	return tn, nil
}

// Stop drains the node and returns Run's error; later calls return the same.
func (n *Node) Stop() error {
	n.stopOnce.Do(func() {
		n.cancel()
		select {
		case n.stopErr = <-n.done:
		case <-time.After(60 * time.Second):
			n.stopErr = fmt.Errorf("node did not stop within 60s")
		}
	})
	return n.stopErr
}

// Do calls the HTTP edge with the token; body is JSON-encoded unless it is []byte or nil.
func (n *Node) Do(method, path string, body any) (int, []byte, error) {
	return n.DoAuth(method, path, body, "Bearer "+n.Token)
}

// DoAuth calls the edge with the given Authorization header ("" for none).
func (n *Node) DoAuth(method, path string, body any, auth string) (int, []byte, error) {
	var rd io.Reader
	switch b := body.(type) {
	case nil:
	case []byte:
		rd = bytes.NewReader(b)
	default:
		j, err := json.Marshal(b)
		if err != nil {
			return 0, nil, err
		}
		rd = bytes.NewReader(j)
	}
	req, err := http.NewRequest(method, "http://"+n.Addr+path, rd)
	if err != nil {
		return 0, nil, err
	}
	if auth != "" {
		req.Header.Set("Authorization", auth)
	}
	if rd != nil {
		req.Header.Set("Content-Type", "application/json")
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		return 0, nil, err
	}
	defer resp.Body.Close()
	out, err := io.ReadAll(resp.Body)
	return resp.StatusCode, out, err
}

// Channels lists every open channel with GET /v1/channels, following its pages (edge-api §4.1),
// and returns each channel's representation as the API gave it, in id order.
func (n *Node) Channels() ([]json.RawMessage, error) {
	var all []json.RawMessage
	for path := "/v1/channels"; ; {
		status, body, err := n.Do(http.MethodGet, path, nil)
		if err != nil {
			return nil, err
		}
		if status != http.StatusOK {
			return nil, fmt.Errorf("GET %s: %d %s", path, status, body)
		}
		var page struct {
			Channels []json.RawMessage `json:"channels"`
			Next     *string           `json:"next"`
		}
		if err := json.Unmarshal(body, &page); err != nil {
			return nil, fmt.Errorf("GET %s: %w", path, err)
		}
		all = append(all, page.Channels...)
		if page.Next == nil {
			return all, nil
		}
		path = "/v1/channels?after=" + url.QueryEscape(*page.Next)
	}
}

// OpenChannel opens a webhook channel bound to cfg (see Target.Config).
func (n *Node) OpenChannel(id string, cfg map[string]any) error {
	status, body, err := n.Do(http.MethodPut, "/v1/channels/"+id, map[string]any{
		"connection": map[string]any{"target_type": "im", "profiles": []string{"xagent.im.v2"}},
		"target":     map[string]any{"adapter": "webhook", "config": cfg},
	})
	if err != nil {
		return err
	}
	if status != http.StatusOK {
		return fmt.Errorf("PUT channel %s: %d %s", id, status, body)
	}
	return nil
}
