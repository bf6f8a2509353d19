package dingtalk_test

import (
	"bytes"
	"net/http"
	"net/http/httptest"
	"strconv"
	"testing"
	"time"

	"github.com/ximd/ximd/handlers/adapter"
	"github.com/ximd/ximd/handlers/adapter/adaptertest"
	"github.com/ximd/ximd/handlers/adapter/dingtalk"
)

// The HTTP callback (inbound "http"): a signed robot message comes in once; a wrong, stale or
// missing sign is refused before the body is read.
func TestDingTalk_HTTPCallback(t *testing.T) {
	files := adaptertest.NewFiles()
	a := dingtalk.New(dingtalk.Options{Common: adapter.Common{Files: files}})
	cfg := []byte(`{"client_id":"ding1","client_secret":"the-secret","user_id":"staff9","inbound":"http"}`)
	ch := adapter.Channel{ID: "cb", Target: adapter.Binding{Adapter: "dingtalk", Config: cfg}, OpenedAt: time.Now().UnixMilli()}
	feed := adaptertest.NewFeed(files, ch)
	body := []byte(`{"msgId":"msgX1","msgtype":"text","createAt":` + strconv.FormatInt(time.Now().UnixMilli(), 10) +
		`,"conversationType":"1","conversationId":"cidD","senderId":"u9","senderStaffId":"staff9","chatbotUserId":"bot","text":{"content":" hi there"}}`)
	call := func(ts, sign string) (int, error) {
		r := httptest.NewRequest(http.MethodPost, "/v1/targets/dingtalk/cb/events", bytes.NewReader(body))
		r.SetPathValue("path", "events")
		if ts != "" {
			r.Header.Set("timestamp", ts)
			r.Header.Set("sign", sign)
		}
		w := httptest.NewRecorder()
		_, err := a.Receive(w, r, ch, feed)
		return w.Code, err
	}
	now := strconv.FormatInt(time.Now().UnixMilli(), 10)
	for range 2 {
		if code, err := call(now, dingtalk.Sign("the-secret", now)); err != nil || code != 200 {
			t.Fatalf("signed callback: %d %v", code, err)
		}
	}
	if m := feed.InboxOf("cb").Messages(); len(m) != 1 || m[0].Text != "hi there" {
		t.Fatalf("messages %+v", m)
	}
	stale := strconv.FormatInt(time.Now().Add(-2*time.Hour).UnixMilli(), 10)
	for name, h := range map[string][2]string{"wrong": {now, dingtalk.Sign("other", now)}, "stale": {stale, dingtalk.Sign("the-secret", stale)}, "none": {"", ""}} {
		if _, err := call(h[0], h[1]); err == nil {
			t.Fatalf("%s sign accepted", name)
		}
	}
}
