package main

import (
	"context"
	"encoding/json"
	"flag"
	"fmt"
	"io"
	"net"
	"net/http"
	"sync/atomic"

	"github.com/ximd/ximd/handlers/target/webhook"
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
	var ids atomic.Int64
	h := http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		body, _ := io.ReadAll(io.LimitReader(r.Body, 8<<20))
		sig := "bad-signature"
		if webhook.Verify([]byte(*secret), body, r.Header.Get("X-Xim-Signature")) {
			sig = "signed"
		}
		fmt.Fprintf(stdout, "%s %s (%s) %s\n", r.Method, r.URL.Path, sig, body)
		if r.Method == http.MethodPost && len(r.URL.Path) >= 9 && r.URL.Path[len(r.URL.Path)-9:] == "/messages" {
			w.Header().Set("Content-Type", "application/json")
			_ = json.NewEncoder(w).Encode(map[string]string{"message_id": fmt.Sprintf("target-%d", ids.Add(1))})
			return
		}
		w.WriteHeader(http.StatusNoContent)
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
