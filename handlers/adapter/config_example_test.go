package adapter_test

import (
	"encoding/json"
	"fmt"

	"github.com/ximd/ximd/handlers/adapter"
)

// An adapter's config parse: its wire struct, the kit's decoder, its field checks in order, and
// the outcome. The first refusal names the field, never its value.
func ExampleCheckConfig() {
	type wireConfig struct {
		ChatID     string `json:"chat_id"`
		Streaming  string `json:"streaming"`
		FirstWords *int   `json:"first_preview_words"`
	}
	type config struct {
		chatID     string
		streaming  adapter.Streaming
		firstWords int
	}
	parse := func(raw json.RawMessage) (*config, error) {
		w, ck := adapter.CheckConfig[wireConfig](raw)
		c := &config{}
		c.chatID = ck.ID("chat_id", w.ChatID, adapter.PathSafe, "required: the chat's id")
		c.streaming = adapter.Enum(ck, "streaming", w.Streaming, adapter.StreamingEdit, adapter.StreamingEdit, adapter.StreamingNone)
		c.firstWords = ck.Int("first_preview_words", w.FirstWords, 3, 0, 100)
		return adapter.Checked(c, ck)
	}
	c, err := parse(json.RawMessage(`{"chat_id":"c1"}`))
	fmt.Printf("%+v %v\n", *c, err)
	for _, raw := range []string{`{"chat_id":"c1","streaming":"draft"}`, `{"chat_id":"c1","colour":"red"}`, `{"chat_id":7}`, `{}`} {
		_, err := parse(json.RawMessage(raw))
		fmt.Println(err)
	}
	// Output:
	// {chatID:c1 streaming:edit firstWords:3} <nil>
	// invalid_descriptor: target.config.streaming: must be "edit" or "none"
	// invalid_descriptor: target.config.colour: unknown field
	// invalid_descriptor: target.config.chat_id: must be a string
	// invalid_descriptor: target.config.chat_id: required: the chat's id
}
