package slacktest

import (
	"encoding/json"
	"fmt"
	"io"
	"mime"
	"net/http"
	"net/url"
	"path"
	"strconv"
	"strings"
	"time"
)

// fileState is an uploaded file.
type fileState struct {
	id, name, title, mime string
	length                int    // the length given to files.getUploadURLExternal
	data                  []byte // nil until uploaded
	uploaded              bool
	user                  string // uploader's user id
	created               time.Time
}

// getUploadURLExternal answers files.getUploadURLExternal: an upload URL on the fake and a
// file id.
func (s *Server) getUploadURLExternal(q *request) answer {
	name := q.str("filename")
	length, err := strconv.Atoi(q.str("length"))
	if name == "" || err != nil || length <= 0 {
		return errAnswer("invalid_arguments")
	}
	if length > maxUpload {
		return errAnswer("file_too_large")
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	f := &fileState{id: "F" + randID(10), name: name, length: length, user: q.bot.UserID, created: s.Now(), mime: mimeFor(name, "")}
	key := f.id + "/" + randAlnum(32)
	s.files[f.id] = f
	s.uploads[key] = f
	return okAnswer(map[string]any{"upload_url": q.base + "/upload/v1/" + key, "file_id": f.id})
}

// serveUpload stores the bytes POSTed to an upload URL, raw or as a multipart form with the
// file in a part ("Files can be sent as raw bytes or can be multipart form encoded").
func (s *Server) serveUpload(w http.ResponseWriter, r *http.Request, key string) {
	if r.Method != http.MethodPost {
		http.Error(w, "method not allowed", http.StatusMethodNotAllowed)
		return
	}
	s.mu.Lock()
	f := s.uploads[key]
	s.mu.Unlock()
	if f == nil {
		http.Error(w, "Not Found", http.StatusNotFound)
		return
	}
	var data []byte
	var partType string
	ct, _, _ := mime.ParseMediaType(r.Header.Get("Content-Type"))
	if ct == "multipart/form-data" {
		mr, err := r.MultipartReader()
		if err != nil {
			http.Error(w, "Bad Request", http.StatusBadRequest)
			return
		}
		for {
			part, err := mr.NextPart()
			if err != nil {
				break
			}
			if part.FileName() == "" {
				continue
			}
			data, err = io.ReadAll(io.LimitReader(part, maxUpload+1))
			if err != nil {
				http.Error(w, "Bad Request", http.StatusBadRequest)
				return
			}
			partType = part.Header.Get("Content-Type")
			break
		}
	} else {
		var err error
		data, err = io.ReadAll(io.LimitReader(r.Body, maxUpload+1))
		if err != nil {
			http.Error(w, "Bad Request", http.StatusBadRequest)
			return
		}
		partType = r.Header.Get("Content-Type")
	}
	if len(data) != f.length {
		http.Error(w, fmt.Sprintf("Bad Request: uploaded %d bytes, length was %d", len(data), f.length), http.StatusBadRequest)
		return
	}
	s.mu.Lock()
	f.data, f.uploaded = data, true
	f.mime = mimeFor(f.name, partType)
	delete(s.uploads, key)
	s.mu.Unlock()
	w.Header().Set("Content-Type", "text/plain; charset=utf-8")
	_, _ = fmt.Fprintf(w, "OK - %d", len(data))
}

// completeUploadExternal answers files.completeUploadExternal: with channel_id, the files are
// shared there as one message of the bot, with initial_comment as its text.
func (s *Server) completeUploadExternal(q *request) answer {
	var list []struct {
		ID    string `json:"id"`
		Title string `json:"title"`
	}
	if err := json.Unmarshal([]byte(q.str("files")), &list); err != nil || len(list) == 0 {
		return errAnswer("invalid_arguments")
	}
	comment := q.str("initial_comment")
	if e := checkText(comment, ""); e != "" {
		return errAnswer(e)
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	var files []*fileState
	for _, it := range list {
		f := s.files[it.ID]
		if f == nil || f.user != q.bot.UserID {
			return errAnswer("file_not_found")
		}
		if !f.uploaded {
			return errAnswer("file_upload_not_complete")
		}
		files = append(files, f)
	}
	channel := q.str("channel_id")
	if channel == "" {
		channel, _, _ = strings.Cut(q.str("channels"), ",")
	}
	var ch *channelState
	if channel != "" {
		var e string
		if ch, e = s.visibleLocked(channel); e != "" {
			return errAnswer(e)
		}
		if ts := q.str("thread_ts"); ts != "" && ch.findMsg(ts) == nil {
			return errAnswer("thread_not_found")
		}
	}
	out := make([]map[string]any, 0, len(files))
	for i, f := range files {
		f.title = list[i].Title
		if f.title == "" {
			f.title = f.name
		}
		out = append(out, map[string]any{"id": f.id, "title": f.title})
	}
	if ch != nil {
		m := s.addBotMessageLocked(ch, q.bot, q.str("thread_ts"), comment)
		m.files = files
	}
	return okAnswer(map[string]any{"files": out})
}

// serveDownload serves url_private and url_private_download: {team}-{file id}/[download/]name.
// Without a bot token of the workspace it redirects to the sign-in page, which answers HTML,
// as Slack does.
func (s *Server) serveDownload(w http.ResponseWriter, r *http.Request, rest string) {
	ids, _, _ := strings.Cut(rest, "/")
	_, fileID, _ := strings.Cut(ids, "-")
	s.mu.Lock()
	b := s.tokens[bearer(r)]
	f := s.files[fileID]
	s.mu.Unlock()
	if b == nil || strings.HasPrefix(bearer(r), "xapp-") {
		http.Redirect(w, r, "/?redir="+url.QueryEscape(r.URL.Path), http.StatusFound)
		return
	}
	if f == nil || !f.uploaded {
		http.NotFound(w, r)
		return
	}
	w.Header().Set("Content-Type", f.mime)
	w.Header().Set("Content-Length", strconv.Itoa(len(f.data)))
	if strings.Contains(rest, "/download/") {
		w.Header().Set("Content-Disposition", mime.FormatMediaType("attachment", map[string]string{"filename": f.name}))
	}
	if r.Method != http.MethodHead {
		_, _ = w.Write(f.data)
	}
}

// urlPrivate is a file's url_private on the fake.
func (s *Server) urlPrivate(f *fileState) string {
	return s.life.URL() + "/files-pri/" + s.teamID + "-" + f.id + "/" + url.PathEscape(f.name)
}

// wireFile renders a file object. s.mu is held.
func (s *Server) wireFile(f *fileState) map[string]any {
	ext := strings.TrimPrefix(path.Ext(f.name), ".")
	return map[string]any{
		"id":                   f.id,
		"created":              f.created.Unix(),
		"timestamp":            f.created.Unix(),
		"name":                 f.name,
		"title":                f.title,
		"mimetype":             f.mime,
		"filetype":             ext,
		"user":                 f.user,
		"size":                 len(f.data),
		"mode":                 "hosted",
		"is_external":          false,
		"url_private":          s.urlPrivate(f),
		"url_private_download": s.life.URL() + "/files-pri/" + s.teamID + "-" + f.id + "/download/" + url.PathEscape(f.name),
	}
}

// mimeFor returns the media type of an upload: the part's own type unless generic, else the
// one for the name's extension, else application/octet-stream.
func mimeFor(name, given string) string {
	if t, _, err := mime.ParseMediaType(given); err == nil && t != "application/octet-stream" && t != "application/x-www-form-urlencoded" && !strings.HasPrefix(t, "multipart/") {
		return t
	}
	if t := mime.TypeByExtension(path.Ext(name)); t != "" {
		t, _, _ = mime.ParseMediaType(t)
		return t
	}
	return "application/octet-stream"
}
