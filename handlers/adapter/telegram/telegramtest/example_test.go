package telegramtest_test

import (
	"encoding/json"
	"fmt"
	"net/http"
	"net/url"
	"strconv"

	"github.com/ximd/ximd/handlers/adapter/telegram/telegramtest"
)

// A test builds a bot, a person and a chat, plays the person, and reads back what the bot sent.
func Example() {
	s := telegramtest.New()
	defer s.Close()
	b := s.AddBot("123456:secret", "ximd_bot")
	ann := s.AddUser("Ann")
	chat := s.AddChat("private", "", ann.ID)
	s.Post(chat, ann, "hello")

	// The adapter would do this with api_url s.URL() and token b.Token.
	resp, err := http.PostForm(s.URL()+"/bot"+b.Token+"/getUpdates", url.Values{"timeout": {"1"}})
	if err != nil {
		fmt.Println(err)
		return
	}
	var got struct {
		Result []struct {
			Message struct {
				Text string `json:"text"`
			} `json:"message"`
		} `json:"result"`
	}
	err = json.NewDecoder(resp.Body).Decode(&got)
	resp.Body.Close()
	if err != nil {
		fmt.Println(err)
		return
	}
	fmt.Println("update:", got.Result[0].Message.Text)

	resp, err = http.PostForm(s.URL()+"/bot"+b.Token+"/sendMessage",
		url.Values{"chat_id": {strconv.FormatInt(chat, 10)}, "text": {"  hi Ann  "}})
	if err != nil {
		fmt.Println(err)
		return
	}
	resp.Body.Close()
	for _, m := range s.Messages(chat) {
		fmt.Printf("bot %d: %q\n", m.From, m.Text)
	}
	// Output:
	// update: hello
	// bot 123456: "hi Ann"
}
