// Package demo is `ximd --demo`: it opens a webchat channel through ximd's real HTTP API and
// runs the demo agent (package agent) against ximd's real WebSocket edge, as xAgent would.
package demo

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"time"

	"github.com/ximd/ximd/cmd/internal/agent"
)

// Channel is the demo's channel id.
const Channel = "demo"

// Reply is the demo agent's answer template: Markdown, as an agent writes it (a short list,
// bold, code spans, a small table), so the first page a newcomer opens shows it rendered.
const Reply = "You said: \"{text}\". I am the **ximd demo agent**, and I answer in Markdown:\n\n" +
	"- this answer travelled as `chat.message.delta` packets over ximd's `/v1/ws` edge\n" +
	"- through **JetStream** into this page, which renders each state of one bubble in place\n" +
	"- until the final `chat.message` replaces it\n\n" +
	"| hop | what travels |\n" +
	"|---|---|\n" +
	"| xAgent → ximd | `chat.message.delta`, then `chat.message` |\n" +
	"| ximd → this page | the text so far, rendered |"

// AgentConfig is the demo agent's configuration against ximd at addr: thinking, then
// web_search, then idle, the answer streamed word by word, files echoed back, and a file sent
// with the im.send_file tool when the message asks for one.
func AgentConfig(addr, token string) agent.Config {
	return agent.Config{
		Name: "ximd demo agent", Addr: addr, Token: token, Reply: Reply,
		Chunk: 1, Delay: 90 * time.Millisecond, Think: 700 * time.Millisecond, Tool: true,
		AckTimeout: 10 * time.Second, Retries: 5, RetryBackoff: time.Second, EchoFiles: true, FileTool: true,
	}
}

// Open opens (or re-opens) channel id on the webchat adapter through PUT /v1/channels/{id} and
// returns its page link from GET /v1/channels/{id}/webchat: the path (with the secret) and the
// absolute URL under XIM_PUBLIC_URL.
func Open(ctx context.Context, addr, token, id, title string) (pagePath, pageURL string, err error) {
	body, _ := json.Marshal(map[string]any{
		"connection": map[string]any{"target_type": "im", "profiles": []string{"xagent.im.v2"}},
		"target":     map[string]any{"adapter": "webchat", "config": map[string]any{"title": title}},
	})
	if _, err := call(ctx, http.MethodPut, addr, token, "/v1/channels/"+url.PathEscape(id), body); err != nil {
		return "", "", err
	}
	b, err := call(ctx, http.MethodGet, addr, token, "/v1/channels/"+url.PathEscape(id)+"/webchat", nil)
	if err != nil {
		return "", "", err
	}
	var link struct {
		PagePath string `json:"page_path"`
		PageURL  string `json:"page_url"`
	}
	if err := json.Unmarshal(b, &link); err != nil || link.PagePath == "" {
		return "", "", fmt.Errorf("page link: unexpected answer %s", b)
	}
	return link.PagePath, link.PageURL, nil
}

func call(ctx context.Context, method, addr, token, path string, body []byte) ([]byte, error) {
	var rd io.Reader
	if body != nil {
		rd = bytes.NewReader(body)
	}
	req, err := http.NewRequestWithContext(ctx, method, "http://"+addr+path, rd)
	if err != nil {
		return nil, err
	}
	req.Header.Set("Authorization", "Bearer "+token)
	if body != nil {
		req.Header.Set("Content-Type", "application/json")
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		return nil, fmt.Errorf("%s %s: %w", method, path, err)
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(io.LimitReader(resp.Body, 1<<20))
	if resp.StatusCode != http.StatusOK {
		return nil, fmt.Errorf("%s %s: HTTP %d %s", method, path, resp.StatusCode, bytes.TrimSpace(b))
	}
	return b, nil
}

// Run opens the demo channel on ximd at addr, prints the page URL to out, and runs the demo
// agent until ctx ends. base is the URL prefix of the printed link ("" for http://addr).
func Run(ctx context.Context, addr, token, base string, out, agentOut, agentErr io.Writer) error {
	octx, cancel := context.WithTimeout(ctx, 30*time.Second)
	path, _, err := Open(octx, addr, token, Channel, "ximd demo")
	cancel()
	if err != nil {
		return fmt.Errorf("demo: %w", err)
	}
	if base == "" {
		base = "http://" + addr
	}
	fmt.Fprintf(out, "\nximd demo: open this page in a browser and chat with the demo agent:\n\n    %s%s\n\n"+
		"The link carries the page's secret: whoever has it can use this chat. Ctrl-C stops ximd.\n\n", base, path)
	agent.New(AgentConfig(addr, token), agentOut, agentErr).Run(ctx)
	return nil
}
