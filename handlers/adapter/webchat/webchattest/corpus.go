package webchattest

// Hostile is an agent text that tries to bring markup, script or a dangerous link to the page.
type Hostile struct {
	Name string
	// Markdown is the agent's text.
	Markdown string
	// Shows is a piece of Markdown's markup the page must show as text ("" when the attempt
	// simply vanishes into text, as a refused link keeps only its label).
	Shows string
}

// XSS is the corpus every path to the page is tested with: raw HTML (inline and blocks), event
// handlers, script and style, SVG, links with javascript:, data:, vbscript: and disguised
// schemes, attribute break-outs through titles, code languages and autolinks, and Markdown cut
// off mid-construct as a streamed part is.
var XSS = []Hostile{
	{Name: "img onerror", Markdown: `Look: <img src=x onerror=alert(1)> done`, Shows: `<img src=x onerror=alert(1)>`},
	{Name: "script inline", Markdown: `a <script>alert(1)</script> b`, Shows: `<script>alert(1)</script>`},
	{Name: "script block", Markdown: "<script>\nalert(document.cookie)\n</script>", Shows: `<script>`},
	{Name: "svg onload", Markdown: `<svg onload=alert(1)><circle r=9></svg>`, Shows: `<svg onload=alert(1)>`},
	{Name: "style block", Markdown: "<style>body { display: none }</style>\n\ntext", Shows: `<style>`},
	{Name: "style attribute", Markdown: `<div style="position:fixed;inset:0">covered</div>`, Shows: `<div style=`},
	{Name: "iframe srcdoc", Markdown: `<iframe srcdoc="<script>alert(1)</script>"></iframe>`, Shows: `<iframe`},
	{Name: "details ontoggle", Markdown: `<details open ontoggle=alert(1)>x</details>`, Shows: `<details`},
	{Name: "html anchor javascript", Markdown: `<a href="javascript:alert(1)">click</a>`, Shows: `<a href="javascript:alert(1)">`},
	{Name: "markdown javascript link", Markdown: `[click](javascript:alert(1))`},
	{Name: "markdown javascript link upper case", Markdown: `[click](JaVaScRiPt:alert(1))`},
	{Name: "markdown javascript link entity", Markdown: `[click](java&#x09;script:alert(1))`},
	{Name: "markdown javascript link escaped colon", Markdown: `[click](javascript&#58;alert(1))`},
	{Name: "markdown data link", Markdown: `[open](data:text/html;base64,PHNjcmlwdD5hbGVydCgxKTwvc2NyaXB0Pg==)`},
	{Name: "markdown data image", Markdown: `![chart](data:image/svg+xml,<svg onload=alert(1)>)`},
	{Name: "markdown vbscript link", Markdown: `[x](vbscript:msgbox(1))`},
	{Name: "markdown file link", Markdown: `[x](file:///etc/passwd)`},
	{Name: "protocol-relative link", Markdown: `[x](//evil.example/steal)`},
	{Name: "autolink javascript", Markdown: `<javascript:alert(1)>`, Shows: `javascript:alert(1)`},
	{Name: "image tracker", Markdown: `![pixel](https://tracker.example/p.gif)`},
	{Name: "link title break-out", Markdown: `[t](https://e.example "x\" onmouseover=\"alert(1)")`},
	{Name: "link destination quote", Markdown: `[t](<https://e.example/"onmouseover="alert(1)>)`},
	{Name: "linkify quote", Markdown: `see www.example.com/"onmouseover=alert(1)// now`},
	{Name: "reference link javascript", Markdown: "[x][r]\n\n[r]: javascript:alert(1)"},
	{Name: "code language break-out", Markdown: "```\"><script>alert(1)</script>\nbody\n```"},
	{Name: "code body", Markdown: "```html\n</code></pre><script>alert(1)</script>\n```", Shows: `</code></pre><script>alert(1)</script>`},
	{Name: "code span", Markdown: "`<img src=x onerror=alert(1)>`", Shows: `<img src=x onerror=alert(1)>`},
	{Name: "table cell html", Markdown: "| a | b |\n|---|---|\n| <img src=x onerror=alert(1)> | <b onclick=alert(1)>x</b> |", Shows: `<img src=x onerror=alert(1)>`},
	{Name: "entities stay text", Markdown: `&lt;script&gt;alert(1)&lt;/script&gt;`, Shows: `alert(1)`},
	{Name: "comment", Markdown: `<!-- <script>alert(1)</script> -->`, Shows: `<!--`},
	{Name: "cdata", Markdown: `<![CDATA[<script>alert(1)</script>]]>`, Shows: `<![CDATA[`},
	{Name: "processing instruction", Markdown: `<?php echo 1; ?>`, Shows: `<?php`},
	{Name: "open fence streamed", Markdown: "```js\n<script>alert(1)"},
	{Name: "half tag streamed", Markdown: `text <img src=x onerror=alert(`},
	{Name: "half link streamed", Markdown: `see [the docs](javascript:alert(1`},
	{Name: "nul and control characters", Markdown: "a\x00b <scr\x00ipt>alert(1)</script> \x1b[31m"},
}
