package profile

import (
	"encoding/json"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// mutateJSON decodes data, lets f change it, and encodes it again.
func mutateJSON(t *testing.T, data []byte, f func(m map[string]any)) []byte {
	t.Helper()
	var m map[string]any
	if err := json.Unmarshal(data, &m); err != nil {
		t.Fatal(err)
	}
	f(m)
	out, err := json.Marshal(m)
	if err != nil {
		t.Fatal(err)
	}
	return out
}

func payloadSpec(m map[string]any, name string) map[string]any {
	for _, p := range m["payloads"].([]any) {
		if p := p.(map[string]any); p["name"] == name {
			return p
		}
	}
	panic("no payload " + name)
}

func fieldSpecOf(m map[string]any, payload, field string) map[string]any {
	for _, f := range payloadSpec(m, payload)["fields"].([]any) {
		if f := f.(map[string]any); f["name"] == field {
			return f
		}
	}
	panic("no field " + field)
}

func removeField(m map[string]any, payload, field string) {
	p := payloadSpec(m, payload)
	var keep []any
	for _, f := range p["fields"].([]any) {
		if f.(map[string]any)["name"] != field {
			keep = append(keep, f)
		}
	}
	p["fields"] = keep
}

func TestLoadRejectsBadCatalog(t *testing.T) {
	tests := []struct {
		name    string
		mutate  func(m map[string]any)
		raw     string // used instead of mutate when set
		wantErr string
	}{
		{name: "not JSON", raw: `{`, wantErr: "catalog.json"},
		{name: "unknown key", mutate: func(m map[string]any) { m["packet_typez"] = 1 }, wantErr: "unknown field"},
		{name: "wrong profile", mutate: func(m map[string]any) { m["profile"] = "xagent.im.v1" }, wantErr: `profile is "xagent.im.v1"`},
		{name: "wrong schema", mutate: func(m map[string]any) { m["schema"] = "x" }, wantErr: "schema is"},
		{name: "packet type constant missing", mutate: func(m map[string]any) {
			pts := m["packet_types"].([]any)
			m["packet_types"] = pts[:len(pts)-1] // drops "error"
		}, wantErr: "packet type error: constant of package profile missing"},
		{name: "packet type twice", mutate: func(m map[string]any) {
			pts := m["packet_types"].([]any)
			m["packet_types"] = append(pts, pts[0])
		}, wantErr: "packet type chat.message: listed twice"},
		{name: "kind not a token", mutate: func(m map[string]any) {
			m["packet_types"].([]any)[0].(map[string]any)["kind"] = "msg.x"
		}, wantErr: `kind "msg.x"`},
		{name: "unknown direction", mutate: func(m map[string]any) {
			m["packet_types"].([]any)[1].(map[string]any)["directions"] = []any{"sideways"}
		}, wantErr: `unknown direction "sideways"`},
		{name: "no directions", mutate: func(m map[string]any) {
			m["packet_types"].([]any)[1].(map[string]any)["directions"] = []any{}
		}, wantErr: "no directions"},
		{name: "unknown payload", mutate: func(m map[string]any) {
			m["packet_types"].([]any)[1].(map[string]any)["payload"] = "deltaz"
		}, wantErr: `unknown payload "deltaz"`},
		{name: "rule without implementation", mutate: func(m map[string]any) {
			payloadSpec(m, "message")["rules"].([]any)[0].(map[string]any)["name"] = "text_or_filez"
		}, wantErr: `rule "text_or_filez" has no implementation`},
		{name: "implemented rule unused", mutate: func(m map[string]any) {
			delete(payloadSpec(m, "activity"), "rules")
		}, wantErr: "rule tool_name_iff_tool is implemented but no payload names it"},
		{name: "rule cites nothing", mutate: func(m map[string]any) {
			delete(payloadSpec(m, "message")["rules"].([]any)[1].(map[string]any), "rule")
		}, wantErr: `rule "unique_file_refs" cites no requirement`},
		{name: "check without implementation", mutate: func(m map[string]any) {
			fieldSpecOf(m, "file", "download_url")["check"] = "nope"
		}, wantErr: `check "nope" has no implementation`},
		{name: "implemented check unused", mutate: func(m map[string]any) {
			delete(fieldSpecOf(m, "file", "filename"), "check")
		}, wantErr: "check filename_safe is implemented but no field names it"},
		{name: "unknown field type", mutate: func(m map[string]any) {
			fieldSpecOf(m, "delta", "sequence")["type"] = "number"
		}, wantErr: `unknown type "number"`},
		{name: "Go field missing from catalog", mutate: func(m map[string]any) {
			removeField(m, "message", "created_at")
		}, wantErr: "Go field created_at is not in the catalog"},
		{name: "catalog field missing in Go", mutate: func(m map[string]any) {
			p := payloadSpec(m, "delta")
			p["fields"] = append(p["fields"].([]any), map[string]any{"name": "final", "type": "boolean"})
		}, wantErr: "catalog field final has no Go field"},
		{name: "type mismatch with Go", mutate: func(m map[string]any) {
			fieldSpecOf(m, "delta", "sequence")["type"] = "string"
		}, wantErr: "field sequence: catalog type string does not match Go type int64"},
		{name: "nested type mismatch with Go", mutate: func(m map[string]any) {
			delete(fieldSpecOf(m, "file", "byte_size"), "min")
			fieldSpecOf(m, "file", "byte_size")["type"] = "boolean"
		}, wantErr: "payload file (Go File): field byte_size"},
		{name: "enum lacks a Go constant", mutate: func(m map[string]any) {
			fieldSpecOf(m, "activity", "status")["enum"] = []any{"thinking", "tool"}
		}, wantErr: `status enum lacks "idle"`},
		{name: "forbidden key defined as field", mutate: func(m map[string]any) {
			m["forbidden_keys"].(map[string]any)["keys"] = []any{"role", "text"}
		}, wantErr: "forbidden key text is a field of payload message"},
		{name: "no forbidden keys", mutate: func(m map[string]any) {
			m["forbidden_keys"] = map[string]any{}
		}, wantErr: "forbidden_keys: rule and keys are required"},
		{name: "max_bytes on integer", mutate: func(m map[string]any) {
			fieldSpecOf(m, "delta", "sequence")["max_bytes"] = 3
		}, wantErr: "apply to strings only"},
		{name: "min on string", mutate: func(m map[string]any) {
			fieldSpecOf(m, "delta", "text")["min"] = 1
		}, wantErr: "min applies to integers only"},
		{name: "items on string", mutate: func(m map[string]any) {
			fieldSpecOf(m, "delta", "text")["items"] = "file"
		}, wantErr: "items and max_items apply to arrays only"},
		{name: "array of unknown items", mutate: func(m map[string]any) {
			fieldSpecOf(m, "message", "files")["items"] = "filez"
		}, wantErr: `items names unknown payload "filez"`},
		{name: "required and required_in", mutate: func(m map[string]any) {
			fieldSpecOf(m, "file", "download_url")["required"] = true
		}, wantErr: "both required and required_in"},
		{name: "no closed rule", mutate: func(m map[string]any) {
			delete(payloadSpec(m, "delta"), "closed_rule")
		}, wantErr: "payload delta: closed_rule is required"},
		{name: "direction not described", mutate: func(m map[string]any) {
			delete(m["directions"].(map[string]any), "connector_to_xagent")
		}, wantErr: "directions: connector_to_xagent not described"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			data := []byte(tc.raw)
			if tc.raw == "" {
				data = mutateJSON(t, catalogJSON, tc.mutate)
			}
			_, err := load(data, errorsJSON)
			if err == nil || !strings.Contains(err.Error(), tc.wantErr) {
				t.Fatalf("load error = %v\nwant it to contain %q", err, tc.wantErr)
			}
			if !strings.Contains(err.Error(), "catalog.json") {
				t.Fatalf("error does not name the file: %v", err)
			}
		})
	}
}

func TestLoadRejectsBadErrorTable(t *testing.T) {
	codes := func(m map[string]any) []any { return m["codes"].([]any) }
	tests := []struct {
		name    string
		mutate  func(m map[string]any)
		raw     string
		wantErr string
	}{
		{name: "not JSON", raw: `[`, wantErr: "errors.json"},
		{name: "unknown key", mutate: func(m map[string]any) { codes(m)[0].(map[string]any)["retry"] = true }, wantErr: "unknown field"},
		{name: "constant missing", mutate: func(m map[string]any) { m["codes"] = codes(m)[1:] }, wantErr: "code invalid_packet: constant of package profile missing"},
		{name: "code twice", mutate: func(m map[string]any) { m["codes"] = append(codes(m), codes(m)[0]) }, wantErr: "code invalid_packet: listed twice"},
		{name: "bad status", mutate: func(m map[string]any) { codes(m)[0].(map[string]any)["http_status"] = 99 }, wantErr: "http_status 99 out of range"},
		{name: "no description", mutate: func(m map[string]any) { codes(m)[0].(map[string]any)["description"] = " " }, wantErr: "no description"},
		{name: "not snake_case", mutate: func(m map[string]any) { codes(m)[0].(map[string]any)["code"] = "Invalid-Packet" }, wantErr: "not snake_case"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			data := []byte(tc.raw)
			if tc.raw == "" {
				data = mutateJSON(t, errorsJSON, tc.mutate)
			}
			_, err := load(catalogJSON, data)
			if err == nil || !strings.Contains(err.Error(), tc.wantErr) || !strings.Contains(err.Error(), "errors.json") {
				t.Fatalf("load error = %v\nwant it to contain %q", err, tc.wantErr)
			}
		})
	}
}

// TestCatalogRulesUsed: every implemented rule is named by the embedded catalog (Load enforces
// it; this documents the set).
func TestCatalogRulesUsed(t *testing.T) {
	if len(fieldChecks) != 2 || len(objectRules) != 4 {
		t.Fatalf("rule registry changed: %d checks, %d rules; update doc.go", len(fieldChecks), len(objectRules))
	}
}

// TestDocNamesTheData: the package doc (doc.go) names every embedded data file and every rule
// implemented in Go, so what it says the data holds stays true as the data grows.
func TestDocNamesTheData(t *testing.T) {
	doc, err := os.ReadFile("doc.go")
	if err != nil {
		t.Fatal(err)
	}
	files, err := filepath.Glob("*.json")
	if err != nil || len(files) < 3 {
		t.Fatalf("embedded data files: %v %v", files, err)
	}
	names := files
	for name := range fieldChecks {
		names = append(names, name)
	}
	for name := range objectRules {
		names = append(names, name)
	}
	for _, name := range names {
		if !strings.Contains(string(doc), name) {
			t.Errorf("doc.go does not name %s", name)
		}
	}
}
