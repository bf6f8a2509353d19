package markdown_test

import (
	"fmt"

	"github.com/ximd/ximd/handlers/adapter/markdown"
)

// One parse of the agent's Markdown, rendered in each platform's form.
func Example() {
	d := markdown.Parse("**Done**: see `ximd.yaml` and [the docs](https://example.com).\n\n<b>raw</b> stays text.")
	fmt.Println(d.HTML(markdown.Telegram))
	fmt.Println("--")
	fmt.Println(d.Plain())
	fmt.Println("--")
	fmt.Println(d.Slack())
	fmt.Println("--")
	fmt.Println(d.Feishu(4))
	fmt.Println("--")
	fmt.Printf("%q\n", markdown.Split("para one\n\npara two", 10, nil))
	// Output:
	// <b>Done</b>: see <code>ximd.yaml</code> and <a href="https://example.com">the docs</a>.
	//
	// &lt;b&gt;raw&lt;/b&gt; stays text.
	// --
	// Done: see ximd.yaml and the docs (https://example.com).
	//
	// <b>raw</b> stays text.
	// --
	// **Done**: see `ximd.yaml` and [the docs](https://example.com).
	//
	// &lt;b&gt;raw&lt;/b&gt; stays text.
	// --
	// **Done**: see `ximd.yaml` and [the docs](https://example.com).
	//
	// &#60;b&#62;raw&#60;/b&#62; stays text.
	// --
	// ["para one" "para two"]
}
