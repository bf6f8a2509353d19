package profile

import (
	"unicode/utf16"
	"unicode/utf8"
)

// maxDepth bounds the nesting of arrays and objects in a frame. The deepest structure the
// profile defines is envelope > payload > files > file (4); the rest is headroom for envelope
// extensions of the Common Protocol.
const maxDepth = 64

// scanner is a single-pass, validating JSON reader over one frame. It is stricter than
// encoding/json: strings must be valid UTF-8 and must not hold lone UTF-16 surrogate escapes,
// nesting is bounded by maxDepth. Decoders drive it member by member, so a frame is read once
// and nothing is decoded that is not needed. All errors are *Error invalid_packet.
type scanner struct {
	b     []byte
	i     int
	depth int
}

func (s *scanner) ws() {
	for s.i < len(s.b) {
		switch s.b[s.i] {
		case ' ', '\t', '\n', '\r':
			s.i++
		default:
			return
		}
	}
}

// peek skips white space and returns the next byte, or 0 at the end of input (a NUL byte in
// the input also reads as 0, and is invalid wherever it appears outside strings).
func (s *scanner) peek() byte {
	s.ws()
	if s.i >= len(s.b) {
		return 0
	}
	return s.b[s.i]
}

func (s *scanner) syntax(what string) *Error {
	if s.i >= len(s.b) {
		return invalidf("not valid JSON: unexpected end of input")
	}
	return invalidf("not valid JSON: %s at byte %d", what, s.i)
}

// end checks that only white space follows the top-level value.
func (s *scanner) end() error {
	s.ws()
	if s.i < len(s.b) {
		return s.syntax("data after the top-level value")
	}
	return nil
}

// object reads an object at s.i (which must be '{'), calling member for each key with s.i at
// the start of the value; member must consume exactly that value. A key with no escapes aliases
// the input.
func (s *scanner) object(member func(key []byte) error) error {
	if err := s.enter(); err != nil {
		return err
	}
	s.i++ // '{'
	if s.peek() == '}' {
		s.i++
		s.depth--
		return nil
	}
	for {
		if s.peek() != '"' {
			return s.syntax("expected an object key")
		}
		key, err := s.str(true)
		if err != nil {
			return err
		}
		if s.peek() != ':' {
			return s.syntax("expected ':'")
		}
		s.i++
		s.ws()
		if s.i >= len(s.b) {
			return s.syntax("")
		}
		if err := member(key); err != nil {
			return err
		}
		switch s.peek() {
		case ',':
			s.i++
		case '}':
			s.i++
			s.depth--
			return nil
		default:
			return s.syntax("expected ',' or '}'")
		}
	}
}

// array reads an array at s.i (which must be '['), calling elem for each element with s.i at
// its start; elem must consume exactly that value.
func (s *scanner) array(elem func(i int) error) error {
	if err := s.enter(); err != nil {
		return err
	}
	s.i++ // '['
	if s.peek() == ']' {
		s.i++
		s.depth--
		return nil
	}
	for n := 0; ; n++ {
		s.ws()
		if s.i >= len(s.b) {
			return s.syntax("")
		}
		if err := elem(n); err != nil {
			return err
		}
		switch s.peek() {
		case ',':
			s.i++
		case ']':
			s.i++
			s.depth--
			return nil
		default:
			return s.syntax("expected ',' or ']'")
		}
	}
}

func (s *scanner) enter() error {
	s.depth++
	if s.depth > maxDepth {
		return invalidf("not valid JSON: nested deeper than %d levels at byte %d", maxDepth, s.i)
	}
	return nil
}

// skip validates and consumes one value of any type.
func (s *scanner) skip() error {
	switch c := s.peek(); {
	case c == '{':
		if err := s.enter(); err != nil {
			return err
		}
		s.i++
		if s.peek() == '}' {
			s.i++
			s.depth--
			return nil
		}
		for {
			if s.peek() != '"' {
				return s.syntax("expected an object key")
			}
			if _, err := s.str(false); err != nil {
				return err
			}
			if s.peek() != ':' {
				return s.syntax("expected ':'")
			}
			s.i++
			if err := s.skip(); err != nil {
				return err
			}
			switch s.peek() {
			case ',':
				s.i++
			case '}':
				s.i++
				s.depth--
				return nil
			default:
				return s.syntax("expected ',' or '}'")
			}
		}
	case c == '[':
		if err := s.enter(); err != nil {
			return err
		}
		s.i++
		if s.peek() == ']' {
			s.i++
			s.depth--
			return nil
		}
		for {
			if err := s.skip(); err != nil {
				return err
			}
			switch s.peek() {
			case ',':
				s.i++
			case ']':
				s.i++
				s.depth--
				return nil
			default:
				return s.syntax("expected ',' or ']'")
			}
		}
	case c == '"':
		_, err := s.str(false)
		return err
	case c == 't':
		return s.literal("true")
	case c == 'f':
		return s.literal("false")
	case c == 'n':
		return s.literal("null")
	case c == '-' || c >= '0' && c <= '9':
		_, _, err := s.number()
		return err
	default:
		return s.syntax("unexpected character")
	}
}

// literal consumes the literal lit (true, false or null).
func (s *scanner) literal(lit string) error {
	if len(s.b)-s.i < len(lit) || string(s.b[s.i:s.i+len(lit)]) != lit {
		return s.syntax("invalid literal")
	}
	s.i += len(lit)
	return nil
}

// boolean reads true or false.
func (s *scanner) boolean() (v, ok bool, err error) {
	switch s.peek() {
	case 't':
		return true, true, s.literal("true")
	case 'f':
		return false, true, s.literal("false")
	}
	return false, false, nil
}

// null consumes a null literal if one is next and reports whether it did.
func (s *scanner) null() (bool, error) {
	if s.peek() != 'n' {
		return false, nil
	}
	return true, s.literal("null")
}

// number consumes a JSON number and returns its text, and whether it is written as an integer
// (no fraction, no exponent).
func (s *scanner) number() (span []byte, isInt bool, err error) {
	b := s.b
	start := s.i
	i := s.i
	if i < len(b) && b[i] == '-' {
		i++
	}
	switch {
	case i < len(b) && b[i] == '0':
		i++
	case i < len(b) && b[i] >= '1' && b[i] <= '9':
		for i < len(b) && b[i] >= '0' && b[i] <= '9' {
			i++
		}
	default:
		s.i = i
		return nil, false, s.syntax("invalid number")
	}
	isInt = true
	if i < len(b) && b[i] == '.' {
		isInt = false
		i++
		if i >= len(b) || b[i] < '0' || b[i] > '9' {
			s.i = i
			return nil, false, s.syntax("invalid number")
		}
		for i < len(b) && b[i] >= '0' && b[i] <= '9' {
			i++
		}
	}
	if i < len(b) && (b[i] == 'e' || b[i] == 'E') {
		isInt = false
		i++
		if i < len(b) && (b[i] == '+' || b[i] == '-') {
			i++
		}
		if i >= len(b) || b[i] < '0' || b[i] > '9' {
			s.i = i
			return nil, false, s.syntax("invalid number")
		}
		for i < len(b) && b[i] >= '0' && b[i] <= '9' {
			i++
		}
	}
	s.i = i
	return b[start:i], isInt, nil
}

// parseInt converts an integer literal returned by number to int64; ok is false on overflow.
func parseInt(span []byte) (v int64, ok bool) {
	neg := false
	if len(span) > 0 && span[0] == '-' {
		neg = true
		span = span[1:]
	}
	const limit = 1 << 63 // magnitude of math.MinInt64
	var u uint64
	for _, c := range span {
		d := uint64(c - '0')
		if u > (limit-d)/10 {
			return 0, false
		}
		u = u*10 + d
	}
	if neg {
		return -int64(u), true // u == limit wraps to MinInt64, which is right
	}
	if u > limit-1 {
		return 0, false
	}
	return int64(u), true
}

// str reads a string at s.i (which must be '"'). With build, it returns the decoded bytes: an
// alias of the input when there are no escapes, else a new buffer. Without build it only
// validates and returns nil. It rejects control characters, invalid UTF-8 and lone surrogates.
func (s *scanner) str(build bool) ([]byte, error) {
	s.i++ // opening quote
	seg := s.i
	nonASCII := false
	var buf []byte
	escaped := false
	for s.i < len(s.b) {
		c := s.b[s.i]
		if c >= 0x20 && c != '"' && c != '\\' {
			if c >= utf8.RuneSelf {
				nonASCII = true
			}
			s.i++
			continue
		}
		switch c {
		case '"':
			raw := s.b[seg:s.i]
			if nonASCII && !utf8.Valid(raw) {
				return nil, s.syntax("invalid UTF-8 in string")
			}
			s.i++
			if !escaped {
				if build {
					return raw, nil
				}
				return nil, nil
			}
			if build {
				buf = append(buf, raw...)
			}
			return buf, nil
		case '\\':
			raw := s.b[seg:s.i]
			if nonASCII && !utf8.Valid(raw) {
				return nil, s.syntax("invalid UTF-8 in string")
			}
			nonASCII = false
			r, n, err := s.escape()
			if err != nil {
				return nil, err
			}
			if build {
				if buf == nil {
					buf = make([]byte, 0, len(raw)+32)
				}
				buf = append(buf, raw...)
				buf = utf8.AppendRune(buf, r)
			}
			escaped = true
			s.i += n
			seg = s.i
		default:
			return nil, s.syntax("control character in string")
		}
	}
	return nil, s.syntax("unterminated string")
}

// escape decodes the escape sequence at s.i (a backslash) and returns the rune and the number
// of input bytes it spans. A surrogate pair (\uD83D\uDE00) is one rune; a lone surrogate is an
// error, since it has no UTF-8 encoding.
func (s *scanner) escape() (rune, int, error) {
	b, i := s.b, s.i
	if i+1 >= len(b) {
		return 0, 0, s.syntax("unterminated string")
	}
	switch b[i+1] {
	case '"':
		return '"', 2, nil
	case '\\':
		return '\\', 2, nil
	case '/':
		return '/', 2, nil
	case 'b':
		return '\b', 2, nil
	case 'f':
		return '\f', 2, nil
	case 'n':
		return '\n', 2, nil
	case 'r':
		return '\r', 2, nil
	case 't':
		return '\t', 2, nil
	case 'u':
		r, ok := hex4(b, i+2)
		if !ok {
			return 0, 0, s.syntax(`invalid \u escape`)
		}
		if !utf16.IsSurrogate(r) {
			return r, 6, nil
		}
		if r < 0xDC00 && i+7 < len(b) && b[i+6] == '\\' && b[i+7] == 'u' {
			if r2, ok := hex4(b, i+8); ok && r2 >= 0xDC00 && r2 <= 0xDFFF {
				return utf16.DecodeRune(r, r2), 12, nil
			}
		}
		return 0, 0, s.syntax("lone UTF-16 surrogate in string")
	}
	return 0, 0, s.syntax("invalid escape in string")
}

func hex4(b []byte, i int) (rune, bool) {
	if i+4 > len(b) {
		return 0, false
	}
	var r rune
	for _, c := range b[i : i+4] {
		switch {
		case c >= '0' && c <= '9':
			c -= '0'
		case c >= 'a' && c <= 'f':
			c = c - 'a' + 10
		case c >= 'A' && c <= 'F':
			c = c - 'A' + 10
		default:
			return 0, false
		}
		r = r<<4 | rune(c)
	}
	return r, true
}
