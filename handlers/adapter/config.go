package adapter

import (
	"bytes"
	"encoding/json"
	"errors"
	"io"
	"reflect"
	"sort"
	"strings"

	"github.com/ximd/ximd/profile"
)

// ConfigPath is how errors name a channel's config: the field of the body of
// PUT /v1/channels/{id} (edge-api §4) that holds it.
const ConfigPath = "target.config"

// ConfigKind says what is wrong with a config field, so a caller can act on it without reading
// the message.
type ConfigKind int

// The kinds of [ConfigError].
const (
	// ConfigInvalid: the field's value is of the right JSON type but not accepted.
	ConfigInvalid ConfigKind = iota
	// ConfigRequired: the field (or the whole config) is missing, null or empty.
	ConfigRequired
	// ConfigNotObject: the config (or a nested field) is not a JSON object.
	ConfigNotObject
	// ConfigUnknownField: the config has a key no field is declared for.
	ConfigUnknownField
	// ConfigWrongType: the field's JSON value is of another type than the field takes.
	ConfigWrongType
)

// ConfigError is a refused channel config: which field, what it takes and what is wrong. It is
// an invalid_descriptor error: errors.As(err, new(*profile.Error)) finds a *profile.Error with
// code invalid_descriptor and the message "<path>: <problem>" (see [ConfigError.Path]). Neither
// the message nor any field quotes a value: configs hold secrets.
type ConfigError struct {
	// Kind says what is wrong.
	Kind ConfigKind
	// Field is the field's path below target.config: "app_id", "file_hosts[2]", "a.b"; ""
	// names the config itself.
	Field string
	// Want is what the field takes: a type ("string", "true or false"), the allowed values
	// (`"edit" or "none"`), a range ("0..100"), or for an unknown field the known ones.
	Want string
	// Problem is the message after the path, e.g. `must be "edit" or "none"`.
	Problem string
}

// Path is the field's full name as the API body spells it: "target.config.<Field>", or
// "target.config" for the config itself.
func (e *ConfigError) Path() string {
	if e.Field == "" {
		return ConfigPath
	}
	return ConfigPath + "." + e.Field
}

// Profile is the error as the protocol reports it: invalid_descriptor "<path>: <problem>".
func (e *ConfigError) Profile() *profile.Error {
	return profile.Errorf(profile.CodeInvalidDescriptor, "%s: %s", e.Path(), e.Problem)
}

// Error is the protocol error's text, "invalid_descriptor: <path>: <problem>".
func (e *ConfigError) Error() string { return e.Profile().Error() }

// Unwrap makes the error an invalid_descriptor *profile.Error for errors.As and errors.Is.
func (e *ConfigError) Unwrap() error { return e.Profile() }

// NoConfig reports whether raw holds no config: empty, blank or null.
func NoConfig(raw json.RawMessage) bool {
	trimmed := bytes.TrimSpace(raw)
	return len(trimmed) == 0 || bytes.Equal(trimmed, []byte("null"))
}

// DecodeConfig decodes a channel's target.config into w, a pointer to a struct whose fields are
// named by their json tags (a field without a tag by its Go name; "-" skips it). The config must
// be one JSON object. A key matches the field named so, or else (as with encoding/json) one whose
// name differs only in case; a key no field has is refused. A null value leaves its field as it
// is. A field of struct type (or pointer to one) is a nested object decoded the same way, its
// fields named "<field>.<name>"; embedded structs are not flattened. Every other field is decoded
// by encoding/json.
//
// Every error is a *[ConfigError]: the config missing ("target.config: required"), not one
// object ("target.config: must be a JSON object"), or the first member, in the order they come,
// that is refused: an unknown key ("target.config.<key>: unknown field") or a value of the wrong
// type ("target.config.<name>: must be <want>", want being the field's `want` tag, or "true or
// false" for a bool, or "a <Go type>": "a string", "a int").
func DecodeConfig(raw json.RawMessage, w any) error {
	if NoConfig(raw) {
		return &ConfigError{Kind: ConfigRequired, Problem: "required"}
	}
	rv := reflect.ValueOf(w)
	if rv.Kind() != reflect.Pointer || rv.IsNil() || rv.Elem().Kind() != reflect.Struct {
		panic("adapter.DecodeConfig: w must be a non-nil pointer to a struct")
	}
	return decodeObject("", raw, rv.Elem())
}

// configField is one field of a config struct: where it goes and what it takes.
type configField struct {
	index int
	want  string
}

// decodeObject decodes the JSON object raw into the struct v, the field at path, member by
// member in the order they come; the first refusal ends it.
func decodeObject(path string, raw json.RawMessage, v reflect.Value) error {
	members, err := objectMembers(raw)
	if err != nil {
		return &ConfigError{Kind: ConfigNotObject, Field: path, Want: "a JSON object", Problem: "must be a JSON object"}
	}
	fields := structFields(v.Type())
	for _, m := range members {
		f, ok := lookupField(fields, m.key)
		switch {
		case !ok:
			return &ConfigError{Kind: ConfigUnknownField, Field: join(path, m.key), Want: knownKeys(v.Type()), Problem: "unknown field"}
		case bytes.Equal(m.value, []byte("null")):
			continue
		}
		if err := decodeField(join(path, m.key), m.value, v.Field(f.index), f.want); err != nil {
			return err
		}
	}
	return nil
}

// decodeField decodes one member's value into the field dst, named path.
func decodeField(path string, val json.RawMessage, dst reflect.Value, want string) error {
	if isNested(dst.Type()) {
		if dst.Kind() == reflect.Pointer {
			if dst.IsNil() {
				dst.Set(reflect.New(dst.Type().Elem()))
			}
			dst = dst.Elem()
		}
		return decodeObject(path, val, dst)
	}
	if err := json.Unmarshal(val, dst.Addr().Interface()); err != nil {
		return &ConfigError{Kind: ConfigWrongType, Field: path, Want: want, Problem: "must be " + want}
	}
	return nil
}

// member is one key and value of a JSON object.
type member struct {
	key   string
	value json.RawMessage
}

// objectMembers splits one JSON object into its members, in order, walking its tokens: anything
// else (an array, a scalar, bad JSON, data after the object) is an error. A repeated key is
// there twice: the last one counts, as with encoding/json.
func objectMembers(raw json.RawMessage) ([]member, error) {
	dec := json.NewDecoder(bytes.NewReader(raw))
	if tok, err := dec.Token(); err != nil || tok != json.Delim('{') {
		return nil, errNotObject
	}
	var members []member
	for dec.More() {
		tok, err := dec.Token()
		if err != nil {
			return nil, errNotObject
		}
		key, _ := tok.(string) // inside an object, the decoder gives keys as strings
		var val json.RawMessage
		if err := dec.Decode(&val); err != nil {
			return nil, errNotObject
		}
		members = append(members, member{key: key, value: val})
	}
	if tok, err := dec.Token(); err != nil || tok != json.Delim('}') {
		return nil, errNotObject
	}
	if _, err := dec.Token(); err != io.EOF {
		return nil, errNotObject
	}
	return members, nil
}

var errNotObject = errors.New("not one JSON object")

// structFields maps the keys of the struct type t to its decodable fields.
func structFields(t reflect.Type) map[string]configField {
	fields := map[string]configField{}
	for i := 0; i < t.NumField(); i++ {
		sf := t.Field(i)
		if !sf.IsExported() {
			continue
		}
		key, _, _ := strings.Cut(sf.Tag.Get("json"), ",")
		switch key {
		case "-":
			continue
		case "":
			key = sf.Name
		}
		want := sf.Tag.Get("want")
		if want == "" {
			want = wantOf(sf.Type)
		}
		fields[key] = configField{index: i, want: want}
	}
	return fields
}

// lookupField finds the field of key: the one named exactly so, or else one whose name differs
// only in case, as encoding/json matches keys (so a config bound before keeps opening).
func lookupField(fields map[string]configField, key string) (configField, bool) {
	if f, ok := fields[key]; ok {
		return f, true
	}
	found := configField{index: -1}
	for name, f := range fields {
		if strings.EqualFold(name, key) && (found.index < 0 || f.index < found.index) {
			found = f // of two such fields, the first declared, whatever the map's order
		}
	}
	return found, found.index >= 0
}

// wantOf describes what a field of type t takes, for "must be <want>".
func wantOf(t reflect.Type) string {
	for t.Kind() == reflect.Pointer {
		t = t.Elem()
	}
	if t.Kind() == reflect.Bool {
		return "true or false"
	}
	return "a " + t.String()
}

var unmarshalerType = reflect.TypeOf((*json.Unmarshaler)(nil)).Elem()

// isNested reports whether a field of type t is a nested config object: a struct, or pointer
// to one, that does not decode itself.
func isNested(t reflect.Type) bool {
	if t.Kind() == reflect.Pointer {
		t = t.Elem()
	}
	return t.Kind() == reflect.Struct && !reflect.PointerTo(t).Implements(unmarshalerType)
}

// knownKeys lists the keys of the struct type t in declaration order, quoted: `"a", "b"`.
func knownKeys(t reflect.Type) string {
	fields := structFields(t)
	keys := make([]string, 0, len(fields))
	for k := range fields {
		keys = append(keys, k)
	}
	sort.Slice(keys, func(i, j int) bool { return fields[keys[i]].index < fields[keys[j]].index })
	for i, k := range keys {
		keys[i] = `"` + k + `"`
	}
	return strings.Join(keys, ", ")
}

func join(path, name string) string {
	if path == "" {
		return name
	}
	return path + "." + name
}
