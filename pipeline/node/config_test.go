package node_test

import (
	"strings"
	"testing"
	"time"

	"github.com/ximd/ximd/pipeline/node"
)

func env(m map[string]string) func(string) string { return func(k string) string { return m[k] } }

func TestFromEnv(t *testing.T) {
	tests := []struct {
		name    string
		role    node.Role
		env     map[string]string
		check   func(t *testing.T, c node.Config)
		wantErr []string
	}{
		{name: "defaults", role: node.RoleAll, env: nil, check: func(t *testing.T, c node.Config) {
			if c.HTTPAddr != "127.0.0.1:8080" || c.DataDir != "./data" || c.PublicURL != "http://127.0.0.1:8080" ||
				c.EditInterval != 250*time.Millisecond || c.Store.CompletedTTL != 24*time.Hour || c.MaxPacketBytes != 1<<20 ||
				c.MaxFileBytes != 64<<20 || c.FileTTL != 24*time.Hour || c.NATSPort != 4222 || c.NATSMonitorPort != 8222 || c.PprofAddr != "" {
				t.Fatalf("defaults %+v", c)
			}
		}},
		{name: "overrides", role: node.RoleAll, env: map[string]string{
			"XIM_HTTP_ADDR": "0.0.0.0:9000", "XIM_EDIT_INTERVAL": "1s", "XIM_MAX_FILE_BYTES": "2MiB",
			"XIM_COMPLETED_TTL": "48h", "XIM_PARTITIONS": "16", "XIM_NATS_PORT": "-1", "XIM_PUBLIC_URL": "https://ximd.example.com/",
		}, check: func(t *testing.T, c node.Config) {
			if c.HTTPAddr != "0.0.0.0:9000" || c.EditInterval != time.Second || c.MaxFileBytes != 2<<20 ||
				c.Store.CompletedTTL != 48*time.Hour || c.Store.Partitions != 16 || c.NATSPort != -1 || c.PublicURL != "https://ximd.example.com" {
				t.Fatalf("overrides %+v", c)
			}
		}},
		{name: "bad values all reported", role: node.RoleAll, env: map[string]string{
			"XIM_EDIT_INTERVAL": "soon", "XIM_MAX_FILE_BYTES": "big", "XIM_LOG_LEVEL": "loud", "XIM_NATS_PORT": "70000",
		}, wantErr: []string{"XIM_EDIT_INTERVAL", "XIM_MAX_FILE_BYTES", "XIM_LOG_LEVEL", "XIM_NATS_PORT"}},
		{name: "pprof off by default, loopback without a host", role: node.RoleAll, env: map[string]string{"XIM_PPROF_ADDR": ":6060"}, check: func(t *testing.T, c node.Config) {
			if c.PprofAddr != "127.0.0.1:6060" {
				t.Fatalf("XIM_PPROF_ADDR=:6060 gives %q", c.PprofAddr)
			}
		}},
		{name: "pprof needs host:port", role: node.RoleAll, env: map[string]string{"XIM_PPROF_ADDR": "6060"}, wantErr: []string{"XIM_PPROF_ADDR"}},
		{name: "gateway needs nats url", role: node.RoleGateway, wantErr: []string{"XIM_NATS_URL"}},
		{name: "worker needs nats url", role: node.RoleWorker, wantErr: []string{"XIM_NATS_URL"}},
		{name: "retry budget at most 1h", role: node.RoleAll, env: map[string]string{"XIM_TARGET_RETRY_BUDGET": "2h"}, wantErr: []string{"XIM_TARGET_RETRY_BUDGET"}},
		{name: "public url must be absolute", role: node.RoleAll, env: map[string]string{"XIM_PUBLIC_URL": "ximd.local"}, wantErr: []string{"XIM_PUBLIC_URL"}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			c, err := node.FromEnv(tt.role, env(tt.env))
			if (err != nil) != (len(tt.wantErr) > 0) {
				t.Fatalf("err = %v, wantErr %v", err, tt.wantErr)
			}
			for _, w := range tt.wantErr {
				if !strings.Contains(err.Error(), w) {
					t.Fatalf("error %q does not name %s", err, w)
				}
			}
			if tt.check != nil {
				tt.check(t, c)
			}
		})
	}
}
