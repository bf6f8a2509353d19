package download

import (
	"net/url"
	"strings"
	"testing"
)

func TestAllowed_Allows(t *testing.T) {
	tests := []struct {
		name    string
		allowed Allowed
		url     string
		want    bool
	}{
		{name: "exact", allowed: Allowed{"example.com"}, url: "https://example.com/f", want: true},
		{name: "case-insensitive", allowed: Allowed{"Example.COM"}, url: "https://EXAMPLE.com/f", want: true},
		{name: "trailing dot", allowed: Allowed{"example.com"}, url: "https://example.com./f", want: true},
		{name: "trailing dot in entry", allowed: Allowed{"example.com."}, url: "https://example.com/f", want: true},
		{name: "no port in the entry: the scheme's port only", allowed: Allowed{"example.com"}, url: "http://example.com:8080/f"},
		{name: "no port in the entry, http's port", allowed: Allowed{"example.com"}, url: "http://example.com/f", want: true},
		{name: "no port in the entry, https's port written out", allowed: Allowed{"example.com"}, url: "https://example.com:443/f", want: true},
		{name: "entry port equals URL port", allowed: Allowed{"example.com:8080"}, url: "http://example.com:8080/f", want: true},
		{name: "entry port differs", allowed: Allowed{"example.com:8080"}, url: "http://example.com:8081/f"},
		{name: "https default port", allowed: Allowed{"example.com:443"}, url: "https://example.com/f", want: true},
		{name: "http default port", allowed: Allowed{"example.com:80"}, url: "http://example.com/f", want: true},
		{name: "http is not 443", allowed: Allowed{"example.com:443"}, url: "http://example.com/f"},
		{name: "subdomain of an exact entry", allowed: Allowed{"example.com"}, url: "https://a.example.com/f"},
		{name: "suffix is not a subdomain", allowed: Allowed{"example.com"}, url: "https://evil-example.com/f"},
		{name: "entry as a prefix", allowed: Allowed{"example.com"}, url: "https://example.com.evil.net/f"},
		{name: "wildcard subdomain", allowed: Allowed{"*.example.com"}, url: "https://a.example.com/f", want: true},
		{name: "wildcard deep subdomain", allowed: Allowed{"*.example.com"}, url: "https://a.b.example.com/f", want: true},
		{name: "wildcard not the apex", allowed: Allowed{"*.example.com"}, url: "https://example.com/f"},
		{name: "wildcard not a suffix", allowed: Allowed{"*.example.com"}, url: "https://evil-example.com/f"},
		{name: "wildcard with port", allowed: Allowed{"*.example.com:443"}, url: "https://a.example.com/f", want: true},
		{name: "wildcard with other port", allowed: Allowed{"*.example.com:443"}, url: "https://a.example.com:8443/f"},
		{name: "wildcard of one label refused", allowed: Allowed{"*.com"}, url: "https://example.com/f"},
		{name: "bare star refused", allowed: Allowed{"*"}, url: "https://example.com/f"},
		{name: "wildcard never matches an IP", allowed: Allowed{"*.0.0.1"}, url: "http://127.0.0.1/f"},
		{name: "IPv4", allowed: Allowed{"127.0.0.1"}, url: "http://127.0.0.1/f", want: true},
		{name: "IPv4 without a port in the entry, another port", allowed: Allowed{"127.0.0.1"}, url: "http://127.0.0.1:1234/f"},
		{name: "IPv4 with port", allowed: Allowed{"127.0.0.1:1234"}, url: "http://127.0.0.1:1234/f", want: true},
		{name: "IPv4 other", allowed: Allowed{"127.0.0.1"}, url: "http://127.0.0.2/f"},
		{name: "IPv4 in another spelling", allowed: Allowed{"127.0.0.1"}, url: "http://2130706433/f"},
		{name: "IPv4 with leading zeros", allowed: Allowed{"127.0.0.1"}, url: "http://127.000.000.001/f"},
		{name: "name is not its address", allowed: Allowed{"localhost"}, url: "http://127.0.0.1/f"},
		{name: "address is not a name", allowed: Allowed{"127.0.0.1"}, url: "http://localhost/f"},
		{name: "IPv6 bare", allowed: Allowed{"::1"}, url: "http://[::1]/f", want: true},
		{name: "IPv6 bracketed with port", allowed: Allowed{"[::1]:8080"}, url: "http://[::1]:8080/f", want: true},
		{name: "IPv6 other spelling of the same address", allowed: Allowed{"::1"}, url: "http://[0:0::1]/f", want: true},
		{name: "IPv6 with zone is another host", allowed: Allowed{"fe80::1"}, url: "http://[fe80::1%25eth0]/f"},
		{name: "IPv4-mapped IPv6 is not the IPv4 entry", allowed: Allowed{"127.0.0.1"}, url: "http://[::ffff:127.0.0.1]/f"},
		{name: "Kelvin sign is not k", allowed: Allowed{"kelvin.example"}, url: "http://\u212aelvin.example/f"},
		{name: "empty list", url: "https://example.com/f"},
		{name: "empty entry", allowed: Allowed{""}, url: "https://example.com/f"},
		{name: "no host", allowed: Allowed{"example.com"}, url: "https:///f"},
		{name: "second entry", allowed: Allowed{"a.example", "example.com"}, url: "https://example.com/f", want: true},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			u, err := url.Parse(tt.url)
			if err != nil {
				t.Fatalf("parse %q: %v", tt.url, err)
			}
			if got := tt.allowed.Allows(u); got != tt.want {
				t.Errorf("%v.Allows(%s) = %v, want %v", tt.allowed, tt.url, got, tt.want)
			}
		})
	}
}

func TestAllowed_Validate(t *testing.T) {
	tests := []struct {
		name    string
		allowed Allowed
		wantErr []string
	}{
		{name: "well formed", allowed: Allowed{"example.com", "files.example.com:8443", "*.example.com", "127.0.0.1", "127.0.0.1:80", "::1", "[::1]:443", "under_score.example"}},
		{name: "malformed", allowed: Allowed{"", "*", "*.com", "a.*.com", "example.com:0", "example.com:65536", "example.com:http", "[::1", "[127.0.0.1]", "exa mple.com", "a..b", "https://example.com", "bücher.example"},
			wantErr: []string{`0 ""`, `1 "*"`, `2 "*.com"`, `3 "a.*.com"`, `4 "example.com:0"`, `5 "example.com:65536"`, `6 "example.com:http"`, `7 "[::1"`, `8 "[127.0.0.1]"`, `9 "exa mple.com"`, `10 "a..b"`, `11 "https://example.com"`, `12 "bücher.example"`}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			err := tt.allowed.Validate()
			if (err != nil) != (len(tt.wantErr) > 0) {
				t.Fatalf("Validate: %v, want errors %v", err, tt.wantErr)
			}
			for _, w := range tt.wantErr {
				if !strings.Contains(err.Error(), w) {
					t.Errorf("Validate: %v\nwant it to name %s", err, w)
				}
			}
		})
	}
}

// FuzzAllowed checks the host matcher on arbitrary entries and hosts: it never panics, a match is
// always the entry's own host (or a subdomain, for a wildcard), and no other name ending in the
// entry's text matches ("evil-example.com" for "example.com").
func FuzzAllowed(f *testing.F) {
	for _, seed := range [][2]string{
		{"example.com", "example.com"},
		{"example.com", "evil-example.com"},
		{"*.example.com", "a.example.com"},
		{"*.example.com", "example.com"},
		{"example.com:443", "example.com:443"},
		{"127.0.0.1", "127.0.0.1:8080"},
		{"[::1]:80", "[::1]:80"},
		{"::1", "[::1]"},
		{"EXAMPLE.com.", "example.COM"},
		{"*.a.b", "x.a.b."},
		{"*", "x"},
		{"", ""},
	} {
		f.Add(seed[0], seed[1], "evil-")
	}
	f.Fuzz(func(t *testing.T, entry, host, prefix string) {
		a := Allowed{entry}
		_ = a.Validate()
		for _, scheme := range []string{"http", "https"} {
			u := &url.URL{Scheme: scheme, Host: host, Path: "/f"}
			got := a.Allows(u)
			if parsed, err := url.Parse(u.String()); err == nil {
				_ = a.Allows(parsed)
			}
			e, err := parseEntry(entry)
			if err != nil {
				if got {
					t.Fatalf("malformed entry %q allows %q", entry, host)
				}
				continue
			}
			if got {
				h, ok := parseURLHost(u)
				switch {
				case !ok:
					t.Fatalf("%q allows unusable host %q", entry, host)
				case e.addr.IsValid():
					if h.addr != e.addr {
						t.Fatalf("IP entry %q allows %q", entry, host)
					}
				case e.wildcard:
					if !strings.HasSuffix(h.name, "."+e.name) || h.name == e.name {
						t.Fatalf("wildcard %q allows %q", entry, host)
					}
				default:
					if h.name != e.name {
						t.Fatalf("entry %q allows %q", entry, host)
					}
				}
				if e.port != 0 && h.port != e.port {
					t.Fatalf("entry %q allows port of %q", entry, host)
				}
			}
			// A longer name ending in the entry's text is another registrable name, unless
			// a wildcard's prefix ends with a dot (a subdomain).
			if prefix == "" || e.addr.IsValid() || (e.wildcard && strings.HasSuffix(prefix, ".")) {
				continue
			}
			other := &url.URL{Scheme: scheme, Host: prefix + e.name, Path: "/f"}
			if a.Allows(other) {
				t.Fatalf("entry %q allows %q", entry, other.Host)
			}
		}
	})
}
