package feishutest

import (
	"bytes"
	"errors"
	"fmt"
	"image"
	_ "image/gif"  // image.DecodeConfig for GIF resolution limits
	_ "image/jpeg" // and JPEG
	_ "image/png"  // and PNG
	"io"
	"mime"
	"net/http"
	"path"
)

// Resource limits ("Upload image", "Upload file", "Obtain resource files in messages").
const (
	maxImageBytes    = 10 << 20  // 234006: images up to 10 MB
	maxFileBytes     = 30 << 20  // 234006: files up to 30 MB
	maxDownloadBytes = 100 << 20 // 234037: downloads up to 100 MB
	maxFieldBytes    = 1 << 20   // a non-file multipart value
	maxGIFSide       = 2000      // 234039: GIF up to 2000 x 2000
	maxImageSide     = 12000     // 234039: other images up to 12000 x 12000
	maxAvatarSide    = 4096      // 234039: avatars up to 4096 x 4096
)

// fileTypes are the documented file_type values of "Upload file".
var fileTypes = map[string]bool{"opus": true, "mp4": true, "pdf": true, "doc": true, "xls": true, "ppt": true, "stream": true}

// upload is a file part of a multipart/form-data body.
type upload struct {
	filename    string
	contentType string
	data        []byte // nil when size > the limit
	size        int64
}

// readMultipart reads form values and file parts; a file over limit is drained and kept with
// its size only.
func readMultipart(r *http.Request, limit int64) (map[string]string, map[string]*upload, error) {
	mr, err := r.MultipartReader()
	if err != nil {
		return nil, nil, fmt.Errorf("multipart reader: %w", err)
	}
	vals, files := map[string]string{}, map[string]*upload{}
	for {
		part, err := mr.NextPart()
		if errors.Is(err, io.EOF) {
			return vals, files, nil
		}
		if err != nil {
			return nil, nil, fmt.Errorf("next part: %w", err)
		}
		name := part.FormName()
		if part.FileName() == "" {
			v, err := io.ReadAll(io.LimitReader(part, maxFieldBytes))
			if err != nil {
				return nil, nil, fmt.Errorf("read field %s: %w", name, err)
			}
			vals[name] = string(v)
			continue
		}
		data, err := io.ReadAll(io.LimitReader(part, limit+1))
		if err != nil {
			return nil, nil, fmt.Errorf("read file %s: %w", name, err)
		}
		up := &upload{filename: part.FileName(), contentType: part.Header.Get("Content-Type"), data: data, size: int64(len(data))}
		if up.size > limit {
			rest, err := io.Copy(io.Discard, part)
			if err != nil {
				return nil, nil, fmt.Errorf("read file %s: %w", name, err)
			}
			up.size += rest
			up.data = nil
		}
		files[name] = up
	}
}

// invalidResourceParam is the resource APIs' parameter error.
func invalidResourceParam() *apiError { return badRequest(234001, "Invalid request param.") }

// uploadImage answers "Upload image" (open.feishu.cn/document/server-docs/im-v1/image/create):
// multipart image_type (message or avatar) and image; JPG, PNG, WEBP, GIF, BMP, ICO, TIFF or
// HEIC, 1 byte to 10 MB. Answers {image_key}.
func (s *Server) uploadImage(q *request) (any, *apiError) {
	vals, files, err := readMultipart(q.r, maxImageBytes)
	if err != nil {
		return nil, invalidResourceParam()
	}
	kind := vals["image_type"]
	up := files["image"]
	if (kind != "message" && kind != "avatar") || up == nil {
		return nil, invalidResourceParam()
	}
	if e := checkImage(kind, up); e != nil {
		return nil, e
	}
	format, _ := sniffImage(up.data)
	s.mu.Lock()
	defer s.mu.Unlock()
	f := &storedFile{kind: "image", key: "img_v2_" + randKey(), name: up.filename, owner: q.app.ID,
		mime: "image/" + format, data: up.data}
	s.files[f.key] = f
	return map[string]string{"image_key": f.key}, nil
}

// checkImage applies the size, format and resolution limits of "Upload image".
func checkImage(kind string, up *upload) *apiError {
	switch {
	case up.size > maxImageBytes:
		return badRequest(234006, "The file size exceed the max value.")
	case up.size == 0:
		return badRequest(234010, "File's size can't be 0.")
	}
	format, ok := sniffImage(up.data)
	if !ok {
		return badRequest(234011, "Can't regonnize the image format.") // sic, as documented
	}
	limit := maxImageSide
	if format == "gif" {
		limit = maxGIFSide
	}
	if kind == "avatar" {
		limit = min(limit, maxAvatarSide)
	}
	if cfg, _, err := image.DecodeConfig(bytes.NewReader(up.data)); err == nil && (cfg.Width > limit || cfg.Height > limit) {
		return badRequest(234039, "Image resolution exceeds limit.")
	}
	return nil
}

// sniffImage recognises the documented image formats by their magic bytes.
func sniffImage(b []byte) (string, bool) {
	switch {
	case bytes.HasPrefix(b, []byte("\xff\xd8\xff")):
		return "jpeg", true
	case bytes.HasPrefix(b, []byte("\x89PNG\r\n\x1a\n")):
		return "png", true
	case bytes.HasPrefix(b, []byte("GIF87a")), bytes.HasPrefix(b, []byte("GIF89a")):
		return "gif", true
	case len(b) >= 12 && string(b[:4]) == "RIFF" && string(b[8:12]) == "WEBP":
		return "webp", true
	case bytes.HasPrefix(b, []byte("BM")):
		return "bmp", true
	case bytes.HasPrefix(b, []byte("\x00\x00\x01\x00")):
		return "x-icon", true
	case bytes.HasPrefix(b, []byte("II*\x00")), bytes.HasPrefix(b, []byte("MM\x00*")):
		return "tiff", true
	case len(b) >= 12 && string(b[4:8]) == "ftyp":
		switch string(b[8:12]) {
		case "heic", "heix", "hevc", "hevx", "mif1", "msf1":
			return "heic", true
		}
	}
	return "", false
}

// uploadFile answers "Upload file" (open.feishu.cn/document/server-docs/im-v1/file/create):
// multipart file_type (opus, mp4, pdf, doc, xls, ppt or stream), file_name and file, 1 byte
// to 30 MB. Answers {file_key}.
func (s *Server) uploadFile(q *request) (any, *apiError) {
	vals, files, err := readMultipart(q.r, maxFileBytes)
	if err != nil {
		return nil, invalidResourceParam()
	}
	up := files["file"]
	if !fileTypes[vals["file_type"]] || vals["file_name"] == "" || up == nil {
		return nil, invalidResourceParam()
	}
	switch {
	case up.size > maxFileBytes:
		return nil, badRequest(234006, "The file size exceed the max value.")
	case up.size == 0:
		return nil, badRequest(234010, "File's size can't be 0.")
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	f := &storedFile{kind: "file", key: "file_v2_" + randKey(), name: vals["file_name"], fileType: vals["file_type"],
		owner: q.app.ID, mime: mimeOf(vals["file_name"]), data: up.data}
	s.files[f.key] = f
	return map[string]string{"file_key": f.key}, nil
}

// mimeOf is the media type for a file name's extension.
func mimeOf(name string) string {
	if t := mime.TypeByExtension(path.Ext(name)); t != "" {
		return t
	}
	return "application/octet-stream"
}

// getResource answers "Obtain resource files in messages"
// (open.feishu.cn/document/server-docs/im-v1/message/get-2): the bytes of the image (type
// image) or file, audio or video (type file) of a message in a chat the bot is in.
func (s *Server) getResource(q *request) (any, *apiError) {
	typ := q.r.URL.Query().Get("type")
	s.mu.Lock()
	defer s.mu.Unlock()
	m := s.msgs[q.params[routeParamMessage]]
	if m == nil || (typ != "image" && typ != "file") {
		return nil, invalidResourceParam()
	}
	if !s.chats[m.chatID].hasBot(q.app.ID) {
		return nil, badRequest(234004, "App not in chat.")
	}
	if m.msgType == "interactive" || m.msgType == "merge_forward" || m.msgType == "sticker" {
		return nil, badRequest(234043, "Unsupported message type.")
	}
	f := m.file
	if f == nil || f.key != q.params[routeParamFileKey] {
		return nil, badRequest(234003, "File not in message.")
	}
	if f.kind != typ {
		return nil, invalidResourceParam()
	}
	if len(f.data) > maxDownloadBytes {
		return nil, badRequest(234037, "Downloaded file size exceeds limit.")
	}
	return rawAnswer{mime: f.mime, name: f.name, data: f.data}, nil
}
