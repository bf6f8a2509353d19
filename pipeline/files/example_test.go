package files_test

import (
	"context"
	"fmt"
	"net/url"
	"os"
	"time"

	"github.com/nats-io/nats-server/v2/server"
	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/ximd/ximd/pipeline/files"
)

// A target system gets a signed link that fetches the file without the bearer token until
// it expires.
func ExampleStore_SignedURL() {
	dir, _ := os.MkdirTemp("", "files-example")
	defer os.RemoveAll(dir)
	srv, _ := server.NewServer(&server.Options{Port: -1, JetStream: true, StoreDir: dir, NoLog: true, NoSigs: true})
	go srv.Start()
	defer srv.Shutdown()
	srv.ReadyForConnections(5 * time.Second)
	nc, err := nats.Connect(srv.ClientURL())
	if err != nil {
		fmt.Println(err)
		return
	}
	defer nc.Close()
	js, _ := jetstream.New(nc)

	cfg := files.Config{PublicURL: "https://ximd.example.com", LinkTTL: 10 * time.Minute}
	if err := files.Provision(context.Background(), js, cfg); err != nil {
		fmt.Println(err)
		return
	}
	key := []byte("0123456789abcdef0123456789abcdef") // load the shared key in real use
	store, err := files.New(js, cfg, key, nil)
	if err != nil {
		fmt.Println(err)
		return
	}

	now := time.Unix(1_800_000_000, 0)
	link := store.SignedURL("file_0123456789abcdef0123456789abcdef", now)
	u, _ := url.Parse(link)
	q := u.Query()
	fmt.Println(u.Scheme + "://" + u.Host + u.Path)
	fmt.Println("exp:", q.Get("exp"))
	fmt.Println("valid now:", store.VerifyLink("file_0123456789abcdef0123456789abcdef", q.Get("exp"), q.Get("sig"), now))
	fmt.Println("valid in 11m:", store.VerifyLink("file_0123456789abcdef0123456789abcdef", q.Get("exp"), q.Get("sig"), now.Add(11*time.Minute)))
	// Output:
	// https://ximd.example.com/files/refs/file_0123456789abcdef0123456789abcdef
	// exp: 1800000600
	// valid now: true
	// valid in 11m: false
}
