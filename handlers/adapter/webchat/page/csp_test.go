package page_test

import (
	"net/http"
	"net/http/httptest"
	"os"
	"strings"
	"testing"

	"golang.org/x/net/html"

	"github.com/ximd/ximd/handlers/adapter/webchat/page"
)

// The page's Content-Security-Policy is strict (edge-api §7.3: no script or style can come from
// a message): its own script and style only, nothing inline, nothing from elsewhere, and markup
// set only through the page's one Trusted Types policy.
func TestPageCSPIsStrict(t *testing.T) {
	t.Parallel()
	h := page.New(page.Config{PublicURL: "http://127.0.0.1:8080"}, nil, nil, nil, nil, nil, nil, nil, nil)
	w := httptest.NewRecorder()
	h.ServeHTTP(w, httptest.NewRequest(http.MethodGet, "/webchat/demo", nil))
	if w.Code != http.StatusOK {
		t.Fatalf("GET /webchat/demo: %d", w.Code)
	}
	csp := w.Header().Get("Content-Security-Policy")
	dirs := map[string]string{}
	for _, d := range strings.Split(csp, ";") {
		name, value, _ := strings.Cut(strings.TrimSpace(d), " ")
		dirs[name] = value
	}
	want := map[string]string{
		"default-src":               "'none'",
		"script-src":                "'self'",
		"style-src":                 "'self'",
		"img-src":                   "'self' blob:",
		"connect-src":               "'self'",
		"base-uri":                  "'none'",
		"form-action":               "'none'",
		"frame-ancestors":           "'none'",
		"require-trusted-types-for": "'script'",
		"trusted-types":             "ximd-markdown",
	}
	for name, v := range want {
		if dirs[name] != v {
			t.Errorf("CSP %s = %q, want %q (CSP %q)", name, dirs[name], v, csp)
		}
	}
	if len(dirs) != len(want) {
		t.Errorf("CSP has directives beyond the strict set: %q", csp)
	}
	for _, loose := range []string{"unsafe-inline", "unsafe-eval", "unsafe-hashes", "data:", "*"} {
		if strings.Contains(csp, loose) {
			t.Errorf("CSP admits %s: %q", loose, csp)
		}
	}

	// The page holds no inline script, no style element or attribute and no event handler
	// attribute, so the strict CSP costs it nothing.
	z := html.NewTokenizer(strings.NewReader(w.Body.String()))
	inScript := false
	for tt := z.Next(); tt != html.ErrorToken; tt = z.Next() {
		tok := z.Token()
		switch tt {
		case html.StartTagToken, html.SelfClosingTagToken:
			if tok.Data == "style" {
				t.Errorf("a <style> element: %s", tok)
			}
			inScript = tok.Data == "script"
			src := false
			for _, a := range tok.Attr {
				if a.Key == "style" || strings.HasPrefix(a.Key, "on") {
					t.Errorf("inline %s attribute: %s", a.Key, tok)
				}
				src = src || a.Key == "src"
			}
			if inScript && !src {
				t.Errorf("an inline script: %s", tok)
			}
		case html.TextToken:
			if inScript && strings.TrimSpace(tok.Data) != "" {
				t.Errorf("inline script text %q", tok.Data)
			}
		case html.EndTagToken:
			inScript = false
		}
	}
}

// The page's script sets markup in one place only (its Trusted Types policy's sink, fed with an
// assistant item's html); everything else is set as text.
func TestPageScriptSetsMarkupOnlyFromTheRenderedHTML(t *testing.T) {
	t.Parallel()
	js, err := os.ReadFile("assets/app.js")
	if err != nil {
		t.Fatal(err)
	}
	src := string(js)
	if n := strings.Count(src, ".innerHTML"); n != 1 || !strings.Contains(src, "el.innerHTML = markdownPolicy ? markdownPolicy.createHTML(html) : html;") {
		t.Errorf("app.js assigns innerHTML %d times; want once, in setRendered", n)
	}
	for _, sink := range []string{"outerHTML", "insertAdjacentHTML", "document.write", "eval(", "new Function", "setAttribute('style'", ".style."} {
		if strings.Contains(src, sink) {
			t.Errorf("app.js uses %s", sink)
		}
	}
	if !strings.Contains(src, "createPolicy('ximd-markdown'") || !strings.Contains(page.PageCSP, "trusted-types ximd-markdown") {
		t.Error("the script's Trusted Types policy and the CSP's trusted-types name differ")
	}
	if n := strings.Count(src, "setRendered("); n != 2 { // its definition and the one call, with it.html
		t.Errorf("setRendered appears %d times; want its definition and one call", n)
	}
	if !strings.Contains(src, "const html = it.html || '';") {
		t.Error("the rendered markup is not taken from the item's html")
	}
}
