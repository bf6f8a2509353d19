package test

import (
	"context"
	"encoding/base64"
	"encoding/hex"
	"errors"
	"net"
	"net/http"
	"net/url"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/ximd/ximd/internal/testkit"
	"github.com/ximd/ximd/pipeline/node"
	"github.com/ximd/ximd/profile"
	"github.com/ximd/ximd/subjects"
)

func buildXimd(t *testing.T) string {
	t.Helper()
	bin := filepath.Join(t.TempDir(), "ximd")
	out, err := exec.Command("go", "build", "-o", bin, "../cmd/ximd").CombinedOutput()
	if err != nil {
		t.Fatalf("go build: %v\n%s", err, out)
	}
	return bin
}

func freeAddr(t testing.TB) string {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	return ln.Addr().String()
}

// edge-api §1 and §2: the ximd process runs from its environment with the embedded NATS server,
// generates the agent token into <data dir>/agent-token (0600) and logs its path, never the token
// or a webhook secret; SIGTERM drains and exits 0.
func TestProcess_RunsFromEnvGeneratesTokenAndDrainsOnSIGTERM(t *testing.T) {
	t.Parallel()
	bin := buildXimd(t)
	dir := t.TempDir()
	addr := freeAddr(t)
	var logs testkit.SyncBuffer
	cmd := exec.Command(bin)
	cmd.Env = append(os.Environ(), "XIM_DATA_DIR="+dir, "XIM_HTTP_ADDR="+addr, "XIM_NATS_PORT=-1",
		"XIM_NATS_MONITOR_PORT=-1", "XIM_LOG_LEVEL=debug", "XIM_AGENT_TOKEN=")
	cmd.Stdout, cmd.Stderr = &logs, &logs
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = cmd.Process.Kill() })
	poll(t, "readyz 200", func() bool {
		resp, err := http.Get("http://" + addr + "/readyz")
		if err != nil {
			return false
		}
		resp.Body.Close()
		return resp.StatusCode == 200
	})
	tokenFile := filepath.Join(dir, "agent-token")
	st, err := os.Stat(tokenFile)
	if err != nil || st.Mode().Perm() != 0o600 {
		t.Fatalf("token file: %v %v", st, err)
	}
	raw, _ := os.ReadFile(tokenFile)
	token := strings.TrimSpace(string(raw))

	tg, err := testkit.NewTarget("webhook-secret-"+testkit.NewID("s"), testkit.TargetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	defer tg.Close()
	n := &testkit.Node{Token: token, Addr: addr}
	if err := n.OpenChannel("cch_proc", tg.Config("edit", "typing")); err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), wait)
	defer cancel()
	a, err := testkit.Dial(ctx, addr, token)
	if err != nil {
		t.Fatal(err)
	}
	pid, _ := a.Send(ctx, "cch_proc", profile.TypeMessage, msg("m_proc", "hello"))
	env, err := a.Reply(pid, wait)
	if ack, aerr := testkit.AckOf(env); err != nil || aerr != nil || ack.Status != profile.AckAccepted {
		t.Fatalf("ack %+v %v %v", env, err, aerr)
	}
	a.Close()
	// NATS is inside the trust boundary: the embedded server admits only the user whose seed ximd
	// wrote into the data dir (0600); an anonymous client is refused.
	seedFile := filepath.Join(dir, node.NATSSeedFile)
	if st, err := os.Stat(seedFile); err != nil || st.Mode().Perm() != 0o600 {
		t.Fatalf("nats seed file: %v %v", st, err)
	}
	seed, _ := os.ReadFile(seedFile)
	natsURL := clientURLOf(t, logs.String())
	if nc, err := nats.Connect(natsURL, nats.MaxReconnects(0)); err == nil || !errors.Is(err, nats.ErrAuthorization) {
		if nc != nil {
			nc.Close()
		}
		t.Fatalf("anonymous client on the embedded NATS: %v, want an authorization violation", err)
	}
	auth, err := nats.NkeyOptionFromSeed(seedFile)
	if err != nil {
		t.Fatal(err)
	}
	signingKey := signingKey(t, natsURL, auth)

	if err := cmd.Process.Signal(syscall.SIGTERM); err != nil {
		t.Fatal(err)
	}
	done := make(chan error, 1)
	go func() { done <- cmd.Wait() }()
	select {
	case err := <-done:
		if err != nil {
			t.Fatalf("exit after SIGTERM: %v\n%s", err, logs.String())
		}
	case <-time.After(45 * time.Second):
		t.Fatalf("no exit within 45s of SIGTERM\n%s", logs.String())
	}
	out := logs.String()
	if !strings.Contains(out, tokenFile) && !strings.Contains(out, "agent-token") {
		t.Fatalf("the token file's path is not logged:\n%s", out)
	}
	for _, secret := range []string{token, tg.Secret, strings.TrimSpace(string(seed)), hex.EncodeToString(signingKey), base64.StdEncoding.EncodeToString(signingKey), base64.RawURLEncoding.EncodeToString(signingKey)} {
		if strings.Contains(out, secret) {
			t.Fatalf("a secret is in the logs")
		}
	}
	if !strings.Contains(out, `"ximd_stopped"`) {
		t.Fatalf("no clean stop:\n%s", out)
	}
}

// edge-api §1: a bad configuration is refused before anything starts, naming every bad variable.
func TestProcess_BadConfigurationExits2NamingVariables(t *testing.T) {
	t.Parallel()
	bin := buildXimd(t)
	cmd := exec.Command(bin, "gateway")
	cmd.Env = append(os.Environ(), "XIM_DATA_DIR="+t.TempDir(), "XIM_EDIT_INTERVAL=soon", "XIM_LOG_LEVEL=loud", "XIM_NATS_URL=")
	out, err := cmd.CombinedOutput()
	var ee *exec.ExitError
	if !errors.As(err, &ee) || ee.ExitCode() != 2 {
		t.Fatalf("exit %v\n%s", err, out)
	}
	for _, want := range []string{"XIM_EDIT_INTERVAL", "XIM_LOG_LEVEL", "XIM_NATS_URL"} {
		if !strings.Contains(string(out), want) {
			t.Fatalf("output does not name %s:\n%s", want, out)
		}
	}
}

// clientURLOf is the embedded NATS client URL a process logged.
func clientURLOf(t *testing.T, logs string) string {
	t.Helper()
	m := regexp.MustCompile(`"client_url":"(nats://[^"]+)"`).FindStringSubmatch(logs)
	if m == nil {
		t.Fatalf("no client_url in the logs:\n%s", logs)
	}
	return m[1]
}

// signingKey reads the cluster's file-link signing key from KV xim_config.
func signingKey(t *testing.T, natsURL string, auth ...nats.Option) []byte {
	t.Helper()
	nc, err := nats.Connect(natsURL, auth...)
	if err != nil {
		t.Fatal(err)
	}
	defer nc.Close()
	js, _ := jetstream.New(nc)
	kv, err := js.KeyValue(context.Background(), subjects.BucketConfig)
	if err != nil {
		t.Fatal(err)
	}
	e, err := kv.Get(context.Background(), subjects.ConfigSigningKey)
	if err != nil || len(e.Value()) < 32 {
		t.Fatalf("signing key: %v", err)
	}
	return e.Value()
}

// A default embedded NATS port that something else holds (a nats-server already on the laptop)
// is replaced by a free one, logged and written to the data dir for ximctl and the `nats` CLI.
func TestEmbeddedNATS_TakenDefaultPortsFallBack(t *testing.T) {
	t.Parallel()
	client, monitor := holdPort(t), holdPort(t)
	dir := t.TempDir()
	n, err := testkit.StartNode(testkit.NodeOptions{DataDir: dir, Mutate: func(c *node.Config) {
		c.NATSPort, c.NATSMonitorPort = client, monitor // as defaults: not set explicitly
	}})
	if err != nil {
		t.Fatalf("node with its default ports taken: %v", err)
	}
	t.Cleanup(func() { _ = n.Stop() })
	for name, taken := range map[string]int{node.NATSURLFile: client, node.NATSMonitorURLFile: monitor} {
		raw, err := os.ReadFile(filepath.Join(dir, name))
		if err != nil {
			t.Fatal(err)
		}
		u, err := url.Parse(strings.TrimSpace(string(raw)))
		if err != nil || u.Port() == "" || u.Port() == strconv.Itoa(taken) {
			t.Fatalf("%s = %q: want the free port used instead of %d", name, raw, taken)
		}
	}
	raw, _ := os.ReadFile(filepath.Join(dir, node.NATSURLFile))
	nc, err := nats.Connect(strings.TrimSpace(string(raw)), n.NATSOptions()...)
	if err != nil {
		t.Fatalf("the written URL does not reach the server: %v", err)
	}
	nc.Close()
	if err := n.Stop(); err != nil {
		t.Fatal(err)
	}
	if _, err := os.Stat(filepath.Join(dir, node.NATSURLFile)); !errors.Is(err, os.ErrNotExist) {
		t.Fatalf("a stopped node left its NATS address behind: %v", err)
	}
}

// An embedded NATS port set explicitly that is taken fails at once, naming the port and its
// variable.
func TestProcess_TakenExplicitNATSPortFailsAtOnce(t *testing.T) {
	t.Parallel()
	bin := buildXimd(t)
	taken := holdPort(t)
	cmd := exec.Command(bin)
	cmd.Env = append(os.Environ(), "XIM_DATA_DIR="+t.TempDir(), "XIM_HTTP_ADDR="+freeAddr(t), "XIM_NATS_PORT="+strconv.Itoa(taken), "XIM_NATS_URL=")
	start := time.Now()
	out, err := cmd.CombinedOutput()
	if err == nil {
		t.Fatalf("ximd ran with its NATS port taken:\n%s", out)
	}
	if took := time.Since(start); took > 10*time.Second {
		t.Fatalf("failed after %s, want at once", took)
	}
	for _, want := range []string{"XIM_NATS_PORT", strconv.Itoa(taken), "in use"} {
		if !strings.Contains(string(out), want) {
			t.Fatalf("output does not name %q:\n%s", want, out)
		}
	}
}

// holdPort listens on a free loopback port until the test ends and returns it.
func holdPort(t *testing.T) int {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { ln.Close() })
	return ln.Addr().(*net.TCPAddr).Port
}
