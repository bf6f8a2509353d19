package telegramtest

import (
	"bytes"
	"encoding/base64"
	"encoding/binary"
	"fmt"
	"image"
	_ "image/gif" // photo dimensions of GIF uploads
	"image/jpeg"
	_ "image/png" // photo dimensions of PNG uploads
	"math/rand/v2"
	"mime"
	"path"
	"strings"
)

// maxDownload is the getFile limit ("For the moment, bots can download files of up to 20MB
// in size").
const maxDownload = 20 << 20

// storedFile is a file Telegram keeps. Guarded by Server.mu; data is never changed.
type storedFile struct {
	id, uniqueID string
	kind         string // photo, document, video, audio
	name, mime   string
	data         []byte
	width        int
	height       int
	duration     int
	path         string        // file_path, given by the first getFile
	sizes        []*storedFile // a photo's sizes, smallest first, shared by all of them
}

// fileIDPrefixes start file ids of each kind like Telegram's (the ids stay opaque).
var fileIDPrefixes = map[string]string{"photo": "AgACAgIAAxkBAA", "document": "BQACAgIAAxkBAA", "video": "BAACAgIAAxkBAA", "audio": "CQACAgIAAxkBAA"}

// newFileLocked stores bytes as a new file. s.mu is held.
func (s *Server) newFileLocked(kind, name, mimeType string, data []byte) *storedFile {
	s.nextFile++
	var raw [20]byte
	binary.BigEndian.PutUint32(raw[:4], uint32(s.nextFile))
	binary.BigEndian.PutUint64(raw[4:12], rand.Uint64())
	binary.BigEndian.PutUint64(raw[12:], rand.Uint64())
	var uniq [9]byte
	binary.BigEndian.PutUint32(uniq[:4], uint32(s.nextFile))
	binary.BigEndian.PutUint32(uniq[4:8], rand.Uint32())
	f := &storedFile{
		id:       fileIDPrefixes[kind] + base64.RawURLEncoding.EncodeToString(raw[:]),
		uniqueID: "AQAD" + base64.RawURLEncoding.EncodeToString(uniq[:]),
		kind:     kind,
		name:     name,
		mime:     mimeType,
		data:     data,
	}
	s.files[f.id] = f
	return f
}

// newMediaLocked stores an uploaded or posted file of a kind and returns the file a message
// carries: for a photo its largest size, with a smaller JPEG size in sizes ("photo: Array of
// PhotoSize, available sizes of the photo"). s.mu is held.
func (s *Server) newMediaLocked(kind, name, contentType string, data []byte) *storedFile {
	if kind != "photo" {
		return s.newFileLocked(kind, name, mimeFor(kind, name, contentType), data)
	}
	big := s.newFileLocked("photo", name, "image/jpeg", data)
	if cfg, format, err := image.DecodeConfig(bytes.NewReader(data)); err == nil {
		big.width, big.height, big.mime = cfg.Width, cfg.Height, "image/"+format
	} else {
		big.width, big.height = 320, 240 // not an image the fake can read: nominal size
	}
	thumb, tw, th := thumbnail(data, 90)
	if thumb == nil {
		thumb, tw, th = data, 90, 67
	}
	small := s.newFileLocked("photo", name, "image/jpeg", thumb)
	small.width, small.height = tw, th
	sizes := []*storedFile{small, big}
	small.sizes, big.sizes = sizes, sizes
	return big
}

// thumbnail scales an image to fit side pixels and encodes it as JPEG; nil when data is not an
// image the standard library decodes.
func thumbnail(data []byte, side int) ([]byte, int, int) {
	src, _, err := image.Decode(bytes.NewReader(data))
	if err != nil {
		return nil, 0, 0
	}
	b := src.Bounds()
	w, h := b.Dx(), b.Dy()
	if w == 0 || h == 0 {
		return nil, 0, 0
	}
	tw, th := side, side
	if w >= h {
		th = max(1, h*side/w)
	} else {
		tw = max(1, w*side/h)
	}
	dst := image.NewRGBA(image.Rect(0, 0, tw, th))
	for y := range th {
		for x := range tw {
			dst.Set(x, y, src.At(b.Min.X+x*w/tw, b.Min.Y+y*h/th))
		}
	}
	var out bytes.Buffer
	if err := jpeg.Encode(&out, dst, nil); err != nil {
		return nil, 0, 0
	}
	return out.Bytes(), tw, th
}

// mimeFor is the mime_type of a file: the part's own type when specific, else by the file
// name's extension, else the kind's usual type.
func mimeFor(kind, name, contentType string) string {
	if t, _, err := mime.ParseMediaType(contentType); err == nil && t != "application/octet-stream" {
		return t
	}
	if t := mime.TypeByExtension(path.Ext(name)); t != "" {
		if mt, _, err := mime.ParseMediaType(t); err == nil {
			return mt
		}
	}
	switch kind {
	case "video":
		return "video/mp4"
	case "audio":
		return "audio/mpeg"
	}
	return "application/octet-stream"
}

// fileDirs are the folders of file_path by kind.
var fileDirs = map[string]string{"photo": "photos", "document": "documents", "video": "videos", "audio": "music"}

// getFile answers getFile: file_id -> File with a file_path for {URL}/file/bot<token>/<path>.
func (s *Server) getFile(q *request) (any, *apiError) {
	id := q.p.str("file_id")
	if id == "" {
		return nil, badRequest("file_id not specified")
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	f := s.files[id]
	if f == nil {
		return nil, badRequest("invalid file_id")
	}
	if len(f.data) > maxDownload {
		return nil, badRequest("file is too big")
	}
	if f.path == "" {
		ext := path.Ext(f.name)
		if f.kind == "photo" {
			ext = ".jpg"
		}
		f.path = fmt.Sprintf("%s/file_%d%s", fileDirs[f.kind], len(s.paths), strings.ToLower(ext))
		s.paths[f.path] = f
	}
	return wireFile{FileID: f.id, FileUniqueID: f.uniqueID, FileSize: len(f.data), FilePath: f.path}, nil
}
