package profile

import (
	"bytes"
	_ "embed"
	"encoding/json"
	"errors"
	"fmt"
	"reflect"
	"slices"
	"strings"
	"sync"
)

// Envelope schema and profile name.
const (
	// Schema is the only envelope schema ximd speaks (edge-api §5 step 1).
	Schema = "xagent.connector.packet/v1"
	// IM is the name of the profile this package implements (P-DECL-1).
	IM = "xagent.im.v2"
)

// Packet types. The catalog (catalog.json) says which direction each may travel; code asks
// [Catalog.Accepts] and [Catalog.Emits], never a list of its own (P-SCOPE-6).
const (
	TypeMessage    = "chat.message"
	TypeDelta      = "chat.message.delta"
	TypeAck        = "chat.message.ack"
	TypeActivity   = "chat.activity"
	TypeError      = "error"
	TypeToolInvoke = "tool.invoke"
	TypeToolResult = "tool.result"
	// TypeChannelOpened is the main protocol's notice that a bot opened a channel (edge-api §4.1).
	TypeChannelOpened = "channel.opened"
)

// Direction is the way a packet travels; it decides which types are allowed (P-DLT-6) and
// which fields are required (P-MSG-6).
type Direction int

const (
	// FromAgent is xAgent -> Connector: what ximd receives on /v1/ws.
	FromAgent Direction = iota + 1
	// ToAgent is Connector -> xAgent: what ximd sends.
	ToAgent
)

// String returns the catalog's name of d: "xagent_to_connector" or "connector_to_xagent".
func (d Direction) String() string {
	switch d {
	case FromAgent:
		return "xagent_to_connector"
	case ToAgent:
		return "connector_to_xagent"
	}
	return fmt.Sprintf("Direction(%d)", int(d))
}

func (d Direction) valid() bool { return d == FromAgent || d == ToAgent }

// PacketType is a catalog entry as code needs it.
type PacketType struct {
	// Name is the wire type, e.g. "chat.message".
	Name string
	// Kind is a short token naming the type in NATS subjects: "message", "delta", "ack",
	// "activity", "tool", "error". It is a valid subject token ([a-z]+).
	Kind string
	// NeedsAck is true for types every instance of which is answered by exactly one
	// chat.message.ack (chat.message; edge-api §5.1).
	NeedsAck bool
	// Answered is true for types every instance of which gets exactly one answer packet (an
	// ack, a tool.result): such a packet must be stored once however often it is published.
	Answered bool
	// Stage is the worker stage that processes the type when it arrives from xAgent: "deliver"
	// (finals and tool invocations, one channel's in order), "assemble" (deltas), "activity",
	// "acks" (xAgent's acks of user messages). Every FromAgent type has one; each stage is its
	// own durable consumer.
	Stage string
}

//go:embed catalog.json
var catalogJSON []byte

//go:embed errors.json
var errorsJSON []byte

// Catalog is the loaded IM v2 profile catalog (catalog.json) and error-code table
// (errors.json). It is immutable and safe for concurrent use.
type Catalog struct {
	profile                       string
	byDir                         [3][]PacketType          // indexed by Direction
	lookup                        [3]map[string]PacketType // indexed by Direction
	payload                       map[string]*objectSpec   // packet type name -> payload spec
	objects                       map[string]*objectSpec   // payload spec name -> spec
	message, delta, activity, ack *objectSpec
	toolInvoke                    *objectSpec
	forbidden                     []string
	forbiddenRule                 string
	codes                         []CodeInfo
	codeIndex                     map[string]int
	tools                         []Tool
}

var loadDefault = sync.OnceValues(Load)

// Default returns the embedded catalog, loaded and validated once. The embedded files are part
// of the binary and a test asserts that [Load] accepts them, so Default panics if they are
// corrupt rather than returning an error every caller would have to handle.
func Default() *Catalog {
	c, err := loadDefault()
	if err != nil {
		panic("profile: embedded catalog is invalid: " + err.Error())
	}
	return c
}

// Load parses and validates the embedded catalog.json and errors.json. It fails if a file does
// not parse (unknown keys included), if a packet type constant, an error code constant or a
// status constant of this package is missing from the data, if a rule or check named in the
// catalog has no implementation (or an implementation is named by no catalog entry), or if a
// payload's fields differ from the JSON fields of the Go type it decodes into.
func Load() (*Catalog, error) {
	return load(catalogJSON, errorsJSON)
}

// Accepts reports whether a packet of type packetType may travel in direction d, and returns
// its entry. For FromAgent that is the set edge-api §5 step 2 admits (chat.message,
// chat.message.delta, chat.message.ack, chat.activity, tool.invoke); everything else is dropped
// silently (P-ERR-1, P-SCOPE-3).
func (c *Catalog) Accepts(d Direction, packetType string) (PacketType, bool) {
	if !d.valid() {
		return PacketType{}, false
	}
	pt, ok := c.lookup[d][packetType]
	return pt, ok
}

// Emits reports whether the Connector may send a packet of type packetType to xAgent (the
// outbound projection: chat.message, chat.message.ack, error, tool.result).
func (c *Catalog) Emits(packetType string) bool {
	_, ok := c.lookup[ToAgent][packetType]
	return ok
}

// Stages returns the worker stages and, for each, the kinds of the FromAgent types it processes
// (sorted), e.g. "deliver": ["message", "tool"].
func (c *Catalog) Stages() map[string][]string {
	out := map[string][]string{}
	for _, t := range c.byDir[FromAgent] {
		if !slices.Contains(out[t.Stage], t.Kind) {
			out[t.Stage] = append(out[t.Stage], t.Kind)
		}
	}
	for _, kinds := range out {
		slices.Sort(kinds)
	}
	return out
}

// Types returns the packet types allowed in direction d, in catalog order (a copy).
func (c *Catalog) Types(d Direction) []PacketType {
	if !d.valid() {
		return nil
	}
	return slices.Clone(c.byDir[d])
}

// Profile returns the profile name the catalog declares (IM).
func (c *Catalog) Profile() string { return c.profile }

// --- data model of catalog.json -------------------------------------------------------------

type catalogFile struct {
	Profile       string            `json:"profile"`
	Schema        string            `json:"schema"`
	Source        string            `json:"source"`
	ForbiddenKeys forbiddenKeys     `json:"forbidden_keys"`
	Directions    map[string]string `json:"directions"`
	PacketTypes   []packetTypeSpec  `json:"packet_types"`
	Payloads      []*objectSpec     `json:"payloads"`
}

type forbiddenKeys struct {
	Rule string   `json:"rule"`
	Keys []string `json:"keys"`
}

type packetTypeSpec struct {
	Name       string   `json:"name"`
	Kind       string   `json:"kind"`
	Stage      string   `json:"stage"`
	NeedsAck   bool     `json:"needs_ack"`
	Answered   bool     `json:"answered"`
	Payload    string   `json:"payload"`
	Directions []string `json:"directions"`
	Rule       string   `json:"rule"`
	Note       string   `json:"note"`
}

// objectSpec describes one closed JSON object of a payload.
type objectSpec struct {
	Name string `json:"name"`
	// ClosedRule is cited when a key the spec does not define appears.
	ClosedRule string      `json:"closed_rule"`
	Fields     []fieldSpec `json:"fields"`
	Rules      []ruleRef   `json:"rules"`
}

type fieldSpec struct {
	Name       string   `json:"name"`
	Type       string   `json:"type"` // string, integer, boolean, array, object
	Required   bool     `json:"required"`
	RequiredIn []string `json:"required_in"`
	NonEmpty   bool     `json:"non_empty"`
	MaxBytes   int      `json:"max_bytes"`
	Min        *int64   `json:"min"`
	Enum       []string `json:"enum"`
	Items      string   `json:"items"`
	MaxItems   int      `json:"max_items"`
	Check      string   `json:"check"`
	Rule       string   `json:"rule"`

	kind     fieldKind
	required [3]bool // indexed by Direction; [0] is "no direction given"
	items    *objectSpec
	check    fieldCheck
	cite     string // " (rule)" or ""
}

type ruleRef struct {
	Name string `json:"name"`
	Rule string `json:"rule"`
	fn   objectRule
}

type fieldKind int

const (
	kindString fieldKind = iota + 1
	kindInteger
	kindBoolean
	kindArray
	kindObject // any JSON object, kept as it is (tool arguments, validated by the tool's schema)
)

var fieldKinds = map[string]fieldKind{
	"string": kindString, "integer": kindInteger, "boolean": kindBoolean, "array": kindArray, "object": kindObject,
}

var directionNames = map[string]Direction{
	FromAgent.String(): FromAgent,
	ToAgent.String():   ToAgent,
}

// bindings ties packet types to the Go types their payloads decode into; load checks that the
// catalog fields and the Go JSON fields are the same set with matching JSON types.
var bindings = map[string]reflect.Type{
	TypeMessage:    reflect.TypeFor[Message](),
	TypeDelta:      reflect.TypeFor[Delta](),
	TypeActivity:   reflect.TypeFor[Activity](),
	TypeAck:        reflect.TypeFor[Ack](),
	TypeError:      reflect.TypeFor[ErrorPayload](),
	TypeToolInvoke: reflect.TypeFor[ToolInvoke](),
}

// enumValues are values Go code relies on; each must be in the named enum.
var enumValues = []struct {
	packetType, field string
	values            []string
}{
	{TypeAck, "status", []string{AckAccepted, AckDuplicate, AckRejected}},
	{TypeActivity, "status", []string{ActivityThinking, ActivityTool, ActivityIdle}},
}

func load(catalogData, errorsData []byte) (*Catalog, error) {
	c := &Catalog{}
	var errs []error
	if err := c.loadCodes(errorsData); err != nil {
		errs = append(errs, fmt.Errorf("errors.json: %w", err))
	}
	if err := c.loadCatalog(catalogData); err != nil {
		errs = append(errs, fmt.Errorf("catalog.json: %w", err))
	}
	var err error
	if c.tools, err = loadTools(toolsJSON); err != nil {
		errs = append(errs, err)
	}
	if err := errors.Join(errs...); err != nil {
		return nil, err
	}
	return c, nil
}

func decodeStrict(data []byte, v any) error {
	dec := json.NewDecoder(bytes.NewReader(data))
	dec.DisallowUnknownFields()
	if err := dec.Decode(v); err != nil {
		return err
	}
	if dec.More() {
		return errors.New("data after the top-level value")
	}
	return nil
}

func (c *Catalog) loadCodes(data []byte) error {
	var f struct {
		Codes []CodeInfo `json:"codes"`
	}
	if err := decodeStrict(data, &f); err != nil {
		return err
	}
	var errs []error
	c.codeIndex = make(map[string]int, len(f.Codes))
	for i, ci := range f.Codes {
		switch {
		case !isSnake(ci.Code):
			errs = append(errs, fmt.Errorf("codes[%d]: code %q is not snake_case", i, ci.Code))
		case ci.HTTPStatus < 100 || ci.HTTPStatus > 599:
			errs = append(errs, fmt.Errorf("code %s: http_status %d out of range", ci.Code, ci.HTTPStatus))
		case strings.TrimSpace(ci.Description) == "":
			errs = append(errs, fmt.Errorf("code %s: no description", ci.Code))
		}
		if _, dup := c.codeIndex[ci.Code]; dup {
			errs = append(errs, fmt.Errorf("code %s: listed twice", ci.Code))
		}
		c.codeIndex[ci.Code] = i
	}
	c.codes = f.Codes
	for _, code := range goCodes {
		if _, ok := c.codeIndex[code]; !ok {
			errs = append(errs, fmt.Errorf("code %s: constant of package profile missing from the table", code))
		}
	}
	return errors.Join(errs...)
}

func (c *Catalog) loadCatalog(data []byte) error {
	var f catalogFile
	if err := decodeStrict(data, &f); err != nil {
		return err
	}
	var p problems
	c.loadHeader(&f, &p)
	c.loadPayloads(f.Payloads, &p)
	c.loadForbiddenKeys(&f, &p)
	c.loadPacketTypes(f.PacketTypes, &p)
	c.checkGoBindings(&p)
	c.message, c.delta = c.payload[TypeMessage], c.payload[TypeDelta]
	c.activity, c.ack = c.payload[TypeActivity], c.payload[TypeAck]
	c.toolInvoke = c.payload[TypeToolInvoke]
	return errors.Join(p...)
}

// problems collects what is wrong with an embedded file, so that Load reports every fault at
// once.
type problems []error

// addf adds one problem, formatted with fmt.Errorf.
func (p *problems) addf(format string, args ...any) { *p = append(*p, fmt.Errorf(format, args...)) }

// loadHeader checks the catalog's profile, schema and the description of each direction.
func (c *Catalog) loadHeader(f *catalogFile, p *problems) {
	if f.Profile != IM {
		p.addf("profile is %q, want %q", f.Profile, IM)
	}
	if f.Schema != Schema {
		p.addf("schema is %q, want %q", f.Schema, Schema)
	}
	c.profile = f.Profile
	for name := range directionNames {
		if _, ok := f.Directions[name]; !ok {
			p.addf("directions: %s not described", name)
		}
	}
	for name := range f.Directions {
		if _, ok := directionNames[name]; !ok {
			p.addf("directions: unknown direction %q", name)
		}
	}
}

// loadPayloads indexes the payload object specs by name and resolves them; every implemented
// field check and object rule must be named by some payload.
func (c *Catalog) loadPayloads(payloads []*objectSpec, p *problems) {
	c.objects = make(map[string]*objectSpec, len(payloads))
	for _, o := range payloads {
		if o.Name == "" {
			p.addf("payloads: a spec has no name")
			continue
		}
		if _, dup := c.objects[o.Name]; dup {
			p.addf("payload %s: defined twice", o.Name)
		}
		c.objects[o.Name] = o
	}
	usedChecks := map[string]bool{}
	usedRules := map[string]bool{}
	for _, o := range payloads {
		*p = append(*p, c.resolveObject(o, usedChecks, usedRules)...)
	}
	for name := range fieldChecks {
		if !usedChecks[name] {
			p.addf("check %s is implemented but no field names it", name)
		}
	}
	for name := range objectRules {
		if !usedRules[name] {
			p.addf("rule %s is implemented but no payload names it", name)
		}
	}
}

// loadForbiddenKeys reads the keys no payload may carry (P-ID-2); none may be a payload field.
func (c *Catalog) loadForbiddenKeys(f *catalogFile, p *problems) {
	if f.ForbiddenKeys.Rule == "" || len(f.ForbiddenKeys.Keys) == 0 {
		p.addf("forbidden_keys: rule and keys are required")
	}
	c.forbidden = f.ForbiddenKeys.Keys
	c.forbiddenRule = f.ForbiddenKeys.Rule
	for _, k := range c.forbidden {
		for _, o := range f.Payloads {
			if o.field([]byte(k)) >= 0 {
				p.addf("forbidden key %s is a field of payload %s", k, o.Name)
			}
		}
	}
}

// loadPacketTypes indexes the packet types by direction and binds their payload specs; every
// Type* constant must be in the catalog.
func (c *Catalog) loadPacketTypes(types []packetTypeSpec, p *problems) {
	c.payload = map[string]*objectSpec{}
	for d := range c.lookup {
		c.lookup[d] = map[string]PacketType{}
	}
	seen := map[string]bool{}
	kindStage := map[string]string{} // kind -> the stage that consumes it
	for _, t := range types {
		if t.Name == "" {
			p.addf("packet_types: an entry has no name")
			continue
		}
		if seen[t.Name] {
			p.addf("packet type %s: listed twice", t.Name)
		}
		seen[t.Name] = true
		c.loadPacketType(t, kindStage, p)
	}
	for _, name := range []string{TypeMessage, TypeDelta, TypeAck, TypeActivity, TypeError, TypeToolInvoke, TypeToolResult} {
		if !seen[name] {
			p.addf("packet type %s: constant of package profile missing from the catalog", name)
		}
	}
}

// loadPacketType checks one packet type's kind, stage and directions, and adds it to the
// direction indexes.
func (c *Catalog) loadPacketType(t packetTypeSpec, kindStage map[string]string, p *problems) {
	if !isLowerToken(t.Kind) {
		p.addf("packet type %s: kind %q is not a lower-case subject token", t.Name, t.Kind)
	}
	if len(t.Directions) == 0 {
		p.addf("packet type %s: no directions", t.Name)
	}
	pt := PacketType{Name: t.Name, Kind: t.Kind, NeedsAck: t.NeedsAck, Answered: t.Answered || t.NeedsAck, Stage: t.Stage}
	fromAgent := slices.Contains(t.Directions, "xagent_to_connector")
	switch {
	case fromAgent && !isLowerToken(t.Stage):
		p.addf("packet type %s: accepted from xAgent, so it needs a stage (a lower-case token), got %q", t.Name, t.Stage)
	case !fromAgent && t.Stage != "":
		p.addf("packet type %s: a stage for a type ximd never receives", t.Name)
	case fromAgent && kindStage[t.Kind] != "" && kindStage[t.Kind] != t.Stage:
		// A stage consumer selects its packets by kind (the subject's last token).
		p.addf("packet type %s: kind %q already belongs to stage %s", t.Name, t.Kind, kindStage[t.Kind])
	case fromAgent:
		kindStage[t.Kind] = t.Stage
	}
	for _, dn := range t.Directions {
		d, ok := directionNames[dn]
		if !ok {
			p.addf("packet type %s: unknown direction %q", t.Name, dn)
			continue
		}
		if _, dup := c.lookup[d][t.Name]; dup {
			p.addf("packet type %s: direction %s listed twice", t.Name, dn)
			continue
		}
		c.lookup[d][t.Name] = pt
		c.byDir[d] = append(c.byDir[d], pt)
	}
	if t.Payload != "" {
		o, ok := c.objects[t.Payload]
		if !ok {
			p.addf("packet type %s: unknown payload %q", t.Name, t.Payload)
			return
		}
		c.payload[t.Name] = o
	}
}

// checkGoBindings checks the payload specs against the Go types and enum values package
// profile uses.
func (c *Catalog) checkGoBindings(p *problems) {
	for name, typ := range bindings {
		o := c.payload[name]
		if o == nil {
			p.addf("packet type %s: no payload spec for Go type %s", name, typ.Name())
			continue
		}
		*p = append(*p, checkBinding(o, typ)...)
	}
	for _, ev := range enumValues {
		o := c.payload[ev.packetType]
		if o == nil {
			continue // reported above
		}
		i := o.field([]byte(ev.field))
		if i < 0 {
			p.addf("payload %s: no field %s", o.Name, ev.field)
			continue
		}
		for _, v := range ev.values {
			if !slices.Contains(o.Fields[i].Enum, v) {
				p.addf("payload %s: %s enum lacks %q, which package profile uses", o.Name, ev.field, v)
			}
		}
	}
}

// resolveObject checks one payload spec and binds its named checks and rules.
func (c *Catalog) resolveObject(o *objectSpec, usedChecks, usedRules map[string]bool) []error {
	var errs []error
	bad := func(format string, args ...any) {
		errs = append(errs, fmt.Errorf("payload %s: "+format, append([]any{o.Name}, args...)...))
	}
	if o.ClosedRule == "" {
		bad("closed_rule is required")
	}
	if len(o.Fields) == 0 || len(o.Fields) > 64 {
		bad("needs 1 to 64 fields, has %d", len(o.Fields))
	}
	names := map[string]bool{}
	for i := range o.Fields {
		f := &o.Fields[i]
		if names[f.Name] {
			bad("field %s: defined twice", f.Name)
		}
		names[f.Name] = true
		if f.Name == "" {
			bad("a field has no name")
		}
		f.kind = fieldKinds[f.Type]
		if f.kind == 0 {
			bad("field %s: unknown type %q", f.Name, f.Type)
		}
		if f.Required && len(f.RequiredIn) > 0 {
			bad("field %s: both required and required_in", f.Name)
		}
		for d := range f.required {
			f.required[d] = f.Required
		}
		for _, dn := range f.RequiredIn {
			d, ok := directionNames[dn]
			if !ok {
				bad("field %s: unknown direction %q", f.Name, dn)
				continue
			}
			f.required[d] = true
		}
		if (f.NonEmpty || f.MaxBytes != 0 || len(f.Enum) > 0 || f.Check != "") && f.kind != kindString {
			bad("field %s: non_empty, max_bytes, enum and check apply to strings only", f.Name)
		}
		if f.MaxBytes < 0 || f.MaxItems < 0 {
			bad("field %s: negative bound", f.Name)
		}
		if f.Min != nil && f.kind != kindInteger {
			bad("field %s: min applies to integers only", f.Name)
		}
		if f.kind != kindArray && (f.Items != "" || f.MaxItems != 0) {
			bad("field %s: items and max_items apply to arrays only", f.Name)
		}
		if f.kind == kindArray {
			f.items = c.objects[f.Items]
			if f.items == nil {
				bad("field %s: items names unknown payload %q", f.Name, f.Items)
			}
		}
		if f.Check != "" {
			f.check = fieldChecks[f.Check]
			if f.check == nil {
				bad("field %s: check %q has no implementation", f.Name, f.Check)
			}
			usedChecks[f.Check] = true
		}
		if f.Rule != "" {
			f.cite = " (" + f.Rule + ")"
		}
	}
	for i := range o.Rules {
		r := &o.Rules[i]
		r.fn = objectRules[r.Name]
		if r.fn == nil {
			bad("rule %q has no implementation", r.Name)
		}
		if r.Rule == "" {
			bad("rule %q cites no requirement", r.Name)
		}
		usedRules[r.Name] = true
	}
	return errs
}

// checkBinding verifies that o's fields are exactly the JSON fields of the struct typ, with
// matching JSON types (recursively for arrays of objects).
func checkBinding(o *objectSpec, typ reflect.Type) []error {
	var errs []error
	bad := func(format string, args ...any) {
		errs = append(errs, fmt.Errorf("payload %s (Go %s): "+format, append([]any{o.Name, typ.Name()}, args...)...))
	}
	goFields := map[string]reflect.Type{}
	for i := range typ.NumField() {
		sf := typ.Field(i)
		name, _, _ := strings.Cut(sf.Tag.Get("json"), ",")
		if name == "" || name == "-" {
			bad("field %s has no JSON name", sf.Name)
			continue
		}
		goFields[name] = sf.Type
	}
	for _, f := range o.Fields {
		ft, ok := goFields[f.Name]
		if !ok {
			bad("catalog field %s has no Go field", f.Name)
			continue
		}
		delete(goFields, f.Name)
		if ft.Kind() == reflect.Pointer {
			ft = ft.Elem()
		}
		var match bool
		switch f.kind {
		case kindString:
			match = ft.Kind() == reflect.String
		case kindInteger:
			match = ft.Kind() == reflect.Int64
		case kindBoolean:
			match = ft.Kind() == reflect.Bool
		case kindObject:
			match = ft == reflect.TypeFor[json.RawMessage]()
		case kindArray:
			match = ft.Kind() == reflect.Slice && ft.Elem().Kind() == reflect.Struct
			if match && f.items != nil {
				errs = append(errs, checkBinding(f.items, ft.Elem())...)
			}
		}
		if !match {
			bad("field %s: catalog type %s does not match Go type %s", f.Name, f.Type, ft)
		}
	}
	for name := range goFields {
		bad("Go field %s is not in the catalog", name)
	}
	return errs
}

// field returns the index of the field named key, or -1.
func (o *objectSpec) field(key []byte) int {
	for i := range o.Fields {
		if o.Fields[i].Name == string(key) {
			return i
		}
	}
	return -1
}

func isLowerToken(s string) bool {
	if s == "" {
		return false
	}
	for i := 0; i < len(s); i++ {
		if s[i] < 'a' || s[i] > 'z' {
			return false
		}
	}
	return true
}

func isSnake(s string) bool {
	if s == "" {
		return false
	}
	for i := 0; i < len(s); i++ {
		c := s[i]
		if !(c >= 'a' && c <= 'z' || c == '_' || c >= '0' && c <= '9') {
			return false
		}
	}
	return true
}
