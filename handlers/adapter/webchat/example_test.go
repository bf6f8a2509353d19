package webchat_test

import (
	"encoding/json"
	"fmt"

	"github.com/ximd/ximd/handlers/adapter/webchat"
)

// A channel's `target.config`: the title is shown on the page; without a "secret", ximd derives
// the page secret itself (package page).
func ExampleParseConfig() {
	c, err := webchat.ParseConfig(json.RawMessage(`{"title":"Support"}`))
	fmt.Println(c.Title, c.Secret == "", err)
	_, err = webchat.ParseConfig(json.RawMessage(`{"secret":"too short"}`))
	fmt.Println(err)
	// Output:
	// Support true <nil>
	// invalid_descriptor: target.config.secret: must be 16 to 256 bytes (omit it to have ximd generate one)
}

// The ids the page and xAgent see are derived, so retries name the same message.
func ExampleUserMessageID() {
	fmt.Println(webchat.UserMessageID("c0ffee00112233445566") == webchat.UserMessageID("c0ffee00112233445566"))
	fmt.Println(webchat.AssistantItemID("demo:asst_1") == webchat.AssistantItemID("demo:asst_1"), webchat.AssistantItemID("demo:asst_1")[:1])
	// Output:
	// true
	// true a
}
