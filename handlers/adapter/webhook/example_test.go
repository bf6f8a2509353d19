package webhook_test

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"

	"github.com/ximd/ximd/handlers/adapter"
	"github.com/ximd/ximd/handlers/adapter/webhook"
)

// A channel bound to a webhook target that edits streamed messages in
// place: the first displayed part creates the message, the final replaces
// its whole text.
func ExampleAdapter_Open() {
	secret := []byte("s3cr3t")
	chat := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		body, _ := io.ReadAll(r.Body)
		if !webhook.Verify(secret, body, r.Header.Get(webhook.SignatureHeader)) {
			http.Error(w, "bad signature", http.StatusUnauthorized)
			return
		}
		fmt.Printf("%s %s %s\n", r.Method, r.URL.Path, body)
		if r.Method == http.MethodPost && r.URL.Path == "/hook/messages" {
			io.WriteString(w, `{"message_id":"m-1"}`)
		}
	}))
	defer chat.Close()

	wh := webhook.New(webhook.Options{})
	defer wh.Close()
	tg, err := wh.Open(json.RawMessage(`{"url":"` + chat.URL + `/hook","chat_id":"room-1",
		"secret":"s3cr3t","streaming":"edit","activity":"typing"}`))
	if err != nil {
		fmt.Println(err)
		return
	}
	ctx := context.Background()

	id, err := tg.Send(ctx, adapter.Message{Text: "Hel", IdempotencyKey: "cch_1:assistant_1"})
	if err != nil {
		fmt.Println(err)
		return
	}
	if ed, ok := tg.(adapter.Editor); ok {
		err = ed.Edit(ctx, id, adapter.Message{Text: "Hello.", Final: true})
	}
	fmt.Println("target message", id, "error", err)
	// Output:
	// POST /hook/messages {"chat_id":"room-1","text":"Hel","files":[],"final":false,"idempotency_key":"cch_1:assistant_1"}
	// PATCH /hook/messages/m-1 {"chat_id":"room-1","text":"Hello.","files":[],"final":true}
	// target message m-1 error <nil>
}

// Public is what the channels API shows of a binding: no secret.
func ExampleAdapter_Public() {
	pub, err := webhook.New(webhook.Options{}).Public(json.RawMessage(
		`{"url":"http://127.0.0.1:9999/hook","chat_id":"room-1","secret":"s3cr3t"}`))
	fmt.Println(string(pub), err)
	// Output:
	// {"url":"http://127.0.0.1:9999/hook","chat_id":"room-1","streaming":"edit","activity":"typing","timeout":"10s","dedupe":false,"lookup":false,"signature":"v1","format":"markdown"} <nil>
}

// The inbound route checks the signature of a target's request with Verify.
func ExampleVerify() {
	secret := []byte("s3cr3t")
	body := []byte(`{"target_message_id":"t-9","text":"hi","files":[]}`)
	header := webhook.Sign(secret, body)
	fmt.Println(header)
	fmt.Println(webhook.Verify(secret, body, header))
	fmt.Println(webhook.Verify(secret, []byte(`{"text":"forged"}`), header))
	// Output:
	// sha256=127d6e08c67dc85b42c86c7782c14f60db8cc63b88528ec6540f3cd4fe5ba25c
	// true
	// false
}
