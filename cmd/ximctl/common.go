package main

import (
	"errors"
	"flag"
	"io"
	"os"
	"strings"
)

var errUsage = errors.New("usage")

// connFlags are the flags every command that talks to ximd shares.
type connFlags struct {
	addr  string
	token string
}

func (c *connFlags) register(fs *flag.FlagSet) {
	fs.StringVar(&c.addr, "addr", envOr("XIM_HTTP_ADDR", "127.0.0.1:8080"), "ximd HTTP address (host:port)")
	fs.StringVar(&c.token, "token", os.Getenv("XIM_AGENT_TOKEN"), "bearer token (default $XIM_AGENT_TOKEN, else the file ./data/agent-token)")
}

func (c *connFlags) resolve() error {
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

func envOr(name, def string) string {
	if v := os.Getenv(name); v != "" {
		return v
	}
	return def
}

func parse(fs *flag.FlagSet, args []string, stderr io.Writer) error {
	fs.SetOutput(stderr)
	if err := fs.Parse(args); err != nil {
		if errors.Is(err, flag.ErrHelp) {
			return errUsage
		}
		return errUsage
	}
	return nil
}
