package demo_test

import (
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/chromedp/chromedp"

	"github.com/ximd/ximd/cmd/internal/demo"
	"github.com/ximd/ximd/internal/testkit"
)

// A webchat bot's public page in a real browser (edge-api §4.1): a visitor nobody bound writes,
// their conversation opens and the demo agent's streamed answer appears; a reload keeps their
// conversation (the visitor cookie); another browser profile is another visitor with a
// conversation of its own.
func TestWebchatBotPageInBrowser(t *testing.T) {
	browser := newBrowser(t, 800, 800)
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
	startAgent(t, cfg)

	page := "http://" + n.Addr + "/webchat/bots/site"
	const live = `document.querySelector('#conn').classList.contains('live')`
	answered := func(text string) string {
		return `[...document.querySelectorAll('.msg.assistant.final')].some(e => e.querySelector('.text').textContent.includes(` + "'" + text + "'" + `))`
	}

	alice := newTab(t, browser, "alice")
	run, eventually := alice.run, alice.eventually
	run(chromedp.Navigate(page))
	eventually("page ready", live+` && document.title === 'Ask the demo'`)
	run(chromedp.SendKeys(chromedp.ID("input"), "hello from alice"), chromedp.Click(chromedp.ID("send")))
	eventually("alice's message shown from ximd", `[...document.querySelectorAll('.msg.user')].some(e => e.dataset.id && e.textContent.includes('hello from alice'))`)
	eventually("the agent's answer streamed in", answered("hello from alice"))
	run(chromedp.Reload())
	eventually("alice's conversation after a reload", live+` && `+answered("hello from alice"))

	bob := newTab(t, browser, "bob")
	run2, eventually2 := bob.run, bob.eventually
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
