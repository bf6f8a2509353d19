package node

import (
	"errors"
	"fmt"
	"net"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/ximd/ximd/pipeline"
)

// Role selects what a process runs (edge-api §1).
type Role string

const (
	// RoleAll runs one complete node: embedded NATS (unless NATSURL is set), edge and workers.
	RoleAll Role = "all"
	// RoleGateway runs only the HTTP/WebSocket edge against NATSURL.
	RoleGateway Role = "gateway"
	// RoleWorker runs only the pipeline consumers against NATSURL.
	RoleWorker Role = "worker"
)

// Config is a process's whole configuration; every field comes from one XIM_* variable
// (README "Configuration" lists them with their defaults and reasons).
type Config struct {
	Role Role

	HTTPAddr string // XIM_HTTP_ADDR
	// PprofAddr (XIM_PPROF_ADDR) serves the Go profiler on its own listener ("": off; a
	// missing host binds loopback).
	PprofAddr string
	DataDir   string // XIM_DATA_DIR
	NATSURL   string // XIM_NATS_URL
	// NATSCreds (XIM_NATS_CREDS) is the .creds or nkey seed file presented to XIM_NATS_URL; the
	// embedded server always uses the seed ximd keeps in the data dir (NATSSeedFile).
	NATSCreds  string
	NATSCA     string // XIM_NATS_CA: PEM roots for a TLS XIM_NATS_URL
	AgentToken string // XIM_AGENT_TOKEN (empty: <data dir>/agent-token)
	PublicURL  string // XIM_PUBLIC_URL
	LogLevel   string // XIM_LOG_LEVEL
	LogFormat  string // XIM_LOG_FORMAT: auto, text, json
	Instance   string // XIM_INSTANCE: this process's name in NATS connection names and replies

	NATSPort        int // XIM_NATS_PORT (embedded server client port)
	NATSMonitorPort int // XIM_NATS_MONITOR_PORT (embedded server monitoring port)
	// NATSPortSet and NATSMonitorPortSet: the port was set explicitly (XIM_NATS_PORT,
	// XIM_NATS_MONITOR_PORT): taken, it is an error; a default port that is taken falls back to
	// a free one.
	NATSPortSet, NATSMonitorPortSet bool
	NATSSync                        time.Duration // XIM_NATS_SYNC_INTERVAL (embedded server fsync interval)
	NATSSyncAlways                  bool          // XIM_NATS_SYNC_INTERVAL=always: fsync every write before acknowledging it

	EditInterval      time.Duration // XIM_EDIT_INTERVAL
	ActivityTimeout   time.Duration // XIM_ACTIVITY_TIMEOUT
	DeltaTTL          time.Duration // XIM_DELTA_TTL
	MaxDeltaBuffers   int           // XIM_MAX_DELTA_BUFFERS
	MaxDeltaBytes     int           // XIM_MAX_DELTA_BYTES
	TargetRetryBudget time.Duration // XIM_TARGET_RETRY_BUDGET
	Stages            []string      // XIM_STAGES: the worker stages this process runs (default: all)
	MaxLanes          int           // XIM_MAX_LANES: channels in process at once per stage partition
	TargetTimeout     time.Duration // XIM_TARGET_TIMEOUT
	MaxPacketBytes    int64         // XIM_MAX_PACKET_BYTES
	FileTTL           time.Duration // XIM_FILE_TTL
	MaxFileBytes      int64         // XIM_MAX_FILE_BYTES
	FilesMaxBytes     int64         // XIM_FILES_MAX_BYTES
	FileLinkTTL       time.Duration // XIM_FILE_LINK_TTL
	DownloadTimeout   time.Duration // XIM_FILE_DOWNLOAD_TIMEOUT
	// Webchat quotas per channel and gateway (page.Quotas): XIM_WEBCHAT_MAX_STREAMS,
	// XIM_WEBCHAT_MESSAGES_PER_MINUTE, XIM_WEBCHAT_UPLOAD_BYTES_PER_HOUR.
	WebchatMaxStreams, WebchatMessagesPerMinute int
	WebchatUploadBytesPerHour                   int64
	// DownloadAllowPrivate (XIM_DOWNLOAD_ALLOW_PRIVATE=1): user files may be downloaded from
	// internal addresses (loopback, private, link-local) that no channel allowed literally.
	DownloadAllowPrivate bool
	AckTimeout           time.Duration // XIM_ACK_TIMEOUT
	OutboundBackoff      time.Duration // XIM_OUTBOUND_BACKOFF_MAX
	MaxConnections       int           // XIM_MAX_CONNECTIONS: live WebSocket connections of one gateway
	// PublishTimeout bounds the gateway's wait for JetStream's acknowledgement of a packet before
	// it publishes again (edge.GatewayConfig). 0: 10s. Not an environment variable.
	PublishTimeout time.Duration
	MaxInbound     int // XIM_MAX_INBOUND_REQUESTS: requests at once on the target inbound route
	// BodyTimeout (XIM_BODY_TIMEOUT) and UploadTimeout (XIM_UPLOAD_TIMEOUT): how long a request
	// body, and a file upload's, may take to arrive (edge.Config).
	BodyTimeout, UploadTimeout time.Duration

	Store pipeline.StoreConfig // XIM_PARTITIONS, XIM_REPLICAS, XIM_COMPLETED_TTL, XIM_COMPLETED_MAX_BYTES, XIM_IN_MAX_AGE, XIM_IN_MAX_BYTES, XIM_OUTBOUND_MAX_AGE
}

// Defaults returns the documented defaults.
func Defaults() Config {
	return Config{
		Role:              RoleAll,
		HTTPAddr:          "127.0.0.1:8080",
		DataDir:           "./data",
		LogLevel:          "info",
		LogFormat:         "auto",
		NATSPort:          4222,
		NATSMonitorPort:   8222,
		EditInterval:      250 * time.Millisecond,
		ActivityTimeout:   30 * time.Second,
		DeltaTTL:          10 * time.Minute,
		MaxDeltaBuffers:   10000,
		MaxDeltaBytes:     1 << 20,
		TargetRetryBudget: 2 * time.Minute,
		Stages:            pipeline.StageNames(),
		MaxLanes:          64,
		TargetTimeout:     10 * time.Second,
		MaxPacketBytes:    1 << 20,
		FileTTL:           24 * time.Hour,
		MaxFileBytes:      64 << 20,
		FilesMaxBytes:     10 << 30,
		FileLinkTTL:       time.Hour,
		DownloadTimeout:   30 * time.Second,
		AckTimeout:        10 * time.Second,
		OutboundBackoff:   5 * time.Minute,
		MaxConnections:    1024,
		MaxInbound:        256,
		BodyTimeout:       10 * time.Second,
		WebchatMaxStreams: 8, WebchatMessagesPerMinute: 60, WebchatUploadBytesPerHour: 1 << 30,
		UploadTimeout: 2 * time.Minute,
		Store:         pipeline.DefaultStoreConfig(),
	}
}

// FromEnv reads every XIM_* variable through getenv over the defaults for a process of role;
// it reports every bad value at once.
func FromEnv(role Role, getenv func(string) string) (Config, error) {
	c := Defaults()
	c.Role = role
	e := &envReader{getenv: getenv}
	str, dur, i64, num, port := e.str, e.dur, e.i64, e.num, e.port
	str("XIM_HTTP_ADDR", &c.HTTPAddr)
	str("XIM_DATA_DIR", &c.DataDir)
	str("XIM_NATS_URL", &c.NATSURL)
	str("XIM_NATS_CREDS", &c.NATSCreds)
	str("XIM_NATS_CA", &c.NATSCA)
	c.AgentToken = e.getenv("XIM_AGENT_TOKEN")
	str("XIM_PUBLIC_URL", &c.PublicURL)
	str("XIM_PPROF_ADDR", &c.PprofAddr)
	str("XIM_LOG_LEVEL", &c.LogLevel)
	str("XIM_LOG_FORMAT", &c.LogFormat)
	str("XIM_INSTANCE", &c.Instance)
	port("XIM_NATS_PORT", &c.NATSPort, &c.NATSPortSet)
	port("XIM_NATS_MONITOR_PORT", &c.NATSMonitorPort, &c.NATSMonitorPortSet)
	if strings.TrimSpace(e.getenv("XIM_NATS_SYNC_INTERVAL")) == "always" {
		c.NATSSyncAlways = true
	} else {
		dur("XIM_NATS_SYNC_INTERVAL", &c.NATSSync)
	}
	dur("XIM_EDIT_INTERVAL", &c.EditInterval)
	dur("XIM_ACTIVITY_TIMEOUT", &c.ActivityTimeout)
	dur("XIM_DELTA_TTL", &c.DeltaTTL)
	num("XIM_MAX_DELTA_BUFFERS", &c.MaxDeltaBuffers)
	num("XIM_MAX_DELTA_BYTES", &c.MaxDeltaBytes)
	dur("XIM_TARGET_RETRY_BUDGET", &c.TargetRetryBudget)
	if v := strings.TrimSpace(e.getenv("XIM_STAGES")); v != "" {
		c.Stages = nil
		for _, st := range strings.Split(v, ",") {
			if st = strings.TrimSpace(st); st != "" && !slices.Contains(c.Stages, st) {
				c.Stages = append(c.Stages, st)
			}
		}
	}
	num("XIM_MAX_LANES", &c.MaxLanes)
	dur("XIM_TARGET_TIMEOUT", &c.TargetTimeout)
	i64("XIM_MAX_PACKET_BYTES", &c.MaxPacketBytes)
	dur("XIM_FILE_TTL", &c.FileTTL)
	i64("XIM_MAX_FILE_BYTES", &c.MaxFileBytes)
	i64("XIM_FILES_MAX_BYTES", &c.FilesMaxBytes)
	dur("XIM_FILE_LINK_TTL", &c.FileLinkTTL)
	dur("XIM_FILE_DOWNLOAD_TIMEOUT", &c.DownloadTimeout)
	switch v := strings.TrimSpace(e.getenv("XIM_DOWNLOAD_ALLOW_PRIVATE")); v {
	case "", "0", "false":
	case "1", "true":
		c.DownloadAllowPrivate = true
	default:
		e.errs = append(e.errs, fmt.Errorf("XIM_DOWNLOAD_ALLOW_PRIVATE=%q: 1 or 0", v))
	}
	dur("XIM_ACK_TIMEOUT", &c.AckTimeout)
	dur("XIM_OUTBOUND_BACKOFF_MAX", &c.OutboundBackoff)
	num("XIM_MAX_CONNECTIONS", &c.MaxConnections)
	num("XIM_MAX_INBOUND_REQUESTS", &c.MaxInbound)
	dur("XIM_BODY_TIMEOUT", &c.BodyTimeout)
	num("XIM_WEBCHAT_MAX_STREAMS", &c.WebchatMaxStreams)
	num("XIM_WEBCHAT_MESSAGES_PER_MINUTE", &c.WebchatMessagesPerMinute)
	i64("XIM_WEBCHAT_UPLOAD_BYTES_PER_HOUR", &c.WebchatUploadBytesPerHour)
	dur("XIM_UPLOAD_TIMEOUT", &c.UploadTimeout)
	dur("XIM_OUTBOUND_MAX_AGE", &c.Store.OutboundMaxAge)
	num("XIM_PARTITIONS", &c.Store.Partitions)
	num("XIM_REPLICAS", &c.Store.Replicas)
	dur("XIM_COMPLETED_TTL", &c.Store.CompletedTTL)
	i64("XIM_COMPLETED_MAX_BYTES", &c.Store.CompletedMaxBytes)
	dur("XIM_IN_MAX_AGE", &c.Store.InMaxAge)
	i64("XIM_IN_MAX_BYTES", &c.Store.InMaxBytes)
	if c.PublicURL == "" {
		c.PublicURL = "http://" + c.HTTPAddr
	}
	if c.PprofAddr != "" {
		if host, port, err := net.SplitHostPort(c.PprofAddr); err != nil {
			e.errs = append(e.errs, fmt.Errorf("XIM_PPROF_ADDR %q: want host:port or :port", c.PprofAddr))
		} else if host == "" {
			c.PprofAddr = net.JoinHostPort("127.0.0.1", port) // loopback unless a host is named
		}
	}
	c.PublicURL = strings.TrimRight(c.PublicURL, "/")
	e.errs = append(e.errs, c.Validate())
	return c, errors.Join(e.errs...)
}

// envReader reads XIM_* variables into a Config's fields, collecting every bad value.
type envReader struct {
	getenv func(string) string
	errs   []error
}

// str sets *dst to the variable's value, if set.
func (e *envReader) str(name string, dst *string) {
	if v := strings.TrimSpace(e.getenv(name)); v != "" {
		*dst = v
	}
}

// dur reads a Go duration.
func (e *envReader) dur(name string, dst *time.Duration) {
	if v := strings.TrimSpace(e.getenv(name)); v != "" {
		d, err := time.ParseDuration(v)
		if err != nil || d < 0 {
			e.errs = append(e.errs, fmt.Errorf("%s=%q: want a Go duration like 250ms or 24h", name, v))
			return
		}
		*dst = d
	}
}

// i64 reads an integer with an optional KiB/MiB/GiB suffix.
func (e *envReader) i64(name string, dst *int64) {
	if v := strings.TrimSpace(e.getenv(name)); v != "" {
		n, err := parseBytes(v)
		if err != nil {
			e.errs = append(e.errs, fmt.Errorf("%s=%q: %v", name, v, err))
			return
		}
		*dst = n
	}
}

// num reads an int as i64 does.
func (e *envReader) num(name string, dst *int) {
	var n int64 = int64(*dst)
	e.i64(name, &n)
	*dst = int(n)
}

// port reads a port (0: disabled, -1: any free one) and records that it was set.
func (e *envReader) port(name string, dst *int, set *bool) {
	if v := strings.TrimSpace(e.getenv(name)); v != "" {
		n, err := strconv.Atoi(v)
		if err != nil || n < -1 || n > 65535 {
			e.errs = append(e.errs, fmt.Errorf("%s=%q: a port, 0 to disable or -1 for any free port", name, v))
			return
		}
		*dst, *set = n, true
	}
}

// Validate reports every inconsistent setting at once.
func (c Config) Validate() error {
	var errs []error
	switch c.Role {
	case RoleAll:
	case RoleGateway, RoleWorker:
		if c.NATSURL == "" {
			errs = append(errs, fmt.Errorf("ximd %s needs XIM_NATS_URL", c.Role))
		}
	default:
		errs = append(errs, fmt.Errorf("unknown role %q (all, gateway, worker)", c.Role))
	}
	switch c.LogLevel {
	case "debug", "info", "warn", "error":
	default:
		errs = append(errs, fmt.Errorf("XIM_LOG_LEVEL=%q: debug, info, warn or error", c.LogLevel))
	}
	switch c.LogFormat {
	case "auto", "text", "json":
	default:
		errs = append(errs, fmt.Errorf("XIM_LOG_FORMAT=%q: auto, text or json", c.LogFormat))
	}
	if !strings.HasPrefix(c.PublicURL, "http://") && !strings.HasPrefix(c.PublicURL, "https://") {
		errs = append(errs, fmt.Errorf("XIM_PUBLIC_URL=%q: must be an absolute http(s) URL", c.PublicURL))
	}
	if c.MaxPacketBytes < 1024 || c.MaxPacketBytes > 4<<20 {
		errs = append(errs, errors.New("XIM_MAX_PACKET_BYTES must be within 1 KiB..4 MiB"))
	}
	if c.TargetRetryBudget <= 0 || c.TargetRetryBudget > time.Hour {
		// A final's retries hold up only its channel's lane, and xAgent waits that long for its ack.
		errs = append(errs, errors.New("XIM_TARGET_RETRY_BUDGET must be within 0..1h"))
	}
	known := pipeline.StageNames()
	if len(c.Stages) == 0 {
		errs = append(errs, fmt.Errorf("XIM_STAGES: at least one of %s", strings.Join(known, ",")))
	}
	for _, st := range c.Stages {
		if !slices.Contains(known, st) {
			errs = append(errs, fmt.Errorf("XIM_STAGES: unknown stage %q (stages: %s)", st, strings.Join(known, ",")))
		}
	}
	if c.MaxLanes < 1 || c.MaxLanes > pipeline.StageMaxHeld {
		errs = append(errs, fmt.Errorf("XIM_MAX_LANES must be within 1..%d", pipeline.StageMaxHeld))
	}
	if c.DeltaTTL <= 0 || c.ActivityTimeout <= 0 || c.FileTTL <= 0 || c.TargetTimeout <= 0 || c.DownloadTimeout <= 0 {
		errs = append(errs, errors.New("XIM_DELTA_TTL, XIM_ACTIVITY_TIMEOUT, XIM_FILE_TTL, XIM_TARGET_TIMEOUT and XIM_FILE_DOWNLOAD_TIMEOUT must be > 0"))
	}
	if c.AckTimeout < 100*time.Millisecond || c.OutboundBackoff < c.AckTimeout {
		errs = append(errs, errors.New("XIM_ACK_TIMEOUT must be at least 100ms and XIM_OUTBOUND_BACKOFF_MAX at least XIM_ACK_TIMEOUT"))
	}
	if c.WebchatMaxStreams < 1 || c.WebchatMessagesPerMinute < 1 || c.WebchatUploadBytesPerHour < 1 {
		errs = append(errs, errors.New("XIM_WEBCHAT_MAX_STREAMS, XIM_WEBCHAT_MESSAGES_PER_MINUTE and XIM_WEBCHAT_UPLOAD_BYTES_PER_HOUR must be > 0"))
	}
	if c.BodyTimeout < time.Second || c.UploadTimeout < time.Second {
		errs = append(errs, errors.New("XIM_BODY_TIMEOUT and XIM_UPLOAD_TIMEOUT must be at least 1s"))
	}
	if c.MaxConnections <= 0 || c.MaxInbound <= 0 {
		errs = append(errs, errors.New("XIM_MAX_CONNECTIONS and XIM_MAX_INBOUND_REQUESTS must be > 0"))
	}
	if c.MaxFileBytes <= 0 || c.MaxDeltaBuffers <= 0 || c.MaxDeltaBytes <= 0 {
		errs = append(errs, errors.New("XIM_MAX_FILE_BYTES, XIM_MAX_DELTA_BUFFERS and XIM_MAX_DELTA_BYTES must be > 0"))
	}
	errs = append(errs, c.Store.Validate())
	return errors.Join(errs...)
}

// parseBytes reads an integer with an optional KiB/MiB/GiB suffix.
func parseBytes(v string) (int64, error) {
	mult := int64(1)
	for _, s := range []struct {
		suffix string
		m      int64
	}{{"KiB", 1 << 10}, {"MiB", 1 << 20}, {"GiB", 1 << 30}} {
		if strings.HasSuffix(v, s.suffix) {
			v, mult = strings.TrimSuffix(v, s.suffix), s.m
			break
		}
	}
	n, err := strconv.ParseInt(strings.TrimSpace(v), 10, 64)
	if err != nil || n < 0 {
		return 0, errors.New("want a non-negative integer, optionally with KiB, MiB or GiB")
	}
	return n * mult, nil
}
