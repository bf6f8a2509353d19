package download

import (
	"context"
	"io"
	"net/http"
	"net/netip"
	"net/url"
	"strings"
	"testing"
)

// A download reaches an internal address only when the channel allowed that address literally:
// a host name that resolves to loopback (here "localhost", the way a hostile target would point
// at the node's own monitoring port) is refused after resolution, before any connection.
func TestGuardRefusesNamesResolvingToInternalAddresses(t *testing.T) {
	srv := newServer(t, func(w http.ResponseWriter, r *http.Request) { io.WriteString(w, "secret metrics") })
	u, _ := url.Parse(srv.URL)
	port := u.Port()
	sink := func(r io.Reader, _ string, _ int64) error { _, err := io.Copy(io.Discard, r); return err }
	ctx := context.Background()

	f := New(Config{}, nil)
	if _, err := f.Fetch(ctx, "http://localhost:"+port+"/x", Allowed{"localhost:" + port}, sink); err == nil || !strings.Contains(err.Error(), "internal addresses") {
		t.Fatalf("a name resolving to loopback: %v, want refused", err)
	}
	if n := srv.conns.Load(); n != 0 {
		t.Fatalf("the server got %d connections from a refused download", n)
	}
	if _, err := f.Fetch(ctx, "http://127.0.0.1:"+port+"/x", Allowed{"127.0.0.1:" + port}, sink); err != nil {
		t.Fatalf("an internal address allowed literally: %v", err)
	}
	if _, err := New(Config{AllowPrivate: true}, nil).Fetch(ctx, "http://localhost:"+port+"/x", Allowed{"localhost:" + port}, sink); err != nil {
		t.Fatalf("with AllowPrivate: %v", err)
	}
}

func TestInternalAddresses(t *testing.T) {
	for addr, want := range map[string]bool{
		"127.0.0.1": true, "10.1.2.3": true, "172.16.0.1": true, "192.168.1.1": true, "169.254.169.254": true,
		"100.64.0.1": true, "0.0.0.0": true, "::1": true, "fd00::1": true, "fe80::1": true, "::ffff:127.0.0.1": true,
		"8.8.8.8": false, "2001:4860:4860::8888": false, "93.184.216.34": false,
	} {
		if got := internal(netip.MustParseAddr(addr)); got != want {
			t.Errorf("internal(%s) = %v, want %v", addr, got, want)
		}
	}
}
