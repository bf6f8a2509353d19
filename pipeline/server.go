package pipeline

import (
	"errors"
	"fmt"
	"log/slog"
	"net"
	"path/filepath"
	"strconv"
	"time"

	"github.com/nats-io/nats-server/v2/server"
	"github.com/nats-io/nats.go"
)

// ServerConfig configures the embedded NATS server of an all-in-one node.
type ServerConfig struct {
	// DataDir holds JetStream's file storage (in DataDir/jetstream).
	DataDir string
	// Host is the listen host of the client and monitoring ports (default 127.0.0.1).
	Host string
	// Port is the client port so the `nats` CLI can attach (default 4222; -1 picks a free port).
	Port int
	// MonitorPort is the HTTP monitoring port (/varz, /jsz, ...; default 8222; 0 disables, -1 random).
	MonitorPort int
	// MaxPayload is the largest NATS message (default 8 MiB; must exceed the largest packet).
	MaxPayload int32
	// SyncInterval is how often JetStream fsyncs (0: the server default of 2 minutes; see README).
	SyncInterval time.Duration
	// SyncAlways makes JetStream fsync every write before acknowledging it (SyncInterval is then
	// ignored).
	SyncAlways bool
	// PortFallback and MonitorPortFallback: when the port is taken (another NATS server on the
	// laptop), listen on a free one instead of failing (the default ports; an explicit port
	// fails at once with a *PortInUseError).
	PortFallback, MonitorPortFallback bool
	// UserNkeys are the public keys of the nkey users allowed in, with every permission (the
	// node's own user: EnsureUserSeed). Empty: anonymous clients are allowed, which only tests
	// and benchmarks on a throwaway server want.
	UserNkeys []string
}

// PortInUseError reports a port the embedded server cannot listen on.
type PortInUseError struct {
	// Which is "client" or "monitor".
	Which string
	Addr  string
	Err   error
}

func (e *PortInUseError) Error() string {
	return fmt.Sprintf("embedded nats: %s port %s is in use: %v", e.Which, e.Addr, e.Err)
}

func (e *PortInUseError) Unwrap() error { return e.Err }

// claimPort checks that host:*port can be listened on. A taken port becomes -1 (any free port)
// with fallback, and a *PortInUseError without.
func claimPort(host string, port *int, fallback bool, which string, logger *slog.Logger) error {
	if *port <= 0 {
		return nil
	}
	addr := net.JoinHostPort(host, strconv.Itoa(*port))
	ln, err := net.Listen("tcp", addr)
	if err == nil {
		return ln.Close()
	}
	if !fallback {
		return &PortInUseError{Which: which, Addr: addr, Err: err}
	}
	logger.Warn("nats_port_taken", "port", which, "addr", addr, "err", err, "using", "a free port")
	*port = -1
	return nil
}

func (c *ServerConfig) defaults() {
	if c.Host == "" {
		c.Host = "127.0.0.1"
	}
	if c.Port == 0 {
		c.Port = 4222
	}
	if c.MaxPayload == 0 {
		c.MaxPayload = 8 << 20
	}
}

// Validate reports every configuration error at once.
func (c ServerConfig) Validate() error {
	var errs []error
	if c.DataDir == "" {
		errs = append(errs, errors.New("data dir is required"))
	}
	if c.MaxPayload < 1<<20 {
		errs = append(errs, errors.New("max payload must be at least 1 MiB"))
	}
	return errors.Join(errs...)
}

// Server is a running embedded nats-server with JetStream.
type Server struct {
	ns *server.Server
}

// StartServer starts the embedded server and waits until it accepts connections.
func StartServer(cfg ServerConfig, logger *slog.Logger) (*Server, error) {
	cfg.defaults()
	if err := cfg.Validate(); err != nil {
		return nil, fmt.Errorf("embedded nats: %w", err)
	}
	if err := claimPort(cfg.Host, &cfg.Port, cfg.PortFallback, "client", logger); err != nil {
		return nil, err
	}
	if err := claimPort(cfg.Host, &cfg.MonitorPort, cfg.MonitorPortFallback, "monitor", logger); err != nil {
		return nil, err
	}
	opts := &server.Options{
		ServerName:   "ximd",
		Host:         cfg.Host,
		Port:         cfg.Port,
		HTTPHost:     cfg.Host,
		HTTPPort:     cfg.MonitorPort,
		JetStream:    true,
		StoreDir:     filepath.Join(cfg.DataDir, "jetstream"),
		MaxPayload:   cfg.MaxPayload,
		SyncInterval: cfg.SyncInterval,
		SyncAlways:   cfg.SyncAlways,
		NoSigs:       true,
	}
	for _, pub := range cfg.UserNkeys {
		opts.Nkeys = append(opts.Nkeys, &server.NkeyUser{Nkey: pub})
	}
	ns, err := server.NewServer(opts)
	if err != nil {
		return nil, fmt.Errorf("embedded nats: %w", err)
	}
	ns.SetLoggerV2(slogAdapter{logger.With("component", "nats")}, false, false, false)
	go ns.Start()
	if !ns.ReadyForConnections(30 * time.Second) {
		ns.Shutdown()
		return nil, errors.New("embedded nats: not ready within 30s (a port taken after it was checked?)")
	}
	return &Server{ns: ns}, nil
}

// ClientURL is the nats:// URL clients (and the `nats` CLI) use.
func (s *Server) ClientURL() string { return s.ns.ClientURL() }

// MonitorURL is the monitoring endpoint's base URL, or "" when disabled.
func (s *Server) MonitorURL() string {
	addr := s.ns.MonitorAddr()
	if addr == nil {
		return ""
	}
	return "http://" + net.JoinHostPort(addr.IP.String(), strconv.Itoa(addr.Port))
}

// Shutdown stops the server and waits for it.
func (s *Server) Shutdown() {
	s.ns.Shutdown()
	s.ns.WaitForShutdown()
}

// slogAdapter lets nats-server log through slog.
type slogAdapter struct{ l *slog.Logger }

func (a slogAdapter) Noticef(format string, v ...any) { a.l.Debug(fmt.Sprintf(format, v...)) }
func (a slogAdapter) Warnf(format string, v ...any)   { a.l.Warn(fmt.Sprintf(format, v...)) }
func (a slogAdapter) Fatalf(format string, v ...any)  { a.l.Error(fmt.Sprintf(format, v...)) }
func (a slogAdapter) Errorf(format string, v ...any)  { a.l.Error(fmt.Sprintf(format, v...)) }
func (a slogAdapter) Debugf(format string, v ...any)  { a.l.Debug(fmt.Sprintf(format, v...)) }
func (a slogAdapter) Tracef(format string, v ...any)  {}

// InProcess is the nats.Option that connects a client of this process without TCP.
func (s *Server) InProcess() nats.Option { return nats.InProcessServer(s.ns) }
