package demo_test

import (
	"context"
	"net/http"
	"os"
	"strings"
	"testing"
	"time"

	"github.com/chromedp/chromedp"

	"github.com/ximd/ximd/cmd/internal/agent"
	"github.com/ximd/ximd/cmd/internal/demo"
	"github.com/ximd/ximd/internal/testkit"
)

// A webchat bot's public page in a real browser (edge-api §4.1): a visitor nobody bound writes,
// their conversation opens and the demo agent's streamed answer appears; a reload keeps their
// conversation (the visitor cookie); another browser profile is another visitor with a
// conversation of its own.
func TestWebchatBotPageInBrowser(t *testing.T) {
	chrome := chromiumPath()
	if chrome == "" && os.Getenv("XIMD_REQUIRE_BROWSER") != "" {
		t.Fatal("XIMD_REQUIRE_BROWSER is set (CI) but there is no Chromium or Chrome on PATH")
	}
	if chrome == "" {
		t.Skip("no Chromium or Chrome on PATH: the browser test needs one; CI installs the Debian package chromium")
	}
	n, err := testkit.StartNode(testkit.NodeOptions{DataDir: t.TempDir()})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = n.Stop() })
	status, body, err := n.Do(http.MethodPut, "/v1/bots/site", map[string]any{
		"connection":    map[string]any{"target_type": "im", "profiles": []string{"xagent.im.v2"}},
		"target":        map[string]any{"adapter": "webchat", "config": map[string]any{"title": "Ask the demo"}},
		"conversations": map[string]any{"direct": "open"},
	})
	if err != nil || status != http.StatusOK {
		t.Fatalf("PUT bot: %d %s %v", status, body, err)
	}
	cfg := demo.AgentConfig(n.Addr, n.Token)
	cfg.Think, cfg.Delay = 100*time.Millisecond, 20*time.Millisecond
	agentOut := &testkit.SyncBuffer{}
	actx, stopAgent := context.WithCancel(context.Background())
	agentDone := make(chan struct{})
	go func() { defer close(agentDone); agent.New(cfg, agentOut, agentOut).Run(actx) }()
	t.Cleanup(func() { stopAgent(); <-agentDone })

	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	alloc, cancelAlloc := chromedp.NewExecAllocator(ctx, append(chromedp.DefaultExecAllocatorOptions[:],
		chromedp.ExecPath(chrome), chromedp.NoSandbox, chromedp.Flag("disable-gpu", true), chromedp.WindowSize(800, 800))...)
	defer cancelAlloc()
	page := "http://" + n.Addr + "/webchat/bots/site"
	visitor := func(name string) (run func(...chromedp.Action[chromedp.Void]), eventually func(string, string)) {
		bctx, cancelBrowser := chromedp.NewContext(alloc, chromedp.WithErrorf(func(string, ...any) {}))
		t.Cleanup(cancelBrowser)
		run = func(steps ...chromedp.Action[chromedp.Void]) {
			t.Helper()
			if err := chromedp.Do(bctx, steps...); err != nil {
				t.Fatalf("%s: %v", name, err)
			}
		}
		eventually = func(what, cond string) {
			t.Helper()
			deadline := time.Now().Add(30 * time.Second)
			for {
				ok, err := chromedp.Run(bctx, chromedp.Evaluate[bool](cond))
				if err == nil && ok {
					return
				}
				if time.Now().After(deadline) {
					html, _ := chromedp.Run(bctx, chromedp.Evaluate[string](`document.body.outerHTML`))
					t.Fatalf("%s: %s: not within 30s (last error %v); agent:\n%s\npage:\n%s", name, what, err, agentOut, html)
				}
				time.Sleep(25 * time.Millisecond)
			}
		}
		return run, eventually
	}
	const live = `document.querySelector('#conn').classList.contains('live')`
	answered := func(text string) string {
		return `[...document.querySelectorAll('.msg.assistant.final')].some(e => e.querySelector('.text').textContent.includes(` + "'" + text + "'" + `))`
	}

	run, eventually := visitor("alice")
	run(chromedp.Navigate(page))
	eventually("page ready", live+` && document.title === 'Ask the demo'`)
	run(chromedp.SendKeys(chromedp.ID("input"), "hello from alice"), chromedp.Click(chromedp.ID("send")))
	eventually("alice's message shown from ximd", `[...document.querySelectorAll('.msg.user')].some(e => e.dataset.id && e.textContent.includes('hello from alice'))`)
	eventually("the agent's answer streamed in", answered("hello from alice"))
	run(chromedp.Reload())
	eventually("alice's conversation after a reload", live+` && `+answered("hello from alice"))

	run2, eventually2 := visitor("bob")
	run2(chromedp.Navigate(page))
	eventually2("bob's page ready, empty", live+` && document.querySelectorAll('.msg').length === 0`)
	run2(chromedp.SendKeys(chromedp.ID("input"), "hello from bob"), chromedp.Click(chromedp.ID("send")))
	eventually2("bob's answer", answered("hello from bob"))
	eventually2("bob sees only his own conversation", `![...document.querySelectorAll('.msg')].some(e => e.textContent.includes('alice'))`)

	_, b, _ := n.Do(http.MethodGet, "/v1/bots/site", nil)
	if !strings.Contains(string(b), `"channels":2`) {
		t.Fatalf("bot after two visitors: %s", b)
	}
}
