package download

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/http/cookiejar"
	"net/url"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/ximd/ximd/profile"
)

func serveText(body string) http.HandlerFunc {
	return func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Content-Type", "text/plain; charset=utf-8")
		io.WriteString(w, body)
	}
}

func TestFetch_OnlyHTTPAndHTTPS(t *testing.T) {
	s := newServer(t, serveText("x"))
	f := New(Config{}, nil)
	allowed := Allowed{s.hostPort()}
	for _, raw := range []string{
		"file:///etc/passwd",
		"file://127.0.0.1/etc/passwd",
		"ftp://" + s.hostPort() + "/x",
		"gopher://" + s.hostPort() + "/_GET%20/",
		"data:text/plain,hello",
		"javascript:alert(1)",
		"ws://" + s.hostPort() + "/x",
		"//" + s.hostPort() + "/x",
		"/relative/path",
		"http:/" + s.hostPort() + "/x",
		"http:///x",
	} {
		t.Run(raw, func(t *testing.T) {
			var rec recorder
			_, err := f.Fetch(t.Context(), raw, allowed, rec.sink)
			wantCode(t, err, profile.CodeFileDownloadFailed)
			if rec.calls != 0 {
				t.Errorf("sink called")
			}
		})
	}
	s.sawNoConnection(t)

	t.Run("HTTP in upper case is http", func(t *testing.T) {
		var rec recorder
		if _, err := f.Fetch(t.Context(), "HTTP://"+s.hostPort()+"/x", allowed, rec.sink); err != nil {
			t.Fatalf("Fetch: %v", err)
		}
	})
}

func TestFetch_UserinfoRefused(t *testing.T) {
	s := newServer(t, serveText("x"))
	f := New(Config{}, nil)
	var rec recorder
	_, err := f.Fetch(t.Context(), "http://user:pass@"+s.hostPort()+"/x", Allowed{s.hostPort()}, rec.sink)
	wantCode(t, err, profile.CodeFileDownloadFailed)
	s.sawNoConnection(t)
}

func TestFetch_HostNotAllowed_NoRequest(t *testing.T) {
	s := newServer(t, serveText("x"))
	f := New(Config{}, nil)
	for _, allowed := range []Allowed{
		nil,
		{"example.com"},
		{"localhost"}, // names are not resolved: 127.0.0.1 is not "localhost"
		{"127.0.0.2"},
		{"::1"},
		{"*.0.0.1"},
	} {
		t.Run(fmt.Sprint(allowed), func(t *testing.T) {
			var rec recorder
			_, err := f.Fetch(t.Context(), s.URL+"/x", allowed, rec.sink)
			wantCode(t, err, profile.CodeFileDownloadFailed)
			if !strings.Contains(err.Error(), "not allowed") {
				t.Errorf("error %q: want it to say the host is not allowed", err)
			}
		})
	}
	s.sawNoConnection(t)
}

func TestFetch_AllowedHostAndPort(t *testing.T) {
	other := newServer(t, serveText("other"))
	tests := []struct {
		name    string
		allowed func(s *testServer) Allowed
		wantErr bool
	}{
		{name: "host without port: the scheme's port only", allowed: func(*testServer) Allowed { return Allowed{"127.0.0.1"} }, wantErr: true},
		{name: "host with the URL's port", allowed: func(s *testServer) Allowed { return Allowed{"127.0.0.1:" + s.port()} }},
		{name: "one of several entries", allowed: func(s *testServer) Allowed { return Allowed{"example.com", "127.0.0.1:" + s.port()} }},
		{name: "host with another port", allowed: func(*testServer) Allowed { return Allowed{"127.0.0.1:" + other.port()} }, wantErr: true},
		{name: "malformed port", allowed: func(*testServer) Allowed { return Allowed{"127.0.0.1:http"} }, wantErr: true},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			s := newServer(t, serveText("hello"))
			var rec recorder
			res, err := New(Config{}, nil).Fetch(t.Context(), s.URL+"/x", tt.allowed(s), rec.sink)
			if tt.wantErr {
				wantCode(t, err, profile.CodeFileDownloadFailed)
				s.sawNoConnection(t)
				return
			}
			if err != nil {
				t.Fatalf("Fetch: %v", err)
			}
			if rec.buf.String() != "hello" || res.Bytes != 5 {
				t.Errorf("sink got %q, Bytes %d; want hello, 5", rec.buf.String(), res.Bytes)
			}
		})
	}
}

// An entry with a port is compared with the scheme's port when the URL names none.
func TestFetch_AllowedPortDefaultsToScheme(t *testing.T) {
	s := newTLSServer(t, serveText("tls"))
	client := resolvingClient(s.Client(), map[string]*testServer{"example.com": s}) // the test certificate names example.com
	f := New(Config{}, client)
	for _, tt := range []struct {
		entry   string
		wantErr bool
	}{
		{entry: "example.com:443"},
		{entry: "example.com"},
		{entry: "example.com:80", wantErr: true},
	} {
		t.Run(tt.entry, func(t *testing.T) {
			var rec recorder
			_, err := f.Fetch(t.Context(), "https://example.com/x", Allowed{tt.entry}, rec.sink)
			if tt.wantErr {
				wantCode(t, err, profile.CodeFileDownloadFailed)
				return
			}
			if err != nil || rec.buf.String() != "tls" {
				t.Fatalf("Fetch: %v, body %q", err, rec.buf.String())
			}
		})
	}
}

func TestFetch_WildcardEntry(t *testing.T) {
	s := newServer(t, serveText("ok"))
	names := []string{"files.example.test", "a.b.example.test", "example.test", "evil-example.test", "example.test.evil.test", "xexample.test"}
	hosts := map[string]*testServer{}
	for _, n := range names {
		hosts[n] = s
	}
	f := New(Config{}, resolvingClient(nil, hosts))
	allowed := Allowed{"*.example.test:" + s.port()}
	for _, tt := range []struct {
		host    string
		wantErr bool
	}{
		{host: "files.example.test"},
		{host: "a.b.example.test"},
		{host: "FILES.Example.Test"},
		{host: "example.test", wantErr: true},
		{host: "evil-example.test", wantErr: true},
		{host: "xexample.test", wantErr: true},
		{host: "example.test.evil.test", wantErr: true},
	} {
		t.Run(tt.host, func(t *testing.T) {
			before := s.reqs.Load()
			var rec recorder
			_, err := f.Fetch(t.Context(), "http://"+tt.host+":"+s.port()+"/x", allowed, rec.sink)
			if tt.wantErr {
				wantCode(t, err, profile.CodeFileDownloadFailed)
				if s.reqs.Load() != before {
					t.Errorf("server saw a request")
				}
				return
			}
			if err != nil || rec.buf.String() != "ok" {
				t.Fatalf("Fetch: %v, body %q", err, rec.buf.String())
			}
		})
	}
}

func TestFetch_RedirectToAllowedHostFollowed(t *testing.T) {
	s2 := newServer(t, serveText("from s2"))
	s1 := newServer(t, func(w http.ResponseWriter, r *http.Request) {
		http.Redirect(w, r, s2.URL+"/file", http.StatusFound)
	})
	var rec recorder
	_, err := New(Config{}, nil).Fetch(t.Context(), s1.URL+"/start", Allowed{s1.hostPort(), s2.hostPort()}, rec.sink)
	if err != nil {
		t.Fatalf("Fetch: %v", err)
	}
	if rec.buf.String() != "from s2" {
		t.Errorf("body %q, want the redirect target's", rec.buf.String())
	}
}

func TestFetch_RedirectToHostNotAllowedRefused(t *testing.T) {
	s2 := newServer(t, serveText("internal"))
	s1 := newServer(t, func(w http.ResponseWriter, r *http.Request) {
		http.Redirect(w, r, s2.URL+"/admin", http.StatusFound)
	})
	var rec recorder
	_, err := New(Config{}, nil).Fetch(t.Context(), s1.URL+"/start", Allowed{s1.hostPort()}, rec.sink)
	wantCode(t, err, profile.CodeFileDownloadFailed)
	if !strings.Contains(err.Error(), "redirect to http://"+s2.hostPort()+"/admin refused") {
		t.Errorf("error %q: want it to name the refused redirect", err)
	}
	if rec.calls != 0 {
		t.Errorf("sink called")
	}
	s2.sawNoConnection(t)
}

func TestFetch_RedirectToOtherSchemeOrUserinfoRefused(t *testing.T) {
	plain := newServer(t, serveText("plain"))
	for _, loc := range []string{
		"file:///etc/passwd",
		"ftp://127.0.0.1/x",
		"gopher://127.0.0.1:70/_x",
		"data:text/plain,hi",
		"http://user:pass@" + plain.hostPort() + "/x",
	} {
		t.Run(loc, func(t *testing.T) {
			s := newServer(t, func(w http.ResponseWriter, r *http.Request) {
				w.Header().Set("Location", loc)
				w.WriteHeader(http.StatusFound)
			})
			var rec recorder
			_, err := New(Config{}, nil).Fetch(t.Context(), s.URL+"/start", Allowed{s.hostPort()}, rec.sink)
			wantCode(t, err, profile.CodeFileDownloadFailed)
			if rec.calls != 0 {
				t.Errorf("sink called")
			}
		})
	}
	plain.sawNoConnection(t)
}

func TestFetch_RedirectFromHTTPSToHTTPRefused(t *testing.T) {
	plain := newServer(t, serveText("plain"))
	s := newTLSServer(t, func(w http.ResponseWriter, r *http.Request) {
		http.Redirect(w, r, plain.URL+"/x", http.StatusFound)
	})
	var rec recorder
	_, err := New(Config{}, s.Client()).Fetch(t.Context(), s.URL+"/start", Allowed{s.hostPort()}, rec.sink)
	wantCode(t, err, profile.CodeFileDownloadFailed)
	plain.sawNoConnection(t)
}

func TestFetch_MoreThanMaxRedirectsRefused(t *testing.T) {
	// /r/N redirects to /r/N-1; /r/0 is the file; /loop redirects to itself.
	handler := func(w http.ResponseWriter, r *http.Request) {
		if r.URL.Path == "/loop" {
			http.Redirect(w, r, "/loop", http.StatusFound)
			return
		}
		n, _ := strconv.Atoi(strings.TrimPrefix(r.URL.Path, "/r/"))
		if n == 0 {
			io.WriteString(w, "file")
			return
		}
		http.Redirect(w, r, fmt.Sprintf("/r/%d", n-1), http.StatusMovedPermanently)
	}
	for _, tt := range []struct {
		name         string
		max          int
		path         string
		wantErr      bool
		wantRequests int64
	}{
		{name: "default 3 followed", path: "/r/3", wantRequests: 4},
		{name: "default: a 4th refused", path: "/r/4", wantErr: true, wantRequests: 4},
		{name: "loop", path: "/loop", wantErr: true, wantRequests: 4},
		{name: "max 1 followed", max: 1, path: "/r/1", wantRequests: 2},
		{name: "max 1: a 2nd refused", max: 1, path: "/r/2", wantErr: true, wantRequests: 2},
	} {
		t.Run(tt.name, func(t *testing.T) {
			s := newServer(t, handler)
			var rec recorder
			_, err := New(Config{MaxRedirects: tt.max}, nil).Fetch(t.Context(), s.URL+tt.path, Allowed{s.hostPort()}, rec.sink)
			if tt.wantErr {
				wantCode(t, err, profile.CodeFileDownloadFailed)
				if !strings.Contains(err.Error(), "redirects") {
					t.Errorf("error %q: want it to name the redirect limit", err)
				}
			} else if err != nil || rec.buf.String() != "file" {
				t.Fatalf("Fetch: %v, body %q", err, rec.buf.String())
			}
			if got := s.reqs.Load(); got != tt.wantRequests {
				t.Errorf("server saw %d requests, want %d", got, tt.wantRequests)
			}
		})
	}
}

func TestFetch_SendsNoCredentialsCookiesOrReferer(t *testing.T) {
	type seen struct{ cookie, auth, referer string }
	var (
		mu  sync.Mutex
		got []seen
	)
	s := newServer(t, func(w http.ResponseWriter, r *http.Request) {
		mu.Lock()
		got = append(got, seen{r.Header.Get("Cookie"), r.Header.Get("Authorization"), r.Header.Get("Referer")})
		mu.Unlock()
		if r.URL.Path == "/start" {
			http.SetCookie(w, &http.Cookie{Name: "session", Value: "from-server", Path: "/"})
			http.Redirect(w, r, "/file", http.StatusFound)
			return
		}
		io.WriteString(w, "ok")
	})
	// A client with a cookie jar already holding a cookie for the host: Fetch must not use it.
	jar, _ := cookiejar.New(nil)
	u, _ := url.Parse(s.URL)
	jar.SetCookies(u, []*http.Cookie{{Name: "ximd", Value: "credential", Path: "/"}})
	client := &http.Client{Jar: jar}

	var rec recorder
	if _, err := New(Config{}, client).Fetch(t.Context(), s.URL+"/start?token=SECRET", Allowed{s.hostPort()}, rec.sink); err != nil {
		t.Fatalf("Fetch: %v", err)
	}
	mu.Lock()
	defer mu.Unlock()
	if len(got) != 2 {
		t.Fatalf("server saw %d requests, want 2", len(got))
	}
	for i, g := range got {
		if g != (seen{}) {
			t.Errorf("request %d carried Cookie %q, Authorization %q, Referer %q; want none", i, g.cookie, g.auth, g.referer)
		}
	}
}

func TestFetch_BodyOverMaxBytes_FileTooLarge(t *testing.T) {
	const max = 4096
	body := strings.Repeat("a", 3*max)
	tests := []struct {
		name    string
		handler func(t *testing.T) http.HandlerFunc
	}{
		{name: "chunked", handler: func(*testing.T) http.HandlerFunc {
			return func(w http.ResponseWriter, r *http.Request) {
				for i := 0; i < 1024 && r.Context().Err() == nil; i++ { // up to 1 MiB, until the client leaves
					if _, err := io.WriteString(w, strings.Repeat("b", 1024)); err != nil {
						return
					}
					w.(http.Flusher).Flush()
				}
			}
		}},
		{name: "no Content-Length, close-delimited", handler: func(t *testing.T) http.HandlerFunc {
			return func(w http.ResponseWriter, r *http.Request) {
				hijack(t, w, "HTTP/1.1 200 OK\r\nConnection: close\r\n\r\n"+body)
			}
		}},
		{name: "one byte over", handler: func(*testing.T) http.HandlerFunc {
			return func(w http.ResponseWriter, r *http.Request) {
				io.WriteString(w, body[:max])
				w.(http.Flusher).Flush() // chunked: no Content-Length to refuse early
				io.WriteString(w, "z")
			}
		}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			s := newServer(t, tt.handler(t))
			var rec recorder
			_, err := New(Config{MaxBytes: max}, nil).Fetch(t.Context(), s.URL+"/x", Allowed{s.hostPort()}, rec.sink)
			wantCode(t, err, profile.CodeFileTooLarge)
			if n := rec.buf.Len(); n > max+1 {
				t.Errorf("sink read %d bytes, want at most %d", n, max+1)
			}
			// The sink saw an error, not a clean end: a store aborts instead of keeping a
			// truncated file.
			if !errors.Is(rec.readErr, &profile.Error{Code: profile.CodeFileTooLarge}) {
				t.Errorf("sink's read error %v, want file_too_large", rec.readErr)
			}
		})
	}
}

func TestFetch_BodyAtMaxBytesAccepted(t *testing.T) {
	const max = 4096
	s := newServer(t, func(w http.ResponseWriter, r *http.Request) {
		io.WriteString(w, strings.Repeat("a", max/2))
		w.(http.Flusher).Flush() // chunked
		io.WriteString(w, strings.Repeat("a", max/2))
	})
	var rec recorder
	res, err := New(Config{MaxBytes: max}, nil).Fetch(t.Context(), s.URL+"/x", Allowed{s.hostPort()}, rec.sink)
	if err != nil || res.Bytes != max || rec.buf.Len() != max {
		t.Fatalf("Fetch: %v, Bytes %d, sink %d; want %d bytes", err, res.Bytes, rec.buf.Len(), max)
	}
}

// A Content-Length that lies cannot push more than it declares, nor more than MaxBytes.
func TestFetch_LyingContentLength(t *testing.T) {
	const max = 4096
	t.Run("shorter than the body", func(t *testing.T) {
		s := newServer(t, func(w http.ResponseWriter, r *http.Request) {
			hijack(t, w, "HTTP/1.1 200 OK\r\nContent-Length: 10\r\nConnection: close\r\n\r\n"+strings.Repeat("a", 3*max))
		})
		var rec recorder
		res, err := New(Config{MaxBytes: max}, nil).Fetch(t.Context(), s.URL+"/x", Allowed{s.hostPort()}, rec.sink)
		if err != nil || res.Bytes != 10 || rec.buf.Len() != 10 {
			t.Fatalf("Fetch: %v, Bytes %d, sink %d; want the 10 declared bytes", err, res.Bytes, rec.buf.Len())
		}
	})
	t.Run("longer than the body", func(t *testing.T) {
		s := newServer(t, func(w http.ResponseWriter, r *http.Request) {
			hijack(t, w, "HTTP/1.1 200 OK\r\nContent-Length: 100\r\nConnection: close\r\n\r\nshort")
		})
		var rec recorder
		_, err := New(Config{MaxBytes: max}, nil).Fetch(t.Context(), s.URL+"/x", Allowed{s.hostPort()}, rec.sink)
		wantCode(t, err, profile.CodeFileDownloadFailed)
	})
}

func TestFetch_BigContentLengthRefusedEarly(t *testing.T) {
	const max = 4096
	s := newServer(t, func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Content-Length", strconv.Itoa(max+1))
		w.WriteHeader(http.StatusOK)
		w.(http.Flusher).Flush()
		waitGone(r) // the body never comes: reading it would wait for the timeout
	})
	var rec recorder
	start := time.Now()
	_, err := New(Config{MaxBytes: max, Timeout: 10 * time.Second}, nil).Fetch(t.Context(), s.URL+"/x", Allowed{s.hostPort()}, rec.sink)
	wantCode(t, err, profile.CodeFileTooLarge)
	if rec.calls != 0 {
		t.Errorf("sink called %d times, want 0", rec.calls)
	}
	if d := time.Since(start); d > 5*time.Second {
		t.Errorf("refused after %s: the body was waited for", d)
	}
}

func TestFetch_Timeout(t *testing.T) {
	const timeout = 300 * time.Millisecond
	tests := []struct {
		name    string
		handler http.HandlerFunc
	}{
		{name: "body trickles", handler: func(w http.ResponseWriter, r *http.Request) {
			for r.Context().Err() == nil {
				if _, err := io.WriteString(w, "x"); err != nil {
					return
				}
				w.(http.Flusher).Flush()
				select {
				case <-r.Context().Done():
				case <-time.After(20 * time.Millisecond):
				}
			}
		}},
		{name: "no answer", handler: func(w http.ResponseWriter, r *http.Request) { waitGone(r) }},
		{name: "slow redirects", handler: func(w http.ResponseWriter, r *http.Request) {
			select {
			case <-r.Context().Done():
				return
			case <-time.After(timeout / 4):
			}
			http.Redirect(w, r, "/again", http.StatusFound)
		}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			s := newServer(t, tt.handler)
			var rec recorder
			start := time.Now()
			_, err := New(Config{Timeout: timeout, MaxRedirects: 100}, nil).Fetch(t.Context(), s.URL+"/x", Allowed{s.hostPort()}, rec.sink)
			d := time.Since(start)
			wantCode(t, err, profile.CodeFileDownloadFailed)
			if !strings.Contains(err.Error(), "timed out") {
				t.Errorf("error %q: want a timeout", err)
			}
			if d < timeout || d > timeout+2*time.Second {
				t.Errorf("failed after %s, want about %s", d, timeout)
			}
		})
	}
}

func TestFetch_Non2xxFails(t *testing.T) {
	for _, code := range []int{http.StatusNotFound, http.StatusForbidden, http.StatusInternalServerError, http.StatusFound, http.StatusNotModified} {
		t.Run(strconv.Itoa(code), func(t *testing.T) {
			s := newServer(t, func(w http.ResponseWriter, r *http.Request) {
				w.WriteHeader(code) // a 3xx without Location is not followed either
				io.WriteString(w, "error page")
			})
			var rec recorder
			_, err := New(Config{}, nil).Fetch(t.Context(), s.URL+"/x", Allowed{s.hostPort()}, rec.sink)
			wantCode(t, err, profile.CodeFileDownloadFailed)
			if !strings.Contains(err.Error(), strconv.Itoa(code)) {
				t.Errorf("error %q: want it to name the status", err)
			}
			if rec.calls != 0 {
				t.Errorf("sink got the error page")
			}
		})
	}
}

func TestFetch_ErrorsNeverContainTheQuery(t *testing.T) {
	const secret = "SECRET"
	notFound := newServer(t, func(w http.ResponseWriter, r *http.Request) { http.NotFound(w, r) })
	big := newServer(t, serveText(strings.Repeat("a", 100)))
	internal := newServer(t, serveText("internal"))
	toInternal := newServer(t, func(w http.ResponseWriter, r *http.Request) {
		http.Redirect(w, r, internal.URL+"/x?token=SECRET#token=SECRET", http.StatusFound)
	})
	loop := newServer(t, func(w http.ResponseWriter, r *http.Request) {
		http.Redirect(w, r, "/loop?token=SECRET", http.StatusFound)
	})
	badLocation := newServer(t, func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Location", "http://[::1/?token=SECRET")
		w.WriteHeader(http.StatusFound)
	})
	slow := newServer(t, func(w http.ResponseWriter, r *http.Request) { waitGone(r) })
	closed := newServer(t, serveText("gone"))
	closed.Close()

	allowed := Allowed{"127.0.0.1:" + notFound.port(), "127.0.0.1:" + big.port(), "127.0.0.1:" + toInternal.port(),
		"127.0.0.1:" + loop.port(), "127.0.0.1:" + badLocation.port(), "127.0.0.1:" + slow.port(), "127.0.0.1:" + closed.port()}
	f := New(Config{MaxBytes: 10, Timeout: 300 * time.Millisecond}, nil)
	for _, tt := range []struct{ name, url string }{
		{"host not allowed", "http://198.51.100.1/x?token=SECRET"},
		{"scheme", "ftp://127.0.0.1/x?token=SECRET"},
		{"userinfo", "http://user:SECRET@" + notFound.hostPort() + "/x"},
		{"malformed", "http://" + notFound.hostPort() + "/%zz?token=SECRET"},
		{"fragment", notFound.URL + "/x#token=SECRET"},
		{"404", notFound.URL + "/x?token=SECRET"},
		{"too large", big.URL + "/x?token=SECRET"},
		{"redirect not allowed", toInternal.URL + "/x?token=SECRET"},
		{"redirect loop", loop.URL + "/loop?token=SECRET"},
		{"bad Location", badLocation.URL + "/x?token=SECRET"},
		{"timeout", slow.URL + "/x?token=SECRET"},
		{"connection refused", closed.URL + "/x?token=SECRET"},
	} {
		t.Run(tt.name, func(t *testing.T) {
			var rec recorder
			_, err := f.Fetch(t.Context(), tt.url, allowed, rec.sink)
			if err == nil {
				t.Fatal("Fetch succeeded")
			}
			var pe *profile.Error
			if !errors.As(err, &pe) {
				t.Fatalf("error %v is no *profile.Error", err)
			}
			if strings.Contains(err.Error(), secret) || strings.Contains(err.Error(), "token") {
				t.Errorf("error %q leaks the query", err)
			}
		})
	}
	internal.sawNoConnection(t)
}

func TestFetch_Filename(t *testing.T) {
	tests := []struct {
		name, disposition, path, want string
	}{
		{name: "Content-Disposition", disposition: `attachment; filename="report.pdf"`, path: "/dl/123", want: "report.pdf"},
		{name: "RFC 5987 filename*", disposition: `attachment; filename*=UTF-8''r%C3%A9sum%C3%A9.pdf`, path: "/dl", want: "résumé.pdf"},
		{name: "directories dropped", disposition: `attachment; filename="../../etc/passwd"`, path: "/dl", want: "passwd"},
		{name: "backslash directories dropped", disposition: `attachment; filename="C:\\Windows\\evil.exe"`, path: "/dl", want: "evil.exe"},
		{name: "bidi override dropped", disposition: "attachment; filename*=UTF-8''a%E2%80%AEfdp.exe", path: "/dl", want: "afdp.exe"},
		{name: "dot-dot falls back to the path", disposition: `attachment; filename=".."`, path: "/files/notes.txt", want: "notes.txt"},
		{name: "malformed header falls back to the path", disposition: `attachment; filename="unterminated`, path: "/files/notes.txt", want: "notes.txt"},
		{name: "path", path: "/files/report%20final.txt", want: "report final.txt"},
		{name: "path with trailing slash", path: "/files/", want: ""},
		{name: "root", path: "/", want: ""},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			s := newServer(t, func(w http.ResponseWriter, r *http.Request) {
				if tt.disposition != "" {
					w.Header().Set("Content-Disposition", tt.disposition)
				}
				io.WriteString(w, "x")
			})
			var rec recorder
			res, err := New(Config{}, nil).Fetch(t.Context(), s.URL+tt.path+"?token=x", Allowed{s.hostPort()}, rec.sink)
			if err != nil {
				t.Fatalf("Fetch: %v", err)
			}
			if res.Filename != tt.want {
				t.Errorf("Filename %q, want %q", res.Filename, tt.want)
			}
		})
	}
}

func TestFetch_ResultAndSinkMetadata(t *testing.T) {
	s := newServer(t, func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Content-Type", `Text/Plain; Charset="utf-8"`)
		w.Header().Set("Content-Length", "5")
		io.WriteString(w, "hello")
	})
	var rec recorder
	res, err := New(Config{}, nil).Fetch(t.Context(), s.URL+"/a.txt", Allowed{s.hostPort()}, rec.sink)
	if err != nil {
		t.Fatalf("Fetch: %v", err)
	}
	want := Result{ContentType: "text/plain; charset=utf-8", Filename: "a.txt", Bytes: 5}
	if res != want {
		t.Errorf("Result %+v, want %+v", res, want)
	}
	if rec.ct != want.ContentType || rec.cl != 5 || rec.calls != 1 {
		t.Errorf("sink got %q, %d, %d calls; want %q, 5, 1 call", rec.ct, rec.cl, rec.calls, want.ContentType)
	}
}

// A sink's own failure (say, a full store) keeps its code: it is not the file's fault.
func TestFetch_SinkErrorPassedThrough(t *testing.T) {
	s := newServer(t, serveText("hello"))
	storeFull := profile.Errorf(profile.CodeInternal, "file store full")
	_, err := New(Config{}, nil).Fetch(t.Context(), s.URL+"/x", Allowed{s.hostPort()}, func(r io.Reader, _ string, _ int64) error {
		io.Copy(io.Discard, r)
		return storeFull
	})
	if !errors.Is(err, storeFull) || profile.CodeOf(err) != profile.CodeInternal {
		t.Fatalf("error %v, want the sink's internal_error", err)
	}
}

func TestFetch_CanceledContext(t *testing.T) {
	entered := make(chan struct{})
	s := newServer(t, func(w http.ResponseWriter, r *http.Request) {
		close(entered)
		waitGone(r)
	})
	ctx, cancel := context.WithCancel(t.Context())
	go func() {
		<-entered
		cancel()
	}()
	var rec recorder
	_, err := New(Config{}, nil).Fetch(ctx, s.URL+"/x", Allowed{s.hostPort()}, rec.sink)
	wantCode(t, err, profile.CodeFileDownloadFailed)
	if !errors.Is(err, context.Canceled) {
		t.Errorf("error %v, want it to wrap context.Canceled", err)
	}
}

func TestRedact(t *testing.T) {
	for _, tt := range []struct{ in, want string }{
		{"https://files.example.com/a/b.pdf?token=SECRET#frag", "https://files.example.com/a/b.pdf"},
		{"http://user:pw@127.0.0.1:8080/x?y=1", "http://127.0.0.1:8080/x"},
		{"https://example.com", "https://example.com"},
		{"https://example.com/a%2Fb?q", "https://example.com/a%2Fb"},
		{"data:text/plain,SECRET", "data:"},
		{"file:///etc/passwd", "file:///etc/passwd"},
		{"http://[::1/?token=SECRET", "(malformed URL)"},
	} {
		if got := Redact(tt.in); got != tt.want {
			t.Errorf("Redact(%q) = %q, want %q", tt.in, got, tt.want)
		}
	}
}

func TestConfig_Validate(t *testing.T) {
	tests := []struct {
		name    string
		cfg     Config
		wantErr []string
	}{
		{name: "defaults", cfg: Config{}.WithDefaults()},
		{name: "negative", cfg: Config{MaxBytes: -1, Timeout: -time.Second, MaxRedirects: -1},
			wantErr: []string{"max file bytes", "timeout", "max redirects"}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			err := tt.cfg.Validate()
			if (err != nil) != (len(tt.wantErr) > 0) {
				t.Fatalf("Validate: %v, want errors %v", err, tt.wantErr)
			}
			for _, w := range tt.wantErr {
				if !strings.Contains(err.Error(), w) {
					t.Errorf("Validate: %v, want it to name %q", err, w)
				}
			}
		})
	}
	if d := (Config{}).WithDefaults(); d != (Config{MaxBytes: 64 << 20, Timeout: 30 * time.Second, MaxRedirects: 3}) {
		t.Errorf("defaults %+v", d)
	}
}

// New never fails: a field Validate refuses takes its default.
func TestNew_InvalidFieldsTakeDefaults(t *testing.T) {
	f := New(Config{MaxBytes: -1, Timeout: -1, MaxRedirects: -1}, nil)
	if f.cfg != (Config{}).WithDefaults() {
		t.Errorf("config %+v, want the defaults", f.cfg)
	}
}
