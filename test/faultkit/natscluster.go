package faultkit

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
)

// NATSNode is one nats-server of a NATSCluster.
type NATSNode struct {
	*Proc
	ClientPort, ClusterPort, MonitorPort int
}

// ClientURL is the node's client URL.
func (n *NATSNode) ClientURL() string { return fmt.Sprintf("nats://127.0.0.1:%d", n.ClientPort) }

// NATSCluster is a JetStream cluster of nats-server processes on loopback ports.
type NATSCluster struct {
	Nodes []*NATSNode
}

// StartNATSCluster writes a config per node (server_name, client/cluster/monitor ports, routes
// to every node, JetStream store in dir/<name>/jetstream, syncInterval when not 0) and starts
// them; it returns once the cluster has a meta leader and every node is healthy. A size of 1 is
// one standalone server (no cluster block: JetStream does not cluster one node), healthy once
// its /healthz answers 200.
func StartNATSCluster(ctx context.Context, bin, dir string, size int, syncInterval time.Duration) (*NATSCluster, error) {
	c := &NATSCluster{}
	for i := 0; i < size; i++ {
		var ports [3]int
		for j := range ports {
			p, err := FreePort()
			if err != nil {
				return nil, err
			}
			ports[j] = p
		}
		name := fmt.Sprintf("n%d", i+1)
		c.Nodes = append(c.Nodes, &NATSNode{Proc: &Proc{Name: name}, ClientPort: ports[0], ClusterPort: ports[1], MonitorPort: ports[2]})
	}
	var routes []string
	for _, n := range c.Nodes {
		routes = append(routes, fmt.Sprintf("nats-route://127.0.0.1:%d", n.ClusterPort))
	}
	for _, n := range c.Nodes {
		ndir := filepath.Join(dir, n.Name)
		if err := os.MkdirAll(ndir, 0o755); err != nil {
			return nil, err
		}
		sync, cluster := "", ""
		if size > 1 {
			cluster = fmt.Sprintf("cluster {\n  name: ximfault\n  listen: \"127.0.0.1:%d\"\n  routes: [%s]\n}\n", n.ClusterPort, strings.Join(routes, ", "))
		}
		if syncInterval > 0 {
			sync = fmt.Sprintf("  sync_interval: %q\n", syncInterval.String())
		}
		conf := fmt.Sprintf(`server_name: %s
listen: "127.0.0.1:%d"
http: "127.0.0.1:%d"
max_payload: 8MB
jetstream {
  store_dir: %q
%s}
%s`, n.Name, n.ClientPort, n.MonitorPort, filepath.Join(ndir, "jetstream"), sync, cluster)
		cf := filepath.Join(ndir, "nats.conf")
		if err := os.WriteFile(cf, []byte(conf), 0o644); err != nil {
			return nil, err
		}
		n.Proc.Bin, n.Proc.Args, n.Proc.LogPath = bin, []string{"-c", cf}, filepath.Join(ndir, "nats.log")
		if err := n.Start(); err != nil {
			c.Close()
			return nil, err
		}
	}
	if err := c.WaitHealthy(ctx, 60*time.Second, nil); err != nil {
		c.Close()
		return nil, err
	}
	return c, nil
}

// URL is the comma-separated client URLs of every node (what XIM_NATS_URL takes).
func (c *NATSCluster) URL() string {
	var urls []string
	for _, n := range c.Nodes {
		urls = append(urls, n.ClientURL())
	}
	return strings.Join(urls, ",")
}

// Node returns the node named name (nil when none).
func (c *NATSCluster) Node(name string) *NATSNode {
	for _, n := range c.Nodes {
		if n.Name == name {
			return n
		}
	}
	return nil
}

// Close kills every node.
func (c *NATSCluster) Close() {
	for _, n := range c.Nodes {
		n.Proc.Close()
	}
}

// WaitHealthy polls until every running node answers /healthz 200 (JetStream enabled and
// current), the cluster has a meta leader, and each stream in streams has a leader and all its
// replicas current: the quorum is back.
func (c *NATSCluster) WaitHealthy(ctx context.Context, timeout time.Duration, streams []string) error {
	deadline := time.Now().Add(timeout)
	var last error
	for {
		last = c.healthy(ctx, streams)
		if last == nil {
			return nil
		}
		if time.Now().After(deadline) {
			return fmt.Errorf("cluster not healthy within %s: %w", timeout, last)
		}
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-time.After(100 * time.Millisecond):
		}
	}
}

func (c *NATSCluster) healthy(ctx context.Context, streams []string) error {
	client := &http.Client{Timeout: 2 * time.Second}
	for _, n := range c.Nodes {
		if !n.Running() {
			return fmt.Errorf("%s is not running", n.Name)
		}
		resp, err := client.Get(fmt.Sprintf("http://127.0.0.1:%d/healthz", n.MonitorPort))
		if err != nil {
			return fmt.Errorf("%s healthz: %w", n.Name, err)
		}
		resp.Body.Close()
		if resp.StatusCode != http.StatusOK {
			return fmt.Errorf("%s healthz: %d", n.Name, resp.StatusCode)
		}
	}
	if len(c.Nodes) == 1 {
		return nil // standalone: no meta group, no replicas
	}
	var jsz struct {
		MetaCluster *struct {
			Leader string `json:"leader"`
		} `json:"meta_cluster"`
	}
	if err := c.getJSON(fmt.Sprintf("http://127.0.0.1:%d/jsz", c.Nodes[0].MonitorPort), &jsz); err != nil {
		return err
	}
	if jsz.MetaCluster == nil || jsz.MetaCluster.Leader == "" {
		return errors.New("no meta leader")
	}
	for _, s := range streams {
		info, err := c.StreamInfo(ctx, s)
		if err != nil {
			return fmt.Errorf("stream %s: %w", s, err)
		}
		if info.Cluster == nil || info.Cluster.Leader == "" {
			return fmt.Errorf("stream %s: no leader", s)
		}
		for _, r := range info.Cluster.Replicas {
			if !r.Current || r.Offline {
				return fmt.Errorf("stream %s: replica %s not current", s, r.Name)
			}
		}
	}
	return nil
}

func (c *NATSCluster) getJSON(url string, v any) error {
	client := &http.Client{Timeout: 2 * time.Second}
	resp, err := client.Get(url)
	if err != nil {
		return err
	}
	defer resp.Body.Close()
	return json.NewDecoder(resp.Body).Decode(v)
}

// StreamInfo asks the cluster (through any running node) for a stream's info, its cluster
// leader and replicas included.
func (c *NATSCluster) StreamInfo(ctx context.Context, stream string) (*jetstream.StreamInfo, error) {
	var urls []string
	for _, n := range c.Nodes {
		if n.Running() {
			urls = append(urls, n.ClientURL())
		}
	}
	nc, err := nats.Connect(strings.Join(urls, ","), nats.Timeout(2*time.Second), nats.MaxReconnects(0))
	if err != nil {
		return nil, err
	}
	defer nc.Close()
	js, err := jetstream.New(nc)
	if err != nil {
		return nil, err
	}
	ictx, cancel := context.WithTimeout(ctx, 3*time.Second)
	defer cancel()
	s, err := js.Stream(ictx, stream)
	if err != nil {
		return nil, err
	}
	return s.Info(ictx)
}

// Leader returns the name of the node leading stream ("" when unknown).
func (c *NATSCluster) Leader(ctx context.Context, stream string) string {
	info, err := c.StreamInfo(ctx, stream)
	if err != nil || info.Cluster == nil {
		return ""
	}
	return info.Cluster.Leader
}
