package feishutest_test

import (
	"bytes"
	"encoding/json"
	"fmt"
	"net/http"

	"github.com/ximd/ximd/handlers/adapter/feishu/feishutest"
)

// A test builds an app, a person and a chat, lets the adapter get a token and send, and reads
// back what the bot sent.
func Example() {
	s := feishutest.New()
	defer s.Close()
	app := s.AddApp("cli_a1b2c3", "app-secret", "ximd")
	ann := s.AddUser("Ann")
	chat := s.AddChat("group", "Team", ann)

	// The adapter would do this with base URL s.URL(), app.ID and app.Secret.
	token, err := postJSON(s.URL()+feishutest.RouteToken, "", map[string]string{"app_id": app.ID, "app_secret": app.Secret})
	if err != nil {
		fmt.Println(err)
		return
	}
	content, _ := json.Marshal(map[string]string{"text": "hi Ann"})
	sent, err := postJSON(s.URL()+feishutest.RouteMessages+"?receive_id_type=chat_id", token["tenant_access_token"].(string),
		map[string]string{"receive_id": chat, "msg_type": "text", "content": string(content), "uuid": "send-1"})
	if err != nil {
		fmt.Println(err)
		return
	}
	fmt.Println("code:", sent["code"])
	for _, m := range s.Messages(chat) {
		fmt.Printf("%s: %q\n", m.Sender, m.Text)
	}
	// Output:
	// code: 0
	// cli_a1b2c3: "hi Ann"
}

// postJSON POSTs a JSON body and decodes the JSON answer.
func postJSON(url, token string, body any) (map[string]any, error) {
	b, err := json.Marshal(body)
	if err != nil {
		return nil, fmt.Errorf("encode: %w", err)
	}
	req, err := http.NewRequest(http.MethodPost, url, bytes.NewReader(b))
	if err != nil {
		return nil, fmt.Errorf("new request: %w", err)
	}
	req.Header.Set("Content-Type", "application/json; charset=utf-8")
	if token != "" {
		req.Header.Set("Authorization", "Bearer "+token)
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		return nil, fmt.Errorf("post: %w", err)
	}
	defer resp.Body.Close()
	var out map[string]any
	if err := json.NewDecoder(resp.Body).Decode(&out); err != nil {
		return nil, fmt.Errorf("decode: %w", err)
	}
	return out, nil
}
