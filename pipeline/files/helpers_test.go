package files

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"mime"
	"mime/multipart"
	"net/http"
	"net/http/httptest"
	"net/textproto"
	"sync"
	"testing"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/ximd/ximd/pipeline/natstest"
)

const testToken = "test-token-not-a-secret"

var testKey = bytes.Repeat([]byte{0x42}, 32)

// runJS starts an in-process JetStream server and returns a JetStream on it.
func runJS(t testing.TB) jetstream.JetStream {
	t.Helper()
	return natstest.JetStream(t)
}

// channelSet is an in-memory ChannelOpen.
type channelSet struct {
	mu   sync.Mutex
	open map[string]bool
}

func openChannels(ids ...string) *channelSet {
	c := &channelSet{open: map[string]bool{}}
	for _, id := range ids {
		c.open[id] = true
	}
	return c
}

func (c *channelSet) IsOpen(id string) bool {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.open[id]
}

// env is a provisioned Store served over loopback HTTP.
type env struct {
	js       jetstream.JetStream
	store    *Store
	srv      *httptest.Server
	channels *channelSet
}

func testConfig() Config {
	return Config{PublicURL: "http://ximd.invalid", MaxFileBytes: 2 << 20, MaxBucketBytes: 256 << 20}
}

// newEnv provisions the bucket of cfg and serves a Store with channels "ch-a" and "ch-b" open.
// adjust, when not nil, runs before the server starts.
func newEnv(t *testing.T, cfg Config, adjust func(*Store)) *env {
	t.Helper()
	js := runJS(t)
	ctx := context.Background()
	if err := Provision(ctx, js, cfg); err != nil {
		t.Fatalf("Provision: %v", err)
	}
	st, err := New(js, cfg, testKey, nil)
	if err != nil {
		t.Fatalf("New: %v", err)
	}
	if adjust != nil {
		adjust(st)
	}
	chs := openChannels("ch-a", "ch-b")
	authorized := func(r *http.Request) bool { return r.Header.Get("Authorization") == "Bearer "+testToken }
	srv := httptest.NewServer(st.Handler(authorized, chs))
	t.Cleanup(srv.Close)
	return &env{js: js, store: st, srv: srv, channels: chs}
}

// part is one multipart part; a part with a filename is written as a file part.
type part struct {
	name, filename, contentType string
	data                        []byte
}

func field(name, value string) part { return part{name: name, data: []byte(value)} }

func filePart(filename string, data []byte) part {
	return part{name: FieldFile, filename: filename, contentType: "application/octet-stream", data: data}
}

func multipartBody(t testing.TB, parts ...part) (*bytes.Buffer, string) {
	t.Helper()
	var buf bytes.Buffer
	mw := multipart.NewWriter(&buf)
	for _, p := range parts {
		h := textproto.MIMEHeader{}
		cd := fmt.Sprintf(`form-data; name=%q`, p.name)
		if p.filename != "" {
			cd += fmt.Sprintf(`; filename=%q`, p.filename)
		}
		h.Set("Content-Disposition", cd)
		if p.contentType != "" {
			h.Set("Content-Type", p.contentType)
		}
		w, err := mw.CreatePart(h)
		if err != nil {
			t.Fatal(err)
		}
		if _, err := w.Write(p.data); err != nil {
			t.Fatal(err)
		}
	}
	if err := mw.Close(); err != nil {
		t.Fatal(err)
	}
	return &buf, mw.FormDataContentType()
}

// upload posts parts to /files/uploads with the token (when withToken) and returns status and body.
func (e *env) upload(t *testing.T, withToken bool, parts ...part) (int, []byte) {
	t.Helper()
	body, ct := multipartBody(t, parts...)
	req, err := http.NewRequest(http.MethodPost, e.srv.URL+"/files/uploads", body)
	if err != nil {
		t.Fatal(err)
	}
	req.Header.Set("Content-Type", ct)
	if withToken {
		req.Header.Set("Authorization", "Bearer "+testToken)
	}
	return do(t, req)
}

// mustUpload uploads data to channel ch and returns the 201 body.
func (e *env) mustUpload(t *testing.T, ch, filename string, data []byte, extra ...part) Meta {
	t.Helper()
	parts := append([]part{field(FieldChannel, ch)}, extra...)
	parts = append(parts, filePart(filename, data))
	status, body := e.upload(t, true, parts...)
	if status != http.StatusCreated {
		t.Fatalf("upload: status %d, body %s", status, body)
	}
	var m Meta
	if err := json.Unmarshal(body, &m); err != nil {
		t.Fatalf("upload body %s: %v", body, err)
	}
	return m
}

// get fetches pathAndQuery (relative to the server) with or without the token.
func (e *env) get(t *testing.T, pathAndQuery string, withToken bool) (*http.Response, []byte) {
	t.Helper()
	req, err := http.NewRequest(http.MethodGet, e.srv.URL+pathAndQuery, nil)
	if err != nil {
		t.Fatal(err)
	}
	if withToken {
		req.Header.Set("Authorization", "Bearer "+testToken)
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatalf("GET: %v", err)
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	if err != nil {
		t.Fatalf("GET body: %v", err)
	}
	return resp, b
}

func do(t *testing.T, req *http.Request) (int, []byte) {
	t.Helper()
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatalf("%s %s: %v", req.Method, req.URL.Path, err)
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	if err != nil {
		t.Fatalf("body: %v", err)
	}
	return resp.StatusCode, b
}

// wantError checks an HTTP error answer: status and JSON {"code","message"}.
func wantError(t *testing.T, status int, body []byte, wantStatus int, wantCode string) {
	t.Helper()
	var eb errorBody
	if err := json.Unmarshal(body, &eb); err != nil {
		t.Fatalf("error body %q: %v", body, err)
	}
	if status != wantStatus || eb.Code != wantCode {
		t.Fatalf("got %d %q (%s), want %d %q", status, eb.Code, eb.Message, wantStatus, wantCode)
	}
	if eb.Message == "" {
		t.Errorf("error %q has no message", eb.Code)
	}
}

// storedMsgs is the number of messages in the bucket's stream (chunks and meta entries).
func (e *env) storedMsgs(t *testing.T) uint64 {
	t.Helper()
	st, err := e.js.Stream(context.Background(), "OBJ_"+e.store.cfg.Bucket)
	if err != nil {
		t.Fatal(err)
	}
	info, err := st.Info(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	return info.State.Msgs
}

func mimeParse(v string) (string, map[string]string, error) { return mime.ParseMediaType(v) }
