package dingtalk

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"strings"
	"sync"
	"time"

	"github.com/coder/websocket"

	"github.com/ximd/ximd/handlers/adapter"
	"github.com/ximd/ximd/profile"
)

// BotTopic is the Stream mode topic of robot messages.
const BotTopic = "/v1.0/im/bot/messages/get"

var _ adapter.Poller = (*Adapter)(nil)

// MessageIDOf is the message_id of the user message of a robot message: its msgId, so a message
// DingTalk pushes again (a new messageId, the same msgId) is one message.
func MessageIDOf(msgID string) string { return "dt_" + digest(msgID) }

// frame is a Stream mode frame from DingTalk.
type frame struct {
	SpecVersion string `json:"specVersion"`
	Type        string `json:"type"`
	Headers     struct {
		Topic       string `json:"topic"`
		MessageID   string `json:"messageId"`
		ContentType string `json:"contentType"`
		Time        string `json:"time"`
	} `json:"headers"`
	Data string `json:"data"`
}

// ack is the client's answer to a frame.
type ack struct {
	Code    int               `json:"code"`
	Headers map[string]string `json:"headers"`
	Message string            `json:"message"`
	Data    string            `json:"data"`
}

// botMessage is a robot message callback's data.
type botMessage struct {
	MsgID            string `json:"msgId"`
	MsgType          string `json:"msgtype"`
	CreateAt         int64  `json:"createAt"`
	ConversationType string `json:"conversationType"`
	ConversationID   string `json:"conversationId"`
	ConversationName string `json:"conversationTitle"`
	SenderID         string `json:"senderId"`
	SenderStaffID    string `json:"senderStaffId"`
	SenderNick       string `json:"senderNick"`
	ChatbotUserID    string `json:"chatbotUserId"`
	RobotCode        string `json:"robotCode"`
	IsInAtList       bool   `json:"isInAtList"`
	Text             struct {
		Content string `json:"content"`
	} `json:"text"`
	Content struct {
		DownloadCode string `json:"downloadCode"`
		FileName     string `json:"fileName"`
		Recognition  string `json:"recognition"`
		RichText     []struct {
			Text         string `json:"text"`
			Type         string `json:"type"`
			DownloadCode string `json:"downloadCode"`
		} `json:"richText"`
	} `json:"content"`
}

// PollKey implements adapter.Poller: the channels and bots of one app with inbound "stream"
// share the app's Stream connection; "" for inbound "http".
func (a *Adapter) PollKey(ch adapter.Channel) string {
	return a.PollKeyOf(ch, func(c *config) bool { return c.inbound == InboundStream }, (*config).appKey)
}

// Poll implements adapter.Poller: one Stream mode connection for the app (a ticket from
// gateway/connections/open, then a WebSocket to its endpoint), for its channels and its bots.
// A robot message frame is acknowledged once what it carries is durable (or refused); a failure
// leaves it unacknowledged and ends the connection. ping is echoed; disconnect opens a new
// connection with a new ticket. No cursor: DingTalk keeps the position.
func (a *Adapter) Poll(ctx context.Context, feed adapter.Feed) error {
	chans, bots := feed.Channels(), feed.Bots()
	c, err := a.pollAccount(chans, bots)
	if c == nil {
		return err
	}
	for {
		again, err := a.connection(ctx, c, chans, bots, feed)
		if ctx.Err() != nil {
			return ctx.Err()
		}
		if !again {
			return err
		}
	}
}

// pollAccount is the app a poll loop connects as: the config of its first channel, else of its
// first bot; nil when it has neither.
func (a *Adapter) pollAccount(chans []adapter.Channel, bots []adapter.Bot) (*config, error) {
	if len(chans) > 0 {
		return parseConfig(chans[0].Target.Config)
	}
	if len(bots) > 0 {
		return a.botConfig(bots[0])
	}
	return nil, nil
}

// connection runs one Stream connection until it ends; again is true after DingTalk's
// disconnect (a new one is opened at once).
func (a *Adapter) connection(ctx context.Context, c *config, chans []adapter.Channel, bots []adapter.Bot, in adapter.Inboxes) (again bool, err error) {
	cli := a.client(c)
	var open struct {
		Endpoint string `json:"endpoint"`
		Ticket   string `json:"ticket"`
	}
	body := map[string]any{"clientId": c.clientID, "clientSecret": c.clientSecret, "ua": "ximd",
		"subscriptions": []map[string]string{{"type": "CALLBACK", "topic": BotTopic}}}
	if err := cli.raw(ctx, http.MethodPost, c.apiURL+"/v1.0/gateway/connections/open", "", body, &open); err != nil {
		return false, mapError(err, "gateway/connections/open")
	}
	u, err := url.Parse(open.Endpoint)
	if err != nil || open.Ticket == "" {
		return false, profile.Errorf(profile.CodeTargetUnavailable, "dingtalk stream: no endpoint or ticket")
	}
	q := u.Query()
	q.Set("ticket", open.Ticket)
	u.RawQuery = q.Encode()
	conn, _, err := websocket.Dial(ctx, u.String(), &websocket.DialOptions{HTTPClient: wsClient(a.HTTPClient)})
	if err != nil {
		return false, profile.Errorf(profile.CodeTargetUnavailable, "dingtalk stream: %v", describe(err))
	}
	defer conn.CloseNow()
	conn.SetReadLimit(4 << 20)
	var wmu sync.Mutex
	write := func(v ack) error {
		b, _ := json.Marshal(v)
		wmu.Lock()
		defer wmu.Unlock()
		wctx, cancel := context.WithTimeout(ctx, 10*time.Second)
		defer cancel()
		return conn.Write(wctx, websocket.MessageText, b)
	}
	same := func(cc *config) bool { return cc.appKey() == c.appKey() }
	for {
		_, data, err := conn.Read(ctx)
		if err != nil {
			if ctx.Err() != nil {
				return false, ctx.Err()
			}
			return false, profile.Errorf(profile.CodeTargetUnavailable, "dingtalk stream: %v", describe(err))
		}
		var f frame
		if err := json.Unmarshal(data, &f); err != nil {
			continue
		}
		reply := ack{Code: 200, Message: "OK", Headers: map[string]string{"messageId": f.Headers.MessageID, "contentType": "application/json"}}
		switch {
		case f.Type == "SYSTEM" && f.Headers.Topic == "ping":
			reply.Data = f.Data
		case f.Type == "SYSTEM" && f.Headers.Topic == "disconnect":
			conn.Close(websocket.StatusNormalClosure, "disconnect")
			return true, nil
		case f.Type == "SYSTEM":
			continue
		case f.Type == "CALLBACK" && f.Headers.Topic == BotTopic:
			var m botMessage
			if err := json.Unmarshal([]byte(f.Data), &m); err == nil {
				if _, err := a.dispatch(ctx, m, chans, bots, in, same); err != nil {
					a.Logger.Warn("dingtalk_message_failed", "err", err)
					return false, err // unacknowledged: the connection ends
				}
			}
			reply.Data = `{"response":null}`
		case f.Type == "EVENT":
			reply.Data = `{"status":"SUCCESS","message":"success"}`
		default:
			reply.Code, reply.Message, reply.Data = 404, "not subscribed", "{}"
		}
		if err := write(reply); err != nil {
			return false, profile.Errorf(profile.CodeTargetUnavailable, "dingtalk stream ack: %v", describe(err))
		}
	}
}

// wsClient is hc without its overall timeout, which would end a long-lived WebSocket.
func wsClient(hc *http.Client) *http.Client {
	c := *hc
	c.Timeout = 0
	return &c
}

// dispatch passes a robot message on: to the channels PUT among chans that bind its
// conversation (a group's conversationId, or the sender's staff id one-to-one) and whose app
// same accepts; when none binds it, to bots of the same app. The robot's own messages and
// messages older than a channel's binding are not passed.
func (a *Adapter) dispatch(ctx context.Context, m botMessage, chans []adapter.Channel, bots []adapter.Bot, in adapter.Inboxes, same func(*config) bool) (adapter.Received, error) {
	if m.MsgID == "" || (m.ChatbotUserID != "" && m.SenderID == m.ChatbotUserID) {
		return adapter.Ignored, nil
	}
	outcome, bound := adapter.Ignored, false
	for _, ch := range chans {
		c, err := parseConfig(ch.Target.Config)
		if err != nil || !same(c) || !binds(c, m) {
			continue
		}
		bound = true
		if ch.Predates(m.CreateAt) {
			continue
		}
		if outcome, err = a.receive(ctx, c, m, ch.ID, in.Inbox(ch.ID)); err != nil {
			return "", err
		}
	}
	if bound || len(bots) == 0 {
		return outcome, nil
	}
	return a.toBots(ctx, m, bots, in, same)
}

// binds reports whether channel config c binds the conversation of m.
func binds(c *config, m botMessage) bool {
	if m.ConversationType == "2" {
		return c.group() && c.conversationID == m.ConversationID
	}
	return !c.group() && c.userID == m.SenderStaffID
}

// receive submits the user message of one robot message.
func (a *Adapter) receive(ctx context.Context, c *config, m botMessage, channel string, in adapter.Inbox) (adapter.Received, error) {
	msgID := MessageIDOf(m.MsgID)
	if seen, err := in.Seen(ctx, msgID); err != nil || seen {
		return adapter.Duplicate, err
	}
	um := profile.Message{MessageID: msgID, Text: strings.TrimSpace(m.Text.Content), CreatedAt: m.CreateAt}
	if um.CreatedAt == 0 {
		um.CreatedAt = time.Now().UnixMilli()
	}
	type file struct{ code, name string }
	var files []file
	switch m.MsgType {
	case "picture":
		files = append(files, file{m.Content.DownloadCode, "picture.jpg"})
	case "file", "video", "audio":
		name := m.Content.FileName
		if name == "" {
			name = m.MsgType
		}
		files = append(files, file{m.Content.DownloadCode, name})
		if m.MsgType == "audio" && m.Content.Recognition != "" {
			um.Text = m.Content.Recognition
		}
	case "richText":
		var parts []string
		for i, r := range m.Content.RichText {
			if r.Type == "picture" && r.DownloadCode != "" {
				files = append(files, file{r.DownloadCode, fmt.Sprintf("picture-%d.jpg", i+1)})
			} else if r.Text != "" {
				parts = append(parts, r.Text)
			}
		}
		um.Text = strings.TrimSpace(strings.Join(parts, "\n"))
	}
	for _, f := range files {
		if f.code == "" {
			continue
		}
		if err := adapter.FileOrNote(ctx, in, &um, f.name, func() (profile.File, error) {
			return a.fetch(ctx, c, f.code, f.name, in)
		}); err != nil {
			return "", err
		}
	}
	return adapter.Submit(ctx, in, um, a.Logger, "dingtalk_message_refused", channel)
}

// fetch copies a file of a message into the Transfer Plane: its downloadCode gives a temporary
// downloadUrl (robot/messageFiles/download), which is read.
func (a *Adapter) fetch(ctx context.Context, c *config, code, name string, in adapter.Inbox) (profile.File, error) {
	var out struct {
		DownloadURL string `json:"downloadUrl"`
	}
	if err := a.client(c).call(ctx, http.MethodPost, "/v1.0/robot/messageFiles/download", map[string]string{"downloadCode": code, "robotCode": c.robotCode}, &out); err != nil {
		if pe := profile.AsError(err); pe.Code == profile.CodeTargetDeliveryFailed {
			return profile.File{}, profile.Errorf(profile.CodeFileDownloadFailed, "%s", pe.Message)
		}
		return profile.File{}, err
	}
	if !strings.HasPrefix(out.DownloadURL, "https://") && !strings.HasPrefix(out.DownloadURL, "http://") {
		return profile.File{}, profile.Errorf(profile.CodeFileDownloadFailed, "dingtalk file download: no URL")
	}
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, out.DownloadURL, nil)
	if err != nil {
		return profile.File{}, profile.Errorf(profile.CodeFileDownloadFailed, "not a file URL")
	}
	resp, err := a.HTTPClient.Do(req)
	if err != nil {
		return profile.File{}, profile.Errorf(profile.CodeTargetUnavailable, "dingtalk file download: %v", describe(err))
	}
	defer resp.Body.Close()
	switch {
	case resp.StatusCode >= 500:
		return profile.File{}, profile.Errorf(profile.CodeTargetUnavailable, "dingtalk file download: status %d", resp.StatusCode)
	case resp.StatusCode != http.StatusOK:
		return profile.File{}, profile.Errorf(profile.CodeFileDownloadFailed, "dingtalk file download: status %d", resp.StatusCode)
	}
	mime := resp.Header.Get("Content-Type")
	if mime == "" {
		mime = "application/octet-stream"
	}
	typ := "file"
	switch {
	case strings.HasPrefix(mime, "image/"):
		typ = "image"
	case strings.HasPrefix(mime, "video/"):
		typ = "video"
	case strings.HasPrefix(mime, "audio/"):
		typ = "audio"
	}
	return in.PutFile(ctx, adapter.StoredFile{Type: typ, Filename: name, MimeType: mime}, io.LimitReader(resp.Body, 1<<40))
}
