package download

import (
	"context"
	"fmt"
	"net"
	"net/netip"
	"strconv"
)

// The dial guard: a download never connects to an address of the host's own or private networks
// (loopback, RFC 1918, carrier-grade NAT, link-local, which holds the cloud metadata address
// 169.254.169.254, unique-local fc00::/7, unspecified, multicast) unless the channel allowed
// that address (and port, where the entry names one) literally (an IP entry of [Allowed], such
// as the target URL's own host) or the
// operator allowed them all (Config.AllowPrivate, XIM_DOWNLOAD_ALLOW_PRIVATE). It checks the
// addresses a name resolves to and dials the address it checked, so a name that resolves to a
// public address at the check and to 127.0.0.1 at the dial (DNS rebinding) cannot slip through.

// cgnat is 100.64.0.0/10 (RFC 6598), not in netip's IsPrivate.
var cgnat = netip.MustParsePrefix("100.64.0.0/10")

// internal reports whether ip is an address a download must not reach uninvited.
func internal(ip netip.Addr) bool {
	ip = ip.Unmap()
	return ip.IsLoopback() || ip.IsPrivate() || ip.IsLinkLocalUnicast() || ip.IsLinkLocalMulticast() ||
		ip.IsInterfaceLocalMulticast() || ip.IsMulticast() || ip.IsUnspecified() || cgnat.Contains(ip) ||
		(ip.Is4() && ip.As4()[0] == 0)
}

// literalsKey carries, in a download's context, the addresses its channel allowed literally.
type literalsKey struct{}

// literals are the IP entries of a, with their port (0: no port named; the URL check already held the URL to its scheme's port).
func (a Allowed) literals() []netip.AddrPort {
	var out []netip.AddrPort
	for _, raw := range a {
		if e, err := parseEntry(raw); err == nil && e.addr.IsValid() {
			out = append(out, netip.AddrPortFrom(e.addr.Unmap(), uint16(e.port)))
		}
	}
	return out
}

// allowedLiterally reports whether ip:port is named by one of the literals.
func allowedLiterally(literals []netip.AddrPort, ip netip.Addr, port uint16) bool {
	for _, l := range literals {
		if l.Addr() == ip.Unmap() && (l.Port() == 0 || l.Port() == port) {
			return true
		}
	}
	return false
}

// guardedDial wraps d: it resolves the host itself, refuses internal addresses that were not
// allowed, and dials the first address that passes.
func guardedDial(d *net.Dialer, allowPrivate bool) func(ctx context.Context, network, addr string) (net.Conn, error) {
	return func(ctx context.Context, network, addr string) (net.Conn, error) {
		host, port, err := net.SplitHostPort(addr)
		if err != nil {
			return nil, err
		}
		var ips []netip.Addr
		if ip, err := netip.ParseAddr(host); err == nil {
			ips = []netip.Addr{ip}
		} else if ips, err = net.DefaultResolver.LookupNetIP(ctx, "ip", host); err != nil {
			return nil, err
		}
		p, err := strconv.ParseUint(port, 10, 16)
		if err != nil {
			return nil, err
		}
		literals, _ := ctx.Value(literalsKey{}).([]netip.AddrPort)
		for _, ip := range ips {
			if allowPrivate || !internal(ip) || allowedLiterally(literals, ip, uint16(p)) {
				return d.DialContext(ctx, network, net.JoinHostPort(ip.Unmap().String(), port))
			}
		}
		return nil, &blockedError{host: host}
	}
}

// blockedError is a download refused by the dial guard.
type blockedError struct{ host string }

func (e *blockedError) Error() string {
	return fmt.Sprintf("%s resolves only to internal addresses (loopback, private, link-local); not allowed", shorten(e.host))
}
