package feishu

import (
	"encoding/json"
	"testing"
)

// A rich-text (post) message's mentions are "at" runs whose user_id is the mention's key
// ("Receive message content", post): the bot's is dropped, another's written as its name.
func TestPostText_MentionsAsNames(t *testing.T) {
	var ms []mention
	if err := json.Unmarshal([]byte(`[{"key":"@_user_1","id":{"open_id":"ou_bot"},"name":"ximd"},
		{"key":"@_user_2","id":{"open_id":"ou_bob"},"name":"Bob"}]`), &ms); err != nil {
		t.Fatal(err)
	}
	var post struct {
		Title   string      `json:"title"`
		Content [][]postRun `json:"content"`
	}
	if err := json.Unmarshal([]byte(`{"title":"","content":[
		[{"tag":"at","user_id":"@_user_1","user_name":"ximd"},{"tag":"text","text":" ask "},{"tag":"at","user_id":"@_user_2","user_name":"Bob"}],
		[{"tag":"text","text":"and "},{"tag":"at","user_id":"@_user_9","user_name":"Cy"}]]}`), &post); err != nil {
		t.Fatal(err)
	}
	tests := []struct {
		name, self, want string
	}{
		{name: "the bot's mention removed", self: "ou_bot", want: "ask @Bob\nand @Cy"},
		{name: "the bot unknown", self: "", want: "@ximd ask @Bob\nand @Cy"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			names := mentionNames(ms, tt.self)
			if got := postText(post.Title, post.Content, names); got != tt.want {
				t.Fatalf("postText = %q, want %q", got, tt.want)
			}
			if names.self != (tt.self != "") {
				t.Fatalf("mentioned = %v", names.self)
			}
		})
	}
}
