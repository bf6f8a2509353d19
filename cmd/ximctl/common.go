package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"net"
	"net/url"
	"os"
	"path/filepath"
	"strings"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/ximd/ximd/pipeline"
	"github.com/ximd/ximd/pipeline/node"
	"github.com/ximd/ximd/pipeline/xagent"
)

var errUsage = errors.New("usage")

// errHelp is returned by parse for -h: the usage was printed and the exit status is 0.
var errHelp = errors.New("help requested")

// Defaults shared by every command, so that -http, -token, -nats and -channel mean the same
// everywhere.
const (
	defaultHTTPAddr = "127.0.0.1:8080"
	defaultNATSURL  = "nats://127.0.0.1:4222"
)

// connFlags are the flags every command that talks to ximd's HTTP edge shares: -http (with -addr
// kept as an alias) and -token.
type connFlags struct {
	http  string
	addr  string // host:port of the HTTP edge, set by resolve from -http
	token string
}

func (c *connFlags) register(fs *flag.FlagSet) {
	def := envOr("XIM_HTTP_ADDR", defaultHTTPAddr)
	fs.StringVar(&c.http, "http", "http://"+def, "ximd HTTP edge, http://host:port or host:port ($XIM_HTTP_ADDR sets the default)")
	fs.StringVar(&c.http, "addr", "http://"+def, "alias of -http")
	fs.StringVar(&c.token, "token", "", "bearer token (default $XIM_AGENT_TOKEN, else the file $XIM_DATA_DIR/agent-token, ./data/agent-token)")
}

// resolve checks -http into addr and reads the token file when no token was given.
func (c *connFlags) resolve() error {
	addr, err := httpAddr(c.http)
	if err != nil {
		return err
	}
	c.addr = addr
	if c.token == "" {
		c.token = os.Getenv("XIM_AGENT_TOKEN") // not the flag's default: -h would print it
	}
	if c.token != "" {
		return nil
	}
	dir := envOr("XIM_DATA_DIR", "./data")
	b, err := os.ReadFile(dir + "/agent-token")
	if err != nil {
		return errors.New("no token: pass -token, set XIM_AGENT_TOKEN, or run where " + dir + "/agent-token is readable")
	}
	c.token = strings.TrimSpace(string(b))
	return nil
}

// dial connects to the edge's packet stream as xAgent (within 10s); resolve first.
func (c *connFlags) dial(ctx context.Context) (*xagent.Client, error) {
	dctx, cancel := context.WithTimeout(ctx, 10*time.Second)
	defer cancel()
	a, err := xagent.Dial(dctx, c.addr, c.token)
	if err != nil {
		return nil, fmt.Errorf("connect ws://%s/v1/ws: %w", c.addr, err)
	}
	return a, nil
}

// httpAddr turns an -http value (http://host:port, host:port, with or without a trailing /)
// into host:port.
func httpAddr(v string) (string, error) {
	s := strings.TrimSuffix(v, "/")
	if i := strings.Index(s, "://"); i >= 0 {
		if s[:i] != "http" {
			return "", fmt.Errorf("-http %q: only http:// is supported", v)
		}
		s = s[i+3:]
	}
	if _, _, err := net.SplitHostPort(s); err != nil || strings.Contains(s, "/") {
		return "", fmt.Errorf("-http %q: want http://host:port", v)
	}
	return s, nil
}

// natsFlags are -nats, -creds and -nats-ca: the NATS server ximd uses and how to log in to it.
type natsFlags struct{ url, creds, ca *string }

func natsFlag(fs *flag.FlagSet) natsFlags {
	dataDir := envOr("XIM_DATA_DIR", "./data")
	return natsFlags{
		url:   fs.String("nats", defaultNATS(dataDir), "NATS server URL (default: $XIM_NATS_URL, else the embedded server's address in $XIM_DATA_DIR/"+node.NATSURLFile+" (./data), else "+defaultNATSURL+")"),
		creds: fs.String("creds", defaultCreds(dataDir), "NATS .creds or nkey seed file (default: $XIM_NATS_CREDS, else the embedded server's $XIM_DATA_DIR/"+node.NATSSeedFile+" when it exists)"),
		ca:    fs.String("nats-ca", os.Getenv("XIM_NATS_CA"), "PEM roots of a TLS NATS server (default: $XIM_NATS_CA)"),
	}
}

// connect dials the server with the credentials.
func (f natsFlags) connect(opts ...nats.Option) (*nats.Conn, error) {
	auth, err := pipeline.Credentials{File: *f.creds, CA: *f.ca}.Options()
	if err != nil {
		return nil, err
	}
	nc, err := nats.Connect(*f.url, append(auth, opts...)...)
	if err != nil {
		return nil, fmt.Errorf("connect %s: %w", f.redacted(), err)
	}
	return nc, nil
}

// redacted is the URL without a password or token, fit for output.
func (f natsFlags) redacted() string { return redactURLs(*f.url) }

// redactURLs hides the user info of each URL in a comma-separated list.
func redactURLs(list string) string {
	parts := strings.Split(list, ",")
	for i, p := range parts {
		if u, err := url.Parse(strings.TrimSpace(p)); err == nil && u.User != nil {
			u.User = url.User("redacted")
			parts[i] = u.String()
		}
	}
	return strings.Join(parts, ",")
}

// defaultNATS is $XIM_NATS_URL, else the URL a running all-in-one ximd wrote into its data dir
// (its embedded server falls back to a free port when 4222 is taken), else defaultNATSURL.
func defaultNATS(dataDir string) string {
	if v := os.Getenv("XIM_NATS_URL"); v != "" {
		return v
	}
	if b, err := os.ReadFile(filepath.Join(dataDir, node.NATSURLFile)); err == nil {
		if u := strings.TrimSpace(string(b)); u != "" {
			return u
		}
	}
	return defaultNATSURL
}

// defaultCreds is $XIM_NATS_CREDS, else (no $XIM_NATS_URL: the embedded server) the seed ximd
// keeps in its data dir, when there is one.
func defaultCreds(dataDir string) string {
	if v := os.Getenv("XIM_NATS_CREDS"); v != "" || os.Getenv("XIM_NATS_URL") != "" {
		return v
	}
	if seed := filepath.Join(dataDir, node.NATSSeedFile); fileExists(seed) {
		return seed
	}
	return ""
}

func fileExists(path string) bool {
	_, err := os.Stat(path)
	return err == nil
}

// channelFlag registers -channel, a connector_channel_id.
func channelFlag(fs *flag.FlagSet, what string) *string {
	return fs.String("channel", "", "connector_channel_id "+what)
}

// setUsage makes fs print "usage: ximctl <name> <synopsis>", the one-line description and the
// flags for -h or a flag error.
func setUsage(fs *flag.FlagSet, stderr io.Writer, synopsis, description string) {
	fs.Usage = func() {
		fmt.Fprintf(stderr, "usage: %s %s\n\n%s\n\nflags:\n", fs.Name(), synopsis, description)
		fs.PrintDefaults()
	}
}

func envOr(name, def string) string {
	if v := os.Getenv(name); v != "" {
		return v
	}
	return def
}

// parse parses args; -h prints the usage and returns errHelp, a bad flag errUsage.
func parse(fs *flag.FlagSet, args []string, stderr io.Writer) error {
	fs.SetOutput(stderr)
	if err := fs.Parse(args); err != nil {
		if errors.Is(err, flag.ErrHelp) {
			return errHelp
		}
		return errUsage
	}
	return nil
}
