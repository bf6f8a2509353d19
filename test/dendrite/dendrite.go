// Package dendrite runs a real Matrix homeserver (Dendrite, github.com/matrix-org/dendrite,
// Apache-2.0) on loopback for tests: a fresh server per call to Start, with SQLite and in-memory
// JetStream in a temporary dir, federation and open registration off, accounts made with the
// registration shared secret.
//
// Dendrite is a test tool, never a dependency of ximd's go.mod: test/matrix/build-dendrite
// builds it into a cache dir (XIMD_DENDRITE_DIR, default ~/.cache/ximd/dendrite-v0.13.8). A test
// that needs it skips when it is not built, unless XIMD_REQUIRE_MATRIX=1 (CI), which builds it
// (about two minutes, once) and fails if that fails.
package dendrite

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"maunium.net/go/mautrix"
	"maunium.net/go/mautrix/event"
	"maunium.net/go/mautrix/id"
)

// Version is the Dendrite release the build script builds.
const Version = "v0.13.8"

// Options tweak a server.
type Options struct {
	// RateLimit turns on Dendrite's client rate limiting (5 requests, then 500 ms cool-off):
	// M_LIMIT_EXCEEDED with retry_after_ms.
	RateLimit bool
}

// Server is one running homeserver.
type Server struct {
	// URL is the client API base, http://127.0.0.1:<port>.
	URL string
	// Name is the server name (user ids end in ":" + Name).
	Name string

	bin, dir, config string
	cmd              *exec.Cmd
	log              *syncBuffer
	done             chan struct{}
}

var (
	buildOnce sync.Once
	binDir    string
	buildErr  error
)

// binaries returns the directory of the built binaries, building them when XIMD_REQUIRE_MATRIX
// is set.
func binaries() (string, error) {
	buildOnce.Do(func() {
		dir := os.Getenv("XIMD_DENDRITE_DIR")
		if dir == "" {
			cache, err := os.UserCacheDir()
			if err != nil {
				buildErr = err
				return
			}
			dir = filepath.Join(cache, "ximd", "dendrite-"+Version)
		}
		if _, err := os.Stat(filepath.Join(dir, "dendrite")); err == nil {
			binDir = dir
			return
		}
		if os.Getenv("XIMD_REQUIRE_MATRIX") == "" {
			buildErr = fmt.Errorf("dendrite is not built in %s (run test/matrix/build-dendrite)", dir)
			return
		}
		_, file, _, _ := runtime.Caller(0)
		script := filepath.Join(filepath.Dir(file), "..", "matrix", "build-dendrite")
		cmd := exec.Command(script)
		cmd.Env = append(os.Environ(), "XIMD_DENDRITE_DIR="+dir)
		out, err := cmd.Output()
		if err != nil {
			buildErr = fmt.Errorf("build dendrite: %v", err)
			return
		}
		binDir = strings.TrimSpace(string(out))
	})
	return binDir, buildErr
}

// Available reports whether Dendrite is built (or, under XIMD_REQUIRE_MATRIX, could be).
func Available() bool {
	_, err := binaries()
	return err == nil || os.Getenv("XIMD_REQUIRE_MATRIX") != ""
}

// Start runs a fresh homeserver and stops it when the test ends. It skips the test when
// Dendrite is not built (fails under XIMD_REQUIRE_MATRIX=1).
func Start(tb testing.TB, opts Options) *Server {
	tb.Helper()
	bin, err := binaries()
	if err != nil {
		if os.Getenv("XIMD_REQUIRE_MATRIX") != "" {
			tb.Fatal(err)
		}
		tb.Skip(err)
	}
	dir := tb.TempDir()
	s := &Server{Name: "localhost", bin: bin, dir: dir, config: filepath.Join(dir, "dendrite.yaml")}
	gen := exec.Command(filepath.Join(bin, "generate-config"), "-ci", "-dir", dir)
	yaml, err := gen.Output()
	if err != nil {
		tb.Fatalf("dendrite generate-config: %v", err)
	}
	cfg := string(yaml)
	for old, repl := range map[string]string{
		"disable_federation: false":    "disable_federation: true",
		"registration_disabled: false": "registration_disabled: true",
		"  level: trace":               "  level: warn",
		"private_key: matrix_key.pem":  "private_key: " + filepath.Join(dir, "matrix_key.pem"),
	} {
		cfg = strings.Replace(cfg, old, repl, 1)
	}
	if opts.RateLimit {
		cfg = strings.Replace(cfg, "  rate_limiting:\n    enabled: false", "  rate_limiting:\n    enabled: true", 1)
	}
	if err := os.WriteFile(s.config, []byte(cfg), 0o600); err != nil {
		tb.Fatal(err)
	}
	if out, err := exec.Command(filepath.Join(bin, "generate-keys"), "--private-key", filepath.Join(dir, "matrix_key.pem")).CombinedOutput(); err != nil {
		tb.Fatalf("dendrite generate-keys: %v\n%s", err, out)
	}
	s.start(tb)
	tb.Cleanup(s.Stop)
	return s
}

// start runs the server on a free loopback port (the same one again after a Stop).
func (s *Server) start(tb testing.TB) {
	tb.Helper()
	if s.URL == "" {
		ln, err := net.Listen("tcp", "127.0.0.1:0")
		if err != nil {
			tb.Fatal(err)
		}
		s.URL = "http://" + ln.Addr().String()
		_ = ln.Close()
	}
	s.log = &syncBuffer{}
	s.cmd = exec.Command(filepath.Join(s.bin, "dendrite"), "-config", s.config, "-http-bind-address", strings.TrimPrefix(s.URL, "http://"))
	s.cmd.Dir = s.dir
	s.cmd.Stdout, s.cmd.Stderr = s.log, s.log
	if err := s.cmd.Start(); err != nil {
		tb.Fatalf("start dendrite: %v", err)
	}
	s.done = make(chan struct{})
	go func() { _ = s.cmd.Wait(); close(s.done) }()
	deadline := time.Now().Add(30 * time.Second)
	for {
		resp, err := http.Get(s.URL + "/_matrix/client/versions")
		if err == nil {
			resp.Body.Close()
			if resp.StatusCode == http.StatusOK {
				return
			}
		}
		select {
		case <-s.done:
			tb.Fatalf("dendrite exited: %s", s.log.String())
		default:
		}
		if time.Now().After(deadline) {
			tb.Fatalf("dendrite not ready within 30s: %s", s.log.String())
		}
		time.Sleep(20 * time.Millisecond)
	}
}

// Log is what the server wrote (warnings and errors).
func (s *Server) Log() string { return s.log.String() }

// syncBuffer is a bytes.Buffer the server's output goroutine and the test share.
type syncBuffer struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (b *syncBuffer) Write(p []byte) (int, error) {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.b.Write(p)
}

func (b *syncBuffer) String() string {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.b.String()
}

// Stop ends the server (its data stays for a restart in the same test).
func (s *Server) Stop() {
	if s.cmd == nil || s.cmd.Process == nil {
		return
	}
	select {
	case <-s.done:
		return
	default:
	}
	_ = s.cmd.Process.Kill()
	<-s.done
}

// User is an account on the server with a logged-in client.
type User struct {
	ID     id.UserID
	Token  string
	Client *mautrix.Client
}

// Register creates the account name and logs it in.
func (s *Server) Register(tb testing.TB, name string) *User {
	tb.Helper()
	password := "pw-" + name + "-0123456789"
	out, err := exec.Command(filepath.Join(s.bin, "create-account"), "-config", s.config, "-username", name, "-password", password, "-url", s.URL).CombinedOutput()
	if err != nil {
		tb.Fatalf("create-account %s: %v\n%s", name, err, out)
	}
	cli, err := mautrix.NewClient(s.URL, "", "")
	if err != nil {
		tb.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	resp, err := cli.Login(ctx, &mautrix.ReqLogin{
		Type:       mautrix.AuthTypePassword,
		Identifier: mautrix.UserIdentifier{Type: mautrix.IdentifierTypeUser, User: name},
		Password:   password, StoreCredentials: true,
	})
	if err != nil {
		tb.Fatalf("login %s: %v", name, err)
	}
	return &User{ID: resp.UserID, Token: resp.AccessToken, Client: cli}
}

// Room creates a private room owned by owner with the others invited and joined, and returns
// its id. encrypted adds m.room.encryption.
func (s *Server) Room(tb testing.TB, owner *User, encrypted bool, others ...*User) id.RoomID {
	tb.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	req := &mautrix.ReqCreateRoom{Preset: "private_chat", Name: "ximd test"}
	for _, o := range others {
		req.Invite = append(req.Invite, o.ID)
	}
	if encrypted {
		req.InitialState = append(req.InitialState, &event.Event{Type: event.StateEncryption, StateKey: new(""),
			Content: event.Content{Parsed: &event.EncryptionEventContent{Algorithm: id.AlgorithmMegolmV1}}})
	}
	resp, err := owner.Client.CreateRoom(ctx, req)
	if err != nil {
		tb.Fatalf("create room: %v", err)
	}
	for _, o := range others {
		if _, err := o.Client.JoinRoomByID(ctx, resp.RoomID); err != nil {
			tb.Fatalf("%s joins: %v", o.ID, err)
		}
	}
	return resp.RoomID
}

// Message is a room message as a person's client shows it.
type Message struct {
	ID      id.EventID
	Sender  id.UserID
	MsgType string
	// Body is the text now: the latest m.replace edit's, else the event's.
	Body string
	// Filename and URL (mxc://) of a media message.
	Filename, URL string
	// ReplyTo is the event the message replies to ("": none).
	ReplyTo string
}

// Messages returns the room's m.room.message events as u sees them, oldest first: the
// originals, each with the body of its latest edit.
func (u *User) Messages(tb testing.TB, room id.RoomID) []Message {
	tb.Helper()
	var chunk []*event.Event
	for from := ""; ; {
		resp, err := u.Client.Messages(context.Background(), room, from, "", mautrix.DirectionBackward, &mautrix.FilterPart{Types: []event.Type{event.EventMessage}}, 500)
		if err != nil {
			tb.Fatal(err)
		}
		chunk = append(chunk, resp.Chunk...)
		if resp.End == "" || len(resp.Chunk) == 0 {
			break
		}
		from = resp.End
	}
	var c struct {
		MsgType    string `json:"msgtype"`
		Body       string `json:"body"`
		Filename   string `json:"filename"`
		URL        string `json:"url"`
		NewContent *struct {
			Body string `json:"body"`
		} `json:"m.new_content"`
		RelatesTo *struct {
			RelType   string `json:"rel_type"`
			EventID   string `json:"event_id"`
			InReplyTo *struct {
				EventID string `json:"event_id"`
			} `json:"m.in_reply_to"`
		} `json:"m.relates_to"`
	}
	latest := map[string]string{}
	var out []Message
	for _, ev := range chunk { // newest first
		c.NewContent, c.RelatesTo, c.Filename, c.URL = nil, nil, "", ""
		_ = json.Unmarshal(ev.Content.VeryRaw, &c)
		if r := c.RelatesTo; r != nil && r.RelType == "m.replace" && c.NewContent != nil {
			if _, seen := latest[r.EventID]; !seen {
				latest[r.EventID] = c.NewContent.Body
			}
			continue
		}
		m := Message{ID: ev.ID, Sender: ev.Sender, MsgType: c.MsgType, Body: c.Body, Filename: c.Filename, URL: c.URL}
		if body, ok := latest[string(ev.ID)]; ok {
			m.Body = body
		}
		if c.RelatesTo != nil && c.RelatesTo.InReplyTo != nil {
			m.ReplyTo = c.RelatesTo.InReplyTo.EventID
		}
		out = append([]Message{m}, out...)
	}
	return out
}

// Typing returns a function that reports, from u's sync, whether who types in room now. It
// syncs once at once, so every typing change after Typing returns reaches the function by an
// incremental sync (an initial sync made after the change may leave it out).
func (u *User) Typing(room id.RoomID, who id.UserID) func(tb testing.TB) bool {
	since, typing := "", false
	first, initErr := u.Client.SyncRequest(context.Background(), 0, "", "", false, event.PresenceOffline)
	if initErr == nil {
		since = first.NextBatch
	}
	return func(tb testing.TB) bool {
		tb.Helper()
		if initErr != nil {
			tb.Fatalf("initial sync: %v", initErr)
		}
		resp, err := u.Client.SyncRequest(context.Background(), 200, since, "", false, event.PresenceOffline)
		if err != nil {
			tb.Fatal(err)
		}
		since = resp.NextBatch
		jr := resp.Rooms.Join[room]
		if jr == nil {
			return typing
		}
		for _, ev := range jr.Ephemeral.Events {
			if ev.Type != event.EphemeralEventTyping {
				continue
			}
			var c struct {
				UserIDs []id.UserID `json:"user_ids"`
			}
			_ = json.Unmarshal(ev.Content.VeryRaw, &c)
			typing = slices.Contains(c.UserIDs, who)
		}
		return typing
	}
}
