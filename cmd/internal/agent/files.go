package agent

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"mime/multipart"
	"net/http"
	"net/textproto"
	"strings"

	"github.com/ximd/ximd/pipeline/xagent"
	"github.com/ximd/ximd/profile"
)

// maxEchoBytes bounds one file the agent echoes (it holds it in memory).
const maxEchoBytes = 32 << 20

// echo fetches each user file from ximd and uploads it to the channel again, as xAgent does
// with a session file it sends (P-MSG-6: download_url is Connector-relative, fetched with the
// bearer token; P-MSG-7: upload first, then reference the new file_ref in the final).
func (r *Runner) echo(ctx context.Context, channel string, in []profile.File) ([]profile.File, error) {
	out := make([]profile.File, 0, len(in))
	for _, f := range in {
		fctx, cancel := context.WithTimeout(ctx, fileTimeout)
		nf, err := r.echoOne(fctx, channel, f)
		cancel()
		if err != nil {
			return nil, fmt.Errorf("%s: %w", f.FileRef, err)
		}
		out = append(out, nf)
	}
	return out, nil
}

func (r *Runner) echoOne(ctx context.Context, channel string, f profile.File) (profile.File, error) {
	u := f.DownloadURL
	if strings.HasPrefix(u, "/") {
		u = "http://" + r.cfg.Addr + u
	}
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, u, nil)
	if err != nil {
		return profile.File{}, err
	}
	req.Header.Set("Authorization", "Bearer "+r.cfg.Token)
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		return profile.File{}, fmt.Errorf("download: %w", err)
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		return profile.File{}, fmt.Errorf("download: HTTP %d", resp.StatusCode)
	}
	data, err := io.ReadAll(io.LimitReader(resp.Body, maxEchoBytes+1))
	if err != nil {
		return profile.File{}, fmt.Errorf("download: %w", err)
	}
	if len(data) > maxEchoBytes {
		return profile.File{}, fmt.Errorf("download: larger than %d bytes", maxEchoBytes)
	}
	if f.MimeType == "" {
		f.MimeType = resp.Header.Get("Content-Type")
	}
	return r.upload(ctx, channel, f, data)
}

// upload stores data as a file of the channel (POST /files/uploads) named and typed as f says.
func (r *Runner) upload(ctx context.Context, channel string, f profile.File, data []byte) (profile.File, error) {
	mime := f.MimeType
	var body bytes.Buffer
	mw := multipart.NewWriter(&body)
	_ = mw.WriteField("connector_channel_id", channel)
	if f.Type != "" {
		_ = mw.WriteField("type", f.Type)
	}
	if f.Filename != "" {
		_ = mw.WriteField("filename", f.Filename)
	}
	if mime != "" {
		_ = mw.WriteField("mime_type", mime)
	}
	h := textproto.MIMEHeader{}
	h.Set("Content-Disposition", fmt.Sprintf(`form-data; name="file"; filename=%q`, f.Filename))
	h.Set("Content-Type", "application/octet-stream")
	pw, _ := mw.CreatePart(h)
	_, _ = pw.Write(data)
	_ = mw.Close()
	up, err := http.NewRequestWithContext(ctx, http.MethodPost, "http://"+r.cfg.Addr+"/files/uploads", &body)
	if err != nil {
		return profile.File{}, err
	}
	up.Header.Set("Authorization", "Bearer "+r.cfg.Token)
	up.Header.Set("Content-Type", mw.FormDataContentType())
	uresp, err := http.DefaultClient.Do(up)
	if err != nil {
		return profile.File{}, fmt.Errorf("upload: %w", err)
	}
	defer uresp.Body.Close()
	if uresp.StatusCode != http.StatusCreated {
		b, _ := io.ReadAll(io.LimitReader(uresp.Body, 1024))
		return profile.File{}, fmt.Errorf("upload: HTTP %d %s", uresp.StatusCode, bytes.TrimSpace(b))
	}
	var meta struct {
		FileRef  string `json:"file_ref"`
		Type     string `json:"type"`
		Filename string `json:"filename"`
		MimeType string `json:"mime_type"`
		ByteSize int64  `json:"byte_size"`
	}
	if err := json.NewDecoder(uresp.Body).Decode(&meta); err != nil {
		return profile.File{}, fmt.Errorf("upload answer: %w", err)
	}
	return profile.File{Type: meta.Type, FileRef: meta.FileRef, Filename: meta.Filename, MimeType: meta.MimeType, ByteSize: meta.ByteSize}, nil
}

// asksForFile reports whether a user message asks for a file.
func asksForFile(text string) bool { return strings.Contains(strings.ToLower(text), "file") }

// sendFile uploads a small text file to the channel and sends it with the im.send_file tool;
// its tool.result is printed with every packet received.
func (r *Runner) sendFile(ctx context.Context, channel string, msg profile.Message) {
	fctx, cancel := context.WithTimeout(ctx, fileTimeout)
	defer cancel()
	body := fmt.Sprintf("A file from the ximd demo agent, sent with the im.send_file tool.\nYou asked: %q\n", msg.Text)
	f, err := r.upload(fctx, channel, profile.File{Type: "file", Filename: "ximd-demo.txt", MimeType: "text/plain"}, []byte(body))
	if err != nil {
		if ctx.Err() == nil {
			r.out.errorf("upload a file for im.send_file on %s: %v", channel, err)
		}
		return
	}
	r.sendBestEffort(ctx, channel, profile.TypeToolInvoke, map[string]any{
		"invocation_id": xagent.NewID("inv"), "tool": profile.ToolSendFile,
		"arguments": map[string]any{"files": []map[string]string{{"file_ref": f.FileRef}}, "text": "Here is a file, as you asked."},
	})
}
