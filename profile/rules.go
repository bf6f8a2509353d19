package profile

import (
	"net/url"
	"strings"
)

// Rules the catalog names but data cannot express. catalog.json refers to them by name; Load
// fails if a name has no entry here or an entry is named nowhere.

// fieldCheck validates one string value; it returns "" or the problem, citing its rule.
type fieldCheck func(v string, d Direction) (problem string)

// objectRule validates a decoded object as a whole; it returns the offending field (relative
// to the object) and the problem, or "" when the object is fine. The caller cites the rule.
type objectRule func(r *record, d Direction) (field, problem string)

var fieldChecks = map[string]fieldCheck{
	"download_url_safe": checkDownloadURL,
	"filename_safe":     checkFilename,
}

var objectRules = map[string]objectRule{
	"text_or_files":       ruleTextOrFiles,
	"unique_file_refs":    ruleUniqueFileRefs,
	"tool_name_iff_tool":  ruleToolNameIffTool,
	"rejected_needs_code": ruleRejectedNeedsCode,
}

// filesRefPrefix is the only relative download_url xAgent may send (edge-api §5.1).
const filesRefPrefix = "/files/refs/"

// checkDownloadURL: P-MSG-6, P-MSG-8, edge-api §5.1. Both directions accept an absolute http(s)
// URL with a host and no user info (credentials are "CDN auth material", P-MSG-8). A relative
// URL must start with a single '/': from xAgent only /files/refs/{file_ref} (ximd's own Transfer
// Plane), to xAgent any Connector-relative path. file:, data:, any other scheme, local paths
// (C:\..., ~/..., ../...) and protocol-relative //host URLs are refused.
func checkDownloadURL(v string, d Direction) string {
	for i := 0; i < len(v); i++ {
		if c := v[i]; c <= ' ' || c == 0x7f || c == '\\' {
			return "must not contain spaces, control characters or backslashes (P-MSG-8)"
		}
	}
	if strings.HasPrefix(v, "/") {
		if strings.HasPrefix(v, "//") {
			return "must not be a protocol-relative URL (P-MSG-6)"
		}
		u, err := url.Parse(v)
		if err != nil {
			return "is not a valid relative URL (P-MSG-6)"
		}
		if d == FromAgent {
			ref, ok := strings.CutPrefix(u.Path, filesRefPrefix)
			if !ok || ref == "" || ref == "." || ref == ".." || strings.Contains(ref, "/") {
				return "a relative download_url must be " + filesRefPrefix + "{file_ref} (edge-api §5.1)"
			}
		}
		return ""
	}
	scheme, _, ok := strings.Cut(v, ":")
	if !ok || scheme == "" {
		return "must be an absolute http(s) URL or a path starting with / (P-MSG-6)"
	}
	switch strings.ToLower(scheme) {
	case "http", "https":
	case "data":
		return "data: URLs are not allowed; file bytes never travel in chat.message (P-MSG-8)"
	case "file":
		return "file: URLs are not allowed; local paths never travel in chat.message (P-MSG-8)"
	default:
		return "scheme " + safeQuote(scheme) + " is not allowed; use http(s) or a path starting with / (P-MSG-6)"
	}
	u, err := url.Parse(v)
	if err != nil {
		return "is not a valid URL (P-MSG-6)"
	}
	if u.Host == "" {
		return "an absolute URL needs a host (P-MSG-6)"
	}
	if u.User != nil {
		return "must not carry credentials (P-MSG-8)"
	}
	return ""
}

// checkFilename: P-MSG-8 (no local paths). A filename is a bare name: no '/' or '\', no control
// characters, not "." or "..".
func checkFilename(v string, _ Direction) string {
	if v == "." || v == ".." {
		return "must be a bare file name, not a path (P-MSG-8)"
	}
	for i := 0; i < len(v); i++ {
		switch c := v[i]; {
		case c == '/' || c == '\\':
			return "must be a bare file name, not a path (P-MSG-8)"
		case c < ' ' || c == 0x7f:
			return "must not contain control characters (P-MSG-8)"
		}
	}
	return ""
}

// ruleTextOrFiles: P-MSG-3, at least one of text and files is non-empty.
func ruleTextOrFiles(r *record, _ Direction) (string, string) {
	if r.get("text").str == "" && len(r.get("files").items) == 0 {
		return "text", "text and files are both empty; at least one must be non-empty"
	}
	return "", ""
}

// ruleUniqueFileRefs: P-MSG-5, file_ref is unique within the message.
func ruleUniqueFileRefs(r *record, _ Direction) (string, string) {
	files := r.get("files").items
	for i := 1; i < len(files); i++ {
		ref := files[i].get("file_ref").str
		for j := range i {
			if files[j].get("file_ref").str == ref {
				return "files[" + itoa(i) + "].file_ref", "repeats files[" + itoa(j) + "].file_ref; file_ref must be unique within the message"
			}
		}
	}
	return "", ""
}

// ruleToolNameIffTool: P-ACT-2, tool_name is required when status is tool and absent otherwise.
func ruleToolNameIffTool(r *record, _ Direction) (string, string) {
	tool := r.get("status").str == ActivityTool
	has := r.get("tool_name").set
	switch {
	case tool && !has:
		return "tool_name", "required when status is tool"
	case !tool && has:
		return "tool_name", "must be absent unless status is tool"
	}
	return "", ""
}

// ruleRejectedNeedsCode: profile §7, a rejected ack carries a stable code and a boolean retryable.
func ruleRejectedNeedsCode(r *record, _ Direction) (string, string) {
	if r.get("status").str != AckRejected {
		return "", ""
	}
	if !r.get("code").set {
		return "code", "required when status is rejected"
	}
	if !r.get("retryable").set {
		return "retryable", "required when status is rejected"
	}
	return "", ""
}
