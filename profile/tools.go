package profile

import (
	"bytes"
	_ "embed"
	"encoding/json"
	"errors"
	"fmt"
	"slices"
	"strings"

	"github.com/santhosh-tekuri/jsonschema/v6"
	"golang.org/x/text/language"
	"golang.org/x/text/message"
)

// schemaMessages prints schema failures.
var schemaMessages = message.NewPrinter(language.English)

// The IM tools (P-SCOPE-1, edge-api §8): the Card declares them from this document and the tool
// stage validates arguments against the same schemas, so the two cannot drift.
//
//go:embed tools.json
var toolsJSON []byte

// Tool is one IM tool of the profile.
type Tool struct {
	Name        string          `json:"name"`
	Profile     string          `json:"profile"`
	Description string          `json:"description"`
	InputSchema json.RawMessage `json:"input_schema"`

	schema *jsonschema.Schema
}

// Tool names (edge-api §8).
const (
	ToolSendMessage  = "im.send_message"
	ToolReplyMessage = "im.reply_message"
	ToolSendFile     = "im.send_file"
)

// loadTools parses tools.json and compiles every input schema.
func loadTools(doc []byte) ([]Tool, error) {
	var file struct {
		Tools []Tool `json:"tools"`
	}
	dec := json.NewDecoder(bytes.NewReader(doc))
	dec.DisallowUnknownFields()
	if err := dec.Decode(&file); err != nil {
		return nil, fmt.Errorf("tools.json: %w", err)
	}
	c := jsonschema.NewCompiler()
	for i := range file.Tools {
		t := &file.Tools[i]
		schema, err := jsonschema.UnmarshalJSON(bytes.NewReader(t.InputSchema))
		if err != nil {
			return nil, fmt.Errorf("tools.json %s: %w", t.Name, err)
		}
		url := "ximd:tools/" + t.Name
		if err := c.AddResource(url, schema); err != nil {
			return nil, fmt.Errorf("tools.json %s: %w", t.Name, err)
		}
		if t.schema, err = c.Compile(url); err != nil {
			return nil, fmt.Errorf("tools.json %s: %w", t.Name, err)
		}
	}
	for _, name := range []string{ToolSendMessage, ToolReplyMessage, ToolSendFile} {
		if !slices.ContainsFunc(file.Tools, func(t Tool) bool { return t.Name == name }) {
			return nil, fmt.Errorf("tools.json: tool %s is missing", name)
		}
	}
	return file.Tools, nil
}

// Tools are the IM tools, as the Card declares them.
func (c *Catalog) Tools() []Tool { return slices.Clone(c.tools) }

// Tool returns the tool called name.
func (c *Catalog) Tool(name string) (Tool, bool) {
	i := slices.IndexFunc(c.tools, func(t Tool) bool { return t.Name == name })
	if i < 0 {
		return Tool{}, false
	}
	return c.tools[i], true
}

// CheckArguments validates a tool's arguments against its input schema: nil, or an
// invalid_arguments error whose message names the field ("arguments.files[0].file_ref: …").
func (t Tool) CheckArguments(args json.RawMessage) *Error {
	v, err := jsonschema.UnmarshalJSON(bytes.NewReader(args))
	if err != nil {
		return Errorf(CodeInvalidArguments, "arguments: not a JSON value")
	}
	err = t.schema.Validate(v)
	var ve *jsonschema.ValidationError
	if errors.As(err, &ve) {
		leaf := ve
		for len(leaf.Causes) > 0 {
			leaf = leaf.Causes[0]
		}
		return Errorf(CodeInvalidArguments, "%s: %s", fieldPath(leaf.InstanceLocation), leaf.ErrorKind.LocalizedString(schemaMessages))
	}
	if err != nil {
		return Errorf(CodeInvalidArguments, "arguments: %v", err)
	}
	return nil
}

// fieldPath writes an instance location as "arguments.files[0].file_ref".
func fieldPath(loc []string) string {
	var b strings.Builder
	b.WriteString("arguments")
	for _, tok := range loc {
		if tok != "" && strings.Trim(tok, "0123456789") == "" {
			b.WriteString("[" + tok + "]")
			continue
		}
		b.WriteString("." + tok)
	}
	return b.String()
}
