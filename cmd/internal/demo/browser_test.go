package demo_test

import (
	"bytes"
	"context"
	"fmt"
	"image"
	"image/color"
	"image/png"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/chromedp/chromedp"

	"github.com/ximd/ximd/cmd/internal/agent"
	"github.com/ximd/ximd/cmd/internal/demo"
	"github.com/ximd/ximd/internal/testkit"
	"github.com/ximd/ximd/pipeline/xagent"
	"github.com/ximd/ximd/profile"
)

// The demo in a real browser: a real all-in-one node (embedded JetStream, HTTP on loopback),
// the demo agent on its real /v1/ws edge, and headless Chromium driven over the DevTools
// protocol. XIMD_SCREENSHOT=docs/demo.png (relative to the module root) writes a screenshot.

// chromiumPath is the system Chromium or Chrome, "" when none is installed.
func chromiumPath() string {
	for _, name := range []string{"chromium", "chromium-browser", "google-chrome", "google-chrome-stable", "headless-shell"} {
		if p, err := exec.LookPath(name); err == nil {
			return p
		}
	}
	return ""
}

// newBrowser is a headless Chromium for the test, its windows w×h pixels, for two minutes at
// most; each newTab of it is a browser of its own (its own profile and cookies). Without
// Chromium or Chrome on PATH the test is skipped, or fails where XIMD_REQUIRE_BROWSER is set
// (CI).
func newBrowser(t *testing.T, w, h int) context.Context {
	t.Helper()
	chrome := chromiumPath()
	if chrome == "" && os.Getenv("XIMD_REQUIRE_BROWSER") != "" {
		t.Fatal("XIMD_REQUIRE_BROWSER is set (CI) but there is no Chromium or Chrome on PATH")
	}
	if chrome == "" {
		t.Skip("no Chromium or Chrome on PATH (chromium, chromium-browser, google-chrome): the browser test needs one; CI installs the Debian package chromium")
	}
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	t.Cleanup(cancel)
	alloc, cancelAlloc := chromedp.NewExecAllocator(ctx, append(chromedp.DefaultExecAllocatorOptions[:],
		chromedp.ExecPath(chrome), chromedp.NoSandbox, chromedp.Flag("disable-gpu", true), chromedp.WindowSize(w, h))...)
	t.Cleanup(cancelAlloc)
	return alloc
}

// tab is a browser tab a test drives; a failure names the tab and shows its page.
type tab struct {
	t    *testing.T
	ctx  context.Context // for chromedp.Run
	name string          // the tab's name in failures ("": the test's only tab)
}

// newTab opens a tab in a browser of its own from newBrowser, closed when the test ends.
func newTab(t *testing.T, browser context.Context, name string) *tab {
	ctx, cancel := chromedp.NewContext(browser, chromedp.WithErrorf(func(string, ...any) {}))
	t.Cleanup(cancel)
	return &tab{t: t, ctx: ctx, name: name}
}

// fatalf fails the test, the message after the tab's name.
func (b *tab) fatalf(format string, args ...any) {
	b.t.Helper()
	if b.name != "" {
		format, args = "%s: "+format, append([]any{b.name}, args...)
	}
	b.t.Fatalf(format, args...)
}

// run performs steps in the tab; an error fails the test.
func (b *tab) run(steps ...chromedp.Action[chromedp.Void]) {
	b.t.Helper()
	if err := chromedp.Do(b.ctx, steps...); err != nil {
		b.fatalf("%v", err)
	}
}

// eventually polls the JavaScript expression cond until it is true; not within 30s, the test
// fails showing the page.
func (b *tab) eventually(what, cond string) {
	b.t.Helper()
	deadline := time.Now().Add(30 * time.Second)
	for {
		ok, err := chromedp.Run(b.ctx, chromedp.Evaluate[bool](cond))
		if err == nil && ok {
			return
		}
		if time.Now().After(deadline) {
			html, _ := chromedp.Run(b.ctx, chromedp.Evaluate[string](`document.body.outerHTML`))
			b.fatalf("%s: not within 30s (last error %v); page:\n%s", what, err, html)
		}
		time.Sleep(25 * time.Millisecond)
	}
}

// screenshot writes a screenshot of the tab to the file the environment variable env names
// (relative to the module root), when it names one.
func (b *tab) screenshot(env string) {
	b.t.Helper()
	out := os.Getenv(env)
	if out == "" {
		return
	}
	shot, err := chromedp.Run(b.ctx, chromedp.CaptureScreenshot())
	if err != nil {
		b.fatalf("%v", err)
	}
	if !filepath.IsAbs(out) {
		out = filepath.Join(moduleRoot(b.t), out)
	}
	if err := os.WriteFile(out, shot, 0o644); err != nil {
		b.t.Fatal(err)
	}
	b.t.Logf("screenshot written to %s", out)
}

// startAgent runs the demo agent with cfg until the test ends, and shows what it wrote when the
// test failed.
func startAgent(t *testing.T, cfg agent.Config) {
	out := &testkit.SyncBuffer{}
	ctx, stop := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() { defer close(done); agent.New(cfg, out, out).Run(ctx) }()
	t.Cleanup(func() {
		stop()
		<-done
		if t.Failed() {
			t.Logf("agent output:\n%s", out)
		}
	})
}

// record is one distinct state of the page, pushed by the recorder (recorder.js) on every DOM
// change: the status line, and the latest assistant bubble (probe names the DOM element).
type record struct {
	Status    string `json:"status"`
	Probe     string `json:"probe"`
	Len       int    `json:"len"`
	Text      string `json:"text"`
	Streaming bool   `json:"streaming"`
	Final     bool   `json:"final"`
	Count     int    `json:"count"`
}

// recorderJS observes the page and appends each distinct state to window.__rec. Each
// assistant bubble element gets a probe name the first time it is seen: a bubble that is
// replaced rather than edited shows up as a new probe.
const recorderJS = `(() => {
  window.__rec = []; let last = '', n = 0;
  const snap = () => {
    const st = document.querySelector('#status');
    const as = document.querySelectorAll('.msg.assistant');
    const a = as.length ? as[as.length - 1] : null;
    if (a && !a.__probe) a.__probe = 'p' + (++n);
    const text = a ? a.querySelector('.text').textContent : '';
    const r = { status: st && !st.hidden ? st.textContent : '', probe: a ? a.__probe : '', len: text.length, text,
      streaming: !!(a && a.classList.contains('streaming')), final: !!(a && a.classList.contains('final')), count: as.length };
    const k = JSON.stringify(r);
    if (k !== last) { last = k; window.__rec.push(r); }
  };
  new MutationObserver(snap).observe(document.body, { subtree: true, childList: true, characterData: true, attributes: true });
  snap();
  return true;
})()`

func TestDemoInBrowser(t *testing.T) {
	browser := newBrowser(t, 960, 900)
	n, err := testkit.StartNode(testkit.NodeOptions{DataDir: t.TempDir()})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = n.Stop() })

	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	path, _, err := demo.Open(ctx, n.Addr, n.Token, demo.Channel, "ximd demo")
	if err != nil {
		t.Fatal(err)
	}
	// The demo agent, with pauses long enough that every stage is visible to the recorder.
	cfg := demo.AgentConfig(n.Addr, n.Token)
	cfg.Think, cfg.Delay = 600*time.Millisecond, 120*time.Millisecond
	startAgent(t, cfg)

	b := newTab(t, browser, "")
	run, eventually, bctx := b.run, b.eventually, b.ctx
	const live = `document.querySelector('#conn').classList.contains('live')`

	page := "http://" + n.Addr + path
	run(onEveryDocument(watchCSP), chromedp.Navigate(page))
	eventually("page connected", live)
	if _, err := chromedp.Run(bctx, chromedp.Evaluate[bool](recorderJS)); err != nil {
		t.Fatal(err)
	}

	// 1. A message: the status line, the bubble growing in place, the final.
	run(chromedp.SendKeys(chromedp.ID("input"), "hello browser"), chromedp.Click(chromedp.ID("send")))
	eventually("user message shown as sent", `[...document.querySelectorAll('.msg.user')].some(e => e.dataset.id && e.textContent.includes('hello browser'))`)
	eventually("assistant final shown", `[...document.querySelectorAll('.msg.assistant.final')].length === 1`)
	eventually("status cleared", `document.querySelector('#status').hidden`)
	recs, err := chromedp.Run(bctx, chromedp.Evaluate[[]record](`window.__rec`))
	if err != nil {
		t.Fatal(err)
	}
	answer := strings.ReplaceAll(demo.Reply, "{text}", "hello browser")
	checkStream(t, recs, answer)
	want := pageText(answer)
	// The answer is Markdown, rendered (edge-api §7.3): its list, bold, code spans and table.
	eventually("the answer rendered", `(() => {
	  const t = document.querySelector('.msg.assistant.final .text');
	  return t.querySelectorAll(':scope > ul > li').length === 3 && !!t.querySelector('strong') &&
	    t.querySelectorAll('code').length >= 3 && t.querySelectorAll('table tr').length === 3 &&
	    t.querySelector('th').textContent === 'hop' && !t.textContent.includes('**') && !t.textContent.includes('|---');
	})()`)
	eventually("the person's message stays text", `document.querySelector('.msg.user .text').children.length === 0`)

	// 2. History survives a reload: the same two bubbles, once each, final.
	run(chromedp.Reload())
	eventually("page connected after reload", live)
	eventually("history replayed", fmt.Sprintf(`(() => {
	  const u = [...document.querySelectorAll('.msg.user')], a = [...document.querySelectorAll('.msg.assistant')];
	  return u.length === 1 && u[0].querySelector('.text').textContent === 'hello browser' &&
	    a.length === 1 && a[0].classList.contains('final') && a[0].querySelector('.text').textContent === %q;
	})()`, want))

	// 3. A file both ways: uploaded from the page, echoed back by the agent, shown as an image.
	img := filepath.Join(t.TempDir(), "chart.png")
	if err := os.WriteFile(img, pngBytes(t), 0o600); err != nil {
		t.Fatal(err)
	}
	run(chromedp.SetUploadFiles(chromedp.ID("file"), []string{img}))
	eventually("file chip shown", `document.querySelector('#chips').textContent.includes('chart.png')`)
	run(chromedp.SendKeys(chromedp.ID("input"), "here is a picture"), chromedp.Click(chromedp.ID("send")))
	eventually("user image shown from ximd", `[...document.querySelectorAll('.msg.user[data-id] .files img')].some(i => i.complete && i.naturalWidth === 200)`)
	eventually("assistant echoed the image", `(() => {
	  const a = [...document.querySelectorAll('.msg.assistant.final')];
	  if (a.length !== 2) return false;
	  const i = a[1].querySelector('.files img');
	  return !!i && i.alt === 'chart.png' && i.complete && i.naturalWidth === 200 &&
	    a[1].querySelector('.text').textContent.includes('Files received and sent back: chart.png');
	})()`)

	// 4. im.reply_message (edge-api §8, webchat reply "native"): the reply shows the start of the
	// message it answers, quoted above its text.
	firstID, err := chromedp.Run(bctx, chromedp.Evaluate[string](`document.querySelector('.msg.assistant.final').dataset.id`))
	if err != nil || firstID == "" {
		t.Fatalf("the first answer's id: %q %v", firstID, err)
	}
	xa, err := xagent.Dial(ctx, n.Addr, n.Token)
	if err != nil {
		t.Fatal(err)
	}
	defer xa.Close()
	pid, err := xa.Invoke(ctx, demo.Channel, "inv_browser_reply", profile.ToolReplyMessage, map[string]any{"reply_to_target_message_id": firstID, "text": "a reply to the first answer"})
	if err != nil {
		t.Fatal(err)
	}
	if env, err := xa.Reply(pid, 10*time.Second); err != nil || env.Type != profile.TypeToolResult {
		t.Fatalf("tool.result: %+v %v", env, err)
	}
	eventually("the reply quotes the first answer", `(() => {
	  const a = [...document.querySelectorAll('.msg.assistant.final')].find(e => e.querySelector('.text').textContent === 'a reply to the first answer');
	  const q = a && a.querySelector('.quote');
	  return !!q && q.textContent.startsWith('↩ ') && q.textContent.length > 10;
	})()`)

	b.screenshot("XIMD_SCREENSHOT")

	if v, err := chromedp.Run(bctx, chromedp.Evaluate[[]string](`window.__csp`)); err != nil || len(v) > 0 {
		t.Fatalf("Content-Security-Policy violations on the page: %v %v", v, err)
	}

	// 5. ximd unreachable: the page says so, and a message waits as "not sent yet".
	if err := n.Stop(); err != nil {
		t.Fatal(err)
	}
	eventually("connection loss shown", `(() => {
	  const b = document.querySelector('#banner'), c = document.querySelector('#conn');
	  return !b.hidden && b.textContent.includes('ximd') && !c.classList.contains('live');
	})()`)
	run(chromedp.SendKeys(chromedp.ID("input"), "anyone there?"), chromedp.Click(chromedp.ID("send")))
	eventually("unsent message marked", `[...document.querySelectorAll('.msg.user.pending')].some(e =>
	  e.textContent.includes('anyone there?') && e.querySelector('.note').textContent.includes('ximd unreachable'))`)
}

// checkStream checks the recorded states of the first answer (its Markdown): the status line
// showed thinking, then the tool, then cleared; the assistant bubble was one DOM element that
// showed, while streaming, the rendering of at least two ever longer parts of the answer (each
// a word-boundary prefix, as the agent streams it), and whose final rendering replaced the
// stream.
func checkStream(t *testing.T, recs []record, answer string) {
	t.Helper()
	states := pageStates(answer)
	want := states[len(states)-1]
	var statuses []string
	for _, r := range recs {
		if len(statuses) == 0 || statuses[len(statuses)-1] != r.Status {
			statuses = append(statuses, r.Status)
		}
	}
	seq := strings.Join(statuses, " | ")
	if !strings.Contains(seq, "thinking… | using web_search… | ") {
		t.Errorf("status line went %q; want thinking…, then using web_search…, then cleared", seq)
	}
	if statuses[len(statuses)-1] != "" {
		t.Errorf("status line ends as %q, want cleared", statuses[len(statuses)-1])
	}
	probe := ""
	at := 0     // the index in states of the last streamed state shown
	shown := "" // its text
	var lengths []int
	var final *record
	for i, r := range recs {
		if r.Count == 0 {
			continue
		}
		if probe == "" {
			probe = r.Probe
		}
		if r.Probe != probe {
			t.Fatalf("the assistant bubble was replaced (element %s, then %s): not edited in place", probe, r.Probe)
		}
		if r.Streaming && r.Text != shown {
			shown = r.Text
			// The page shows the rendering of a part of the answer, and of no shorter part than
			// it showed before (a Markdown rendering may grow shorter as a construct completes).
			k := slices.Index(states[at:], r.Text)
			if k < 0 {
				t.Errorf("streamed text %q is not the rendering of a part of the answer at or after the last one shown", r.Text)
			} else {
				at += k
			}
			lengths = append(lengths, r.Len)
		}
		if r.Final {
			final = &recs[i]
		}
	}
	if len(lengths) < 2 {
		t.Errorf("streamed lengths %v: want the bubble seen growing through at least 2 lengths", lengths)
	}
	if final == nil || final.Text != want || final.Streaming {
		t.Fatalf("final state %+v, want text %q, not streaming", final, want)
	}
	t.Logf("status line: %s; streamed lengths %v then final %d", seq, lengths, final.Len)
}

// pngBytes is a 200x120 PNG: a gradient with a bar chart.
func pngBytes(t *testing.T) []byte {
	t.Helper()
	m := image.NewRGBA(image.Rect(0, 0, 200, 120))
	for x := range 200 {
		for y := range 120 {
			c := color.RGBA{R: uint8(30 + x/3), G: uint8(60 + y/2), B: 200, A: 255}
			if bar := x / 40; x%40 >= 8 && x%40 < 32 && y > 100-(bar+1)*16 {
				c = color.RGBA{R: 250, G: 250, B: 255, A: 255}
			}
			m.Set(x, y, c)
		}
	}
	var b bytes.Buffer
	if err := png.Encode(&b, m); err != nil {
		t.Fatal(err)
	}
	return b.Bytes()
}

func moduleRoot(t *testing.T) string {
	t.Helper()
	dir, err := os.Getwd()
	if err != nil {
		t.Fatal(err)
	}
	for {
		if _, err := os.Stat(filepath.Join(dir, "go.mod")); err == nil {
			return dir
		}
		parent := filepath.Dir(dir)
		if parent == dir {
			t.Fatal("go.mod not found above the test's directory")
		}
		dir = parent
	}
}
