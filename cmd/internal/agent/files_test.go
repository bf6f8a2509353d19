package agent

import (
	"context"
	"encoding/json"
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"

	"github.com/ximd/ximd/profile"
)

// echo fetches a user file with the bearer token and uploads it to the same channel (P-MSG-6/7).
func TestEchoFetchesAndUploadsAgain(t *testing.T) {
	t.Parallel()
	const token = "tok"
	var uploaded struct{ channel, filename, mime, body string }
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.Header.Get("Authorization") != "Bearer "+token {
			http.Error(w, "unauthorized", http.StatusUnauthorized)
			return
		}
		switch {
		case r.Method == http.MethodGet && r.URL.Path == "/files/refs/file_in":
			w.Header().Set("Content-Type", "image/png")
			_, _ = io.WriteString(w, "PNGBYTES")
		case r.Method == http.MethodPost && r.URL.Path == "/files/uploads":
			if err := r.ParseMultipartForm(1 << 20); err != nil {
				http.Error(w, err.Error(), http.StatusBadRequest)
				return
			}
			f, _, err := r.FormFile("file")
			if err != nil {
				http.Error(w, err.Error(), http.StatusBadRequest)
				return
			}
			b, _ := io.ReadAll(f)
			uploaded.channel, uploaded.filename, uploaded.mime, uploaded.body = r.FormValue("connector_channel_id"), r.FormValue("filename"), r.FormValue("mime_type"), string(b)
			w.WriteHeader(http.StatusCreated)
			_ = json.NewEncoder(w).Encode(map[string]any{"file_ref": "file_out", "type": "image", "filename": "a.png", "mime_type": "image/png", "byte_size": len(b)})
		default:
			http.NotFound(w, r)
		}
	}))
	defer srv.Close()
	r := New(Config{Addr: strings.TrimPrefix(srv.URL, "http://"), Token: token}, io.Discard, io.Discard)

	got, err := r.echo(context.Background(), "room", []profile.File{{Type: "image", FileRef: "file_in", Filename: "a.png", MimeType: "image/png", DownloadURL: "/files/refs/file_in"}})
	if err != nil {
		t.Fatal(err)
	}
	if len(got) != 1 || got[0].FileRef != "file_out" || got[0].DownloadURL != "" || got[0].ByteSize != 8 {
		t.Fatalf("echoed %+v, want file_out without download_url", got)
	}
	if uploaded.channel != "room" || uploaded.filename != "a.png" || uploaded.mime != "image/png" || uploaded.body != "PNGBYTES" {
		t.Fatalf("uploaded %+v", uploaded)
	}
	if _, err := r.echo(context.Background(), "room", []profile.File{{FileRef: "gone", DownloadURL: "/files/refs/gone"}}); err == nil || !strings.Contains(err.Error(), "HTTP 404") {
		t.Fatalf("echo of a missing file = %v, want the download's 404", err)
	}
}
