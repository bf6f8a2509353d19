package pipeline_test

import (
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/tls"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/pem"
	"errors"
	"log/slog"
	"math/big"
	"net"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/nats-io/nats-server/v2/server"
	"github.com/nats-io/nats.go"

	"github.com/ximd/ximd/pipeline"
)

// The embedded server's user: a seed created once (0600), the same key on every later start, a
// wider mode narrowed; the server admits it and refuses anyone else.
func TestCredentials_EmbeddedSeedAdmitsOnlyItsHolder(t *testing.T) {
	dir := t.TempDir()
	seed := filepath.Join(dir, "nats.nk")
	logger := slog.New(slog.DiscardHandler)
	pub, err := pipeline.EnsureUserSeed(seed, logger)
	if err != nil {
		t.Fatal(err)
	}
	if st, err := os.Stat(seed); err != nil || st.Mode().Perm() != 0o600 {
		t.Fatalf("seed file: %v %v", st, err)
	}
	if err := os.Chmod(seed, 0o644); err != nil {
		t.Fatal(err)
	}
	again, err := pipeline.EnsureUserSeed(seed, logger)
	if err != nil || again != pub {
		t.Fatalf("second start: %q %v, want the same user %q", again, err, pub)
	}
	if st, _ := os.Stat(seed); st.Mode().Perm() != 0o600 {
		t.Fatalf("a readable seed file stays %v", st.Mode().Perm())
	}

	srv, err := pipeline.StartServer(pipeline.ServerConfig{DataDir: dir, Port: -1, UserNkeys: []string{pub}}, logger)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(srv.Shutdown)
	opts, err := pipeline.Credentials{File: seed}.Options()
	if err != nil {
		t.Fatal(err)
	}
	nc, err := nats.Connect(srv.ClientURL(), opts...)
	if err != nil {
		t.Fatalf("the seed's holder: %v", err)
	}
	nc.Close()
	if nc, err := nats.Connect(srv.ClientURL(), nats.MaxReconnects(0)); !errors.Is(err, nats.ErrAuthorization) {
		if nc != nil {
			nc.Close()
		}
		t.Fatalf("anonymous: %v, want an authorization violation", err)
	}
	other := filepath.Join(t.TempDir(), "other.nk")
	if _, err := pipeline.EnsureUserSeed(other, logger); err != nil {
		t.Fatal(err)
	}
	opts, _ = pipeline.Credentials{File: other}.Options()
	if nc, err := nats.Connect(srv.ClientURL(), append(opts, nats.MaxReconnects(0))...); !errors.Is(err, nats.ErrAuthorization) {
		if nc != nil {
			nc.Close()
		}
		t.Fatalf("another seed: %v, want an authorization violation", err)
	}
}

// XIM_NATS_CREDS that is neither a .creds file nor a seed, or is missing, is refused at start,
// naming the file.
func TestCredentials_BadFileNamed(t *testing.T) {
	bad := filepath.Join(t.TempDir(), "token.txt")
	if err := os.WriteFile(bad, []byte("not-a-credential\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	for _, file := range []string{bad, filepath.Join(t.TempDir(), "missing.creds")} {
		if _, err := (pipeline.Credentials{File: file}).Options(); err == nil || !strings.Contains(err.Error(), filepath.Base(file)) {
			t.Errorf("%s: %v, want an error naming it", file, err)
		}
	}
}

// XIM_NATS_CA: a TLS server whose certificate the system does not trust is reached with the CA
// file, and refused without it.
func TestCredentials_CAReachesATLSServer(t *testing.T) {
	dir := t.TempDir()
	caFile, tlsCfg := selfSignedTLS(t, dir)
	opts := &server.Options{Host: "127.0.0.1", Port: -1, NoLog: true, NoSigs: true, TLS: true, TLSConfig: tlsCfg, TLSTimeout: 2}
	srv, err := server.NewServer(opts)
	if err != nil {
		t.Fatal(err)
	}
	go srv.Start()
	if !srv.ReadyForConnections(10 * time.Second) {
		t.Fatal("tls server not ready")
	}
	t.Cleanup(srv.Shutdown)
	url := strings.Replace(srv.ClientURL(), "nats://", "tls://", 1)
	if nc, err := nats.Connect(url, nats.MaxReconnects(0)); err == nil {
		nc.Close()
		t.Fatal("connected without the CA")
	}
	with, err := pipeline.Credentials{CA: caFile}.Options()
	if err != nil {
		t.Fatal(err)
	}
	nc, err := nats.Connect(url, with...)
	if err != nil {
		t.Fatalf("with the CA: %v", err)
	}
	nc.Close()
}

// selfSignedTLS writes a CA certificate for 127.0.0.1 into dir and returns its path and a
// server config presenting it.
func selfSignedTLS(t *testing.T, dir string) (string, *tls.Config) {
	t.Helper()
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	tmpl := &x509.Certificate{
		SerialNumber: big.NewInt(1), Subject: pkix.Name{CommonName: "ximd test"},
		NotBefore: time.Now().Add(-time.Hour), NotAfter: time.Now().Add(time.Hour),
		IPAddresses: []net.IP{net.ParseIP("127.0.0.1")}, IsCA: true, BasicConstraintsValid: true,
		KeyUsage: x509.KeyUsageDigitalSignature | x509.KeyUsageCertSign, ExtKeyUsage: []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth},
	}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, tmpl, &key.PublicKey, key)
	if err != nil {
		t.Fatal(err)
	}
	caFile := filepath.Join(dir, "ca.pem")
	if err := os.WriteFile(caFile, pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: der}), 0o600); err != nil {
		t.Fatal(err)
	}
	return caFile, &tls.Config{Certificates: []tls.Certificate{{Certificate: [][]byte{der}, PrivateKey: key}}, MinVersion: tls.VersionTLS12}
}
