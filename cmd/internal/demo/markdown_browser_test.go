package demo_test

import (
	"context"
	"encoding/json"
	"strings"
	"testing"
	"time"
	"unicode"

	"github.com/chromedp/cdproto/cdp"
	"github.com/chromedp/cdproto/page"
	"github.com/chromedp/chromedp"

	"github.com/ximd/ximd/cmd/internal/demo"
	"github.com/ximd/ximd/handlers/adapter/markdown"
	"github.com/ximd/ximd/handlers/adapter/webchat/webchattest"
	"github.com/ximd/ximd/internal/testkit"
	"github.com/ximd/ximd/pipeline/xagent"
	"github.com/ximd/ximd/profile"
)

// pageText is the text the page shows of an agent's Markdown: the text of its rendering (the
// html the gateway sends), as a browser's textContent reads it.
func pageText(md string) string {
	return webchattest.Text(markdown.Parse(md).HTML(markdown.Web))
}

// pageStates is what the page may show of an answer streamed a word at a time: the rendering
// of each prefix that ends before a word, then of the whole.
func pageStates(answer string) []string {
	var out []string
	prevSpace := true
	for i, r := range answer {
		if !unicode.IsSpace(r) && !prevSpace {
			prevSpace = false
			continue
		}
		if !unicode.IsSpace(r) && i > 0 {
			out = append(out, pageText(answer[:i]))
		}
		prevSpace = unicode.IsSpace(r)
	}
	return append(out, pageText(answer))
}

// edge-api §7.3 in a real browser: the agent's streamed Markdown is rendered at every edit (a
// table and a code block appear in the streaming bubble, edited in place), its final renders
// them whole; a message carrying markup (an <img onerror>, a <script>, a javascript: link)
// shows it as text, as do the person's own messages; nothing breaks the page's strict CSP.
// XIMD_SCREENSHOT_MARKDOWN=docs/webchat-markdown.png writes a screenshot.
func TestWebchatMarkdownInBrowser(t *testing.T) {
	browser := newBrowser(t, 960, 900)
	n, err := testkit.StartNode(testkit.NodeOptions{DataDir: t.TempDir()})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = n.Stop() })
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	const channel = "markdown"
	path, _, err := demo.Open(ctx, n.Addr, n.Token, channel, "Markdown on the page")
	if err != nil {
		t.Fatal(err)
	}
	xa, err := xagent.Dial(ctx, n.Addr, n.Token)
	if err != nil {
		t.Fatal(err)
	}
	defer xa.Close()

	b := newTab(t, browser, "")
	run, eventually, bctx := b.run, b.eventually, b.ctx
	send := func(typ string, payload any) string {
		t.Helper()
		pid, err := xa.Send(ctx, channel, typ, payload)
		if err != nil {
			t.Fatal(err)
		}
		return pid
	}
	final := func(id, text string) {
		t.Helper()
		env, err := xa.Reply(send(profile.TypeMessage, profile.Message{MessageID: id, Text: text, CreatedAt: time.Now().UnixMilli()}), 15*time.Second)
		if err != nil {
			t.Fatal(err)
		}
		if ack, _ := xagent.AckOf(env); ack.Status != profile.AckAccepted {
			t.Fatalf("final %s: %s", id, env.Payload)
		}
	}

	run(onEveryDocument(watchCSP), chromedp.Navigate("http://"+n.Addr+path))
	eventually("page connected", `document.querySelector('#conn').classList.contains('live')`)

	// 1. The person asks in Markdown: their message stays text.
	run(chromedp.SendKeys(chromedp.ID("input"), "How do I **build** it? <img src=x onerror=window.__xss=1>"), chromedp.Click(chromedp.ID("send")))
	eventually("the person's message shown as typed", `(() => {
	  const u = document.querySelector('.msg.user[data-id] .text');
	  return !!u && u.textContent === 'How do I **build** it? <img src=x onerror=window.__xss=1>' && u.children.length === 0;
	})()`)

	// 2. A streamed answer with a table and a code block, each part shown before the next is
	// sent: every state is rendered, in the same bubble (marked "first" when it appears: a
	// bubble replaced rather than edited would lose the mark).
	parts := []string{
		"Here is **the plan**:\n\n| step | command |\n|---|---|\n| build | `go build ./...` |\n",
		"| test | `go test ./...` |\n\nThen run it:\n\n```go\nfunc main() {\n",
		"\tfmt.Println(\"<hello>\")\n}\n```\n\nThat is all:\n\n- see [the docs](https://example.com/docs)\n- ~~guess~~ ask again",
	}
	streaming := `document.querySelector('.msg.assistant.streaming .text.md')`
	eventually("status idle before the answer", `document.querySelector('#status').hidden`)
	send(profile.TypeDelta, profile.Delta{MessageID: "asst_md", Sequence: 1, Text: parts[0]})
	eventually("the streamed table rendered", `(() => {
	  const t = `+streaming+`;
	  if (!t || !t.querySelector('table') || t.querySelectorAll('table tr').length !== 2) return false;
	  t.closest('.msg').dataset.probe = 'first';
	  return t.querySelector('strong').textContent === 'the plan' && t.querySelector('td code').textContent === 'go build ./...';
	})()`)
	send(profile.TypeDelta, profile.Delta{MessageID: "asst_md", Sequence: 2, Text: parts[1]})
	eventually("the streamed code block rendered while its fence is open", `(() => {
	  const t = `+streaming+`;
	  return !!t && t.closest('.msg').dataset.probe === 'first' && t.querySelectorAll('table tr').length === 3 &&
	    !!t.querySelector('pre > code.language-go') && t.querySelector('pre > code').textContent.startsWith('func main() {');
	})()`)
	send(profile.TypeDelta, profile.Delta{MessageID: "asst_md", Sequence: 3, Text: parts[2]})
	eventually("the streamed code block closed", `(() => {
	  const t = `+streaming+`;
	  return !!t && t.querySelector('pre > code').textContent.includes('fmt.Println("<hello>")') && !!t.querySelector('a');
	})()`)
	answer := strings.Join(parts, "")
	final("asst_md", answer)
	eventually("the final rendered in the same bubble", `(() => {
	  const as = document.querySelectorAll('.msg.assistant');
	  const a = as[0];
	  if (as.length !== 1 || a.dataset.probe !== 'first' || !a.classList.contains('final') || a.classList.contains('streaming')) return false;
	  const t = a.querySelector('.text');
	  const link = t.querySelector('a');
	  return t.querySelectorAll('table').length === 1 && t.querySelectorAll('tbody tr').length === 2 && t.querySelectorAll('ul > li').length === 2 &&
	    t.querySelectorAll('pre > code').length === 1 && t.querySelector('pre > code').textContent === 'func main() {\n\tfmt.Println("<hello>")\n}' &&
	    link.href === 'https://example.com/docs' && link.rel === 'nofollow noopener noreferrer' && link.target === '_blank' &&
	    t.textContent === `+jsString(pageText(answer))+`;
	})()`)

	// 3. A message carrying markup shows it as text: no element, no script run, no link to it.
	hostile := "Careful: <img src=x onerror=window.__xss=2> and <script>window.__xss=3</script> and " +
		"<svg onload=window.__xss=4></svg> and [click](javascript:window.__xss=5) and [data](data:text/html,<script>window.__xss=6</script>)"
	final("asst_xss", hostile)
	eventually("the hostile message shown as text", `(() => {
	  const a = [...document.querySelectorAll('.msg.assistant.final')];
	  if (a.length !== 2) return false;
	  const t = a[1].querySelector('.text');
	  return t.textContent.includes('<img src=x onerror=window.__xss=2>') && t.textContent.includes('<script>window.__xss=3</script>');
	})()`)
	eventually("no markup from any message", `(() => {
	  const texts = document.querySelectorAll('.msg .text');
	  for (const t of texts) if (t.querySelector('img, script, svg, iframe, style, [onerror], [onload], [style]')) return false;
	  return window.__xss === undefined && ![...document.querySelectorAll('.msg .text a')].some(l => !/^https?:|^mailto:/.test(l.href));
	})()`)

	// 4. A reload replays both answers rendered, the hostile one as text.
	run(chromedp.Reload())
	eventually("history replayed rendered", `(() => {
	  const a = [...document.querySelectorAll('.msg.assistant.final .text')];
	  return a.length === 2 && !!a[0].querySelector('table') && !!a[0].querySelector('pre > code') &&
	    a[1].textContent.includes('<img src=x onerror=window.__xss=2>') && !document.querySelector('.msg .text img');
	})()`)

	b.screenshot("XIMD_SCREENSHOT_MARKDOWN")
	if v, err := chromedp.Run(bctx, chromedp.Evaluate[[]string](`window.__csp`)); err != nil || len(v) > 0 {
		t.Fatalf("Content-Security-Policy violations: %v %v", v, err)
	}
}

// jsString is s as a JavaScript string literal.
func jsString(s string) string {
	b, _ := json.Marshal(s)
	return string(b)
}

// watchCSP records every Content-Security-Policy violation of each document the tab opens in
// window.__csp, from its start.
const watchCSP = `window.__csp = [];
document.addEventListener('securitypolicyviolation', (e) => window.__csp.push(e.violatedDirective + ' ' + e.blockedURI));`

// onEveryDocument runs script at the start of every document the tab opens.
func onEveryDocument(script string) chromedp.Action[chromedp.Void] {
	return chromedp.Func(func(ctx context.Context, t *chromedp.Target) error {
		_, err := cdp.Call(ctx, t, page.AddScriptToEvaluateOnNewDocument, page.AddScriptToEvaluateOnNewDocumentParams{Source: script})
		return err
	})
}
