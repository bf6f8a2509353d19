package feishutest

import (
	"encoding/json"
	"time"
)

// issueToken answers "Get custom app tenant_access_token"
// (open.feishu.cn/document/server-docs/authentication-management/access-token/tenant_access_token_internal):
// the token is valid for the TTL (2 hours). While the app's newest token has at least a
// quarter of the TTL left (30 of 120 minutes), the same token is returned with the seconds it
// has left; otherwise a new one is issued and the old one stays valid until it expires.
//
// An unknown app gets code 10003 and a wrong secret code 10014 ("Generic error codes" lists
// 10003 "invalid parameter", 10014 "app unauthorized" and 10015 "wrong app secret"; the
// messages are the ones the official Lark CLI expects from this endpoint).
func (s *Server) issueToken(q *request) (any, *apiError) {
	var in struct {
		AppID     string `json:"app_id"`
		AppSecret string `json:"app_secret"`
	}
	if err := json.Unmarshal(q.body, &in); err != nil || in.AppID == "" || in.AppSecret == "" {
		return nil, badRequest(10003, "invalid param")
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	a := s.apps[in.AppID]
	if a == nil {
		return nil, badRequest(10003, "invalid param")
	}
	if a.Secret != in.AppSecret {
		return nil, badRequest(10014, "app secret invalid")
	}
	now := s.Now()
	var newest *tokenState
	for _, t := range s.tokens {
		if t.app == a && (newest == nil || t.expires.After(newest.expires)) {
			newest = t
		}
	}
	if newest != nil && newest.expires.Sub(now) >= s.tokenTTL/4 {
		return tokenAnswer{token: newest.token, expire: int(newest.expires.Sub(now) / time.Second)}, nil
	}
	for tok, t := range s.tokens { // forget expired tokens; they answer 99991663 like unknown ones
		if !now.Before(t.expires) {
			delete(s.tokens, tok)
		}
	}
	t := &tokenState{token: "t-" + randHex(40), app: a, expires: now.Add(s.tokenTTL)}
	s.tokens[t.token] = t
	return tokenAnswer{token: t.token, expire: int(s.tokenTTL / time.Second)}, nil
}

// botInfo answers "Get bot information" (open.feishu.cn/document/ukTMukTMukTM/uAjMxEjLwITMx4CMyETM,
// GET /open-apis/bot/v3/info with a tenant_access_token, no scope needed): {"code":0,"msg":"ok",
// "bot":{activate_status, app_name, avatar_url, ip_white_list, open_id}} with no data object.
// The fake's apps are all installed and enabled (activate_status 2, "租户启用").
func (s *Server) botInfo(q *request) (any, *apiError) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return wireBotData{ActivateStatus: 2, AppName: q.app.botName, IPWhiteList: []string{},
		AvatarURL: "https://s1-imfile.feishucdn.com/static-resource/v1/" + q.app.ID, OpenID: q.app.BotOpenID}, nil
}
