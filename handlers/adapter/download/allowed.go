package download

import (
	"errors"
	"fmt"
	"net/netip"
	"net/url"
	"strconv"
	"strings"
)

// Allowed is the set of hosts a channel may download from: the target's own host plus the hosts
// the channel's config lists. An empty Allowed allows nothing.
//
// Each entry is one of
//
//	files.example.com        that host name, on the URL scheme's port (80 for http, 443 for https)
//	files.example.com:8443   that host name, that port only
//	*.example.com            every subdomain of example.com (a.example.com, a.b.example.com),
//	                         not example.com itself; the part after "*." needs at least one dot;
//	                         on the scheme's port
//	*.example.com:443        the same, that port only
//	192.0.2.7, 192.0.2.7:80  that IPv4 address, on the scheme's port / that port
//	[2001:db8::1]:443, ::1   that IPv6 address, with a port only in brackets
//
// Matching is on the URL's host name, ASCII case-insensitive and otherwise exact (one trailing
// dot is ignored on both sides; internationalized names must be written in their ASCII "xn--"
// form on both sides). A URL without a port has its scheme's port (80 for http, 443 for https);
// an entry without a port allows that port only, so naming a host never opens its other ports. An IP entry matches only that address written as an IP literal,
// never a name that resolves to it, and a wildcard never matches an IP literal. An entry that is
// none of the above (see [Allowed.Validate]) matches nothing.
type Allowed []string

// Allows reports whether u's host and port are allowed by an entry of a. It never resolves
// names: it looks at u alone, so it can run before any connection.
func (a Allowed) Allows(u *url.URL) bool {
	if u == nil {
		return false
	}
	h, ok := parseURLHost(u)
	if !ok {
		return false
	}
	for _, raw := range a {
		e, err := parseEntry(raw)
		if err == nil && e.matches(h) {
			return true
		}
	}
	return false
}

// Validate reports every malformed entry of a at once (nil if all are well formed). Channel
// configuration should be checked with it, since a malformed entry silently allows nothing.
func (a Allowed) Validate() error {
	var errs []error
	for i, raw := range a {
		if _, err := parseEntry(raw); err != nil {
			errs = append(errs, fmt.Errorf("allowed host %d %q: %w", i, raw, err))
		}
	}
	return errors.Join(errs...)
}

// entry is a parsed Allowed entry.
type entry struct {
	name     string     // lower-case host name without trailing dot, or the suffix of a wildcard
	addr     netip.Addr // valid for an IP entry
	wildcard bool       // "*." + name
	port     int        // 0: the URL scheme's port
}

// host is a parsed URL host.
type host struct {
	name string     // lower-case, without one trailing dot; "" if not a valid host name
	addr netip.Addr // valid for an IP literal
	port int        // explicit or the scheme's; 0 if unknown
	// schemePort is the scheme's port (80 for http, 443 for https; 0 if unknown).
	schemePort int
}

func (e entry) matches(h host) bool {
	want := e.port
	if want == 0 {
		want = h.schemePort // an entry without a port: the scheme's port only
	}
	if want == 0 || want != h.port {
		return false
	}
	switch {
	case e.addr.IsValid():
		return h.addr.IsValid() && h.addr == e.addr
	case h.addr.IsValid():
		return false
	case e.wildcard:
		return len(h.name) > len(e.name)+1 && strings.HasSuffix(h.name, "."+e.name)
	default:
		return h.name == e.name
	}
}

// parseEntry parses one Allowed entry.
func parseEntry(raw string) (entry, error) {
	var e entry
	hostPart, portPart, err := splitHostPort(raw)
	if err != nil {
		return e, err
	}
	if portPart != "" {
		if e.port, err = parsePort(portPart); err != nil {
			return e, err
		}
	}
	if strings.HasPrefix(raw, "[") || strings.Contains(hostPart, ":") {
		addr, err := netip.ParseAddr(hostPart)
		if err != nil || !addr.Is6() {
			return e, errors.New("not an IPv6 address")
		}
		e.addr = addr
		return e, nil
	}
	if addr, err := netip.ParseAddr(hostPart); err == nil {
		e.addr = addr
		return e, nil
	}
	name := strings.TrimSuffix(asciiLower(hostPart), ".")
	if rest, ok := strings.CutPrefix(name, "*."); ok {
		e.wildcard = true
		name = rest
		if !strings.Contains(name, ".") {
			return e, errors.New(`the part after "*." must have at least two labels`)
		}
	}
	if !validHostName(name) {
		return e, errors.New("not a host name (ASCII letters, digits, '-', '_' and dots), IP address or *.domain")
	}
	e.name = name
	return e, nil
}

// splitHostPort splits "host", "host:port", "[v6]", "[v6]:port" and a bare IPv6 address.
func splitHostPort(raw string) (hostPart, portPart string, err error) {
	if raw == "" {
		return "", "", errors.New("empty")
	}
	if rest, ok := strings.CutPrefix(raw, "["); ok {
		inside, after, ok := strings.Cut(rest, "]")
		if !ok {
			return "", "", errors.New("missing ']'")
		}
		if after == "" {
			return inside, "", nil
		}
		p, ok := strings.CutPrefix(after, ":")
		if !ok {
			return "", "", errors.New("unexpected text after ']'")
		}
		return inside, p, nil
	}
	switch strings.Count(raw, ":") {
	case 0:
		return raw, "", nil
	case 1:
		h, p, _ := strings.Cut(raw, ":")
		return h, p, nil
	default:
		return raw, "", nil // a bare IPv6 address: checked by the caller
	}
}

// parsePort parses a decimal port 1..65535.
func parsePort(s string) (int, error) {
	if s == "" || len(s) > 5 || strings.Trim(s, "0123456789") != "" {
		return 0, errors.New("port must be 1..65535")
	}
	p, err := strconv.Atoi(s)
	if err != nil || p < 1 || p > 65535 {
		return 0, errors.New("port must be 1..65535")
	}
	return p, nil
}

// parseURLHost extracts the comparable host of u. ok is false when u has no usable host.
func parseURLHost(u *url.URL) (h host, ok bool) {
	hn := u.Hostname()
	if hn == "" {
		return h, false
	}
	switch asciiLower(u.Scheme) {
	case "http":
		h.schemePort = 80
	case "https":
		h.schemePort = 443
	}
	h.port = h.schemePort
	if p := u.Port(); p != "" {
		var err error
		if h.port, err = parsePort(p); err != nil {
			return h, false
		}
	}
	if addr, err := netip.ParseAddr(hn); err == nil {
		h.addr = addr
		return h, true
	}
	if strings.HasPrefix(u.Host, "[") {
		return h, false // bracketed but not an address
	}
	h.name = strings.TrimSuffix(asciiLower(hn), ".")
	return h, validHostName(h.name)
}

// validHostName reports whether s is dot-separated non-empty labels of ASCII letters, digits,
// '-' and '_' (the last seen in real names though not in RFC 1123), at most 253 bytes.
func validHostName(s string) bool {
	if s == "" || len(s) > 253 {
		return false
	}
	for label := range strings.SplitSeq(s, ".") {
		if label == "" || len(label) > 63 {
			return false
		}
		for i := 0; i < len(label); i++ {
			c := label[i]
			if !('a' <= c && c <= 'z' || '0' <= c && c <= '9' || c == '-' || c == '_') {
				return false
			}
		}
	}
	return true
}

// asciiLower lower-cases ASCII letters only. Unicode case folding is deliberately not used: it
// maps distinct code points (the Kelvin sign, the long s) onto ASCII letters.
func asciiLower(s string) string {
	b := []byte(s)
	for i, c := range b {
		if 'A' <= c && c <= 'Z' {
			b[i] = c + 'a' - 'A'
		}
	}
	return string(b)
}
