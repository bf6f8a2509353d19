package pipeline

import (
	"bytes"
	"errors"
	"fmt"
	"io/fs"
	"log/slog"
	"os"
	"path/filepath"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nkeys"
)

// Credentials say how a NATS client proves who it is and whom it trusts. The zero value connects
// anonymously without TLS roots (a user/token in the URL still applies).
type Credentials struct {
	// File is a `.creds` file (user JWT and seed, as `nsc` writes it) or an nkey user seed file
	// (as ximd writes for its embedded server): XIM_NATS_CREDS.
	File string
	// CA is a PEM file of root certificates for a TLS NATS server: XIM_NATS_CA.
	CA string
}

// Options are the nats.Options that present c. The file is read now, so a missing or malformed
// file is reported at start, naming it, rather than as a refused connection later.
func (c Credentials) Options() ([]nats.Option, error) {
	var opts []nats.Option
	if c.File != "" {
		raw, err := os.ReadFile(c.File)
		if err != nil {
			return nil, fmt.Errorf("nats credentials: %w", err)
		}
		switch {
		case bytes.Contains(raw, []byte("BEGIN NATS USER JWT")):
			opts = append(opts, nats.UserCredentials(c.File))
		case isUserSeed(raw):
			opt, err := nats.NkeyOptionFromSeed(c.File)
			if err != nil {
				return nil, fmt.Errorf("nats credentials %s: %w", c.File, err)
			}
			opts = append(opts, opt)
		default:
			return nil, fmt.Errorf("nats credentials %s: neither a .creds file nor an nkey user seed", c.File)
		}
	}
	if c.CA != "" {
		if _, err := os.Stat(c.CA); err != nil {
			return nil, fmt.Errorf("nats CA: %w", err)
		}
		opts = append(opts, nats.RootCAs(c.CA))
	}
	return opts, nil
}

func isUserSeed(raw []byte) bool {
	kp, err := nkeys.FromSeed(bytes.TrimSpace(raw))
	if err != nil {
		return false
	}
	defer kp.Wipe()
	pub, err := kp.PublicKey()
	return err == nil && nkeys.IsValidPublicUserKey(pub)
}

// EnsureUserSeed returns the public key of the nkey user whose seed is in path, creating the seed
// (mode 0600) on first use. A seed file others can read is narrowed to 0600 with a warning: it
// lets its holder act as xAgent and read every channel's secrets.
func EnsureUserSeed(path string, logger *slog.Logger) (string, error) {
	raw, err := os.ReadFile(path)
	if errors.Is(err, fs.ErrNotExist) {
		if err := os.MkdirAll(filepath.Dir(path), 0o700); err != nil {
			return "", fmt.Errorf("nats credentials: %w", err)
		}
		kp, err := nkeys.CreateUser()
		if err != nil {
			return "", fmt.Errorf("nats credentials: %w", err)
		}
		defer kp.Wipe()
		seed, err := kp.Seed()
		if err != nil {
			return "", fmt.Errorf("nats credentials: %w", err)
		}
		f, err := os.OpenFile(path, os.O_WRONLY|os.O_CREATE|os.O_EXCL, 0o600)
		if err != nil {
			return "", fmt.Errorf("nats credentials: %w", err)
		}
		if _, err := f.Write(append(seed, '\n')); err != nil {
			_ = f.Close()
			return "", fmt.Errorf("nats credentials: %w", err)
		}
		if err := f.Close(); err != nil {
			return "", fmt.Errorf("nats credentials: %w", err)
		}
		logger.Info("nats_credentials_created", "file", path)
		return kp.PublicKey()
	}
	if err != nil {
		return "", fmt.Errorf("nats credentials: %w", err)
	}
	if fi, err := os.Stat(path); err == nil && fi.Mode().Perm()&0o077 != 0 {
		logger.Warn("nats_credentials_mode_narrowed", "file", path, "was", fi.Mode().Perm().String(), "now", "-rw-------")
		if err := os.Chmod(path, 0o600); err != nil {
			return "", fmt.Errorf("nats credentials: %w", err)
		}
	}
	kp, err := nkeys.FromSeed(bytes.TrimSpace(raw))
	if err != nil {
		return "", fmt.Errorf("nats credentials %s: not an nkey seed: %w", path, err)
	}
	defer kp.Wipe()
	pub, err := kp.PublicKey()
	if err != nil || !nkeys.IsValidPublicUserKey(pub) {
		return "", fmt.Errorf("nats credentials %s: not an nkey user seed", path)
	}
	return pub, nil
}
