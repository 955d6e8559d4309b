package guards

import (
	"net/netip"
	"strings"
)

// This file is the address classification shared by the egress guard and
// other SSRF defences of the edges (the A2A push webhook policy): keep
// one copy of it here.

// NonPublicAddr returns why a is not a public unicast address, as a short
// phrase for a decision's details ("loopback address", "private address
// (embedded in IPv6)"), or "" when a is public. It never resolves
// anything. Not public are:
//
//   - loopback, unspecified, RFC 1918 and unique-local, link-local
//     (including the cloud metadata address 169.254.169.254), multicast;
//   - "this network" (0/8), CGNAT (100.64/10), IETF protocol assignments
//     (192.0.0/24), the 6to4 relay anycast (192.88.99/24), benchmarking
//     (198.18/15, 2001:2::/48), reserved and broadcast (240/4),
//     documentation (192.0.2/24, 198.51.100/24, 203.0.113/24,
//     2001:db8::/32, 3fff::/20), IPv6 site-local (fec0::/10), local-use
//     NAT64 (64:ff9b:1::/48) and discard-only (100::/64);
//   - IPv6 addresses that embed a non-public IPv4 address which a host,
//     gateway or translator may deliver to: IPv4-mapped (::ffff:0:0/96),
//     IPv4-translated (::ffff:0:0:0/96), IPv4-compatible (::/96) and
//     NAT64 (64:ff9b::/96), all in the last 32 bits, and 6to4
//     (2002::/16, bits 16-47). Each is judged by the IPv4 address it
//     embeds: one that embeds a public address is public;
//   - every Teredo address (2001::/32), whatever it embeds. A Teredo
//     address names a NATed client reached through a relay; it embeds
//     two IPv4 addresses (the server's, and the client's inverted bit by
//     bit) that are both tunnel endpoints, and no service is published
//     on one, so it is refused outright rather than judged by either.
//
// A zone ("fe80::1%eth0") is ignored.
func NonPublicAddr(a netip.Addr) string {
	a = a.Unmap().WithZone("") // a zoned address matches no prefix
	switch {
	case !a.IsValid():
		return "invalid address"
	case a.IsLoopback():
		return "loopback address"
	case a.IsUnspecified():
		return "unspecified address"
	case a.IsPrivate():
		return "private address"
	case a.IsLinkLocalUnicast():
		return "link-local address"
	case a.IsMulticast():
		return "multicast address"
	}
	for _, p := range nonPublicRanges {
		if p.Contains(a) {
			return "non-public address"
		}
	}
	if teredoPrefix.Contains(a) {
		return "Teredo address"
	}
	for _, e := range embeddingPrefixes {
		if e.prefix.Contains(a) {
			b := a.As16()
			if why := NonPublicAddr(netip.AddrFrom4([4]byte(b[e.at:]))); why != "" {
				return why + " (embedded in IPv6)"
			}
			return ""
		}
	}
	return ""
}

// nonPublicRanges are the ranges of NonPublicAddr beyond netip's
// predicates and the IPv6 forms that embed an IPv4 address.
var nonPublicRanges = [...]netip.Prefix{
	netip.MustParsePrefix("0.0.0.0/8"),       // "this network"
	netip.MustParsePrefix("100.64.0.0/10"),   // CGNAT
	netip.MustParsePrefix("192.0.0.0/24"),    // IETF protocol assignments
	netip.MustParsePrefix("192.0.2.0/24"),    // TEST-NET-1
	netip.MustParsePrefix("192.88.99.0/24"),  // 6to4 relay anycast
	netip.MustParsePrefix("198.18.0.0/15"),   // benchmarking
	netip.MustParsePrefix("198.51.100.0/24"), // TEST-NET-2
	netip.MustParsePrefix("203.0.113.0/24"),  // TEST-NET-3
	netip.MustParsePrefix("240.0.0.0/4"),     // reserved, broadcast
	netip.MustParsePrefix("fec0::/10"),       // site-local
	netip.MustParsePrefix("64:ff9b:1::/48"),  // local-use NAT64
	netip.MustParsePrefix("100::/64"),        // discard-only
	netip.MustParsePrefix("2001:2::/48"),     // benchmarking
	netip.MustParsePrefix("2001:db8::/32"),   // documentation
	netip.MustParsePrefix("3fff::/20"),       // documentation
}

// embeddingPrefixes are the IPv6 prefixes whose addresses embed an IPv4
// address, at byte at (IPv4-mapped addresses are unmapped first), and
// teredoPrefix the one refused whatever it embeds (see NonPublicAddr).
var embeddingPrefixes = [...]struct {
	prefix netip.Prefix
	at     int
}{
	{netip.MustParsePrefix("64:ff9b::/96"), 12},    // NAT64
	{netip.MustParsePrefix("::/96"), 12},           // IPv4-compatible
	{netip.MustParsePrefix("::ffff:0:0:0/96"), 12}, // IPv4-translated
	{netip.MustParsePrefix("2002::/16"), 2},        // 6to4
}

var teredoPrefix = netip.MustParsePrefix("2001::/32")

// NumericHost reports whether host, a URL's host name without brackets
// or trailing dot, ends in a numeric label (decimal, or hex after "0x",
// in any case). WHATWG URL parsers and inet_aton then read the whole
// host as an IPv4 address, in decimal, octal or hex, in 1 to 4 parts
// ("2130706433", "0x7f000001", "0177.0.0.1", "127.1"), and resolvers
// differ on which. addr is valid only when host is the canonical
// dotted-decimal form ("127.0.0.1"), which every client reads alike;
// callers refuse the other numeric forms rather than guess at them.
// "123.example.com" is a name: its last label is not numeric.
func NumericHost(host string) (addr netip.Addr, numeric bool) {
	l := host[strings.LastIndexByte(host, '.')+1:]
	if l == "" {
		return netip.Addr{}, false
	}
	if len(l) >= 2 && l[0] == '0' && l[1]|0x20 == 'x' {
		for i := 2; i < len(l); i++ {
			if c := l[i]; !isDigit(c) && (c|0x20 < 'a' || c|0x20 > 'f') {
				return netip.Addr{}, false
			}
		}
	} else {
		for i := 0; i < len(l); i++ {
			if !isDigit(l[i]) {
				return netip.Addr{}, false
			}
		}
	}
	if a, err := netip.ParseAddr(host); err == nil && a.Is4() {
		return a, true
	}
	return netip.Addr{}, true
}
