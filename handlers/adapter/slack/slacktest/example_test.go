package slacktest_test

import (
	"fmt"

	"github.com/slack-go/slack"

	"github.com/ximd/ximd/handlers/adapter/slack/slacktest"
)

// A bot answers a person in a DM; the test reads what the person sees.
func Example() {
	s := slacktest.New()
	defer s.Close()
	bot := s.AddBot("ximd")
	ann := s.AddUser("Ann")
	dm := s.AddChannel("im", "", ann)
	ask, _ := s.Post(dm, ann, "hello?", "")

	api := slack.New(bot.Token, slack.OptionAPIURL(s.URL()))
	_, ts, err := api.StartStream(dm, slack.MsgOptionTS(ask), slack.MsgOptionMarkdownText("Hi"))
	if err != nil {
		fmt.Println(err)
		return
	}
	_, _, _ = api.AppendStream(dm, ts, slack.MsgOptionMarkdownText(", Ann"))
	_, _, _ = api.StopStream(dm, ts)

	for _, m := range s.Messages(dm) {
		fmt.Printf("%s bot=%t streaming=%t\n", m.Text, m.BotID != "", m.Streaming)
	}
	// Output:
	// hello? bot=false streaming=false
	// Hi, Ann bot=true streaming=false
}
