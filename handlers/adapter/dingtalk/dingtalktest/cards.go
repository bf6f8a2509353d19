package dingtalktest

import (
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"strings"
)

// createAndDeliver is POST /v1.0/card/instances/createAndDeliver: cardTemplateId, outTrackId,
// cardData.cardParamMap (string values), openSpaceId and the space's deliver model required.
func (s *Server) createAndDeliver(w http.ResponseWriter, app *App, body map[string]any) {
	id, tmpl, space := str(body, "outTrackId"), str(body, "cardTemplateId"), str(body, "openSpaceId")
	params, ok := paramMap(body)
	if id == "" || tmpl == "" || space == "" || !ok {
		writeErr(w, 400, "invalidParameter", "outTrackId, cardTemplateId, openSpaceId and cardData.cardParamMap (strings) are required")
		return
	}
	switch {
	case strings.HasPrefix(space, "dtv1.card//IM_GROUP."):
		if dm := obj(body, "imGroupOpenDeliverModel"); dm == nil || str(dm, "robotCode") != app.RobotCode {
			writeErr(w, 400, "invalidParameter.imGroupOpenDeliverModel", "imGroupOpenDeliverModel.robotCode required")
			return
		}
	case strings.HasPrefix(space, "dtv1.card//IM_ROBOT."):
		if dm := obj(body, "imRobotOpenDeliverModel"); dm == nil || str(dm, "spaceType") != "IM_ROBOT" {
			writeErr(w, 400, "invalidParameter.imRobotOpenDeliverModel", "imRobotOpenDeliverModel.spaceType IM_ROBOT required")
			return
		}
	default:
		writeErr(w, 400, "invalidParameter.openSpaceId", "openSpaceId")
		return
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	if _, dup := s.cards[id]; dup {
		writeErr(w, 400, CodeCardExists, "outTrackId already used")
		return
	}
	c := &Card{OutTrackID: id, App: app.ClientID, Space: space, Params: params, Created: s.clock.Now()}
	if str(body, "callbackType") == "STREAM" {
		c.Params["__stream"] = "1"
	}
	c.Statuses = append(c.Statuses, params["flowStatus"])
	s.cards[id] = c
	s.order = append(s.order, id)
	kind, spaceID, _ := strings.Cut(strings.TrimPrefix(space, "dtv1.card//"), ".")
	writeJSON(w, 200, map[string]any{"success": true, "result": map[string]any{"outTrackId": id,
		"deliverResults": []map[string]any{{"spaceType": kind, "spaceId": spaceID, "success": true, "carrierId": "carrier_" + id}}}})
}

func paramMap(body map[string]any) (map[string]string, bool) {
	cd := obj(body, "cardData")
	pm := obj(cd, "cardParamMap")
	if pm == nil {
		return nil, false
	}
	out := map[string]string{}
	for k, v := range pm {
		sv, ok := v.(string)
		if !ok {
			return nil, false // cardParamMap values are strings
		}
		out[k] = sv
	}
	return out, true
}

// updateCard is PUT /v1.0/card/instances: the card's parameters, merged by key with
// cardUpdateOptions.updateCardDataByKey, else replaced. An unknown outTrackId fails.
func (s *Server) updateCard(w http.ResponseWriter, app *App, body map[string]any) {
	id := str(body, "outTrackId")
	params, ok := paramMap(body)
	if id == "" || !ok {
		writeErr(w, 400, "invalidParameter", "outTrackId and cardData.cardParamMap required")
		return
	}
	byKey, _ := obj(body, "cardUpdateOptions")["updateCardDataByKey"].(bool)
	s.mu.Lock()
	defer s.mu.Unlock()
	c := s.cards[id]
	if c == nil || c.App != app.ClientID {
		writeErr(w, 400, CodeCardNotFound, "card not exist")
		return
	}
	if !byKey {
		stream := c.Params["__stream"]
		c.Params = map[string]string{"__stream": stream}
	}
	for k, v := range params {
		c.Params[k] = v
	}
	if st, ok := params["flowStatus"]; ok && (len(c.Statuses) == 0 || c.Statuses[len(c.Statuses)-1] != st) {
		c.Statuses = append(c.Statuses, st)
	}
	writeJSON(w, 200, map[string]any{"success": true, "result": true})
}

// streaming is PUT /v1.0/card/streaming: outTrackId, guid, key and content required; isFull
// replaces the key's value, else appends. A card created without callbackType STREAM answers
// 500 unknownError; over the app's QPS 403 QpsLimitForApi.
func (s *Server) streaming(w http.ResponseWriter, app *App, body map[string]any) {
	id, guid, key := str(body, "outTrackId"), str(body, "guid"), str(body, "key")
	content, hasContent := body["content"].(string)
	if id == "" || guid == "" || key == "" || !hasContent {
		writeErr(w, 400, "invalidParameter", "outTrackId, guid, key and content required")
		return
	}
	full, _ := body["isFull"].(bool)
	final, _ := body["isFinalize"].(bool)
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.qps > 0 {
		now := s.clock.Now()
		var recent = s.window[app.ClientID][:0]
		for _, t := range s.window[app.ClientID] {
			if now.Sub(t) < 1e9 {
				recent = append(recent, t)
			}
		}
		if len(recent) >= s.qps {
			s.window[app.ClientID] = recent
			writeErr(w, 403, CodeQPS, "QPS limit for api card/streaming")
			return
		}
		s.window[app.ClientID] = append(recent, now)
	}
	c := s.cards[id]
	if c == nil || c.App != app.ClientID {
		writeErr(w, 400, CodeCardNotFound, "card not exist")
		return
	}
	if c.Params["__stream"] != "1" {
		writeErr(w, 500, "unknownError", "unknownError")
		return
	}
	if full {
		c.Params[key] = content
	} else {
		c.Params[key] += content
	}
	c.Streams++
	c.GUIDs = append(c.GUIDs, guid)
	c.Finalized = c.Finalized || final
	writeJSON(w, 200, map[string]any{"success": true, "result": true})
}

// groupSend is POST /v1.0/robot/groupMessages/send; otoSend POST /v1.0/robot/oToMessages/batchSend.
func (s *Server) groupSend(w http.ResponseWriter, app *App, body map[string]any) {
	cid := str(body, "openConversationId")
	if cid == "" || str(body, "robotCode") != app.RobotCode {
		writeErr(w, 400, "invalidParameter.openConversationId", "openConversationId and robotCode required")
		return
	}
	if !s.robotMessage(w, app, GroupSpace(cid), body) {
		return
	}
	writeJSON(w, 200, map[string]any{"processQueryKey": "pqk" + cid})
}

func (s *Server) otoSend(w http.ResponseWriter, app *App, body map[string]any) {
	users, _ := body["userIds"].([]any)
	if len(users) == 0 || len(users) > 20 || str(body, "robotCode") != app.RobotCode {
		writeErr(w, 400, "invalidParameter.userIds", "1 to 20 userIds and robotCode required")
		return
	}
	for _, u := range users {
		staff, _ := u.(string)
		if !s.robotMessage(w, app, DirectSpace(staff), body) {
			return
		}
	}
	writeJSON(w, 200, map[string]any{"processQueryKey": "pqk", "invalidStaffIdList": []string{}, "flowControlledStaffIdList": []string{}})
}

// robotMessage stores a robot message (msgKey and msgParam, a JSON string of at most 15000
// bytes); a media id of a file message brings its name and bytes.
func (s *Server) robotMessage(w http.ResponseWriter, app *App, space string, body map[string]any) bool {
	key, raw := str(body, "msgKey"), str(body, "msgParam")
	var param map[string]string
	if key == "" || len(raw) > 15000 || json.Unmarshal([]byte(raw), &param) != nil {
		writeErr(w, 400, "invalidParameter.msgParam", "msgKey and msgParam (a JSON string) required")
		return false
	}
	m := Message{App: app.ClientID, Space: space, MsgKey: key, Param: param}
	s.mu.Lock()
	defer s.mu.Unlock()
	switch key {
	case "sampleFile":
		md, ok := s.media[param["mediaId"]]
		if !ok {
			writeErr(w, 400, "invalidParameter.mediaId", "unknown mediaId")
			return false
		}
		m.FileName, m.Data = param["fileName"], md.data
	case "sampleImageMsg":
		if md, ok := s.media[param["photoURL"]]; ok {
			m.FileName, m.Data = md.name, md.data
		}
	}
	s.messages = append(s.messages, m)
	return true
}

// upload is oapi POST /media/upload?access_token=&type= (multipart field "media"):
// {errcode, errmsg, type, media_id, created_at}.
func (s *Server) upload(w http.ResponseWriter, r *http.Request) {
	app := s.tokenApp(r)
	if app == nil {
		writeJSON(w, 200, map[string]any{"errcode": 40014, "errmsg": "不合法的access_token"})
		return
	}
	typ := r.URL.Query().Get("type")
	f, hdr, err := r.FormFile("media")
	if err != nil || (typ != "image" && typ != "file" && typ != "voice" && typ != "video") {
		writeJSON(w, 200, map[string]any{"errcode": 40004, "errmsg": "无效的媒体文件类型或缺少media"})
		return
	}
	data, _ := io.ReadAll(f)
	s.mu.Lock()
	s.n++
	id := fmt.Sprintf("@lAfake%d", s.n)
	s.media[id] = media{name: hdr.Filename, data: data}
	s.mu.Unlock()
	writeJSON(w, 200, map[string]any{"errcode": 0, "errmsg": "ok", "type": typ, "media_id": id, "created_at": 0})
}

// fileDownload is POST /v1.0/robot/messageFiles/download: a message's downloadCode to a
// temporary downloadUrl.
func (s *Server) fileDownload(w http.ResponseWriter, app *App, body map[string]any) {
	code := str(body, "downloadCode")
	s.mu.Lock()
	_, ok := s.files[code]
	s.mu.Unlock()
	if !ok || str(body, "robotCode") != app.RobotCode {
		writeErr(w, 400, "invalidParameter.downloadCode", "downloadCode")
		return
	}
	writeJSON(w, 200, map[string]any{"downloadUrl": s.URL() + "/download/" + code})
}

func (s *Server) download(w http.ResponseWriter, r *http.Request) {
	s.mu.Lock()
	f, ok := s.files[r.PathValue("code")]
	s.mu.Unlock()
	if !ok {
		http.NotFound(w, r)
		return
	}
	w.Header().Set("Content-Type", f.mime)
	_, _ = w.Write(f.data)
}
