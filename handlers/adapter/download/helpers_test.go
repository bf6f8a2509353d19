package download

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"net/url"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/ximd/ximd/profile"
)

// testServer is a loopback HTTP server that counts the connections it accepted and the
// requests it served.
type testServer struct {
	*httptest.Server
	conns atomic.Int64
	reqs  atomic.Int64
}

const markerPath = "/__marker"

func newServer(t *testing.T, h http.HandlerFunc) *testServer {
	return startServer(t, h, false)
}

func newTLSServer(t *testing.T, h http.HandlerFunc) *testServer {
	return startServer(t, h, true)
}

func startServer(t *testing.T, h http.HandlerFunc, tls bool) *testServer {
	t.Helper()
	s := &testServer{}
	s.Server = httptest.NewUnstartedServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.URL.Path == markerPath {
			return
		}
		s.reqs.Add(1)
		h(w, r)
	}))
	s.Config.ConnState = func(_ net.Conn, st http.ConnState) {
		if st == http.StateNew {
			s.conns.Add(1)
		}
	}
	if tls {
		s.StartTLS()
	} else {
		s.Start()
	}
	t.Cleanup(s.Close)
	return s
}

// hostPort is the server's "127.0.0.1:port".
func (s *testServer) hostPort() string {
	u, _ := url.Parse(s.URL)
	return u.Host
}

// port is the server's port.
func (s *testServer) port() string {
	u, _ := url.Parse(s.URL)
	return u.Port()
}

// sawNoConnection asserts that nothing but this check ever connected to s. It connects once
// itself: the server accepts connections in order, so once this request is answered every
// earlier connection attempt has been counted.
func (s *testServer) sawNoConnection(t *testing.T) {
	t.Helper()
	tr := s.Client().Transport.(*http.Transport).Clone()
	tr.DisableKeepAlives = true
	defer tr.CloseIdleConnections()
	resp, err := (&http.Client{Transport: tr}).Get(s.URL + markerPath)
	if err != nil {
		t.Fatalf("marker request: %v", err)
	}
	resp.Body.Close()
	if n := s.conns.Load(); n != 1 {
		t.Errorf("server accepted %d connections besides the check's own, want 0", n-1)
	}
}

// resolvingClient dials the servers named in hosts for those host names, and any other
// address as it is: loopback servers standing in for named hosts.
func resolvingClient(base *http.Client, hosts map[string]*testServer) *http.Client {
	var tr *http.Transport
	if base != nil {
		tr = base.Transport.(*http.Transport).Clone()
	} else {
		tr = &http.Transport{}
	}
	d := &net.Dialer{}
	tr.DialContext = func(ctx context.Context, network, addr string) (net.Conn, error) {
		h, _, err := net.SplitHostPort(addr)
		if err != nil {
			return nil, err
		}
		if s, ok := hosts[strings.ToLower(h)]; ok {
			addr = s.hostPort()
		}
		return d.DialContext(ctx, network, addr)
	}
	return &http.Client{Transport: tr}
}

// recorder is a sink that streams the body into a buffer like a store would.
type recorder struct {
	calls   int
	buf     bytes.Buffer
	ct      string
	cl      int64
	readErr error
}

func (r *recorder) sink(rd io.Reader, ct string, cl int64) error {
	r.calls++
	r.ct, r.cl = ct, cl
	_, err := io.Copy(&r.buf, rd)
	r.readErr = err
	return err
}

// wantCode fails unless err's chain holds a *profile.Error with code.
func wantCode(t *testing.T, err error, code string) {
	t.Helper()
	var pe *profile.Error
	if !errors.As(err, &pe) {
		t.Fatalf("error %v (%T): want a *profile.Error %s", err, err, code)
	}
	if pe.Code != code {
		t.Fatalf("error %v: want code %s", err, code)
	}
}

// waitGone blocks until the client went away (bounded, so a broken test cannot hang Close).
func waitGone(r *http.Request) {
	select {
	case <-r.Context().Done():
	case <-time.After(10 * time.Second):
	}
}

// hijack writes raw as the whole response and closes the connection.
func hijack(t *testing.T, w http.ResponseWriter, raw string) {
	conn, buf, err := w.(http.Hijacker).Hijack()
	if err != nil {
		t.Errorf("hijack: %v", err)
		return
	}
	defer conn.Close()
	fmt.Fprint(buf, raw)
	buf.Flush()
}
