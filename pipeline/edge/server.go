// Package edge is ximd's HTTP edge (edge-api §1-6): health, readiness and metrics, the Card,
// the channels API, the WebSocket packet stream and the Transfer Plane routes, all behind the
// bearer token where the contract says so.
package edge

import (
	"bytes"
	"context"
	"crypto/sha256"
	"crypto/subtle"
	_ "embed"
	"encoding/json"
	"io"
	"log/slog"
	"net/http"
	"strings"
	"sync"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/promhttp"

	"github.com/ximd/ximd/profile"
)

//go:embed card.json
var cardJSON []byte

// cardProfiles are the Card's supports.profiles (P-DECL-2): a Descriptor may declare only these.
var cardProfiles = sync.OnceValue(func() []string {
	var card struct {
		Supports struct {
			Profiles []string `json:"profiles"`
		} `json:"supports"`
	}
	if err := json.Unmarshal(cardJSON, &card); err != nil || len(card.Supports.Profiles) == 0 {
		panic("edge: card.json has no supports.profiles")
	}
	return card.Supports.Profiles
})

// Config configures the edge.
type Config struct {
	// Token is XIM_AGENT_TOKEN; compared in constant time, never logged.
	Token string
	// Version is reported in the Card.
	Version string
	// MaxInboundRequests (XIM_MAX_INBOUND_REQUESTS) bounds the requests served at once on the
	// target inbound route, which needs no bearer token and may download files for a while; past
	// it: 503 {"code":"unavailable"} with Retry-After. 0: DefaultMaxInboundRequests.
	MaxInboundRequests int
	// BodyTimeout (XIM_BODY_TIMEOUT) bounds how long a request body may take to arrive, and
	// UploadTimeout (XIM_UPLOAD_TIMEOUT) that of a file upload (…/uploads): a client that sends
	// slowly, or stops, has its connection cut at the deadline. Streams (the WebSocket, the
	// webchat events) have no body. 0: no deadline.
	BodyTimeout, UploadTimeout time.Duration
}

// DefaultMaxInboundRequests is Config.MaxInboundRequests when unset.
const DefaultMaxInboundRequests = 256

// Edge is the HTTP handler of a gateway.
type Edge struct {
	cfg      Config
	mux      *http.ServeMux
	tokenSum [32]byte
	card     []byte
	logger   *slog.Logger
	ops      *ops
}

// ops serves the routes every ximd process has, without a token (edge-api §1).
type ops struct {
	gatherer  prometheus.Gatherer
	readiness func(ctx context.Context) error

	mu       sync.Mutex
	readyAt  time.Time
	readyErr error
}

// Ops returns the handler of GET /healthz, /readyz and /metrics alone (a worker's HTTP listener).
func Ops(g prometheus.Gatherer, ready func(ctx context.Context) error) http.Handler {
	mux := http.NewServeMux()
	(&ops{gatherer: g, readiness: ready}).register(mux)
	return mux
}

func (o *ops) register(mux *http.ServeMux) {
	mux.HandleFunc("GET /healthz", func(w http.ResponseWriter, _ *http.Request) {
		writeJSON(w, http.StatusOK, map[string]string{"status": "ok"})
	})
	mux.HandleFunc("GET /readyz", o.ready)
	mux.Handle("GET /metrics", promhttp.HandlerFor(o.gatherer, promhttp.HandlerOpts{}))
}

// Parts are the components the edge serves.
type Parts struct {
	Gateway  http.Handler // GET /v1/ws
	Channels *ChannelsAPI
	Bots     *BotsAPI     // optional: /v1/bots
	Files    http.Handler // /files/...
	Inbound  http.Handler // optional: POST /v1/targets/{adapter}/{channel}/{path...} (Receivers: own signatures, no bearer token)
	Gatherer prometheus.Gatherer
	// Registerer, optional, takes the edge's own metrics (ximd_inbound_requests_in_flight).
	Registerer prometheus.Registerer
	// Ready reports whether NATS and every stream, bucket and consumer is there.
	Ready func(ctx context.Context) error

	// Webchat is optional: /webchat/... (the webchat pages; their own per-channel secret, no
	// bearer token), and WebchatLink GET /v1/channels/{id}/webchat (behind the bearer token).
	Webchat     http.Handler
	WebchatLink http.Handler
	// WebchatBotLink is optional: GET /v1/bots/{id}/webchat, a webchat bot's page link and
	// snippet (behind the bearer token).
	WebchatBotLink http.Handler
}

// New builds the edge's routes.
func New(cfg Config, p Parts, logger *slog.Logger) (*Edge, error) {
	e := &Edge{cfg: cfg, mux: http.NewServeMux(), tokenSum: sha256.Sum256([]byte(cfg.Token)), logger: logger,
		ops: &ops{gatherer: p.Gatherer, readiness: p.Ready}}
	var card map[string]any
	if err := json.Unmarshal(cardJSON, &card); err != nil {
		return nil, err
	}
	card["version"] = cfg.Version
	card["tools"] = profile.Default().Tools() // the same document the tool stage validates with
	e.card, _ = json.Marshal(card)

	e.ops.register(e.mux)
	e.mux.Handle("GET /v1/card", e.auth(http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) {
		w.Header().Set("Content-Type", "application/json")
		_, _ = w.Write(e.card)
	})))
	e.mux.Handle("GET /v1/ws", e.auth(p.Gateway))
	p.Channels.register(e.mux, e.auth)
	if p.Bots != nil {
		p.Bots.register(e.mux, e.auth)
	}
	e.mux.Handle("/files/", p.Files) // the files handler checks the token or a signed link itself
	if p.Inbound != nil {
		// Only the inbound route goes without the token; the rest of /v1/targets/ is /v1/.
		max := cfg.MaxInboundRequests
		if max <= 0 {
			max = DefaultMaxInboundRequests
		}
		inFlight := prometheus.NewGauge(prometheus.GaugeOpts{Name: "ximd_inbound_requests_in_flight",
			Help: "Requests on the target inbound route being served now (at most XIM_MAX_INBOUND_REQUESTS)."})
		if p.Registerer != nil {
			p.Registerer.MustRegister(inFlight)
		}
		inbound := limit(max, inFlight, p.Inbound)
		e.mux.Handle("POST /v1/targets/{adapter}/{channel}/{path...}", inbound)
		e.mux.Handle("POST /v1/targets/{adapter}/bots/{bot}/{path...}", inbound)
	}
	if p.Webchat != nil {
		e.mux.Handle("/webchat/", p.Webchat)
	}
	if p.WebchatLink != nil {
		e.mux.Handle("GET /v1/channels/{id}/webchat", e.auth(p.WebchatLink))
	}
	if p.WebchatBotLink != nil {
		e.mux.Handle("GET /v1/bots/{id}/webchat", e.auth(p.WebchatBotLink))
	}
	e.mux.Handle("/v1/", e.auth(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		WriteError(w, profile.Errorf(profile.CodeNotFound, "no route %s %s", r.Method, r.URL.Path))
	})))
	return e, nil
}

// limit serves at most max requests at once through next and refuses the others at once.
func limit(max int, inFlight prometheus.Gauge, next http.Handler) http.Handler {
	sem := make(chan struct{}, max)
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		select {
		case sem <- struct{}{}:
			inFlight.Inc()
			defer func() { inFlight.Dec(); <-sem }()
			next.ServeHTTP(w, r)
		default:
			w.Header().Set("Retry-After", "1")
			WriteError(w, profile.Errorf(profile.CodeUnavailable, "too many requests in progress (XIM_MAX_INBOUND_REQUESTS=%d)", max))
		}
	})
}

// ServeHTTP serves the edge.
func (e *Edge) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	e.bodyDeadline(w, r)
	w.Header().Set("X-Content-Type-Options", "nosniff")
	e.mux.ServeHTTP(w, r)
}

// bodyDeadline sets the read deadline of a request with a body (BodyTimeout, UploadTimeout) and
// lifts it once the body is read, so the handler's work after it is not cut.
func (e *Edge) bodyDeadline(w http.ResponseWriter, r *http.Request) {
	if r.Body == nil || r.Body == http.NoBody || r.Header.Get("Upgrade") != "" {
		return
	}
	d := e.cfg.BodyTimeout
	if strings.HasSuffix(r.URL.Path, "/uploads") {
		d = e.cfg.UploadTimeout
	}
	if d <= 0 {
		return
	}
	rc := http.NewResponseController(w)
	if rc.SetReadDeadline(time.Now().Add(d)) != nil {
		return
	}
	r.Body = &deadlineBody{ReadCloser: r.Body, lift: func() { _ = rc.SetReadDeadline(time.Time{}) }}
}

// deadlineBody lifts the read deadline when its body ends.
type deadlineBody struct {
	io.ReadCloser
	lift func()
	done bool
}

func (b *deadlineBody) Read(p []byte) (int, error) {
	n, err := b.ReadCloser.Read(p)
	if err == io.EOF && !b.done {
		b.done = true
		b.lift()
	}
	return n, err
}

// Authorized reports whether r carries the bearer token (constant time, edge-api §2).
func (e *Edge) Authorized(r *http.Request) bool {
	h := r.Header.Get("Authorization")
	const prefix = "Bearer "
	if len(h) < len(prefix) || !strings.EqualFold(h[:len(prefix)], prefix) {
		return false
	}
	sum := sha256.Sum256([]byte(h[len(prefix):]))
	return subtle.ConstantTimeCompare(sum[:], e.tokenSum[:]) == 1
}

func (e *Edge) auth(next http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if !e.Authorized(r) {
			WriteError(w, profile.Errorf(profile.CodeUnauthorized, "missing or wrong bearer token"))
			return
		}
		next.ServeHTTP(w, r)
	})
}

// ready answers 200 once NATS and every stream, bucket and consumer exist (cached for 1s).
func (o *ops) ready(w http.ResponseWriter, r *http.Request) {
	o.mu.Lock()
	if time.Since(o.readyAt) > time.Second {
		ctx, cancel := context.WithTimeout(r.Context(), 2*time.Second)
		o.readyErr = o.readiness(ctx)
		cancel()
		o.readyAt = time.Now()
	}
	err := o.readyErr
	o.mu.Unlock()
	if err != nil {
		WriteError(w, profile.Errorf(profile.CodeUnavailable, "not ready: %v", err))
		return
	}
	writeJSON(w, http.StatusOK, map[string]string{"status": "ready"})
}

// WriteError writes the JSON error body {"code","message"} with the code's HTTP status.
func WriteError(w http.ResponseWriter, e *profile.Error) {
	status := http.StatusInternalServerError
	if info, ok := profile.Lookup(e.Code); ok && info.HTTPStatus != 0 {
		status = info.HTTPStatus
	}
	writeJSON(w, status, map[string]string{"code": e.Code, "message": e.Message})
}

func writeJSON(w http.ResponseWriter, status int, v any) {
	var buf bytes.Buffer
	enc := json.NewEncoder(&buf)
	enc.SetEscapeHTML(false)
	_ = enc.Encode(v)
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(status)
	_, _ = w.Write(buf.Bytes())
}
