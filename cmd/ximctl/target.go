package main

import (
	"context"
	"encoding/json"
	"flag"
	"fmt"
	"io"
	"net"
	"net/http"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/ximd/ximd/handlers/adapter/webhook"
)

func runTarget(ctx context.Context, args []string, stdout, stderr io.Writer) error {
	fs := flag.NewFlagSet("ximctl target", flag.ContinueOnError)
	addr := fs.String("listen", "127.0.0.1:9999", "listen address (host:port)")
	fs.StringVar(addr, "addr", "127.0.0.1:9999", "alias of -listen")
	secret := fs.String("secret", "s3cr3t", "the channel's webhook secret (to check X-Xim-Signature)")
	setUsage(fs, stderr, "[flags]", "Runs a loopback webhook target that prints every call ximd makes; bind channels to http://<listen>/hook.")
	if err := parse(fs, args, stderr); err != nil {
		return err
	}
	if fs.NArg() > 0 {
		fs.Usage()
		return errUsage
	}
	shown := newShownMessages(100000)
	var ids atomic.Int64
	h := http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		body, _ := io.ReadAll(io.LimitReader(r.Body, 8<<20))
		sig := "bad-signature"
		signed := webhook.Verify([]byte(*secret), body, r.Header.Get(webhook.SignatureHeader)) &&
			webhook.VerifyV2([]byte(*secret), body, r.Header.Get(webhook.TimestampHeader), r.Header.Get(webhook.SignatureV2Header), time.Now())
		if signed {
			sig = "signed"
		}
		fmt.Fprintf(stdout, "%s %s (%s) %s\n", r.Method, r.URL.RequestURI(), sig, body)
		isMessages := strings.HasSuffix(r.URL.Path, "/messages")
		switch {
		case r.Method == http.MethodGet && isMessages:
			// The lookup of edge-api §7.1 (config "lookup": true).
			if !signed {
				w.WriteHeader(http.StatusUnauthorized)
				return
			}
			m, ok := shown.get(r.URL.Query().Get("idempotency_key"))
			if !ok {
				w.WriteHeader(http.StatusNotFound)
				return
			}
			w.Header().Set("Content-Type", "application/json")
			_ = json.NewEncoder(w).Encode(m)
		case r.Method == http.MethodPost && isMessages:
			var call struct {
				Text           string `json:"text"`
				Final          bool   `json:"final"`
				IdempotencyKey string `json:"idempotency_key"`
			}
			_ = json.Unmarshal(body, &call)
			id := fmt.Sprintf("target-%d", ids.Add(1))
			shown.put(call.IdempotencyKey, id, shownMessage{ID: id, Text: call.Text, Final: call.Final})
			w.Header().Set("Content-Type", "application/json")
			_ = json.NewEncoder(w).Encode(map[string]string{"message_id": id})
		case r.Method == http.MethodPatch:
			var call struct {
				Text  string `json:"text"`
				Final bool   `json:"final"`
			}
			_ = json.Unmarshal(body, &call)
			id := r.URL.Path[strings.LastIndexByte(r.URL.Path, '/')+1:]
			shown.edit(id, call.Text, call.Final)
			w.WriteHeader(http.StatusNoContent)
		default:
			w.WriteHeader(http.StatusNoContent)
		}
	})
	ln, err := net.Listen("tcp", *addr)
	if err != nil {
		return err
	}
	fmt.Fprintf(stdout, "webhook target on http://%s/hook (Ctrl-C to stop)\n", ln.Addr())
	srv := &http.Server{Handler: h}
	go func() { <-ctx.Done(); _ = srv.Close() }()
	if err := srv.Serve(ln); err != nil && err != http.ErrServerClosed {
		return err
	}
	return nil
}

// shownMessage is what the target shows of one message: the answer to a lookup.
type shownMessage struct {
	ID    string `json:"message_id"`
	Final bool   `json:"final"`
	Text  string `json:"text"`
}

// shownMessages keeps the last max messages by idempotency key (and their keys by message id).
type shownMessages struct {
	mu    sync.Mutex
	max   int
	byKey map[string]shownMessage
	keyOf map[string]string // message id -> idempotency key
	order []string          // keys, oldest first
}

func newShownMessages(max int) *shownMessages {
	return &shownMessages{max: max, byKey: map[string]shownMessage{}, keyOf: map[string]string{}}
}

func (s *shownMessages) put(key, id string, m shownMessage) {
	if key == "" {
		return
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	if _, ok := s.byKey[key]; !ok {
		s.order = append(s.order, key)
		if len(s.order) > s.max {
			old := s.order[0]
			s.order = s.order[1:]
			delete(s.keyOf, s.byKey[old].ID)
			delete(s.byKey, old)
		}
	}
	s.byKey[key] = m
	s.keyOf[id] = key
}

func (s *shownMessages) edit(id, text string, final bool) {
	s.mu.Lock()
	defer s.mu.Unlock()
	key, ok := s.keyOf[id]
	if !ok {
		return
	}
	m := s.byKey[key]
	m.Text, m.Final = text, final
	s.byKey[key] = m
}

func (s *shownMessages) get(key string) (shownMessage, bool) {
	s.mu.Lock()
	defer s.mu.Unlock()
	m, ok := s.byKey[key]
	return m, ok
}
