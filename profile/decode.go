package profile

import (
	"strconv"
	"strings"
)

// record is one decoded payload object: a value per field of its spec, in spec order.
type record struct {
	spec *objectSpec
	v    []fieldValue
}

type fieldValue struct {
	set   bool   // present and not null
	raw   []byte // kindObject: the object as sent
	str   string
	num   int64
	b     bool
	items []record
}

// get returns the value of the field named name (the zero value if the spec has no such field).
func (r *record) get(name string) fieldValue {
	for i := range r.spec.Fields {
		if r.spec.Fields[i].Name == name {
			return r.v[i]
		}
	}
	return fieldValue{}
}

// decodePayload decodes raw as the closed object spec, for direction d (0: no
// direction-specific requirement). raw must hold exactly one JSON value.
func (c *Catalog) decodePayload(raw []byte, spec *objectSpec, d Direction) (record, error) {
	if !d.valid() {
		d = 0
	}
	s := scanner{b: raw}
	if s.peek() != '{' {
		return record{}, invalidf("payload: must be a JSON object")
	}
	rec, err := c.decodeObject(&s, spec, "", d)
	if err != nil {
		return record{}, err
	}
	if err := s.end(); err != nil {
		return record{}, err
	}
	return rec, nil
}

// decodeObject reads one object at s.i (which must be '{') against spec. path is the field
// path of the object ("" for the payload itself, "files[1]" for a file item).
func (c *Catalog) decodeObject(s *scanner, spec *objectSpec, path string, d Direction) (record, error) {
	rec := record{spec: spec, v: make([]fieldValue, len(spec.Fields))}
	var seen uint64
	err := s.object(func(key []byte) error {
		i := spec.field(key)
		if i < 0 {
			for _, k := range c.forbidden {
				if k == string(key) {
					return invalidf("%s: must not appear in a payload (%s)", join(path, key), c.forbiddenRule)
				}
			}
			return invalidf("%s: unknown field; the payload is a closed record (%s)", join(path, key), spec.ClosedRule)
		}
		if seen&(1<<i) != 0 {
			return invalidf("%s: duplicate key", join(path, key))
		}
		seen |= 1 << i
		return c.decodeField(s, &spec.Fields[i], &rec.v[i], path, d)
	})
	if err != nil {
		return record{}, err
	}
	for i := range spec.Fields {
		f := &spec.Fields[i]
		if !rec.v[i].set && f.required[d] {
			if d.valid() && !f.Required {
				return record{}, invalidf("%s: required in direction %s%s", joinS(path, f.Name), d, f.cite)
			}
			return record{}, invalidf("%s: required%s", joinS(path, f.Name), f.cite)
		}
	}
	for _, r := range spec.Rules {
		if field, problem := r.fn(&rec, d); problem != "" {
			return record{}, invalidf("%s: %s (%s)", joinS(path, field), problem, r.Rule)
		}
	}
	return rec, nil
}

func (c *Catalog) decodeField(s *scanner, f *fieldSpec, v *fieldValue, path string, d Direction) error {
	if isNull, err := s.null(); isNull || err != nil {
		return err // null is the same as absent
	}
	switch f.kind {
	case kindString:
		if s.peek() != '"' {
			return invalidf("%s: must be a string%s", joinS(path, f.Name), f.cite)
		}
		b, err := s.str(true)
		if err != nil {
			return err
		}
		if f.NonEmpty && len(b) == 0 {
			return invalidf("%s: must not be empty%s", joinS(path, f.Name), f.cite)
		}
		if f.MaxBytes > 0 && len(b) > f.MaxBytes {
			return invalidf("%s: must be at most %d bytes%s", joinS(path, f.Name), f.MaxBytes, f.cite)
		}
		if len(f.Enum) > 0 {
			j := 0
			for j < len(f.Enum) && f.Enum[j] != string(b) {
				j++
			}
			if j == len(f.Enum) {
				return invalidf("%s: must be one of %s%s", joinS(path, f.Name), strings.Join(f.Enum, ", "), f.cite)
			}
			v.str = f.Enum[j] // no allocation for enum values
		} else {
			v.str = string(b)
		}
		if f.check != nil {
			if problem := f.check(v.str, d); problem != "" {
				return invalidf("%s: %s", joinS(path, f.Name), problem)
			}
		}
	case kindInteger:
		if c := s.peek(); c != '-' && (c < '0' || c > '9') {
			return invalidf("%s: must be an integer%s", joinS(path, f.Name), f.cite)
		}
		span, isInt, err := s.number()
		if err != nil {
			return err
		}
		n, ok := parseInt(span)
		if !isInt || !ok {
			return invalidf("%s: must be an integer%s", joinS(path, f.Name), f.cite)
		}
		if f.Min != nil && n < *f.Min {
			return invalidf("%s: must be at least %d%s", joinS(path, f.Name), *f.Min, f.cite)
		}
		v.num = n
	case kindBoolean:
		b, ok, err := s.boolean()
		if err != nil {
			return err
		}
		if !ok {
			return invalidf("%s: must be true or false%s", joinS(path, f.Name), f.cite)
		}
		v.b = b
	case kindObject:
		if s.peek() != '{' {
			return invalidf("%s: must be an object%s", joinS(path, f.Name), f.cite)
		}
		start := s.i
		if err := s.skip(); err != nil {
			return err
		}
		v.raw = s.b[start:s.i]
	case kindArray:
		if s.peek() != '[' {
			return invalidf("%s: must be an array%s", joinS(path, f.Name), f.cite)
		}
		name := joinS(path, f.Name)
		err := s.array(func(i int) error {
			if f.MaxItems > 0 && i >= f.MaxItems {
				return invalidf("%s: must have at most %d items%s", name, f.MaxItems, f.cite)
			}
			item := name + "[" + strconv.Itoa(i) + "]"
			if s.peek() != '{' {
				return invalidf("%s: must be an object", item)
			}
			r, err := c.decodeObject(s, f.items, item, d)
			if err != nil {
				return err
			}
			v.items = append(v.items, r)
			return nil
		})
		if err != nil {
			return err
		}
	}
	v.set = true
	return nil
}

// join appends a key to a field path for messages; unusual keys are quoted and cut short so a
// hostile key cannot bloat or garble the message.
func join(path string, key []byte) string {
	k := string(key)
	if !plainKey(k) {
		if len(k) > 64 {
			k = strings.ToValidUTF8(k[:64], "") + "…"
		}
		k = strconv.Quote(k)
	}
	return joinS(path, k)
}

func joinS(path, name string) string {
	if path == "" {
		return name
	}
	return path + "." + name
}

func plainKey(k string) bool {
	if k == "" || len(k) > 64 {
		return false
	}
	for i := 0; i < len(k); i++ {
		c := k[i]
		if !(c >= 'a' && c <= 'z' || c >= 'A' && c <= 'Z' || c >= '0' && c <= '9' || c == '_' || c == '-') {
			return false
		}
	}
	return true
}
