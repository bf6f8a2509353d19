package feishutest

import (
	"crypto/rand"
	"encoding/hex"
	"strconv"
	"time"
)

// The JSON objects the fake answers with, reduced to the fields it fills. Each follows the
// response body of its documentation page.

// wireOK is a success: {"code":0,"msg":"success","data":{...}}.
type wireOK struct {
	Code int    `json:"code"`
	Msg  string `json:"msg"`
	Data any    `json:"data"`
}

// wireError is a refusal; "error.log_id" appears in the documented error examples.
type wireError struct {
	Code  int       `json:"code"`
	Msg   string    `json:"msg"`
	Error wireLogID `json:"error"`
}

type wireLogID struct {
	LogID string `json:"log_id"`
}

// wireToken is the answer of "Get custom app tenant_access_token", which has no data object.
type wireToken struct {
	Code              int    `json:"code"`
	Msg               string `json:"msg"`
	TenantAccessToken string `json:"tenant_access_token"`
	Expire            int    `json:"expire"`
}

// wireMessage is the Message of "Send message" and "Reply message".
type wireMessage struct {
	MessageID  string          `json:"message_id"`
	RootID     string          `json:"root_id,omitempty"`
	ParentID   string          `json:"parent_id,omitempty"`
	ThreadID   string          `json:"thread_id,omitempty"`
	MsgType    string          `json:"msg_type"`
	CreateTime string          `json:"create_time"`
	UpdateTime string          `json:"update_time"`
	Deleted    bool            `json:"deleted"`
	Updated    bool            `json:"updated"`
	ChatID     string          `json:"chat_id"`
	Sender     wireSender      `json:"sender"`
	Body       wireMessageBody `json:"body"`
}

type wireSender struct {
	ID         string `json:"id"`
	IDType     string `json:"id_type"`
	SenderType string `json:"sender_type"`
	TenantKey  string `json:"tenant_key"`
}

type wireMessageBody struct {
	Content string `json:"content"`
}

// wireChat is the data of "Get group information", with the fields a p2p chat omits left
// out for one.
type wireChat struct {
	Avatar                 string `json:"avatar"`
	Name                   string `json:"name,omitempty"`
	Description            string `json:"description"`
	AddMemberPermission    string `json:"add_member_permission,omitempty"`
	ShareCardPermission    string `json:"share_card_permission,omitempty"`
	AtAllPermission        string `json:"at_all_permission,omitempty"`
	EditPermission         string `json:"edit_permission"`
	ChatMode               string `json:"chat_mode"`
	ChatType               string `json:"chat_type,omitempty"`
	ChatTag                string `json:"chat_tag,omitempty"`
	GroupMessageType       string `json:"group_message_type,omitempty"`
	JoinMessageVisibility  string `json:"join_message_visibility,omitempty"`
	LeaveMessageVisibility string `json:"leave_message_visibility,omitempty"`
	MembershipApproval     string `json:"membership_approval,omitempty"`
	ModerationPermission   string `json:"moderation_permission"`
	External               bool   `json:"external"`
	TenantKey              string `json:"tenant_key"`
	UserCount              string `json:"user_count"`
	BotCount               string `json:"bot_count"`
	ChatStatus             string `json:"chat_status"`
}

// wireEvent is a schema 2.0 event ("Event overview", "Receive message").
type wireEvent struct {
	Schema string          `json:"schema"`
	Header wireEventHeader `json:"header"`
	Event  any             `json:"event"`
}

type wireEventHeader struct {
	EventID    string `json:"event_id"`
	EventType  string `json:"event_type"`
	CreateTime string `json:"create_time"`
	Token      string `json:"token"`
	AppID      string `json:"app_id"`
	TenantKey  string `json:"tenant_key"`
}

type wireReceive struct {
	Sender  wireEventSender  `json:"sender"`
	Message wireEventMessage `json:"message"`
}

type wireEventSender struct {
	SenderID   wireUserID `json:"sender_id"`
	SenderType string     `json:"sender_type"`
	TenantKey  string     `json:"tenant_key"`
}

type wireUserID struct {
	UnionID string `json:"union_id"`
	UserID  string `json:"user_id"`
	OpenID  string `json:"open_id"`
}

type wireEventMessage struct {
	MessageID   string `json:"message_id"`
	RootID      string `json:"root_id,omitempty"`
	ParentID    string `json:"parent_id,omitempty"`
	CreateTime  string `json:"create_time"`
	UpdateTime  string `json:"update_time"`
	ChatID      string `json:"chat_id"`
	ThreadID    string `json:"thread_id,omitempty"`
	ChatType    string `json:"chat_type"`
	MessageType string `json:"message_type"`
	Content     string `json:"content"`
	// Mentions are the people and bots the message mentions; its text holds each one's key
	// ("@_user_1", ...) where the mention was written ("Receive message": message.mentions).
	Mentions []wireMention `json:"mentions,omitempty"`
}

// wireMention is one entry of message.mentions ("Receive message": key, id, name, tenant_key).
type wireMention struct {
	Key       string     `json:"key"`
	ID        wireUserID `json:"id"`
	Name      string     `json:"name"`
	TenantKey string     `json:"tenant_key"`
}

// wireBotInfo is the answer of "Get bot information", which has no data object: the bot is
// under "bot".
type wireBotInfo struct {
	Code int         `json:"code"`
	Msg  string      `json:"msg"`
	Bot  wireBotData `json:"bot"`
}

type wireBotData struct {
	ActivateStatus int      `json:"activate_status"`
	AppName        string   `json:"app_name"`
	AvatarURL      string   `json:"avatar_url"`
	IPWhiteList    []string `json:"ip_white_list"`
	OpenID         string   `json:"open_id"`
}

// wireChallenge is the url_verification request ("Send events to the developer server").
type wireChallenge struct {
	Challenge string `json:"challenge"`
	Token     string `json:"token"`
	Type      string `json:"type"`
}

// millis is a timestamp in milliseconds as a decimal string, as Feishu sends them.
func millis(t time.Time) string { return strconv.FormatInt(t.UnixMilli(), 10) }

// randHex returns n random lowercase hex digits.
func randHex(n int) string {
	b := make([]byte, (n+1)/2)
	_, _ = rand.Read(b) // crypto/rand.Read never fails
	return hex.EncodeToString(b)[:n]
}

// randKey returns an id in the shape of Feishu's resource keys (a UUID with a suffix letter).
func randKey() string {
	h := randHex(32)
	return h[:8] + "-" + h[8:12] + "-" + h[12:16] + "-" + h[16:20] + "-" + h[20:] + "g"
}

// randDigits returns n random decimal digits, the first non-zero (card entity ids).
func randDigits(n int) string {
	b := make([]byte, n)
	_, _ = rand.Read(b)
	for i := range b {
		b[i] = '0' + b[i]%10
	}
	if b[0] == '0' {
		b[0] = '7'
	}
	return string(b)
}
