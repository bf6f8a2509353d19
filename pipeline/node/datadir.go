package node

import (
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
)

// Files in the data dir that tell other tools (ximctl, the README's `nats` commands) where the
// embedded NATS server listens, which is not always the default port.
const (
	NATSURLFile        = "nats.url"
	NATSMonitorURLFile = "nats-monitor.url"
	// NATSSeedFile is the nkey user seed (mode 0600) the embedded server admits: ximd, ximctl
	// and `nats --nkey` connect with it. Whoever reads it can act as xAgent.
	NATSSeedFile = "nats.nk"
)

// writeNATSURLs writes the embedded server's URLs into dir and returns the function that removes
// them (at shutdown, so a stopped node leaves no stale address).
func writeNATSURLs(dir, clientURL, monitorURL string) (func(), error) {
	files := map[string]string{NATSURLFile: clientURL, NATSMonitorURLFile: monitorURL}
	for name, url := range files {
		path := filepath.Join(dir, name)
		if url == "" {
			if err := os.Remove(path); err != nil && !errors.Is(err, fs.ErrNotExist) {
				return nil, fmt.Errorf("data dir: %w", err)
			}
			continue
		}
		if err := os.WriteFile(path, []byte(url+"\n"), 0o644); err != nil {
			return nil, fmt.Errorf("data dir: %w", err)
		}
	}
	return func() {
		for name := range files {
			_ = os.Remove(filepath.Join(dir, name))
		}
	}, nil
}
