package download_test

import (
	"bytes"
	"context"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"net/url"
	"time"

	"github.com/ximd/ximd/handlers/adapter/download"
)

// A target system's user posts a file URL; ximd downloads it from the target's own host and
// refuses a URL aimed elsewhere, such as a cloud metadata service.
func ExampleFetcher_Fetch() {
	target := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Content-Type", "text/plain; charset=utf-8")
		w.Header().Set("Content-Disposition", `attachment; filename="notes.txt"`)
		io.WriteString(w, "hello, xAgent\n")
	}))
	defer target.Close()

	targetURL, _ := url.Parse(target.URL)       // the channel's target URL
	allowed := download.Allowed{targetURL.Host} // its host, port included, plus the channel's listed hosts
	f := download.New(download.Config{MaxBytes: 1 << 20, Timeout: 5 * time.Second}, nil)

	var stored bytes.Buffer // the object store in ximd
	sink := func(r io.Reader, contentType string, contentLength int64) error {
		_, err := io.Copy(&stored, r)
		return err
	}
	ctx := context.Background()
	res, err := f.Fetch(ctx, target.URL+"/files/42?token=abc", allowed, sink)
	fmt.Printf("%s %q %d bytes, err %v\n", res.Filename, res.ContentType, res.Bytes, err)

	_, err = f.Fetch(ctx, "http://169.254.169.254/latest/meta-data/?token=abc", allowed, sink)
	fmt.Println(err)
	// Output:
	// notes.txt "text/plain; charset=utf-8" 14 bytes, err <nil>
	// file_download_failed: download http://169.254.169.254/latest/meta-data/: host 169.254.169.254 is not allowed for this channel
}

func ExampleAllowed_Allows() {
	allowed := download.Allowed{"chat.example.com:443", "*.cdn.example.com"}
	for _, raw := range []string{
		"https://chat.example.com/f/1",
		"http://chat.example.com:8080/f/1",
		"https://img.cdn.example.com/a.png",
		"https://cdn.example.com/a.png",
		"https://evil-cdn.example.com/a.png",
	} {
		u, _ := url.Parse(raw)
		fmt.Println(allowed.Allows(u), raw)
	}
	// Output:
	// true https://chat.example.com/f/1
	// false http://chat.example.com:8080/f/1
	// true https://img.cdn.example.com/a.png
	// false https://cdn.example.com/a.png
	// false https://evil-cdn.example.com/a.png
}

func ExampleRedact() {
	fmt.Println(download.Redact("https://user:pw@files.example.com/a/report.pdf?X-Signature=SECRET#p=2"))
	// Output: https://files.example.com/a/report.pdf
}
