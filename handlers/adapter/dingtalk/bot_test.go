package dingtalk_test

import (
	"encoding/json"
	"testing"

	"github.com/ximd/ximd/handlers/adapter"
	"github.com/ximd/ximd/handlers/adapter/adaptertest"
	"github.com/ximd/ximd/handlers/adapter/dingtalk"
	"github.com/ximd/ximd/handlers/adapter/dingtalk/dingtalktest"
)

// The universal suite's bot cases (edge-api §4.1) against the DingTalk fake, messages in by
// Stream mode: a bot's config is the app's credentials without conversation_id or user_id; each
// case gets a fake of its own. DingTalk pushes a group's robot only @-mentions; the fake pushes
// the rest too (SetAllGroupMessages), so that the adapter's own gating is what is tested.
func TestDingTalk_BotSuite(t *testing.T) {
	files := adaptertest.NewFiles()
	adaptertest.RunBots(t, adaptertest.Setup{Adapter: dingtalk.New(dingtalk.Options{Common: adapter.Common{Files: files}}), Files: files},
		func(t *testing.T) adaptertest.BotSetup {
			fake := dingtalktest.New()
			t.Cleanup(fake.Close)
			fake.SetAllGroupMessages(true)
			return botSetup(t, fake, fake.AddApp())
		})
}

func botSetup(t *testing.T, fake *dingtalktest.Server, app dingtalktest.App) adaptertest.BotSetup {
	raw, err := json.Marshal(map[string]any{"client_id": app.ClientID, "client_secret": app.ClientSecret, "api_url": fake.URL(), "oapi_url": fake.URL()})
	if err != nil {
		t.Fatal(err)
	}
	return adaptertest.BotSetup{
		Config: raw,
		Direct: func(t *testing.T) adaptertest.BotChat {
			person := fake.AddUser("Dana")
			return adaptertest.BotChat{Kind: adapter.Direct, Author: person.StaffID,
				Post: func(t *testing.T, text string, _ bool) string { return fake.Post(app, person, "", text, false) },
				Messages: func(t *testing.T) []adaptertest.Seen {
					return seen(fake, dingtalktest.DirectSpace(person.StaffID))
				}}
		},
		Group: func(t *testing.T) adaptertest.BotChat {
			person, cid := fake.AddUser("Gil"), fake.AddGroup()
			return adaptertest.BotChat{Kind: adapter.Group, Author: person.StaffID,
				Post: func(t *testing.T, text string, mention bool) string {
					return fake.Post(app, person, cid, text, mention)
				},
				Messages: func(t *testing.T) []adaptertest.Seen { return seen(fake, dingtalktest.GroupSpace(cid)) }}
		},
	}
}

// A group's key is h_… of its conversationId (DingTalk's ids hold '=' and '+'); a direct
// conversation's is the staff id.
func TestDingTalk_ConversationKeys(t *testing.T) {
	g := adapter.Conversation{Kind: adapter.Group, ID: "cidAbC+dEf/gh=="}
	if k := g.Key(); len(k) != 28 || k[:2] != "h_" {
		t.Fatalf("group key %q", k)
	}
	d := adapter.Conversation{Kind: adapter.Direct, ID: "manager4321"}
	if d.Key() != "manager4321" {
		t.Fatalf("direct key %q", d.Key())
	}
	a := dingtalk.New(dingtalk.Options{})
	raw, err := a.Bind(json.RawMessage(`{"client_id":"ding1","client_secret":"s"}`), g)
	if err != nil {
		t.Fatal(err)
	}
	var c map[string]string
	_ = json.Unmarshal(raw, &c)
	if c["conversation_id"] != g.ID || c["user_id"] != "" {
		t.Fatalf("group binding %s", raw)
	}
	raw, _ = a.Bind(json.RawMessage(`{"client_id":"ding1","client_secret":"s"}`), d)
	c = nil
	_ = json.Unmarshal(raw, &c)
	if c["user_id"] != "manager4321" || c["conversation_id"] != "" {
		t.Fatalf("direct binding %s", raw)
	}
}
